"""Whether the other ranks outlive a rank's death when mpiexec never learns of it (issue 33, healing): rank 1's engine
is killed while its stub (processes/engine_stub.py, what mpiexec launched) is held stopped, so that it cannot end as
its engine did; rank 0's engine is then watched. Without the hold, mpiexec ends the whole job (MPI's rule), and the
pool restarts. A rank that outlives its peer this way keeps its process and its namespace; what it can still do with
its peers (a torch.distributed group formed again, Horovod's MPI communicator) is another question.

    python bench/survive_stub.py [--watch 10]

Prints a table and writes bench/results/survive_stub.json.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import report, setup_env

from jupyter_hvd.testing import Kernel

PIDS = (
    "%%hvd --ranks all --no-plot\nimport os\nprint('pid', rank, os.getpid(), os.environ.get('JUPYTER_HVD_WARM_ENGINE'))"
)


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def one(backend: str, watch: float) -> dict[str, object]:
    k = Kernel()
    try:
        k.run(
            "%hvd_start -np 2" + (" --torch-distributed" if backend == "torch.distributed" else ""), timeout=120
        ).check()
        said = k.run(PIDS).stdout.splitlines()
        rows = {int(w[-3]): (int(w[-2]), int(w[-1])) for w in (ln.split() for ln in said if "pid " in ln)}
        (engine0, _), (engine1, stub1) = rows[0], rows[1]
        os.kill(stub1, signal.SIGSTOP)
        os.kill(engine1, signal.SIGKILL)
        t0 = time.monotonic()
        while time.monotonic() - t0 < watch and alive(engine0):
            time.sleep(0.2)
        survived = time.monotonic() - t0
        os.kill(stub1, signal.SIGCONT)
        return {"backend": backend, "rank 1 dead": not alive(engine1), "rank 0 alive for s": round(survived, 1)}
    finally:
        k.shutdown()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--watch", type=float, default=10.0)
    args = ap.parse_args()
    setup_env()
    rows = [one(b, args.watch) for b in ("Horovod (MPI)", "torch.distributed")]
    report("survive_stub", rows, ["backend", "rank 1 dead", "rank 0 alive for s"], {"watch_s": args.watch})


if __name__ == "__main__":
    main()
