"""The engine's own background work before its first cell: torch and Horovod imported and started while the engine
registers (`start`), and the bootstrap's warm-up of the device (`in_background`).

Importing torch and horovod.torch takes seconds, and so does a process's first torch.optim optimizer; doing both
while the engine registers (instead of after, in the bootstrap, or in the first training cell) cuts that time from
`%hvd_start` and from the first cell. Cells wait until all of it is done (`wait`): user code and the libraries'
first initialisation then never run at the same time in two threads.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

_threads: list[threading.Thread] = []


def start() -> None:
    """Begin the preload of torch and Horovod."""
    in_background(_run, "jupyter-hvd preload")


def in_background(target: Callable[[], None], name: str) -> None:
    """Run `target` in a daemon thread that cells wait for."""
    thread = threading.Thread(target=target, name=name, daemon=True)
    _threads.append(thread)
    thread.start()


def wait(timeout: float) -> bool:
    """Wait until the background work ended (at once where it did); whether it did within `timeout` s."""
    deadline = time.monotonic() + timeout
    for thread in _threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    _threads[:] = [t for t in _threads if t.is_alive()]
    return not _threads


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
