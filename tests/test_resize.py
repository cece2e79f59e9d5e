"""Resize a pool and keep the work: `%hvd_restart -np M` brings the pool up at M ranks, replays the setup at the new
size and lays the kept state out for the new ranks.

Real kernels with real CPU pools (Horovod, and torch.distributed for FSDP2).
"""

from __future__ import annotations

import re
import time

import pytest
from conftest import new_kernel, wait_until_gone

SETUP = """%%hvd --setup
import math
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Dropout(0.1), torch.nn.Linear(16, 1))
base = torch.optim.Adam(model.parameters(), lr=0.01 * hvd.size())
sched = torch.optim.lr_scheduler.StepLR(base, step_size=1, gamma=0.5)
scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
g = torch.Generator().manual_seed(7)
data = torch.utils.data.TensorDataset(torch.randn(60, 4, generator=g), torch.randn(60, 1, generator=g))
sampler = torch.utils.data.distributed.DistributedSampler(data, num_replicas=hvd.size(), rank=hvd.rank(), seed=3)
opt = hvd.DistributedOptimizer(base, named_parameters=model.named_parameters())
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
seen = 100 * rank  # counted per rank
"""

TRAIN = """%%hvd --ranks all
for epoch in range(2):
    sampler.set_epoch(epoch)
    for i in sampler:
        x, y = data[i]
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x[None]), y[None])
        loss.backward()
        opt.step()
        seen += 1
    sched.step()
    print(f"epoch loss={loss.item():.8f} rank={rank}")
scaler.scale(torch.ones(1))
scaler.update(new_scale=scaler.get_scale() / 2)
"""

LOOK = """%%hvd --ranks all
w = torch.cat([p.detach().flatten() for p in model.parameters()])
print('look', rank, hvd.size(), f"{w.sum().item():.8f}", f"{opt.param_groups[0]['lr']:g}", f"{sched.base_lrs[0]:g}",
      sched.last_epoch, scaler.get_scale(), sampler.num_replicas, len(list(sampler)), seen)
"""


def looks(stdout: str) -> dict[int, list[str]]:
    """rank -> what LOOK printed after the rank."""
    return {int(m[1]): m[2].split() for m in re.finditer(r"look (\d+) (.*)", stdout)}


def losses(stdout: str) -> dict[int, list[str]]:
    found: dict[int, list[str]] = {}
    for m in re.finditer(r"epoch loss=(\S+) rank=(\d+)", stdout):
        found.setdefault(int(m[2]), []).append(m[1])
    return found


@pytest.fixture
def k():
    kernel = new_kernel()
    r = kernel.run("%load_ext jupyter_hvd\n%config HvdPool.live_view = 'text'\n%hvd_start -np 2", timeout=120)
    assert r.status == "ok", r.error_text
    yield kernel
    kernel.shutdown()
    assert wait_until_gone(f"hvd-{kernel.pid}-") == []


