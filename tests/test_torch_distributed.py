"""torch.distributed on the same pool: DDP and FSDP2 train in cells, and every promise the pool makes for Horovod
holds for them: a raise in a collective ends the cell, uneven batches are named with torch's remedy, kept DDP and
FSDP2 state comes back after a crash, the export runs under torchrun and mpirun, the profile says where time went.

Real kernels with real 2-rank CPU pools (Gloo); tests/test_gpu.py runs the NCCL paths where a GPU is present.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import VENV_BIN, Kernel, new_kernel, run_under_mpirun, script_env, wait_until_gone

START = "%load_ext jupyter_hvd\n%config HvdPool.live_view = 'text'\n%hvd_start -np 2 --torch-distributed"

DDP_SETUP = """%%hvd --setup
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
torch.manual_seed(0)
model = DDP(torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Dropout(0.1), torch.nn.ReLU(), torch.nn.Linear(32, 1)))
opt = torch.optim.Adam(model.parameters(), lr=0.01)
g = torch.Generator().manual_seed(10 + rank)
X = torch.randn(256, 8, generator=g)
Y = X.sum(1, keepdim=True)
epoch = 0
"""

DDP_TRAIN = """%%hvd
import os, signal, jupyter_hvd
while epoch < 6:
    for i in range(0, 256, 32):
        opt.zero_grad()
        loss = F.mse_loss(model(X[i:i + 32]), Y[i:i + 32])
        loss.backward()
        opt.step()
    epoch += 1
    jupyter_hvd.commit()
    print(f"epoch {epoch} loss={loss.item():.6f}")
    if epoch == CRASH_AT and rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
