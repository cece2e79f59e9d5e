"""Engine entry point: ipyparallel's engine, with torch and Horovod imported in a background thread meanwhile.

Importing torch and horovod.torch takes seconds; doing it while the engine starts and registers (instead of
after, in the bootstrap) cuts that time from `%hvd_start`. The bootstrap's own imports then find the modules
loaded, or wait for the thread's import to finish: an import failure is still reported by the bootstrap.
"""

from __future__ import annotations

import os
import threading


def _preload() -> None:
    try:
        import horovod.torch as hvd  # (imports torch too)

        # The pool's environment (Horovod's settings, the user's --env) came with the launch: MPI and Horovod can
        # start now, while the engine registers, instead of after it.
        from mpi4py import MPI  # noqa: F401

        hvd.init()
    except Exception:
        pass  # the bootstrap imports again and reports the error with its context


def main() -> None:
    """Start the preload thread, then run ipyparallel's engine with the given command line."""
    # ipykernel stops forwarding C-level output (Horovod's stall and error reports on fd 2) when it sees this
    # variable; engines started from a test session must show what a user's engines show.
    os.environ.pop("PYTEST_CURRENT_TEST", None)
    threading.Thread(target=_preload, name="jupyter-hvd preload", daemon=True).start()
    from ipyparallel.engine.app import main as engine_main

    engine_main()


if __name__ == "__main__":
    main()
