"""Torch and Horovod imported and started in a background thread while the engine starts and registers.

Importing torch and horovod.torch takes seconds, and so does a process's first torch.optim optimizer; doing both
while the engine registers (instead of after, in the bootstrap, or in the first training cell) cuts that time from
`%hvd_start` and from the first cell. Cells wait until it is done (`wait`): user code and the libraries' first
initialisation then never run at the same time in two threads.
"""

from __future__ import annotations

import threading

_thread: threading.Thread | None = None


def start() -> None:
    """Begin the preload in a daemon thread."""
    global _thread
    _thread = threading.Thread(target=_run, name="jupyter-hvd preload", daemon=True)
    _thread.start()


def wait(timeout: float) -> bool:
    """Wait until the preload ended (at once where it did, or where none started); whether it did."""
    if _thread is not None:
        _thread.join(timeout)
    return _thread is None or not _thread.is_alive()


def _run() -> None:
    try:
        import horovod.torch as hvd  # (imports torch too)

        # The pool's environment (Horovod's settings, the user's --env) came with the launch: MPI and Horovod can
        # start now, while the engine registers, instead of after it.
        from mpi4py import MPI  # noqa: F401

        hvd.init()
    except Exception:
        pass  # the bootstrap imports again and reports the error with its context
    try:
        import torch

        # A process's first torch.optim optimizer imports torch._dynamo (1-4 s): the first training cell's
        # hvd.DistributedOptimizer(torch.optim.SGD(...)) would wait for it.
        torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
    except Exception:
        pass  # the cell that makes an optimizer says what is wrong
