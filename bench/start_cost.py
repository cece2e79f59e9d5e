"""What a kernel and a pool cost the CPUs, step by step: the kernel with jupyter_hvd loaded and its warm template
ready, `%hvd_start -np 2`, the idle seconds after it, a first cell whose value is a tensor (shown as rank 0 formats
it), `%hvd_stop`, a second start, the kernel's shutdown. CPU is that of this process's whole tree (kernel, template,
mpiexec, engines, controller), read before and after each step: the test suite runs on 2 cores, and this is what
each test that builds its own kernel and pool spends.

    python bench/start_cost.py [--repeats 3] [--idle 10]

Prints a table and writes bench/results/start_cost.json.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import report, setup_env, summary

from jupyter_hvd.testing import Kernel


def tree_cpu(me: psutil.Process) -> float:
    """CPU-s of `me` and its descendants, those alive and those it reaped (children_*)."""
    total = 0.0
    for p in [me, *me.children(recursive=True)]:
        try:
            t = p.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
        except psutil.Error:
            pass
    return total


def one_round(idle: float) -> dict[str, tuple[float, float]]:
    """{step: (wall s, CPU-s)} of one kernel's life."""
    me = psutil.Process()
    steps: dict[str, tuple[float, float]] = {}
    t, c = time.monotonic(), tree_cpu(me)

    def mark(step: str) -> None:
        nonlocal t, c
        now, cpu = time.monotonic(), tree_cpu(me)
        steps[step] = (now - t, cpu - c)
        t, c = now, cpu

    k = Kernel()  # handed over once its warm template is ready
    mark("kernel and template")
    k.run("%hvd_start -np 2", timeout=120).check()
    mark("%hvd_start -np 2")
    time.sleep(idle)
    mark(f"the {idle:g} s after the start (idle)")
    k.run("%%hvd\ntorch.ones(2) * rank", timeout=60).check()
    mark("a first cell whose value is a tensor")
    k.run("%hvd_stop", timeout=60).check()
    mark("%hvd_stop")
    k.run("%hvd_start -np 2", timeout=120).check()
    mark("second %hvd_start")
    k.shutdown()
    mark("kernel shutdown (pool and template with it)")
    return steps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--idle", type=float, default=10.0)
    args = ap.parse_args()
    setup_env()
    rounds = [one_round(args.idle) for _ in range(args.repeats)]
    rows = []
    for step in rounds[0]:
        wall = summary([r[step][0] for r in rounds])
        cpu = summary([r[step][1] for r in rounds])
        rows.append({"step": step, "wall_s": wall["median"], "cpu_s": cpu["median"], "cpu_s_max": cpu["max"]})
    report("start_cost", rows, ["step", "wall_s", "cpu_s", "cpu_s_max"], {"repeats": args.repeats})


if __name__ == "__main__":
    main()
