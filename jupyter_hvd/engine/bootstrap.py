"""Runs once on every engine of a new pool, before any user code: MPI, Horovod, device pinning.

Imported on the engines only (no IPython.display, no widgets).
"""

from __future__ import annotations

import os
import socket
from typing import Any


def start(env: dict[str, str], device: str, channel_info: dict[str, Any]) -> dict[str, Any]:
    """Initialise MPI and Horovod on this engine, pin it to its device, fill the user namespace, and open the
    cell channel to the kernel.

    `env` is applied before torch and Horovod read it (Horovod tuning knobs, the user's `--env`).
    `device` is "auto" (GPU `local_rank` when CUDA is present, else CPU) or "cpu".
    `channel_info` says where the kernel's cell channel listens, and its key (kernel/channel.py).
    Returns this rank's row of the pool table.
    """
    os.environ.update(env)
    from .. import compat
    from . import collectives, guards, pace
    from .prelude import prelude

    names = prelude(device)  # what an exported script runs too (%hvd_export)
    hvd, torch, dev = names["hvd"], names["torch"], names["device"]
    guards.install()  # hvd.init() pasted into a cell, or a cell that wraps an optimizer run twice, must be harmless
    collectives.install()  # which collective a rank waits in, for the kernel's mismatch check
    pace.install()  # compute and wait per training step, for the kernel's straggler check (after collectives)
    if dev.type == "cuda":
        dev_name = f"cuda:{dev.index} {torch.cuda.get_device_name(dev)}"
        tensor_ops = "NCCL" if hvd.nccl_built() else "MPI"
    else:
        threads = torch.get_num_threads()
        dev_name = f"cpu ({threads} thread{'s' if threads > 1 else ''})"
        tensor_ops = "Gloo" if os.environ.get("HOROVOD_CPU_OPERATIONS", "").lower() == "gloo" else "MPI"

    from IPython import get_ipython

    shell = get_ipython()
    shell.user_ns.update(names)
    # IPython's exit()/quit() would end the engine after the cell, while the cell reports success: raise instead.
    shell.user_ns.update(exit=_Exit("exit"), quit=_Exit("quit"))
    from . import channel

    channel.connect(channel_info, hvd.rank())
    return {
        "rank": hvd.rank(),
        "size": hvd.size(),
        "local_rank": hvd.local_rank(),
        "cross_rank": hvd.cross_rank(),
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "device": dev_name,
        "controller": "MPI" if hvd.mpi_enabled() else "Gloo",
        "tensor_ops": tensor_ops,
        # A plain str: torch's own version type would make the kernel import torch to unpickle this row (2 s).
        "torch": str(torch.__version__),
        "cuda": bool(dev.type == "cuda"),
        "warning": compat.check_horovod(),
    }


class _Exit:
    """exit() and quit() on a rank: end the cell there, like sys.exit(), and keep the engine."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __repr__(self) -> str:
        return f"Use {self._name}() or sys.exit() to end this cell on this rank."

    def __call__(self, code: Any = None) -> None:
        raise SystemExit(code)
