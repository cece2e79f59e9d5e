"""How fast a 2-rank pool recovers: first exception -> cell end, interrupt -> cell end, kill -9 -> cell end,
%hvd_restart. Real kernel, real MPI ranks.

    python bench/failure_latency.py [--repeats 10]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import report, setup_env, summary

from jupyter_hvd import state
from jupyter_hvd.testing import Kernel

# rank 1 raises at once; rank 0 is already waiting in an allreduce that rank 1 will never join
RAISE = "%%hvd --no-plot\nif rank == 1:\n    raise ValueError('injected')\nhvd.allreduce(torch.ones(1), name='never')\n"
LOOP = "%%hvd --no-plot\nfor i in range(10**6):\n    hvd.allreduce(torch.ones(256), name=f'loop.{i}')\n"
HEALTHY = "%%hvd --no-plot\nassert hvd.allreduce(torch.ones(1), name='ok', op=hvd.Sum).item() == 2"


def rank_pid(kernel_pid: int, rank: int) -> int:
    state_dir = state.state_dir()
    for f in state_dir.glob(f"pool-hvd-{kernel_pid}-*.json"):
        if not f.name.endswith(".action.json"):
            return next(int(r["pid"]) for r in json.loads(f.read_text())["ranks"] if r["rank"] == rank)
    raise RuntimeError("no pool state file")


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
    args = parser.parse_args()
    setup_env()
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
            mark = after(1.0, lambda: os.kill(rank_pid(k.pid, 1), signal.SIGKILL))
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
