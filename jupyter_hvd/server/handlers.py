"""REST endpoints of the sidebar, all behind the Jupyter server's authentication and XSRF checks. They see only the
pools of this server's kernels; file reads and process checks run in a worker thread, off the event loop.

GET  /jupyter-hvd/pools                  every pool of this server: {"pools": [...], "now": epoch s}
GET  /jupyter-hvd/pools/<id>             one pool (404 if unknown)
POST /jupyter-hvd/pools/<id>/<action>    interrupt | restart | stop | where | where-full (202; 404 unknown pool;
                                         400 bad action). where: the kernel puts where every rank is into the
                                         pool's `where` (where-full: with library frames) and under a running cell;
                                         restart with the body {"np": N}: at N ranks (a resize)
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import tornado.web
from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join

from .registry import PoolRegistry, UnknownPool

AUTH_RESOURCE = "kernels"  # acting on a pool acts on what a kernel started: same permission as kernels


class _PoolHandler(APIHandler):
    auth_resource = AUTH_RESOURCE

    @property
    def registry(self) -> PoolRegistry:
        return self.settings["jupyter_hvd_registry"]

    def kernel_ids(self) -> list[str]:
        """This server's kernels (read here, on the event loop, where the kernel manager lives)."""
        return list(self.kernel_manager.list_kernel_ids())

    async def notebooks(self) -> dict[str, str]:
        """kernel id -> notebook path, from the server's sessions (a kernel knows its notebook only sometimes)."""
        try:
            sessions = await self.session_manager.list_sessions()
        except Exception:
            return {}
        return {s["kernel"]["id"]: s.get("path") or s.get("name") or "" for s in sessions if s.get("kernel")}


class PoolsHandler(_PoolHandler):
    @tornado.web.authenticated
    @authorized
    async def get(self) -> None:
        # Reading pool files (a dead kernel's pool is only marked stale here): off the event loop.
        pools = await asyncio.to_thread(self.registry.pools, self.kernel_ids(), await self.notebooks())
        self.finish(json.dumps({"pools": pools, "now": time.time()}))


class PoolHandler(_PoolHandler):
    @tornado.web.authenticated
    @authorized
    async def get(self, pool_id: str) -> None:
        try:
            pool = await asyncio.to_thread(self.registry.pool, pool_id, self.kernel_ids(), await self.notebooks())
        except UnknownPool:
            raise tornado.web.HTTPError(404, f"no jupyter-hvd pool {pool_id}") from None
        self.finish(json.dumps(pool))


class PoolActionHandler(_PoolHandler):
    @tornado.web.authenticated
    @authorized
    async def post(self, pool_id: str, action: str) -> None:
        np = self._np()
        try:
            done = await asyncio.to_thread(self.registry.act, pool_id, action, self.kernel_ids(), np)
        except UnknownPool:
            raise tornado.web.HTTPError(404, f"no jupyter-hvd pool {pool_id}") from None
        except ValueError as exc:
            raise tornado.web.HTTPError(400, str(exc)) from None
        self.set_status(202 if done == "requested" else 200)
        self.finish(json.dumps({"id": pool_id, "action": action, "result": done}))

    def _np(self) -> int | None:
        """The Restart dialog's number of ranks, from the JSON body {"np": N}; None for an empty body."""
        body = self.request.body.strip()
        if not body:
            return None
        try:
            np = json.loads(body).get("np")
        except (ValueError, AttributeError):
            raise tornado.web.HTTPError(400, 'the body must be JSON: {"np": N}') from None
        if np is not None and (not isinstance(np, int) or isinstance(np, bool)):
            raise tornado.web.HTTPError(400, f"np must be a whole number of ranks (got {np!r})")
        return np


def setup_handlers(web_app: Any, registry: PoolRegistry) -> None:
    """Register the sidebar's endpoints under the server's base URL."""
    web_app.settings["jupyter_hvd_registry"] = registry
    base = url_path_join(web_app.settings["base_url"], "jupyter-hvd", "pools")
    pool_id = r"(?P<pool_id>[^/]+)"
    web_app.add_handlers(
        ".*$",
        [
            (base, PoolsHandler),
            (url_path_join(base, pool_id), PoolHandler),
            (url_path_join(base, pool_id, r"(?P<action>[a-z-]+)"), PoolActionHandler),
        ],
    )
