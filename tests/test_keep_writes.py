"""Kept for sure: whatever writes a kept tensor, the snapshot holds the values of the end of the cell.

A write campaign on real 2-rank pools in real kernels: one cell changes kept values in fifteen ways, twelve of which
torch's in-place counter never sees (BatchNorm's and SyncBatchNorm's running statistics, a broadcast from rank 0,
`.data`, numpy and DLPack views, an in-place allreduce, ctypes, a new tensor at a freed tensor's address, a user's
thread, a big tensor that lives in a data file), plus three it does (an optimizer's load_state_dict, torch.load into a
live module, an in-place op). Then one of four things happens: an engine dies, `%hvd_restart`, `%hvd_rewind` to a
tag after more writes, or the snapshot cannot be written (a real full disk: a tmpfs mounted where the snapshots go)
and is written again once there is room, before an engine dies. Every rank's every value must then be what it was at
the end of that cell: values no replay of the setup cells can produce (each rank's own, from the write cell).
"""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest
from conftest import Kernel, needs, new_kernel, wait_until_gone

START = "%load_ext jupyter_hvd\n%config HvdPool.live_view = 'text'\n%hvd_start -np 2"

SETUP = """%%hvd --setup
import ctypes, io, json, os, threading
import numpy as np
torch.manual_seed(0)
bn = torch.nn.BatchNorm1d(3)
bn2 = torch.nn.BatchNorm2d(2)
sbn = torch.nn.SyncBatchNorm(3)  # on CPU ranks without a process group it trains as a BatchNorm
model = torch.nn.Linear(4, 2)
lin = torch.nn.Linear(3, 3)
src = torch.nn.Linear(3, 3)
opt = torch.optim.Adam(lin.parameters(), lr=0.1)
loaded = torch.nn.Linear(2, 2)
w_inplace = torch.zeros(5)
w_numpy = torch.zeros(5)
w_dlpack = torch.zeros(5)
w_allreduce = torch.full((5,), float(rank + 1))
w_ctypes = torch.zeros(5)
w_thread = torch.zeros(5)
w_addr = torch.zeros(5); w_addr.fill_(0.0)
big = torch.zeros(300_000)
KEPT = ["bn", "bn2", "sbn", "model", "lin", "opt", "loaded", "w_inplace", "w_numpy", "w_dlpack", "w_allreduce",
        "w_ctypes", "w_thread", "w_addr", "big"]
def _fp():
    out = {}
    for name in KEPT:
        obj = globals()[name]
        if hasattr(obj, "state_dict"):
            state = obj.state_dict()
            if isinstance(obj, torch.optim.Optimizer):
                state = {str(k): v for k, v in state["state"].items()}
                out[name] = json.dumps({k: {kk: round(float(vv.double().sum()), 4) for kk, vv in v.items()}
                                        for k, v in state.items()}, sort_keys=True)
            else:
                out[name] = json.dumps({k: round(float(v.double().sum()), 4) for k, v in state.items()})
        else:
            out[name] = round(float(obj.double().sum()), 4)
    return out
"""

# Each rank writes values of its own, most of them behind torch's in-place counter.
WRITE = """%%hvd
step = {step}
bn(torch.randn(8, 3) + 10 * rank + step)
bn2(torch.randn(4, 2, 3, 3) + rank + step)
sbn(torch.randn(8, 3) + rank + step)
with torch.no_grad():
    if rank == 0:
        model.weight.copy_(torch.full_like(model.weight, 28.0 + step))
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
lin.weight.data.add_(100 + rank + step)
lin(torch.ones(2, 3)).sum().backward(); opt.step(); opt.zero_grad()
other = torch.optim.Adam(lin.parameters(), lr=0.1)
lin(torch.ones(2, 3) * (rank + step)).sum().backward(); other.step(); other.zero_grad()
opt.load_state_dict(other.state_dict())
saved = io.BytesIO()
torch.save({{"weight": torch.full((2, 2), 5.0 + rank + step), "bias": torch.zeros(2)}}, saved)
saved.seek(0)
loaded.load_state_dict(torch.load(saved))
w_inplace.add_(1 + rank + step)
w_numpy.numpy()[:] = 50 + rank + step
np.from_dlpack(w_dlpack)[:] = 7 + rank + step
w_allreduce.fill_(rank + 1 + step) if step else None
hvd.allreduce_(w_allreduce, op=hvd.Sum, name=f"writes.{{step}}")
source = torch.full((5,), 3.0 + rank + step)
ctypes.memmove(w_ctypes.data_ptr(), source.data_ptr(), 5 * 4)
t = threading.Thread(target=lambda: w_thread.numpy().__setitem__(slice(None), 11 + rank + step)); t.start(); t.join()
del w_addr
w_addr = torch.empty(5); w_addr.fill_(9.0 + rank + step)
big.numpy()[:] = 1.0 + rank + step
_expected = _fp()
"""


