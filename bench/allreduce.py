"""Allreduce inside the pool vs under plain mpirun vs raw mpi4py, 4 KB to 64 MB: latency and bus bandwidth.

    python bench/allreduce.py [--iters 20] [--rounds 3] [--start-args '--env OMPI_MCA_mpi_yield_when_idle=0']

Rounds are interleaved (pool, mpirun, mpirun with the pool's MPI yield setting); a figure is the median over rounds,
a ratio the median of per-round ratios (> 1: the pool is faster). Bus bandwidth uses NCCL's convention for
allreduce: bytes * 2 (n-1)/n / time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import report, setup_env

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
    iters = ITERS if nbytes <= (4 << 20) else max(3, ITERS // 4)
    for i in range(3):
        hvd.allreduce(t, name=f"warm.{nbytes}.{i}", op=hvd.Sum)
    comm.Barrier()
    t0 = time.perf_counter()
    for i in range(iters):
        hvd.allreduce(t, name=f"ar.{nbytes}.{i}", op=hvd.Sum)
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


def result_of(text: str) -> dict:
    line = next(ln for ln in text.splitlines() if ln.startswith("RESULT "))
    return {int(k): v for k, v in json.loads(line[len("RESULT ") :]).items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds: pool, mpirun, mpirun + yield")
    parser.add_argument("--np", type=int, default=2)
    parser.add_argument("--start-args", default="", help="more %%hvd_start options, e.g. '--cycle-time 2'")
    args = parser.parse_args()
    setup_env()
    body = MEASURE.replace("SIZES", repr(SIZES)).replace("ITERS", str(args.iters))
    script = "from mpi4py import MPI\nimport torch\nimport horovod.torch as hvd\nhvd.init()\nrank = hvd.rank()\n" + body
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(script)
    mpirun = ["mpirun", "-np", str(args.np), "--bind-to", "none"]
    # The pool's ranks yield the CPU while MPI waits (kernel/pool.py); the same setting for a like-for-like script.
    scripts = {"mpirun": mpirun, "mpirun_yield": [*mpirun, "--mca", "mpi_yield_when_idle", "1"]}
    runs: dict[str, list[dict[int, list[float]]]] = {"pool": [], "mpirun": [], "mpirun_yield": []}
    k = Kernel()
    try:
        k.run("%load_ext jupyter_hvd")
        assert k.run(f"%hvd_start -np {args.np} {args.start_args}", timeout=300).status == "ok"
        for _ in range(args.rounds):  # A B C A B C: the VM's drift hits every variant alike
            r = k.run("%%hvd --no-plot\n" + body, timeout=600)
            assert r.status == "ok", r.error_text
            runs["pool"].append(result_of(r.stdout))
            for name, cmd in scripts.items():
                out = subprocess.run([*cmd, sys.executable, f.name], check=True, capture_output=True, text=True)
                runs[name].append(result_of(out.stdout))
        k.run("%hvd_stop")
    finally:
        k.shutdown()
    n = args.np
    rows = []
    for nbytes in SIZES:
        hvd_ms = {name: statistics.median(r[nbytes][0] for r in rs) * 1e3 for name, rs in runs.items()}
        ratios = {
            name: statistics.median(s[nbytes][0] / p[nbytes][0] for p, s in zip(runs["pool"], runs[name], strict=True))
            for name in scripts
        }
        rows.append(
            {
                "size": f"{nbytes >> 10} KB" if nbytes < (1 << 20) else f"{nbytes >> 20} MB",
                "pool_hvd_ms": hvd_ms["pool"],
                "mpirun_hvd_ms": hvd_ms["mpirun"],
                "mpirun_yield_hvd_ms": hvd_ms["mpirun_yield"],
                "pool_mpi4py_ms": statistics.median(r[nbytes][1] for r in runs["pool"]) * 1e3,
                "pool_busbw_GBps": nbytes * 2 * (n - 1) / n / (hvd_ms["pool"] / 1e3) / 1e9,
                "pool/mpirun": ratios["mpirun"],
                "pool/mpirun_yield": ratios["mpirun_yield"],
            }
        )
    columns = list(rows[0])
    report("allreduce", rows, columns, {"rounds": args.rounds, "iters": args.iters})


if __name__ == "__main__":
    main()
