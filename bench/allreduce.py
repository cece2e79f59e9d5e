"""Allreduce inside the pool vs under plain mpirun vs raw mpi4py, 4 KB to 64 MB: latency and bus bandwidth.

    python bench/allreduce.py [--iters 100] [--rounds 6] [--start-args '--env OMPI_MCA_mpi_yield_when_idle=0']

The pool and two mpirun jobs (Open MPI's defaults, and the pool's yield setting) stay alive for the whole run and
take turns, window by window, the others suspended (bench/common.py). A figure is the median over windows, a ratio
the median of per-window ratios (> 1: the pool is faster), with its range against the yield script. The last rows
sum up all sizes: per window the geometric mean over sizes of the ratio, then its median and range over windows.
Bus bandwidth uses NCCL's convention for allreduce: bytes * 2 (n-1)/n / time.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import SCRIPTS, Script, report, result_of, setup_env, summary, take_turns

from jupyter_hvd.testing import Kernel

SIZES = [4 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20]

MEASURE = """
import json, time
import numpy as np
from mpi4py import MPI
comm = MPI.COMM_WORLD
out = {}
for nbytes in SIZES:
    t = torch.ones(nbytes // 4)
    iters = max(3, ITERS * min(1, (4 << 20) / nbytes))  # above 4 MB: the same bytes per window
    iters = int(iters)
    for i in range(3):
        hvd.allreduce(t, name=f"warm.{nbytes}.{i}", op=hvd.Sum)
    comm.Barrier()
    t0 = time.perf_counter()
    for i in range(iters):
        hvd.allreduce(t, name=f"ar.{nbytes}", op=hvd.Sum)  # one name per size, as a training step reuses its own
    hvd_s = (time.perf_counter() - t0) / iters
    a, b = np.ones(nbytes // 4, dtype=np.float32), np.empty(nbytes // 4, dtype=np.float32)
    comm.Barrier()
    t0 = time.perf_counter()
    for i in range(iters):
        comm.Allreduce(a, b)
    mpi_s = (time.perf_counter() - t0) / iters
    out[nbytes] = (hvd_s, mpi_s)
if rank == 0:
    print("RESULT " + json.dumps(out), flush=True)
"""


def script(body: str, windows: int) -> str:
    """MEASURE as an mpirun script: before each window rank 0 waits for a line on stdin (common.Script)."""
    head = "import sys\nfrom mpi4py import MPI\nimport torch\nimport horovod.torch as hvd\n"
    head += "hvd.init()\nrank = hvd.rank()\n"
    loop = f"for w in range({windows}):\n    if rank == 0:\n        sys.stdin.readline()\n"
    loop += "    MPI.COMM_WORLD.Barrier()\n"
    return head + loop + "\n".join("    " + line for line in body.strip().splitlines()) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=100, help="ops per size and window (fewer above 4 MB)")
    parser.add_argument("--rounds", type=int, default=6, help="windows of each: pool, mpirun, mpirun + yield")
    parser.add_argument("--np", type=int, default=2)
    parser.add_argument("--start-args", default="", help="more %%hvd_start options, e.g. '--cycle-time 2'")
    args = parser.parse_args()
    setup_env()
    body = MEASURE.replace("SIZES", repr(SIZES)).replace("ITERS", str(args.iters))
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(script(body, args.rounds))
    scripts = [Script(name, mca, f.name, args.np) for name, mca in SCRIPTS]
    k = Kernel()
    try:
        k.run("%load_ext jupyter_hvd")
        assert k.run(f"%hvd_start -np {args.np} {args.start_args}", timeout=300).status == "ok"

        def cell_window() -> dict:
            r = k.run("%%hvd --no-plot\n" + body, timeout=600)
            assert r.status == "ok", r.error_text
            return result_of(r.stdout)

        pool_runs = take_turns(k.pid, scripts, args.rounds, cell_window)
        k.run("%hvd_stop")
    finally:
        for s in scripts:
            s.kill()
        k.shutdown()
    runs = {"pool": pool_runs, **{_key(s): s.results for s in scripts}}
    n = args.np
    rows = []
    for nbytes in map(str, SIZES):
        hvd_ms = {name: statistics.median(r[nbytes][0] for r in rs) * 1e3 for name, rs in runs.items()}
        ratios = {
            _key(s): summary([m[nbytes][0] / p[nbytes][0] for p, m in zip(pool_runs, s.results, strict=True)])
            for s in scripts
        }
        rows.append(
            {
                "size": _size(int(nbytes)),
                "pool_hvd_ms": hvd_ms["pool"],
                "mpirun_hvd_ms": hvd_ms["mpirun"],
                "mpirun_yield_hvd_ms": hvd_ms["mpirun_yield"],
                "pool_mpi4py_ms": statistics.median(r[nbytes][1] for r in pool_runs) * 1e3,
                "pool_busbw_GBps": int(nbytes) * 2 * (n - 1) / n / (hvd_ms["pool"] / 1e3) / 1e9,
                "pool/mpirun": ratios["mpirun"]["median"],
                "pool/mpirun_yield": ratios["mpirun_yield"]["median"],
                "range": f"{ratios['mpirun_yield']['min']:.2f}-{ratios['mpirun_yield']['max']:.2f}",
            }
        )
    # One figure for "does the pool slow collectives": per window, the geometric mean over sizes of the ratio.
    for s in scripts:
        overall = summary(
            [
                math.exp(statistics.fmean(math.log(m[n][0] / p[n][0]) for n in map(str, SIZES)))
                for p, m in zip(pool_runs, s.results, strict=True)
            ]
        )
        rows.append(
            {
                "size": f"all sizes (geometric mean), pool/{_key(s)}",
                f"pool/{_key(s)}": overall["median"],
                "range": f"{overall['min']:.2f}-{overall['max']:.2f}",
            }
        )
    report("allreduce", rows, list(rows[0]), {"rounds": args.rounds, "iters": args.iters, "windows": runs})


def _key(s: Script) -> str:
    return "mpirun_yield" if s.mca else "mpirun"


def _size(nbytes: int) -> str:
    return f"{nbytes >> 10} KB" if nbytes < (1 << 20) else f"{nbytes >> 20} MB"


if __name__ == "__main__":
    main()
