"""What Horovod's dynamic process sets cost: allreduce latency under plain mpirun with and without
HOROVOD_DYNAMIC_PROCESS_SETS=1, alternated, 2 CPU ranks.

    python bench/process_sets.py [--rounds 6] [--iters 300]

A pool starts without them (a cell's hvd.init(process_sets=...) starts Horovod again with them, and such a pool no
longer rests): this says whether starting every pool with them would cost anything. Prints a table and writes
bench/results/process_sets.json.
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
from common import VENV_BIN, report, setup_env

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--iters", type=int, default=300)
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
    report(
        "process_sets",
        rows,
        ["size", "plain_ms", "dynamic_ms", "ratio_median", "ratio_range"],
        {"runs": {"plain": runs[False], "dynamic": runs[True]}},
    )


if __name__ == "__main__":
    main()