def per_rank(k: Kernel, code: str = "%%hvd\n_now = _fp()") -> list[dict]:
    """Every rank's fingerprint of the kept values (after running `code` on every rank)."""
    r = k.run(code)
    assert r.status == "ok", r.error_text
    name = "_expected" if "_expected = _fp()" in code else "_now"
    out = []
    for rank in (0, 1):
        got = k.run(f"%hvd_pull {name} --rank {rank}\nimport json as _json\nprint('@@', _json.dumps({name}))")
        assert got.status == "ok", got.error_text
        out.append(json.loads(got.stdout.split("@@ ", 1)[1]))
    return out


def assert_same(expected: list[dict], now: list[dict], said: str) -> None:
    """Every rank's every kept value is what it was; the message names each way of writing that was lost."""
    lost = [
        f"rank {rank}: {name} is {now[rank].get(name)!r}, was {value!r}"
        for rank in (0, 1)
        for name, value in expected[rank].items()
        if now[rank].get(name) != value
    ]
    assert not lost, "\n".join([*lost, "what the restart said:", said])


@pytest.fixture
def kernel():
    k = new_kernel()
    k.run(START, timeout=120).check()
    yield k
    k.shutdown()
    assert wait_until_gone(f"hvd-{k.pid}-") == []


KEPT = "bn bn2 sbn model lin opt loaded w_inplace w_numpy w_dlpack w_allreduce w_ctypes w_thread w_addr big"


def start_writing(k: Kernel) -> list[dict]:
    """The setup, the names kept, one write cell; every rank's values at its end."""
    assert k.run(SETUP).status == "ok"
    r = k.run(f"%hvd_keep {KEPT}")
    assert r.status == "ok", r.error_text
    expected = per_rank(k, WRITE.format(step=0))
    # Only the write cell can have made these: each rank's own statistics, rank 0's broadcast on rank 1.
    assert expected[0]["bn"] != expected[1]["bn"] and expected[1]["model"] == expected[0]["model"]
    assert expected[1]["w_allreduce"] == 15.0 and expected[1]["w_numpy"] == 255.0
    return expected


def test_an_engine_that_dies_brings_back_every_write_on_every_rank(kernel):
    k = kernel
    expected = start_writing(k)
    r = k.run("%%hvd\nimport os\nif rank == 1:\n    os._exit(3)\nimport time; time.sleep(30)", timeout=180)
    assert r.status == "error" and "restarted" in r.error_text + r.stderr, r.error_text + r.stderr
    assert_same(expected, per_rank(k), r.error_text + r.stderr)


def test_hvd_restart_brings_back_every_write_on_every_rank(kernel):
    k = kernel
    expected = start_writing(k)
    r = k.run("%hvd_restart", timeout=180)
    assert r.status == "ok" and "restored" in r.stdout, r.stdout + r.error_text
    assert_same(expected, per_rank(k), r.stdout)


def test_hvd_rewind_to_a_tag_brings_back_every_write_on_every_rank(kernel):
    k = kernel
    expected = start_writing(k)
    assert k.run("%%hvd\nimport jupyter_hvd\njupyter_hvd.commit(tag='written')").status == "ok"
    later = per_rank(k, WRITE.format(step=1))
    assert later != expected
    r = k.run("%hvd_rewind written", timeout=120)
    assert r.status == "ok" and "Rewound" in r.stdout, r.stdout + r.error_text
    assert_same(expected, per_rank(k), r.stdout)


def test_a_snapshot_that_could_not_be_written_is_written_again_once_there_is_room():
    needs("" if os.geteuid() == 0 else "mounting a small file system for a full disk needs root")
    k = new_kernel()
    kept = None
    try:
        k.run(START, timeout=120).check()
        kept = k.state_dir / k.pool()["id"] / "kept"
        kept.mkdir(mode=0o700)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m,mode=0700", "tmpfs", str(kept)], check=True)
        assert k.run(SETUP).status == "ok"
        k.run(f"%hvd_keep {KEPT}").check()
        before = per_rank(k, WRITE.format(step=0))
        ballast = kept / "ballast"
        subprocess.run(["dd", "if=/dev/zero", f"of={ballast}", "bs=1M", "count=64"], capture_output=True)
        expected = per_rank(k, WRITE.format(step=1))  # its snapshot cannot be written: the disk is full
        said = ""
        deadline = time.monotonic() + 30
        while "could not be written" not in said and time.monotonic() < deadline:
            said += k.run("%%hvd\npass").stderr
        assert "could not be written on rank" in said and "No space left on device" in said, said
        assert "free" in said and "stays the one to restore" in said, said
        said += k.run("%%hvd\npass").stderr
        assert said.count("could not be written") == 1, said  # once, not once a rank and a cell
        ballast.unlink()  # room again: nothing changes, and the next cell's end writes it all the same
        deadline = time.monotonic() + 30
        while "written again" not in said and time.monotonic() < deadline:
            said += k.run("%%hvd\npass").stderr
        assert "snapshots are written again" in said, said
        r = k.run("%%hvd\nimport os\nif rank == 1:\n    os._exit(3)\nimport time; time.sleep(30)", timeout=180)
        assert r.status == "error", r.stdout
        now = per_rank(k)
        assert now != before
        assert_same(expected, now, r.error_text + r.stderr)
    finally:
        k.shutdown()
        if kept is not None:
            subprocess.run(["umount", "-l", str(kept)], check=False)
    assert wait_until_gone(f"hvd-{k.pid}-") == []
