"""Kept means kept, for the objects of an everyday notebook: each rank gets its own state back (a sampler's shard,
per-rank counters), objects with a state_dict are loaded into the live objects the setup cells rebuilt (a scheduler
still drives its optimizer), one value that cannot be kept spoils nothing, pushed values are replayed with the setup
cells, and what did not come back is named.

Real kernels with real 2-rank CPU pools; every check reads each rank's state, not only a message.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from conftest import Kernel, new_kernel, wait_until_gone

START = "%load_ext jupyter_hvd\n%config HvdPool.live_view = 'text'\n%hvd_start -np 2"

EVERYDAY = """%%hvd --setup
from torch.utils.data import DistributedSampler, TensorDataset
dataset = TensorDataset(torch.arange(8.0))
sampler = DistributedSampler(dataset, num_replicas=size, rank=rank, shuffle=False)
model = torch.nn.Linear(2, 2)
opt = torch.optim.SGD(model.parameters(), lr=1.0)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
seen = 0
history = {"rank": rank, "losses": []}
"""

STEP = """%%hvd
sampler.set_epoch(3)
opt.step(); sched.step()
seen += 10 * (rank + 1)
history["losses"].append(rank + 0.5)
"""

# Each rank's view, as one JSON line per rank (rank 0 prints, the others' lines are pulled).
REPORT = """%%hvd
import json
state = json.dumps({"rank": rank, "sampler_rank": sampler.rank, "shard": list(sampler), "epoch": sampler.epoch,
    "lr": opt.param_groups[0]["lr"], "sched_drives_opt": sched.optimizer is opt, "seen": seen,
    "history": history, "after_step": None})
