"""How fast a 2-rank pool recovers: first exception -> cell end, interrupt -> cell end, kill -9 -> cell end,
%hvd_restart. Real kernel, real MPI ranks. With --torch, on a --torch-distributed pool: a raise while the other rank
waits in dist.all_reduce -> cell end, one dist.all_reduce too many on rank 1 -> cell end (both with every process
kept: the ranks whose cell ended decline the check the other waits in), and uneven DDP batches -> cell end (kept
too: they complete the owed bucket allreduces with zeros).

    python bench/failure_latency.py [--repeats 10] [--torch]

Targets (the tests assert only that each cell ends by itself, with the right words): a raise during an allreduce
within 1 s; during a dist.all_reduce within 2 s; uneven DDP batches within 3 s.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import report, setup_env, summary

from jupyter_hvd.testing import Kernel
from jupyter_hvd.testing.faults import rank_pid

# rank 1 raises at once; rank 0 is already waiting in an allreduce that rank 1 will never join
RAISE = "%%hvd --no-plot\nif rank == 1:\n    raise ValueError('injected')\nhvd.allreduce(torch.ones(1), name='never')\n"
LOOP = "%%hvd --no-plot\nfor i in range(10**6):\n    hvd.allreduce(torch.ones(256), name=f'loop.{i}')\n"
HEALTHY = "%%hvd --no-plot\nassert hvd.allreduce(torch.ones(1), name='ok', op=hvd.Sum).item() == 2"
TORCH_RAISE = "%%hvd --no-plot\nif rank == 1:\n    raise ValueError('injected')\nx = torch.ones(2)\ndist.all_reduce(x)"
TORCH_TOO_MANY = "%%hvd --no-plot\nx = torch.ones(2)\ndist.all_reduce(x)\nif rank == 1:\n    dist.all_reduce(x)"
PIDS = "%%hvd --ranks all --no-plot\nimport os\nprint('pid', os.getpid())"
DDP_SETUP = """%%hvd --setup
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
model = DDP(torch.nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
X, Y = torch.randn(32, 8), torch.randn(32, 1)
"""
UNEVEN = (
    "%%hvd --no-plot\nfor i in range(3 + rank):\n    opt.zero_grad()\n"
    "    F.mse_loss(model(X), Y).backward()\n    opt.step()\n"
)


def torch_cases(repeats: int) -> None:
    """A raise in a torch collective, and uneven DDP batches, on a --torch-distributed pool."""
    k = Kernel()
    found: dict[str, list[float]] = {"raise": [], "too many": [], "uneven": []}
    try:
        k.run("%load_ext jupyter_hvd")
        assert k.run("%hvd_start -np 2 --torch-distributed", timeout=300).status == "ok"
        for _ in range(repeats):
            pids = sorted(k.run(PIDS).stdout.split())
            r = k.run(TORCH_RAISE, timeout=120)
            assert r.status == "error" and "rank 1: ValueError: injected" in r.error_text, r.error_text
            found["raise"].append(r.finished - r.started)
            r = k.run(TORCH_TOO_MANY, timeout=120)
            assert r.status == "error" and "Collectives did not match" in r.error_text, r.error_text
            found["too many"].append(r.finished - r.started)
            assert sorted(k.run(PIDS).stdout.split()) == pids, "the pool restarted"
            assert k.run(DDP_SETUP).status == "ok"
            r = k.run(UNEVEN, timeout=120)
            assert r.status == "error" and "Collectives did not match" in r.error_text, r.error_text
            found["uneven"].append(r.finished - r.started)
            assert sorted(k.run(PIDS).stdout.split()) == pids, "the pool restarted"
            k.run("%hvd_setup --clear")
        k.run("%hvd_stop")
    finally:
        k.shutdown()
    labels = {
        "raise": "torch: rank 1 raises, rank 0 in dist.all_reduce: cell start -> cell end (processes kept)",
        "too many": "torch: one dist.all_reduce too many on rank 1: cell start -> cell end (processes kept)",
        "uneven": "torch: uneven DDP batches: cell start -> cell end (processes kept)",
    }
    rows = []
    for key, label in labels.items():
        s = summary(found[key])
        rows.append({"what": label, "median_s": s["median"], "max_s": s["max"], "n": s["n"]})
    report("failure_latency_torch", rows, ["what", "median_s", "max_s", "n"])


def after(seconds: float, action) -> dict:
    mark = {}

    def run():
        time.sleep(seconds)
        mark["t"] = time.time()
        action()

    threading.Thread(target=run, daemon=True).start()
    return mark


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--torch", action="store_true", help="the torch.distributed cases instead")
    args = parser.parse_args()
    setup_env()
    if args.torch:
        torch_cases(args.repeats)
        return
    k = Kernel()
    found: dict[str, list[float]] = {"exception": [], "interrupt": [], "kill -9": [], "restart": []}
    try:
        k.run("%load_ext jupyter_hvd")
        assert k.run("%hvd_start -np 2", timeout=300).status == "ok"
        for _ in range(args.repeats):
            r = k.run(RAISE)
            assert r.status == "error" and "rank 1: ValueError: injected" in r.error_text, r.error_text
            found["exception"].append(r.finished - r.started)
            assert k.run(HEALTHY).status == "ok"
            mark = after(1.0, k.km.interrupt_kernel)
            r = k.run(LOOP)
            assert r.status == "error" and "Interrupted" in r.error_text, r.error_text
            found["interrupt"].append(r.finished - mark["t"])
            assert k.run(HEALTHY).status == "ok"
        for _ in range(max(2, args.repeats // 3)):
            mark = after(1.0, lambda: os.kill(rank_pid(k, 1), signal.SIGKILL))
            r = k.run(LOOP, timeout=300)
            assert r.status == "error" and "signal 9" in r.error_text, r.error_text
            found["kill -9"].append(r.finished - mark["t"])
            assert k.run(HEALTHY).status == "ok"
            r = k.run("%hvd_restart", timeout=300)
            found["restart"].append(r.finished - r.started)
        k.run("%hvd_stop")
    finally:
        k.shutdown()
    labels = {
        "exception": "rank 1 raises, rank 0 in allreduce: cell start -> cell end",
        "interrupt": "kernel interrupt during allreduce loop -> cell end",
        "kill -9": "kill -9 of rank 1 -> cell end (incl. automatic restart)",
        "restart": "%hvd_restart of a 2-rank pool",
    }
    rows = []
    for key, label in labels.items():
        s = summary(found[key])
        rows.append({"what": label, "median_s": s["median"], "max_s": s["max"], "n": s["n"]})
    report("failure_latency", rows, ["what", "median_s", "max_s", "n"])


if __name__ == "__main__":
    main()
