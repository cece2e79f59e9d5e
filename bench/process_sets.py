"""What Horovod's dynamic process sets cost: allreduce latency under plain mpirun with and without
HOROVOD_DYNAMIC_PROCESS_SETS=1, alternated, 2 CPU ranks; and in a pool, what starting Horovod again after a rest
costs when it registers the process sets cells added again (engine/horovod/rest.py), against a start without any.

    python bench/process_sets.py [--rounds 6] [--iters 300] [--starts 20]

A pool starts without them (a cell's hvd.init(process_sets=...) starts Horovod again with them): this says whether
starting every pool with them would cost anything. Prints a table and writes bench/results/process_sets.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import VENV_BIN, report, result_of, setup_env

from jupyter_hvd.testing import Kernel

SCRIPT = """
import json, sys, time
from mpi4py import MPI
import horovod.torch as hvd, torch
hvd.init()
out = {}
for nbytes in (4 << 10, 1 << 20, 16 << 20):
    t = torch.ones(nbytes // 4)
    for i in range(5):
        hvd.allreduce(t, name=f"warm.{nbytes}")
    iters = ITERS if nbytes < (16 << 20) else max(5, ITERS // 20)
    MPI.COMM_WORLD.Barrier()
    t0 = time.perf_counter()
    for i in range(iters):
        hvd.allreduce(t, name=f"bench.{nbytes}")
    out[nbytes] = (time.perf_counter() - t0) / iters * 1000
if hvd.rank() == 0:
    print("RESULT " + json.dumps(out), flush=True)
"""


def run(path: str, dynamic: bool) -> dict[str, float]:
    env = {**os.environ, "HOROVOD_DYNAMIC_PROCESS_SETS": "1" if dynamic else "0"}
    command = [f"{VENV_BIN}/mpirun", "-np", "2", "--bind-to", "none", "-x", "HOROVOD_DYNAMIC_PROCESS_SETS"]
    out = subprocess.run([*command, sys.executable, path], capture_output=True, text=True, env=env, timeout=600)
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith("RESULT "))
    return {int(k): v for k, v in json.loads(line[7:]).items()}


# Every rank stops and starts Horovod together (as a rest and a wake do), with dynamic process sets on: without a set
# of the cell's, then with two that every start registers again, then without them again (the VM's drift falls on both).
STARTS = """
import json, statistics, time
from jupyter_hvd.engine.horovod import rest
def starts(n):
    seconds = []
    for i in range(n):
        with rest._lock:
            rest._stop()
        t0 = time.perf_counter()
        rest.wake()
        seconds.append(time.perf_counter() - t0)
    return seconds
hvd.init(process_sets="dynamic")
plain = starts(STARTS_N)
first, second = hvd.add_process_set([0]), hvd.add_process_set([1])
with_sets = starts(STARTS_N)
hvd.allreduce(torch.ones(1), op=hvd.Sum, process_set=second, name="check") if rank == 1 else None
hvd.remove_process_set(first), hvd.remove_process_set(second)
plain += starts(STARTS_N)
if rank == 0:
    ms = {"plain_ms": statistics.median(plain) * 1000, "with_sets_ms": statistics.median(with_sets) * 1000}
    print("RESULT " + json.dumps(ms), flush=True)
"""


def start_costs(n: int) -> dict[str, float]:
    """Median ms of a stop and start of Horovod in a 2-rank pool, without and with two process sets."""
    k = Kernel()
    try:
        k.run("%load_ext jupyter_hvd\n%config HvdPool.live_view = 'off'")
        assert k.run("%hvd_start -np 2", timeout=300).status == "ok"
        r = k.run("%%hvd\n" + STARTS.replace("STARTS_N", str(n)), timeout=600)
        assert r.status == "ok", r.error_text
        return result_of(r.stdout)
    finally:
        k.run("%hvd_stop", timeout=60)
        k.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--iters", type=int, default=300)
    parser.add_argument("--starts", type=int, default=20, help="stops and starts of Horovod timed in a pool")
    args = parser.parse_args()
    setup_env()
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(SCRIPT.replace("ITERS", str(args.iters)))
    runs: dict[bool, list[dict[int, float]]] = {False: [], True: []}
    for _ in range(args.rounds):
        for dynamic in (False, True):
            runs[dynamic].append(run(f.name, dynamic))
    rows = []
    for size in runs[False][0]:
        plain = statistics.median(r[size] for r in runs[False])
        dynamic = statistics.median(r[size] for r in runs[True])
        ratios = [d[size] / p[size] for p, d in zip(runs[False], runs[True], strict=True)]
        rows.append(
            {
                "size": f"{size >> 10} KB" if size < 1 << 20 else f"{size >> 20} MB",
                "plain_ms": round(plain, 3),
                "dynamic_ms": round(dynamic, 3),
                "ratio_median": round(statistics.median(ratios), 3),
                "ratio_range": f"{min(ratios):.2f}-{max(ratios):.2f}",
            }
        )
    starts = start_costs(args.starts)
    rows.append(
        {
            "size": "Horovod's start in a pool (rest, wake)",
            "plain_ms": round(starts["plain_ms"], 2),
            "dynamic_ms": round(starts["with_sets_ms"], 2),
            "ratio_median": round(starts["with_sets_ms"] / starts["plain_ms"], 2),
            "ratio_range": "with 2 process sets registered again",
        }
    )
    report(
        "process_sets",
        rows,
        ["size", "plain_ms", "dynamic_ms", "ratio_median", "ratio_range"],
        {"runs": {"plain": runs[False], "dynamic": runs[True]}, "starts": starts},
    )


if __name__ == "__main__":
    main()
