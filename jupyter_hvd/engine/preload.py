"""Torch and Horovod imported and started in a background thread while the engine starts and registers.

Importing torch and horovod.torch takes seconds, and so does a process's first torch.optim optimizer; doing both
while the engine registers (instead of after, in the bootstrap, or in the first training cell) cuts that time from
`%hvd_start` and from the first cell. The bootstrap waits for this thread's Horovod start (`horovod_started`)
before it touches Horovod: a late `hvd.init()` here, after the bootstrap's own and after the pool put Horovod to rest,
started Horovod again on that rank alone, which then spun in MPI waiting for its peers.
"""

from __future__ import annotations

import threading

_started = False
_horovod = threading.Event()  # set once this thread's Horovod start returned (or failed)


def start() -> None:
    """Begin the preload in a daemon thread."""
    global _started
    _started = True
    threading.Thread(target=_run, name="jupyter-hvd preload", daemon=True).start()


def horovod_started(timeout: float) -> bool:
    """Wait until the preload's `hvd.init()` returned (at once where no preload runs); whether it did in time."""
    return _horovod.wait(timeout) if _started else True


def _run() -> None:
    try:
        import horovod.torch as hvd  # (imports torch too)

        # The pool's environment (Horovod's settings, the user's --env) came with the launch: MPI and Horovod can
        # start now, while the engine registers, instead of after it.
        from mpi4py import MPI  # noqa: F401

        hvd.init()
    except Exception:
        pass  # the bootstrap imports again and reports the error with its context
    finally:
        _horovod.set()
    try:
        import torch

        # A process's first torch.optim optimizer imports torch._dynamo (1-4 s): the first training cell's
        # hvd.DistributedOptimizer(torch.optim.SGD(...)) would wait for it.
        torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
    except Exception:
        pass  # the cell that makes an optimizer says what is wrong
