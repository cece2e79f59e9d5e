"""What every rank has before the first cell, on the engines and in a script exported by `%hvd_export`: MPI and
Horovod initialised, the rank pinned to its device, and the names cells use.

`prelude` is self-contained on purpose (only the standard library, torch, Horovod and mpi4py, imported inside it):
`%hvd_export` copies its source into the script, so a script and the notebook's engines start alike.
"""

from __future__ import annotations

from typing import Any


def prelude(device: str = "auto") -> dict[str, Any]:
    """Initialise MPI and Horovod, pin this rank to its device; the names cells use: hvd, torch, rank, size,
    local_rank, device.

    `device`: "auto" (GPU `local_rank` where CUDA is present, else CPU) or "cpu".
    """
    import os

    import horovod.torch as hvd
    import torch

    # mpi4py initialises MPI (thread level MULTIPLE) before hvd.init(), so Horovod leaves MPI's lifetime to it.
    from mpi4py import MPI  # noqa: F401

    if not hvd.is_initialized():
        hvd.init()
    local_rank, local_size = hvd.local_rank(), hvd.local_size()
    if device == "auto" and torch.cuda.is_available():
        torch.cuda.set_device(local_rank % torch.cuda.device_count())
        dev = torch.device("cuda", torch.cuda.current_device())
    else:
        # N ranks on one host share its cores: one rank's intra-op threads must not starve the others.
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        torch.set_num_threads(max(1, cores // local_size))
        dev = torch.device("cpu")
    return {"hvd": hvd, "torch": torch, "rank": hvd.rank(), "size": hvd.size(), "local_rank": local_rank, "device": dev}
