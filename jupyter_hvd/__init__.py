"""jupyter-hvd: Horovod data-parallel training from a notebook, on a persistent MPI engine pool."""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    # `from jupyter_hvd import report, commit` on the engines, without importing the kernel-side modules.
    if name == "report":
        from .engine.cell.report import report

        return report
    if name == "commit":
        from .engine.keep.snapshot import commit

        return commit
    raise AttributeError(f"module 'jupyter_hvd' has no attribute {name!r}")


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    """Where JupyterLab finds the sidebar's built front end (inside this package: no node needed)."""
    return [{"src": "labextension", "dest": "jupyter-hvd"}]


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    """The server extension that serves the sidebar's REST endpoints."""
    return [{"module": "jupyter_hvd.server"}]


def load_ipython_extension(ipython: Any) -> None:
    """`%load_ext jupyter_hvd`: register %hvd_start, %%hvd and friends."""
    import atexit

    from .compat import check_ipykernel
    from .kernel.errors import PoolError
    from .kernel.launch.launcher import find_mpiexec
    from .kernel.launch.options import defaults
    from .kernel.launch.template import template
    from .kernel.magics import HvdMagics
    from .kernel.owner import owner

    if check_ipykernel():
        print(f"jupyter-hvd: {check_ipykernel()}")
    if defaults(ipython).warm_start:  # c.HvdPool from the config files, and `%config HvdPool.<option> = ...` later
        try:
            mpiexec = find_mpiexec()
        except PoolError:
            pass  # %hvd_start says what is missing
        else:
            template.start(mpiexec)  # its imports run while the user writes the next cell: %hvd_start skips them
    ipython.register_magics(HvdMagics)
    atexit.register(owner.stop_at_exit)


def unload_ipython_extension(ipython: Any) -> None:
    """`%unload_ext jupyter_hvd`: stop the pool and the warm template (the magics stay registered, as IPython keeps
    them)."""
    from .kernel.launch.template import template
    from .kernel.owner import owner

    owner.stop_at_exit()
    template.stop()