def test_two_to_three_to_two_ranks_keeps_the_training_and_trains_as_a_fresh_run_at_that_size(k, tmp_path):
    assert k.run(SETUP).status == "ok"
    r = k.run("%hvd_keep model opt sched scaler sampler seen")
    assert r.status == "ok", r.error_text
    r = k.run(TRAIN, timeout=120)
    assert r.status == "ok", r.error_text
    before = looks(k.run(LOOK).stdout)
    weights = before[0][1]
    assert before[1][1] == weights, before  # data-parallel: every rank alike

    # A size the host cannot run is refused before anything stops.
    pid_cell = "%%hvd --ranks all\nimport os\nprint('pid', rank, os.getpid())"
    pids = sorted(k.run(pid_cell).stdout.splitlines())
    r = k.run("%hvd_restart -np 999")
    said = r.error_text + r.stderr
    assert r.status == "error" and "-np 999 asks for more ranks than this host runs" in said, said
    assert "The pool runs on as it was." in said, said
    assert sorted(k.run(pid_cell).stdout.splitlines()) == pids

    r = k.run("%hvd_restart -np 3", timeout=240)
    assert r.status == "ok", r.error_text
    said = r.stdout
    assert "Pool restarted on 3 ranks (it had 2)" in said and "replayed 1 setup cell" in said, said
    assert "restored model, opt, sched, scaler" in said and "from rank 0's copy (it was taken on 2 ranks" in said, said
    assert "opt's learning rate 0.005 -> 0.0075" in said and "sched's base learning rate 0.02 -> 0.03" in said, said
    assert "kept per rank, so not restored at another size: sampler, seen" in said, said
    now = looks(k.run(LOOK).stdout)
    assert sorted(now) == [0, 1, 2], now
    for rank, seen in now.items():
        # size, weights, lr (decayed twice, scaled for 3), base lr, scheduler step, scaler, sampler, per-rank count
        assert seen[:9] == ["3", weights, "0.0075", "0.03", "2", "512.0", "3", "20", str(100 * rank)], now
    # What the export writes launches the current size.
    r = k.run(f"%hvd_export {tmp_path / 'train.py'}")
    assert "-np 3" in r.stdout, r.stdout

    # The same cell trains as a fresh 3-rank pool does from the same state.
    weights_file = str(tmp_path / "w.pt")
    save = (
        "%%hvd\nif rank == 0:\n"
        f"    torch.save({{'m': model.state_dict(), 'o': opt.state_dict(), 's': sched.state_dict()}}, {weights_file!r})"
    )
    assert k.run(save).status == "ok"
    resized = k.run(TRAIN, timeout=120)
    assert resized.status == "ok", resized.error_text

    # And down again: 3 to 2.
    r = k.run("%hvd_restart -np 2", timeout=240)
    assert r.status == "ok" and "Pool restarted on 2 ranks (it had 3)" in r.stdout, r.stdout + r.error_text
    assert "sched's base learning rate 0.03 -> 0.02" in r.stdout, r.stdout
    down = looks(k.run(LOOK).stdout)
    assert sorted(down) == [0, 1] and down[0][1] == down[1][1] and down[0][6:9] == ["2", "30", "0"], down
    # Once the snapshots taken on 3 ranks are older than those kept, rank 2's parts of them leave the disk too.
    for _ in range(4):
        assert k.run("%%hvd\nseen += 1").status == "ok"
    k.run("%hvd_snapshots").check()  # expires what is no longer kept
    parts = (
        "from jupyter_hvd.kernel.owner import current\nimport os\n"
        "print({r: sorted(os.listdir(current().kept_dir / f'rank-{r}')) "
        "for r in range(3) if (current().kept_dir / f'rank-{r}').exists()})"
    )
    deadline = time.monotonic() + 60  # the deletion is the engines' writer thread's job, after what it writes
    while (left := eval(k.run(parts).check().stdout.strip()).get(2)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, f"rank 2's parts of expired snapshots are still on disk: {left}"

    r = k.run("%hvd_stop\n%hvd_start -np 3", timeout=120)
    assert r.status == "ok", r.error_text
    assert k.run(SETUP).status == "ok"
    load = (
        f"%%hvd\nw = torch.load({weights_file!r})\n"
        "model.load_state_dict(w['m']); opt.load_state_dict(w['o']); sched.load_state_dict(w['s'])"
    )
    assert k.run(load).status == "ok"
    fresh = k.run(TRAIN, timeout=120)
    assert fresh.status == "ok", fresh.error_text
    assert losses(resized.stdout) == losses(fresh.stdout) and len(losses(fresh.stdout)) == 3, (
        resized.stdout,
        fresh.stdout,
    )


def test_a_rewind_at_the_new_size_takes_a_snapshot_of_the_old_size(k):
    assert k.run(SETUP).status == "ok"
    assert k.run("%hvd_keep model").status == "ok"
    assert k.run(TRAIN, timeout=120).status == "ok"
    r = k.run("%%hvd\nimport jupyter_hvd\njupyter_hvd.commit(tag='two')")
    assert r.status == "ok", r.error_text
    at_two = looks(k.run(LOOK).stdout)[0][1]
    assert k.run("%hvd_restart -np 3", timeout=240).status == "ok"
    assert k.run(TRAIN, timeout=120).status == "ok"  # the model moves on at 3 ranks
    assert looks(k.run(LOOK).stdout)[0][1] != at_two
    r = k.run("%hvd_rewind two", timeout=120)
    assert r.status == "ok" and "from rank 0's copy (it was taken on 2 ranks" in r.stdout, r.stdout + r.error_text
    back = looks(k.run(LOOK).stdout)
    assert sorted(back) == [0, 1, 2] and {b[1] for b in back.values()} == {at_two}, back


def test_a_crash_during_the_resize_keeps_the_last_good_snapshot(k):
    # The setup cell fails on the third rank only: the resize to 3 cannot come back, and nothing kept is lost.
    setup = SETUP + "if hvd.size() == 3 and rank == 2:\n    import os\n    os._exit(4)\n"
    assert k.run(setup).status == "ok"
    assert k.run("%hvd_keep model opt").status == "ok"
    assert k.run(TRAIN, timeout=120).status == "ok"
    kept = looks(k.run(LOOK).stdout)[0][1]
    r = k.run("%hvd_restart -np 3", timeout=400)
    said = r.stdout + r.error_text
    assert "the engines were lost" in said, said
    r = k.run("%hvd_restart -np 2", timeout=240)
    assert r.status == "ok" and "restored model, opt" in r.stdout, r.stdout + r.error_text
    back = looks(k.run(LOOK).stdout)
    assert sorted(back) == [0, 1] and back[0][1] == back[1][1] == kept, back


FSDP_SETUP = """%%hvd --setup
import torch.nn.functional as F
from torch.distributed.fsdp import fully_shard
torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Linear(8, 48), torch.nn.ReLU(), torch.nn.Linear(48, 1))
for layer in net:
    if isinstance(layer, torch.nn.Linear):
        fully_shard(layer)
fully_shard(net)
fopt = torch.optim.Adam(net.parameters(), lr=0.01)
FX = torch.randn(96, 8, generator=torch.Generator().manual_seed(5))
FY = FX.sum(1, keepdim=True)
"""

FSDP_TRAIN = """%%hvd
for step in range(10):
    fopt.zero_grad()
    floss = F.mse_loss(net(FX), FY)
    floss.backward()
    fopt.step()
"""

WHOLE = """%%hvd --ranks all
full = {k: v.full_tensor() for k, v in net.state_dict().items()}
moment = {i: s['exp_avg'].full_tensor().sum().item() for i, s in fopt.state_dict()['state'].items()}
print('whole', rank, dist.get_world_size(), f"{sum(t.sum().item() for t in full.values()):.6f}",
      f"{sum(moment.values()):.6f}", net[0].weight.to_local().shape[0])
"""


def test_fsdp2_shards_are_laid_out_anew_from_two_ranks_to_three():
    k = new_kernel()
    try:
        start = "%load_ext jupyter_hvd\n%config HvdPool.live_view = 'text'\n%hvd_start -np 2 --torch-distributed"
        r = k.run(start, timeout=120)
        assert r.status == "ok", r.error_text
        assert k.run(FSDP_SETUP).status == "ok"
        assert k.run("%hvd_keep net fopt").status == "ok"
        assert k.run(FSDP_TRAIN, timeout=180).status == "ok"
        before = re.findall(r"whole (\d) (\d) (\S+) (\S+) (\d+)", k.run(WHOLE).stdout)
        assert len(before) == 2 and before[0][1:4] == before[1][1:4] and before[0][4] == "24", before
        r = k.run("%hvd_restart -np 3", timeout=240)
        assert r.status == "ok" and "restored net, fopt" in r.stdout, r.stdout + r.error_text
        after = re.findall(r"whole (\d) (\d) (\S+) (\S+) (\d+)", k.run(WHOLE).stdout)
        assert sorted(a[0] for a in after) == ["0", "1", "2"], after
        # The whole weights and Adam's moments are those kept; each rank holds its third (48 rows over 3 ranks).
        assert {a[2] for a in after} == {before[0][2]} and {a[3] for a in after} == {before[0][3]}, (before, after)
        assert {a[1] for a in after} == {"3"} and {a[4] for a in after} == {"16"}, after
        assert k.run(FSDP_TRAIN, timeout=180).status == "ok"  # and it trains on at 3
    finally:
        k.shutdown()
    assert wait_until_gone(f"hvd-{k.pid}-") == []
