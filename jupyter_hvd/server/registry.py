"""Every jupyter-hvd pool of this machine, as the Jupyter server sees them: listing, stale pools, actions.

No tornado here (the handlers are thin): the registry reads the pools' state files (`jupyter_hvd.state`),
marks a pool whose kernel died as stale, cleans a stale pool up after a grace period (its recorded processes
are killed, its files removed), and passes interrupt / restart / stop to the kernel that owns a live pool.
It can only ask a kernel for those three actions; it never runs code anywhere.
"""

from __future__ import annotations

import re
import time
from typing import Any

from .. import state

POOL_ID = re.compile(r"^hvd-\d+-\d+$")  # what Pool ids look like; anything else is refused before touching a path
STALE_GRACE_S = 30.0  # how long a stale pool stays visible (so the user sees what happened) before it is cleaned up


class UnknownPool(KeyError):
    """No pool with that id exists (or the id is malformed)."""


class PoolRegistry:
    """Lists pools for the sidebar and carries out its actions."""

    def __init__(self, stale_grace_s: float = STALE_GRACE_S) -> None:
        self.stale_grace_s = stale_grace_s
        self._stale_since: dict[str, float] = {}

    def pools(self, notebooks: dict[str, str] | None = None) -> list[dict[str, Any]]:
        """Every pool, newest first, with ages computed now; stale pools past their grace are cleaned up first."""
        self.clean_up()
        now = time.time()
        return sorted(
            (describe(p, now, notebooks or {}, self._stale_since) for p in state.list_pools()),
            key=lambda p: -float(p.get("started") or 0),
        )

    def pool(self, pool_id: str, notebooks: dict[str, str] | None = None) -> dict[str, Any]:
        """One pool by id; raises UnknownPool."""
        for p in self.pools(notebooks):
            if p["id"] == pool_id:
                return p
        raise UnknownPool(pool_id)

    def act(self, pool_id: str, action: str) -> str:
        """Ask the pool's kernel to interrupt, restart or stop it; a stale pool can only be stopped (cleaned up).

        Returns what was done: "requested" (the kernel will carry it out within about a second) or "cleaned".
        Raises UnknownPool, or ValueError for an unknown action or one a stale pool cannot take.
        """
        if action not in state.ACTIONS:
            raise ValueError(f"unknown action {action!r}; expected one of {', '.join(state.ACTIONS)}")
        data = self._find(pool_id)
        if data["stale"]:
            if action != "stop":
                raise ValueError(f"pool {pool_id}'s kernel has died: it can only be stopped (cleaned up)")
            self._reap(pool_id, data)
            return "cleaned"
        state.request_action(pool_id, action)
        return "requested"

    def clean_up(self) -> list[str]:
        """Clean up pools that have been stale for longer than the grace period; return their ids."""
        now = time.time()
        cleaned = []
        seen = set()
        for data in state.list_pools():
            pool_id = str(data.get("id", ""))
            seen.add(pool_id)
            if not data["stale"]:
                self._stale_since.pop(pool_id, None)
                continue
            since = self._stale_since.setdefault(pool_id, now)
            if now - since >= self.stale_grace_s:
                self._reap(pool_id, data)
                cleaned.append(pool_id)
        for gone in set(self._stale_since) - seen:
            del self._stale_since[gone]
        return cleaned

    def _find(self, pool_id: str) -> dict[str, Any]:
        if not POOL_ID.match(pool_id):
            raise UnknownPool(pool_id)
        data = state.read_pool(state.pool_file(pool_id))
        if data is None:
            raise UnknownPool(pool_id)
        data["stale"] = not state.kernel_alive(data)
        return data

    def _reap(self, pool_id: str, data: dict[str, Any]) -> None:
        procs = state.recorded_processes(data)
        for p in list(procs):
            try:
                procs += p.children(recursive=True)
            except Exception:
                pass
        state.kill_processes(procs)
        state.remove(state.pool_file(pool_id))
        state.remove(state.action_file(pool_id))
        self._stale_since.pop(pool_id, None)


def describe(
    data: dict[str, Any], now: float, notebooks: dict[str, str], stale_since: dict[str, float]
) -> dict[str, Any]:
    """What the sidebar shows of one pool: its state file's fields plus ages, the notebook, and rank states."""
    stale = bool(data.get("stale"))
    started = float(data.get("started") or now)
    updated = float(data.get("updated") or now)
    ranks = []
    for r in data.get("ranks", []):
        beat = r.get("heartbeat")
        rank_state = r.get("state") or "idle"
        if stale:
            rank_state = "dead"
        ranks.append({**r, "state": rank_state, "heartbeat_age": round(now - beat, 1) if beat else None})
    kernel_id = str(data.get("kernel_id") or "")
    notebook = notebooks.get(kernel_id) or str(data.get("notebook") or "")
    return {
        "id": data.get("id"),
        "state": "stale" if stale else data.get("state", "starting"),
        "stale": stale,
        "stale_for": round(now - stale_since.get(str(data.get("id")), now), 1) if stale else None,
        "notebook": notebook,
        "kernel_id": kernel_id,
        "kernel_pid": data.get("kernel_pid"),
        "np": data.get("np"),
        "backend": data.get("backend") or "",
        "hosts": data.get("hosts") or [],
        "started": started,
        "uptime": round(now - started, 1),
        "updated_age": round(now - updated, 1),
        "cell": data.get("cell"),
        "ranks": ranks,
        "straggler": data.get("straggler"),
        "nonfinite": data.get("nonfinite"),
        "problems": data.get("problems") or [],
    }