"""


def per_rank(k: Kernel, code: str = REPORT) -> list[dict]:
    r = k.run(code)
    assert r.status == "ok", r.error_text
    out = []
    for rank in (0, 1):
        got = k.run(f"%hvd_pull state --rank {rank}\nprint('@@', state)")
        assert got.status == "ok", got.error_text
        out.append(json.loads(got.stdout.split("@@ ", 1)[1]))
    return out


@pytest.fixture
def kernel():
    k = new_kernel()
    yield k
    k.shutdown()
    assert wait_until_gone(f"hvd-{k.pid}-") == []


def test_each_rank_gets_its_own_sampler_counters_and_a_scheduler_that_drives_the_live_optimizer(kernel):
    k = kernel
    k.run(START, timeout=120).check()
    assert k.run(EVERYDAY).status == "ok"
    assert k.run("%hvd_keep sampler model opt sched seen history").status == "ok"
    assert k.run(STEP).status == "ok"
    before = per_rank(k)
    assert [b["shard"] for b in before] == [[0, 2, 4, 6], [1, 3, 5, 7]]
    r = k.run("%hvd_restart", timeout=120)
    assert r.status == "ok", r.error_text
    assert "restored" in r.stdout, r.stdout
    after = per_rank(k)
    for rank in (0, 1):
        assert after[rank]["sampler_rank"] == rank, after[rank]
        assert after[rank]["shard"] == before[rank]["shard"], (rank, after[rank])
        assert after[rank]["epoch"] == 3
        assert after[rank]["seen"] == 10 * (rank + 1), after[rank]
        assert after[rank]["history"] == {"rank": rank, "losses": [rank + 0.5]}, after[rank]
        assert after[rank]["lr"] == 0.5, after[rank]
        assert after[rank]["sched_drives_opt"], "the restored scheduler holds a copy of the optimizer"
    # The restored scheduler drives the live optimizer: one more step halves its learning rate on every rank.
    r = k.run("%%hvd\nsched.step()\nprint('lr', opt.param_groups[0]['lr'])")
    assert r.status == "ok" and "lr 0.25" in r.stdout, r.stdout + r.error_text


def test_one_value_that_cannot_be_kept_spoils_nothing_and_commit_never_raises(kernel):
    k = kernel
    k.run(START, timeout=120).check()
    setup = "%%hvd --setup\nmodel = torch.nn.Linear(3, 1)\nsteps = 0\nfeed = (i for i in range(100))\n"
    assert k.run(setup).status == "ok"
    r = k.run("%hvd_keep model feed steps")
    assert r.status == "ok", r.error_text
    said = r.stdout + r.stderr
    assert "feed" in said and "generator" in said, said
    train = (
        "%%hvd\nimport jupyter_hvd\nwith torch.no_grad():\n    model.weight += 1\nsteps += 1\n"
        "jupyter_hvd.commit()\nprint('after commit', steps)"
    )
    r = k.run(train)
    assert r.status == "ok" and "after commit 1" in r.stdout, r.stdout + r.error_text
    r = k.run(train)
    assert r.status == "ok", r.error_text
    # Said once (at %hvd_keep), not at every commit.
    assert "generator" not in r.stdout + r.stderr, r.stdout + r.stderr
    w = k.run("%%hvd\nw = model.weight.sum().item()\nprint('w', round(w, 3), 'steps', steps)")
    before = w.stdout.split("w ", 1)[1].strip()
    r = k.run("%hvd_restart", timeout=120)
    assert r.status == "ok", r.error_text
    assert "model" in r.stdout and "steps" in r.stdout and "feed" in r.stdout, r.stdout
    w = k.run("%%hvd\nw = model.weight.sum().item()\nprint('w', round(w, 3), 'steps', steps)")
    assert w.stdout.split("w ", 1)[1].strip() == before, (w.stdout, before)


def test_pushed_values_are_replayed_in_order_with_the_setup_cells(kernel):
    k = kernel
    k.run(START, timeout=120).check()
    assert k.run("cfg = {'width': 5}\n%hvd_push cfg").status == "ok"
    r = k.run("%%hvd --setup\nmodel = torch.nn.Linear(cfg['width'], 1)\nsteps = 0")
    assert r.status == "ok", r.error_text
    listing = k.run("%hvd_setup").stdout
    assert "push" in listing and "cfg" in listing, listing
    assert k.run("%hvd_keep model steps").status == "ok"
    assert k.run("%%hvd\nsteps = 7").status == "ok"
    r = k.run("%hvd_restart", timeout=120)
    assert r.status == "ok", r.error_text
    assert "failed" not in r.stdout, r.stdout
    r = k.run("%%hvd\nprint('width', model.in_features, 'steps', steps, 'cfg', cfg)")
    assert r.status == "ok" and "width 5 steps 7" in r.stdout, r.stdout + r.error_text


def test_a_module_that_differs_between_ranks_is_kept_per_rank_and_said_once(kernel):
    k = kernel
    k.run(START, timeout=120).check()
    # BatchNorm statistics are not synchronised by data-parallel training: each rank's differ.
    setup = "%%hvd --setup\ntorch.manual_seed(0)\nnet = torch.nn.BatchNorm1d(3)\n"
    assert k.run(setup).status == "ok"
    assert k.run("%hvd_keep net").status == "ok"
    step = "%%hvd\nnet(torch.randn(8, 3) + 10 * rank)\nstats = net.running_mean.tolist()"
    r = k.run(step)
    assert r.status == "ok", r.error_text
    said = r.stdout + r.stderr + k.run(step).stderr
    for _ in range(20):  # the news comes with the next cell once every rank's snapshot is on disk (later under load)
        if "net differs" in said:
            break
        time.sleep(0.5)
        said += k.run("%%hvd\npass").stderr
    said += k.run("%%hvd\npass").stderr  # and it is not said again
    assert said.count("net differs between ranks 0, 1") == 1, said
    before = [k.run(f"%hvd_pull stats --rank {rank}\nprint('@@', stats)").stdout for rank in (0, 1)]
    assert before[0] != before[1]
    assert k.run("%hvd_restart", timeout=120).status == "ok"
    assert k.run("%%hvd\nstats = net.running_mean.tolist()").status == "ok"
    after = [k.run(f"%hvd_pull stats --rank {rank}\nprint('@@', stats)").stdout for rank in (0, 1)]
    assert after == before


def test_a_failed_replay_never_loses_the_last_good_snapshot_and_a_mended_restart_brings_it_back(kernel, tmp_path):
    k = kernel
    data = tmp_path / "width.txt"
    data.write_text("4")
    k.run(START, timeout=120).check()
    setup = f"%%hvd --setup\nmodel = torch.nn.Linear(int(open({str(data)!r}).read()), 1)\nsteps = 0"
    assert k.run(setup).status == "ok"
    assert k.run("%hvd_keep model steps").status == "ok"
    train = "%%hvd\nwith torch.no_grad():\n    model.weight += 1\nsteps += 1\nw = model.weight.sum().item()"
    assert k.run(train).status == "ok"
    good = k.run("%hvd_pull w\nprint('@@', round(w, 4))").stdout.split("@@ ")[1].strip()
    data.unlink()  # the setup cell cannot run again: model is not rebuilt
    r = k.run("%hvd_restart", timeout=120)
    assert r.status == "ok", r.error_text
    assert "FileNotFoundError" in r.stdout and "not restored: model" in r.stdout, r.stdout
    assert "stays the one to restore" in r.stdout, r.stdout
    # More cells than snapshots are kept: each changes steps, none may push the good snapshot out.
    for _ in range(5):
        assert k.run("%%hvd\nsteps += 100").status == "ok"
    listing = k.run("%hvd_snapshots").stdout
    assert "pinned" in listing, listing
    data.write_text("4")
    r = k.run("%hvd_restart", timeout=120)
    assert r.status == "ok" and "restored model, steps" in r.stdout, r.stdout
    r = k.run("%%hvd\nprint('@@', round(model.weight.sum().item(), 4), steps)")
    assert r.stdout.split("@@ ")[1].strip() == f"{good} 1", r.stdout


def test_rewind_goes_back_to_an_earlier_snapshot_in_the_running_pool_and_tags_keep_one(kernel):
    k = kernel
    k.run(START, timeout=120).check()
    assert k.run("%%hvd --setup\nmodel = torch.nn.Linear(2, 1, bias=False)\nepoch = 0").status == "ok"
    assert k.run("%hvd_keep model epoch").status == "ok"
    train = (
        "%%hvd\nimport jupyter_hvd\nfor _ in range(3):\n    with torch.no_grad():\n        model.weight += 1\n"
        "    epoch += 1\n    jupyter_hvd.commit(tag='epoch1' if epoch == 1 else '')\n"
        "    if epoch == 1:\n        at_epoch1 = round(model.weight.sum().item(), 4)\n"
    )
    assert k.run(train).status == "ok"
    for _ in range(4):  # later snapshots push the untagged early ones out
        assert k.run("%%hvd\nepoch += 10").status == "ok"
    listing = k.run("%hvd_snapshots").stdout
    assert "tag 'epoch1'" in listing and "on disk" in listing, listing
    rows = [ln for ln in listing.splitlines() if ln[:4].strip().isdigit()]
    assert len(rows) == 4, listing  # the last 3 and the tagged one
    pid_before = k.run("%%hvd\nimport os\nprint('@@', os.getpid())").stdout
    r = k.run("%hvd_rewind epoch1")
    assert r.status == "ok" and "restored model, epoch" in r.stdout, r.stdout + r.error_text
    r = k.run("%%hvd\nimport os\nprint('@@', os.getpid(), epoch, round(model.weight.sum().item(), 4) == at_epoch1)")
    pid, epoch, same = r.stdout.split("@@ ")[1].split()
    assert pid == pid_before.split("@@ ")[1].split()[0], "rewind restarted the pool"
    assert (epoch, same) == ("1", "True"), r.stdout
    status = k.run("%hvd_status").stdout
    assert "Snapshots on disk:" in status, status


def test_a_snapshot_whose_files_are_gone_falls_back_to_the_one_before(kernel):
    k = kernel
    k.run(START, timeout=120).check()
    assert k.run("%%hvd --setup\nsteps = 0").status == "ok"
    assert k.run("%hvd_keep steps").status == "ok"
    assert k.run("%%hvd\nsteps = 1").status == "ok"
    assert k.run("%%hvd\nsteps = 2").status == "ok"
    assert "Last snapshot (#3)" in k.run("%hvd_keep").stdout  # every rank's part is written
    # The newest snapshot's files disappear (a cleaned disk): both ranks' parts of it.
    code = (
        "from jupyter_hvd.kernel.owner import current\nimport shutil\np = current()\n"
        "g = p.keeper.snapshots.newest()\nfor r, part in g.parts.items():\n"
        "    shutil.rmtree(p.directory / 'kept' / f'rank-{r}' / f'{part[0]:08d}-{part[1]:04d}')\nprint('@@', g.number)"
    )
    gone = k.run(code).stdout.split("@@ ")[1].strip()
    r = k.run("%hvd_restart", timeout=120)
    assert r.status == "ok", r.error_text
    assert f"snapshot #{gone} could not be read on any rank" in r.stdout and "restored steps" in r.stdout, r.stdout
    assert "steps 1" in k.run("%%hvd\nprint('steps', steps)").stdout


def test_a_tag_names_its_newest_snapshot_digits_name_numbers_and_tagged_snapshots_are_capped(kernel):
    k = kernel
    k.run(START.replace("%hvd_start", "%config HvdPool.tags_kept = 2\n%hvd_start"), timeout=120).check()
    assert k.run("%%hvd --setup\nloss = 0.0").status == "ok"
    assert k.run("%hvd_keep loss").status == "ok"
    commit = "%%hvd\nimport jupyter_hvd\nloss = {loss}\njupyter_hvd.commit(tag='{tag}')"
    for loss, tag in ((0.5, "best"), (0.4, "best"), (0.3, "best")):
        assert k.run(commit.format(loss=loss, tag=tag)).status == "ok"
    said = k.run(commit.format(loss=0.9, tag="3")).stderr
    for _ in range(20):  # said under the next cells, once every rank's part is on disk (later under load)
        if "tagged snapshot #2 ('best'" in said and "tag='3'" in said:
            break
        time.sleep(0.5)
        said += k.run("%%hvd\npass").stderr
    assert "commit(tag='3'): a tag of digits alone would read as a snapshot's number" in said, said
    assert "tagged snapshot #2 ('best', from commit() in cell" in said and "c.HvdPool.tags_kept" in said, said
    listing = k.run("%hvd_snapshots").stdout
    assert listing.count("tag 'best'") == 2 and "tag '3'" not in listing, listing
    r = k.run("%hvd_rewind best")
    assert r.status == "ok", r.error_text
    assert "@@ 0.3" in k.run("%%hvd\nprint('@@', loss)").stdout  # the newest 'best', not the first


def test_a_stopped_pool_started_again_keeps_its_snapshots_by_moving_them_not_copying(kernel):
    k = kernel
    k.run(START, timeout=120).check()
    assert k.run("%%hvd --setup\nw = torch.zeros(300_000)").status == "ok"
    assert k.run("%hvd_keep w").status == "ok"
    assert k.run("%%hvd\nw += 1 + rank").status == "ok"
    assert "Last snapshot (#2)" in k.run("%hvd_keep").stdout
    where = "from jupyter_hvd.kernel.owner import current\nprint('@@', current().kept_dir)"
    old = Path(k.run(where).stdout.split("@@ ")[1].strip())
    data = {f.name: (f.stat().st_ino, f.stat().st_nlink) for f in (old / "data").iterdir()}
    assert data and all(links > 1 for _, links in data.values()), data  # shared by the snapshots' links
    r = k.run("%config HvdPool.mpiexec = '/nonexistent/mpiexec'\n%hvd_restart", timeout=120)
    assert r.status == "error" and "The pool was stopped" in r.error_text, r.error_text
    r = k.run("%config HvdPool.mpiexec = ''\n%hvd_restart", timeout=120)
    assert r.status == "ok" and "restored w" in r.stdout, r.stdout + r.error_text
    new = Path(k.run(where).stdout.split("@@ ")[1].strip())
    assert new != old and not old.exists()
    moved = {f.name: (f.stat().st_ino, f.stat().st_nlink) for f in (new / "data").iterdir()}
    assert {n: ino for n, (ino, _) in moved.items()} == {n: ino for n, (ino, _) in data.items()}, (data, moved)
    r = k.run("%%hvd --ranks all\nprint('@@', w.sum().item())")
    assert "[rank 0] @@ 300000.0" in r.stdout and "[rank 1] @@ 600000.0" in r.stdout, r.stdout


def test_two_pushes_of_one_notebook_cell_are_both_replayed_and_running_it_again_replaces_both(kernel):
    k = kernel
    k.run(START, timeout=120).check()
    push = "a = {a}\nb = {b}\n%hvd_push a\n%hvd_push b"
    assert k.run(push.format(a=1, b=2), cell_id="push-cell").status == "ok"
    listing = k.run("%hvd_setup").stdout
    assert "%hvd_push a" in listing and "%hvd_push b" in listing, listing
    assert k.run(push.format(a=10, b=20), cell_id="push-cell").status == "ok"
    listing = k.run("%hvd_setup").stdout
    assert "2 entries" in listing, listing
    r = k.run("%hvd_restart", timeout=120)
    assert r.status == "ok" and "replayed 2 pushes" in r.stdout, r.stdout + r.error_text
    assert "@@ 10 20" in k.run("%%hvd\nprint('@@', a, b)").stdout
