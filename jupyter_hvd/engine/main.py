"""Engine entry point: ipyparallel's engine, with torch and Horovod imported and started in a background thread.

Importing torch and horovod.torch takes seconds, and so does a process's first torch.optim optimizer; doing both
while the engine starts and registers (instead of after, in the bootstrap, or in the first training cell) cuts that
time from `%hvd_start` and from the first cell. The bootstrap's own imports then find the modules
loaded, or wait for the thread's import to finish: an import failure is still reported by the bootstrap.
A local pool's engines are launched before the controller is ready; they wait here for its connection file.
"""

from __future__ import annotations

import faulthandler
import json
import os
import threading
import time
from pathlib import Path
from typing import TextIO

FAULTS_DIR_ENV = "JUPYTER_HVD_FAULTS_DIR"  # where a local engine writes its stack if it crashes (the pool's directory)
_crash_file: TextIO | None = None  # kept open for faulthandler, which writes to its descriptor as the process dies


def _preload() -> None:
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


def _wait_for_controller(path: str, timeout: float) -> None:
    """Hand the controller's connection file to ipyparallel's engine as $IPP_CONNECTION_INFO, once it is complete.

    A local pool launches its engines while the controller is still starting, so the file may not exist yet, or be
    half written: wait for valid JSON (ipyparallel's own wait would read a half-written file and fail).
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            with open(path) as f:
                text = f.read()
            json.loads(text)
        except (OSError, ValueError):
            if time.monotonic() > deadline:
                return  # ipyparallel's engine then says which file never arrived
            time.sleep(0.02)
            continue
        os.environ["IPP_CONNECTION_INFO"] = text
        return


def _record_crashes() -> None:
    """A native crash (in Horovod, MPI or torch) writes every thread's Python stack where the kernel can quote it
    when it says the rank died: a file of this process's own (fault-<pid>.txt) in the pool's directory on the
    kernel's host, else mpiexec's output (the engine's stderr before ipykernel captures it)."""
    global _crash_file
    directory = os.environ.pop(FAULTS_DIR_ENV, "")
    try:
        if directory:
            _crash_file = open(Path(directory) / f"fault-{os.getpid()}.txt", "w")
        else:
            _crash_file = os.fdopen(os.dup(2), "w")
        faulthandler.enable(file=_crash_file, all_threads=True)
    except (OSError, ValueError):
        pass  # a crash then says only its signal, as without this


def main() -> None:
    """Start the preload thread, then run ipyparallel's engine with the given command line."""
    _record_crashes()
    # ipykernel stops forwarding C-level output (Horovod's stall and error reports on fd 2) when it sees this
    # variable; engines started from a test session must show what a user's engines show.
    os.environ.pop("PYTEST_CURRENT_TEST", None)
    from .horovod import negotiation

    negotiation.start()  # before the preload starts Horovod
    threading.Thread(target=_preload, name="jupyter-hvd preload", daemon=True).start()
    from ipyparallel.engine.app import main as engine_main

    from .. import wire
    from . import bootstrap, tasks

    wire.serve(bootstrap.start_task, tasks.perform)

    connection_file = os.environ.pop("JUPYTER_HVD_CONNECTION_FILE", "")
    wait_s = float(os.environ.pop("JUPYTER_HVD_CONNECTION_WAIT_S", "60"))
    if connection_file and not os.environ.get("IPP_CONNECTION_INFO"):
        _wait_for_controller(connection_file, wait_s)

    engine_main()


if __name__ == "__main__":
    main()