"""

FSDP_SETUP = """%%hvd --setup
import torch.nn.functional as F
from torch.distributed.fsdp import fully_shard
torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Linear(8, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
for layer in net:
    if isinstance(layer, torch.nn.Linear):
        fully_shard(layer)
fully_shard(net)
fopt = torch.optim.Adam(net.parameters(), lr=0.01)
g = torch.Generator().manual_seed(20 + rank)
FX = torch.randn(128, 8, generator=g)
FY = FX.sum(1, keepdim=True)
"""

FSDP_TRAIN = """%%hvd
for step in range(20):
    fopt.zero_grad()
    floss = F.mse_loss(net(FX), FY)
    floss.backward()
    fopt.step()
    if step % 5 == 4:
        print(f"step {step} loss={floss.item():.6f}")
"""

SHARDS = """%%hvd
shards = {k: v.to_local().clone() for k, v in net.state_dict().items()}
moments = {k: {n: (t.to_local() if hasattr(t, 'to_local') else t).clone() for n, t in s.items()}
           for k, s in fopt.state_dict()['state'].items()}
both = (shards, moments)
"""


# The kept names whose DTensor shards each rank holds in a torch.distributed.checkpoint of its own (a .metadata).
DCP_FILES = """from jupyter_hvd.kernel.owner import current
kept = current().directory / 'kept'
print('@@', sorted({(p.parts[-5], p.parts[-2]) for p in kept.glob('rank-*/*/dcp/*/.metadata')}))"""


def kept_in_dcp(k: Kernel, want: list[tuple[str, str]], timeout: float = 30) -> str:
    """Wait until every (rank-r, name) of `want` has a DCP checkpoint on disk (snapshots are written in the
    background); what there is."""
    deadline = time.monotonic() + timeout
    while True:
        said = k.run(DCP_FILES).stdout
        if all(repr(w) in said for w in want) or time.monotonic() > deadline:
            return said
        time.sleep(0.5)


def losses(text: str) -> list[float]:
    return [float(x) for x in re.findall(r"loss=(\S+)", text)]


def pull_all(k: Kernel, names: str) -> list:
    import pickle

    out = []
    for rank in (0, 1):
        code = f"import pickle\n%hvd_pull {names} --rank {rank}\nprint('@@', pickle.dumps({names}).hex())"
        r = k.run(code)
        assert r.status == "ok", r.error_text
        out.append(pickle.loads(bytes.fromhex(r.stdout.split("@@ ")[1].strip())))
    return out


def same(a, b) -> bool:
    import torch

    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[x], b[x]) for x in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


@pytest.fixture
def kernel():
    k = new_kernel()
    yield k
    k.shutdown()
    assert wait_until_gone(f"hvd-{k.pid}-") == []


def test_ddp_and_fsdp2_train_in_cells_and_the_pool_says_torch_gloo(kernel):
    k = kernel
    r = k.run(START, timeout=120)
    assert r.status == "ok", r.error_text
    assert "torch.distributed (Gloo) initialised" in r.stdout and "torch/Gloo" in r.stdout, r.stdout
    assert k.run(DDP_SETUP).status == "ok"
    r = k.run(DDP_TRAIN.replace("CRASH_AT", "-1"), timeout=180)
    assert r.status == "ok", r.error_text
    ddp = losses(r.stdout)
    assert len(ddp) == 6 and ddp[-1] < ddp[0] / 2, ddp
    r = k.run(FSDP_SETUP)
    assert r.status == "ok", r.error_text
    r = k.run(FSDP_TRAIN, timeout=180)
    assert r.status == "ok", r.error_text
    fsdp = losses(r.stdout)
    assert len(fsdp) == 4 and fsdp[-1] < fsdp[0], fsdp
    # Every rank holds only its shard of each parameter.
    r = k.run("%%hvd --ranks all\nprint('shard', net[0].weight.to_local().shape[0], 'of', net[0].weight.shape[0])")
    assert r.stdout.count("shard 32 of 64") == 2, r.stdout
    status = k.run("%hvd_status").stdout
    assert "torch/Gloo" in status, status


def test_a_raise_or_one_collective_too_many_while_a_rank_waits_costs_no_process_and_no_name(kernel):
    # A rank waiting in a torch.distributed collective its peer will never call cannot be interrupted (Gloo holds it):
    # the pool restarted, and every name not kept was gone. The ranks whose cell ended now decline the check that the
    # waiting rank is in before the collective (wire.Decline), and it returns. How fast: bench/failure_latency.py.
    k = kernel
    assert k.run(START, timeout=120).status == "ok"
    assert k.run("%%hvd\nnot_kept = 40 + rank").status == "ok"
    ids = "%%hvd --ranks all\nimport os\nprint('id', rank, os.getpid(), not_kept)"
    before = sorted(line for line in k.run(ids).stdout.splitlines() if "id " in line)
    assert len(before) == 2, before

    r = k.run(
        "%%hvd\nif rank == 1:\n    raise ValueError('boom on 1')\nx = torch.ones(2)\ndist.all_reduce(x)", timeout=60
    )
    said = r.error_text
    assert r.status == "error" and said.count("rank 1: ValueError: boom on 1") == 1, said
    assert said.count("Traceback") == 1 and "PeerCellEnded" not in said, said  # the waiting rank's end is no error
    assert re.search(r"rank 0 at Cell In\[\d+\], line 4: dist.all_reduce\(x\)", said), said
    assert "restart" not in said and "ready for the next" in said, said

    too_many = (
        "%%hvd\nx = torch.ones(4)\ndist.all_reduce(x)\nif rank == 1:\n    dist.all_reduce(x)\nprint('done', rank)"
    )
    r = k.run(too_many, timeout=60)
    said = r.error_text
    assert r.status == "error" and "the cell finished on rank 0 after 1 collectives" in said, said
    assert "rank 1 waits in 'dist.all_reduce'" in said and "Join([model])" in said, said  # torch's remedy
    assert "restart" not in said and "ready for the next" in said, said

    # The same processes, with what the notebook defined, and their group in step: the next collective is right.
    assert sorted(line for line in k.run(ids).stdout.splitlines() if "id " in line) == before
    r = k.run("%%hvd\nx = torch.full((3,), rank + 1.0)\ndist.all_reduce(x)\nprint('sum', x.tolist())")
    assert r.status == "ok" and "sum [3.0, 3.0, 3.0]" in r.stdout, r.stdout + r.error_text


def test_collectives_of_different_sizes_are_named_and_cost_no_process_and_no_name(kernel):
    # Gloo aborts a rank given a tensor of another size than its peers' (SIGABRT, its raw "GLHF" text): every rank's
    # namespace went with the restart. The ranks now agree on the call first, as Horovod's coordinator does.
    k = kernel
    assert k.run(START, timeout=120).status == "ok"
    ids = "%%hvd --ranks all\nimport os\nprint('id', rank, os.getpid(), not_kept)"
    assert k.run("%%hvd\nnot_kept = 40 + rank").status == "ok"
    before = sorted(line for line in k.run(ids).stdout.splitlines() if "id " in line)
    r = k.run("%%hvd\nt = torch.ones(4 if rank == 0 else 8)\ndist.all_reduce(t)", timeout=60)
    said = r.error_text
    assert r.status == "error" and "ranks 0-1: CollectiveMismatch" in said, said
    assert "rank 0: all_reduce of 4 float32 elements; rank 1: all_reduce of 8 float32 elements" in said, said
    assert "restart" not in said and "GLHF" not in said, said
    r = k.run("%%hvd\nparts = [torch.zeros(3) for _ in range(2)]\ndist.all_gather(parts, torch.ones(3 + rank))")
    assert r.status == "error" and "all_gather of 3 float32 elements" in r.error_text, r.error_text
    other = "%%hvd\nif rank == 0:\n    dist.broadcast(torch.ones(2), src=0)\nelse:\n    dist.all_reduce(torch.ones(2))"
    r = k.run(other)
    assert r.status == "error" and "rank 0: broadcast of 2 float32 elements at root 0" in r.error_text, r.error_text
    # The same processes, with what the notebook defined, and their collectives work.
    assert sorted(line for line in k.run(ids).stdout.splitlines() if "id " in line) == before
    r = k.run("%%hvd\nt = torch.ones(4)\ndist.all_reduce(t)\nprint('sum', t.tolist())")
    assert r.status == "ok" and "sum [2.0, 2.0, 2.0, 2.0]" in r.stdout, r.stdout + r.error_text


def test_a_collective_left_running_on_one_rank_restarts_the_pool_and_says_why(kernel):
    # A stop or an error can end a cell while one rank's collective runs on in Gloo's threads, one its peer never
    # entered: every next collective would pair with the wrong one (a mismatch named wrongly, or a wait with no end).
    k = kernel
    assert k.run(START, timeout=120).status == "ok"
    assert k.run("%%hvd --setup\nmarker = 41").status == "ok"
    assert k.run("%hvd_keep marker").status == "ok"
    left = "%%hvd\nif rank == 0:\n    w = dist.all_reduce(torch.ones(2), async_op=True)\nraise ValueError('stop here')"
    r = k.run(left, timeout=60)
    said = r.error_text
    assert r.status == "error" and "ranks 0-1: ValueError: stop here" in said, said
    assert "out of step: rank 0 entered 1, rank 1 entered 0 collectives" in said, said
    assert "restarted" in said and "restored marker" in said and "ready for the next" not in said, said
    r = k.run("%%hvd\nt = torch.ones(4)\ndist.all_reduce(t)\nprint('sum', t.tolist(), marker)", timeout=60)
    assert r.status == "ok" and "sum [2.0, 2.0, 2.0, 2.0] 41" in r.stdout, r.stdout + r.error_text


def test_uneven_ddp_batches_are_named_with_torchs_remedy_and_cost_no_process(kernel):
    # Rank 1's extra backward waits for DDP's bucket allreduce, which rank 0 never starts: Gloo cannot cancel it, and
    # the pool restarted. Rank 0 now completes it with zeros, as a rank that joined Horovod does (wire.Decline), and
    # rank 1's interrupt ends its cell before its optimizer steps: the replicas stay equal, the processes stay.
    k = kernel
    assert k.run(START, timeout=120).status == "ok"
    assert k.run(DDP_SETUP).status == "ok"
    assert k.run("%%hvd\nnot_kept = 40 + rank").status == "ok"
    ids = "%%hvd --ranks all\nimport os\nprint('id', rank, os.getpid(), not_kept)"
    before = sorted(line for line in k.run(ids).stdout.splitlines() if "id " in line)
    uneven = (
        "%%hvd\nfor i in range(3 + rank):\n    opt.zero_grad()\n"
        "    F.mse_loss(model(X[:32]), Y[:32]).backward()\n    opt.step()\n"
    )
    r = k.run(uneven, timeout=60)  # how fast: bench/failure_latency.py --torch
    assert r.status == "error"
    said = r.error_text
    assert "Collectives did not match" in said and "DDP gradient allreduce" in said, said
    assert "torch.distributed.algorithms.Join" in said and "drop_last=True" in said, said
    assert "restart" not in said and "ready for the next" in said, said
    assert sorted(line for line in k.run(ids).stdout.splitlines() if "id " in line) == before
    # Both replicas made 3 steps: their weights are equal, and DDP trains on.
    same = (
        "%%hvd\nw = torch.cat([p.detach().flatten() for p in model.parameters()])\n"
        "all_w = [torch.zeros_like(w) for _ in range(2)]\ndist.all_gather(all_w, w)\n"
        "print('equal', torch.equal(all_w[0], all_w[1]))\n"
        "opt.zero_grad()\nF.mse_loss(model(X[:32]), Y[:32]).backward()\nopt.step()\nprint('trained on')"
    )
    r = k.run(same, timeout=60)
    assert r.status == "ok" and "equal True" in r.stdout and "trained on" in r.stdout, r.stdout + r.error_text


@pytest.fixture(scope="module")
def ddp_baseline():
    k = new_kernel()
    try:
        assert k.run(START, timeout=120).status == "ok"
        assert k.run(DDP_SETUP).status == "ok"
        assert k.run("%hvd_keep model opt epoch").status == "ok"
        r = k.run(DDP_TRAIN.replace("CRASH_AT", "-1"), timeout=180)
        assert r.status == "ok", r.error_text
        assert k.run("%%hvd\nstate = (model.state_dict(), opt.state_dict())").status == "ok"
        yield {"printed": re.findall(r"epoch \d+ loss=\S+", r.stdout), "state": pull_all(k, "state")}
    finally:
        k.shutdown()


def test_a_crashed_ddp_run_comes_back_and_ends_bit_for_bit(ddp_baseline, kernel):
    k = kernel
    assert k.run(START, timeout=120).status == "ok"
    assert k.run(DDP_SETUP).status == "ok"
    assert k.run("%hvd_keep model opt epoch").status == "ok"
    crashed = k.run(DDP_TRAIN.replace("CRASH_AT", "3"), timeout=180)
    assert crashed.status == "error" and "restored model, opt, epoch" in crashed.error_text, crashed.error_text
    again = k.run(DDP_TRAIN.replace("CRASH_AT", "-1"), timeout=180)
    assert again.status == "ok", again.error_text
    # A restore goes on from the last commit written (epoch 3, or 2 where the crash cut its write short); a retrain
    # from nothing, which the seeded setup would make print the same numbers, starts again at epoch 1.
    resumed = [int(e) for e in re.findall(r"epoch (\d+) loss", again.stdout)]
    assert resumed in ([4, 5, 6], [3, 4, 5, 6]), (resumed, again.stdout)
    printed = re.findall(r"epoch \d+ loss=\S+", crashed.stdout + again.stdout)
    assert sorted(set(printed)) == sorted(ddp_baseline["printed"]), (printed, ddp_baseline["printed"])
    assert k.run("%%hvd\nstate = (model.state_dict(), opt.state_dict())").status == "ok"
    got = pull_all(k, "state")
    for rank in (0, 1):
        assert same(got[rank], ddp_baseline["state"][rank]), f"rank {rank}'s DDP model or Adam state differs"


def test_fsdp2_shards_come_back_on_each_rank_after_a_restart(kernel):
    k = kernel
    assert k.run(START, timeout=120).status == "ok"
    assert k.run(FSDP_SETUP).status == "ok"
    assert k.run("%hvd_keep net fopt").status == "ok"
    assert k.run(FSDP_TRAIN, timeout=180).status == "ok"
    assert k.run(SHARDS).status == "ok"
    before = pull_all(k, "both")
    assert not same(before[0][0], before[1][0]), "the ranks' shards should differ"
    want = [(f"rank-{r}", name) for r in (0, 1) for name in ("net", "fopt")]
    said = kept_in_dcp(k, want)
    assert all(repr(w) in said for w in want), f"each rank keeps its shards with torch.distributed.checkpoint: {said}"
    r = k.run("%hvd_restart", timeout=180)
    assert r.status == "ok" and "restored net, fopt" in r.stdout, r.stdout + r.error_text
    assert k.run(SHARDS).status == "ok"
    after = pull_all(k, "both")
    for rank in (0, 1):
        assert same(after[rank][0], before[rank][0]), f"rank {rank}'s shards differ after the restore"
        assert same(after[rank][1], before[rank][1]), f"rank {rank}'s Adam moments differ after the restore"
    r = k.run(FSDP_TRAIN, timeout=180)
    assert r.status == "ok", r.error_text


def test_a_rewind_brings_each_ranks_fsdp2_shards_back_from_an_earlier_snapshot_in_the_running_pool(kernel):
    k = kernel
    assert k.run(START, timeout=120).status == "ok"
    assert k.run(FSDP_SETUP).status == "ok"
    assert k.run("%hvd_keep net fopt").status == "ok"
    tagged = FSDP_TRAIN + "import jupyter_hvd\njupyter_hvd.commit(tag='trained')\n"
    assert k.run(tagged, timeout=180).status == "ok"
    assert k.run(SHARDS).status == "ok"
    before = pull_all(k, "both")
    assert k.run(FSDP_TRAIN, timeout=180).status == "ok"  # the shards move on from the tagged snapshot
    kept_in_dcp(k, [(f"rank-{r}", name) for r in (0, 1) for name in ("net", "fopt")])
    pid = "%%hvd --ranks all\nimport os\nprint('pid', rank, os.getpid())"
    pids_before = sorted(re.findall(r"pid \d+ \d+", k.run(pid).stdout))
    r = k.run("%hvd_rewind trained", timeout=120)
    assert r.status == "ok" and "restored net, fopt" in r.stdout, r.stdout + r.error_text
    assert sorted(re.findall(r"pid \d+ \d+", k.run(pid).stdout)) == pids_before, "rewind restarted the pool"
    assert k.run(SHARDS).status == "ok"
    after = pull_all(k, "both")
    for rank in (0, 1):
        assert same(after[rank][0], before[rank][0]), f"rank {rank}'s shards are not those of the tagged snapshot"
        assert same(after[rank][1], before[rank][1]), f"rank {rank}'s Adam moments are not those of the tagged one"
    r = k.run(FSDP_TRAIN, timeout=180)
    assert r.status == "ok", r.error_text


def test_an_fsdp2_shard_laid_out_otherwise_is_named_per_rank_and_the_other_kept_names_come_back(kernel, tmp_path):
    k = kernel
    dim = tmp_path / "dim"
    dim.write_text("0")
    # net's first weight is sharded along the dimension the file says: the setup cell lays it out otherwise later.
    setup = f"""%%hvd --setup
import torch.nn.functional as F
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import Shard
torch.manual_seed(0)
dim = int(open({str(dim)!r}).read())
net = torch.nn.Sequential(torch.nn.Linear(8, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
fully_shard(net[0], shard_placement_fn=lambda p: Shard(dim if p.dim() > 1 else 0))
fully_shard(net)
fopt = torch.optim.Adam(net.parameters(), lr=0.01)
head = torch.nn.Linear(8, 16)
fully_shard(head)
hopt = torch.optim.Adam(head.parameters(), lr=0.01)
epoch = 0
"""
    train = """%%hvd
x = torch.randn(32, 8, generator=torch.Generator().manual_seed(rank))
for step in range(3):
    fopt.zero_grad(); hopt.zero_grad()
    (net(x).sum() + head(x).sum()).backward()
    fopt.step(); hopt.step()
epoch += 1
"""
    heads = """%%hvd
hstate = ({k: v.to_local().clone() for k, v in head.state_dict().items()},
          {i: {n: (t.to_local() if hasattr(t, 'to_local') else t).clone() for n, t in s.items()}
           for i, s in hopt.state_dict()['state'].items()}, epoch)
"""
    assert k.run(START, timeout=120).status == "ok"
    assert k.run(setup).status == "ok"
    assert k.run("%hvd_keep net fopt head hopt epoch").status == "ok"
    assert k.run(train, timeout=120).status == "ok"
    assert k.run(heads).status == "ok"
    before = pull_all(k, "hstate")
    kept_in_dcp(k, [(f"rank-{r}", name) for r in (0, 1) for name in ("net", "fopt", "head", "hopt")])
    dim.write_text("1")
    r = k.run("%hvd_restart", timeout=180)
    said = r.stdout + r.error_text
    assert r.status == "ok" and "restored head, hopt, epoch" in said, said
    # What could not come back is named, with each rank's own shard: the kernel names the ranks.
    for name in ("net", "fopt"):
        assert f"not restored: {name} (rank 0: " in said and "rank 1: " in said, said
    assert "0.weight: this rank's shard was (32, 8) at (0, 0) of (64, 8)" in said, said
    assert "(64, 4) at (0, 4) of (64, 8)" in said and "Shard(dim=1)" in said, said
    assert "state 'exp_avg' of parameter 0" in said, said
    assert k.run(heads).status == "ok"
    after = pull_all(k, "hstate")
    for rank in (0, 1):
        assert same(after[rank], before[rank]), f"rank {rank}'s head, its Adam moments or epoch differ"
    # net is as the setup cell built it now, and trains.
    r = k.run("%%hvd --ranks all\nprint('local', tuple(net[0].weight.to_local().shape))")
    assert r.stdout.count("local (64, 4)") == 2, r.stdout
    assert k.run(train, timeout=120).status == "ok"


def test_a_crash_while_fsdp2_shards_are_written_leaves_no_half_snapshot(kernel):
    k = kernel
    assert k.run(START, timeout=120).status == "ok"
    setup = """%%hvd --setup
from torch.distributed.fsdp import fully_shard
big = torch.nn.Linear(2048, 2048)
fully_shard(big)
bopt = torch.optim.Adam(big.parameters(), lr=0.01)
x = torch.randn(4, 2048)
"""
    step = "bopt.zero_grad()\nbig(x).sum().backward()\nbopt.step()\n"
    state = """%%hvd
bstate = ({k: v.to_local().clone() for k, v in big.state_dict().items()},
          {i: {n: (t.to_local() if hasattr(t, 'to_local') else t).clone() for n, t in s.items()}
           for i, s in bopt.state_dict()['state'].items()})
"""
    assert k.run(setup).status == "ok"
    assert k.run("%hvd_keep big bopt").status == "ok"
    assert k.run("%%hvd\n" + step).status == "ok"
    kept_in_dcp(k, [(f"rank-{r}", name) for r in (0, 1) for name in ("big", "bopt")])
    assert k.run(state).status == "ok"
    before = pull_all(k, "bstate")
    # Rank 0 dies while it writes its part of the commit's snapshot: its shards' data is on disk, DCP's metadata not.
    crash = (
        "%%hvd\nimport jupyter_hvd, os, signal, time\nimport torch.distributed.checkpoint as dcp\n"
        "if rank == 0:\n    dcp.FileSystemWriter.finish = lambda *a, **kw: os.kill(os.getpid(), signal.SIGKILL)\n"
        + step
        + "jupyter_hvd.commit()\ntime.sleep(5)"
    )
    r = k.run(crash, timeout=180)
    assert r.status == "error" and "died on signal 9" in r.error_text, r.error_text
    assert "restored big, bopt from the end of cell" in r.error_text, r.error_text
    assert k.run(state).status == "ok"
    after = pull_all(k, "bstate")
    for rank in (0, 1):
        assert same(after[rank], before[rank]), f"rank {rank} did not come back to the last whole snapshot"
    find = """from jupyter_hvd.kernel.owner import current
kept = current().directory / 'kept'
gens = [g for g in kept.glob('rank-*/*') if not g.name.startswith('.tmp-')]
print('@@', sorted(str(p) for p in kept.rglob('.tmp-*')), [str(g) for g in gens if not (g / 'manifest').is_file()],
      [str(d) for g in gens for d in g.glob('dcp/*') if not (d / '.metadata').is_file()])"""
    deadline = time.monotonic() + 10
    while "@@ [] [] []" not in (left := k.run(find).stdout) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert "@@ [] [] []" in left, f"half-written snapshot files were left: {left}"


def test_the_export_runs_under_torchrun_and_under_mpirun(kernel, tmp_path):
    k = kernel
    assert k.run(START, timeout=120).status == "ok"
    assert k.run(DDP_SETUP).status == "ok"
    r = k.run(DDP_TRAIN.replace("CRASH_AT", "-1"), timeout=180)
    assert r.status == "ok", r.error_text
    printed = re.findall(r"epoch \d+ loss=\S+", r.stdout)
    script = tmp_path / "ddp.py"
    r = k.run(f"%hvd_export {script}")
    assert r.status == "ok" and "torchrun --nproc-per-node 2" in r.stdout, r.stdout + r.error_text
    torchrun = shutil.which("torchrun", path=VENV_BIN)
    assert torchrun, "torchrun is not in the venv"
    runs = {
        "torchrun": lambda: subprocess.run(
            [torchrun, "--nproc-per-node", "2", str(script)],
            capture_output=True,
            text=True,
            timeout=240,
            env=script_env(),
            cwd=tmp_path,
        ),
        "mpirun": lambda: run_under_mpirun(script, timeout=240),
    }
    for name, run in runs.items():
        out = run()
        assert out.returncode == 0, f"{name}: {out.stderr[-3000:]}"
        assert re.findall(r"epoch \d+ loss=\S+", out.stdout) == printed, (name, out.stdout, printed)


def test_profile_says_where_each_ranks_time_went(kernel, tmp_path):
    k = kernel
    assert k.run(START, timeout=120).status == "ok"
    assert k.run(DDP_SETUP).status == "ok"
    cell = f"%%hvd --profile {tmp_path}\nimport time\nfor i in range(0, 256, 32):\n"
    cell += "    opt.zero_grad(); F.mse_loss(model(X[i:i+32]), Y[i:i+32]).backward(); opt.step()\n"
    cell += "    if rank == 1:\n        time.sleep(0.05)\nx = torch.ones(1)\ndist.all_reduce(x)\n"
    r = k.run(cell, timeout=180)
    assert r.status == "ok", r.error_text
    assert "Where the time went" in r.stdout, r.stdout
    rows = {int(m.group(1)): m.group(0) for m in re.finditer(r"^\s+(\d)\s+\d+\.\d+\s+\d+%\s+(\d+)%.*$", r.stdout, re.M)}
    assert set(rows) == {0, 1}, r.stdout
    waiting = {rank: int(re.split(r"\s+", row.strip())[3].rstrip("%")) for rank, row in rows.items()}
    assert waiting[0] > waiting[1], f"rank 0 waits for the slow rank 1: {waiting}"
    assert (tmp_path / "rank0.json").exists() and (tmp_path / "rank1.json").exists()


def venv_without_horovod(where: Path) -> Path:
    """A real venv with everything the project's venv has except Horovod (its packages linked, not copied); its
    python."""
    main = Path(VENV_BIN).parent
    site = next(main.glob("lib/python3*/site-packages"))
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    own = next(where.glob("lib/python3*/site-packages"))
    for entry in site.iterdir():
        if not entry.name.lower().startswith("horovod"):
            (own / entry.name).symlink_to(entry)
    for tool in Path(VENV_BIN).iterdir():
        if not (where / "bin" / tool.name).exists():
            (where / "bin" / tool.name).symlink_to(tool.resolve())
    python = where / "bin" / "python"
    probe = subprocess.run([python, "-c", "import horovod"], capture_output=True, text=True)
    assert probe.returncode != 0, "Horovod is still importable in the venv made without it"
    return python


def test_a_pool_without_horovod_starts_and_trains_with_ddp(tmp_path, monkeypatch):
    python = venv_without_horovod(tmp_path / "venv")
    spec = tmp_path / "share" / "kernels" / "python3"
    spec.mkdir(parents=True)
    argv = [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(
        f'{{"argv": {json.dumps(argv)}, "display_name": "no horovod", "language": "python"}}'
    )
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "share"))
    k = Kernel()  # started now: it must see JUPYTER_PATH as set above
    try:
        r = k.run("%load_ext jupyter_hvd\n%config HvdPool.live_view = 'text'\n%hvd_start -np 2", timeout=120)
        assert r.status == "ok", r.error_text
        assert "Horovod is not installed here" in r.stdout and "torch/Gloo" in r.stdout, r.stdout
        r = k.run(DDP_SETUP)
        assert r.status == "ok", r.error_text
        r = k.run(DDP_TRAIN.replace("CRASH_AT", "-1"), timeout=180)
        assert r.status == "ok", r.error_text
        ddp = losses(r.stdout)
        assert len(ddp) == 6 and ddp[-1] < ddp[0] / 2, ddp
        r = k.run("%%hvd\nprint('hvd' in globals(), type(dist).__name__)")
        assert "False module" in r.stdout, r.stdout
        # Idle: no rest is tried (it needs Horovod), and nothing failed on the ranks.
        time.sleep(3)
        r = k.run("%hvd_status")
        assert "problem" not in r.stdout, r.stdout
        # The warm template works without Horovod too: a restart's ranks are forked from it.
        wait = "import time\nfrom jupyter_hvd.kernel.launch.template import template\nt0 = time.monotonic()\n"
        wait += "while not template.ready() and time.monotonic() - t0 < 60:\n    time.sleep(0.1)"
        assert k.run(wait, timeout=90).status == "ok"
        assert k.run("%hvd_restart", timeout=120).status == "ok"
        r = k.run("%%hvd\nimport os\nprint('forked', os.environ.get('JUPYTER_HVD_WARM_ENGINE', '').isdigit())")
        assert "forked True" in r.stdout, r.stdout + r.error_text
    finally:
        k.shutdown()
    assert wait_until_gone(f"hvd-{k.pid}-") == []


def test_a_slow_rank_in_ddp_is_named_the_straggler(kernel):
    """DDP's buckets are timed by a communication hook: rank 1, 30 ms slower per step, is named under the cell."""
    k = kernel
    assert k.run(START, timeout=120).status == "ok"
    assert k.run(DDP_SETUP).status == "ok"
    cell = (
        "%%hvd\nimport time\ndef step(i):\n    opt.zero_grad()\n    F.mse_loss(model(X[:32]), Y[:32]).backward()\n"
        "    if rank == 1:\n        time.sleep(0.03)\n    opt.step()\n"
        "t0 = time.monotonic()\nfor i in range(20):\n    step(i)\n"
        "n = [int(14 * 20 / (time.monotonic() - t0))]\ndist.broadcast_object_list(n, src=0)\n"
        "for i in range(n[0]):\n    step(i)\n"
    )
    r = k.run(cell, timeout=120)
    assert r.status == "ok", r.error_text
    assert re.search(r"rank 1 is the straggler: [\d.]+x the others' compute per step", r.stderr), r.stderr
