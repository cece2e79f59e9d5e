"""The jupyter_server extension behind the sidebar: lists the jupyter-hvd pools of this server's kernels and passes on
their actions."""

from __future__ import annotations

from typing import Any

from tornado.ioloop import IOLoop, PeriodicCallback

from .handlers import setup_handlers
from .registry import PoolRegistry

CLEAN_UP_EVERY_MS = 10_000  # stale pools are cleaned up even while no sidebar is open


def _load_jupyter_server_extension(server_app: Any) -> None:
    """Register the REST endpoints and the periodic clean-up of pools whose kernel died."""
    registry = PoolRegistry()
    setup_handlers(server_app.web_app, registry)
    kernels = server_app.kernel_manager

    def clean_up() -> None:
        # Killing a dead kernel's leftovers may take seconds: off the server's event loop (the ids are read on it).
        IOLoop.current().run_in_executor(None, registry.clean_up, list(kernels.list_kernel_ids()))

    cleaner = PeriodicCallback(clean_up, CLEAN_UP_EVERY_MS)
    cleaner.start()
    server_app.web_app.settings["jupyter_hvd_cleaner"] = cleaner
    server_app.log.info("jupyter_hvd: sidebar endpoints at /jupyter-hvd/pools")
