"""The jupyter-hvd pools of this Jupyter server's kernels, as the sidebar sees them: listing, stale pools, actions.

No tornado here (the handlers are thin): the registry reads the pools' state files (`jupyter_hvd.state`), keeps
only those whose kernel belongs to this server (its kernel manager's ids, including kernels it had earlier: a
killed kernel's pool must still be cleaned up), marks a pool whose kernel died as stale, cleans a stale pool up
after a grace period (its SLURM job cancelled, its recorded processes killed, its files removed), and passes
interrupt / restart / stop / where to the kernel that owns a live pool. It can only ask a kernel for those actions; it
never runs code anywhere. A pool of another server (another notebook server of the same user) is never listed,
touched or stopped here.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Any

from .. import state

log = logging.getLogger("jupyter_hvd")
STALE_GRACE_S = 30.0  # how long a stale pool stays visible (so the user sees what happened) before it is cleaned up


class UnknownPool(KeyError):
    """No pool with that id exists among this server's kernels (or the id is malformed)."""


class PoolRegistry:
    """Lists this server's pools for the sidebar and carries out its actions.

    Every method takes `kernel_ids`: the ids the server's kernel manager lists now (read on the server's event loop,
    where the kernel manager lives).
    """

    def __init__(self, stale_grace_s: float = STALE_GRACE_S) -> None:
        self.stale_grace_s = stale_grace_s
        self._stale_since: dict[str, float] = {}
        self._kernels: set[str] = set()  # every kernel id this server has had
        self._warned = ""

    def _ours(self, kernel_ids: Iterable[str]) -> set[str]:
        self._kernels |= {k for k in kernel_ids if k}
        return set(self._kernels)

    def _list(self, kernel_ids: Iterable[str]) -> list[dict[str, Any]]:
        try:
            return state.list_pools(self._ours(kernel_ids))
        except state.UnsafeStateDir as exc:  # said once in the server's log; the sidebar lists nothing
            if str(exc) != self._warned:
                self._warned = str(exc)
                log.warning("jupyter_hvd: %s", exc)
            return []

    def pools(self, kernel_ids: Iterable[str], notebooks: dict[str, str] | None = None) -> list[dict[str, Any]]:
        """This server's pools, newest first, with ages computed now. Reading changes nothing: stale pools are cleaned
        up by the server's periodic `clean_up` alone."""
        now = time.time()
        return sorted(
            (describe(p, now, notebooks or {}, self._stale_since) for p in self._list(kernel_ids)),
            key=lambda p: -float(p.get("started") or 0),
        )

    def pool(self, pool_id: str, kernel_ids: Iterable[str], notebooks: dict[str, str] | None = None) -> dict[str, Any]:
        """One of this server's pools by id; raises UnknownPool."""
        for p in self.pools(kernel_ids, notebooks):
            if p["id"] == pool_id:
                return p
        raise UnknownPool(pool_id)

    def act(self, pool_id: str, action: str, kernel_ids: Iterable[str], np: int | None = None) -> str:
        """Ask the pool's kernel to interrupt, restart (at `np` ranks, where given) or stop it, or to say where its
        ranks are (state.ACTIONS); a stale pool can only be stopped (cleaned up).

        Returns what was done: "requested" (the kernel will carry it out within about a second) or "cleaned".
        Raises UnknownPool, or ValueError for an unknown action or one a stale pool cannot take.
        """
        if action not in state.ACTIONS:
            raise ValueError(f"unknown action {action!r}; expected one of {', '.join(state.ACTIONS)}")
        data = self._find(pool_id, kernel_ids)
        if data["stale"]:
            if action != "stop":
                raise ValueError(f"pool {pool_id}'s kernel has died: it can only be stopped (cleaned up)")
            self._reap(pool_id, data)
            return "cleaned"
        state.request_action(pool_id, action, np)
        return "requested"

    def clean_up(self, kernel_ids: Iterable[str]) -> list[str]:
        """Clean up this server's pools that have been stale for longer than the grace period; return their ids."""
        now = time.time()
        cleaned = []
        seen = set()
        for data in self._list(kernel_ids):
            pool_id = str(data["id"])
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

    def _find(self, pool_id: str, kernel_ids: Iterable[str]) -> dict[str, Any]:
        if not state.valid_pool_id(pool_id):
            raise UnknownPool(pool_id)
        for data in self._list(kernel_ids):
            if data["id"] == pool_id:
                return data
        raise UnknownPool(pool_id)

    def _reap(self, pool_id: str, data: dict[str, Any]) -> None:
        state.clean_up(state.pool_file(pool_id), data)
        self._stale_since.pop(pool_id, None)


def describe(
    data: dict[str, Any], now: float, notebooks: dict[str, str], stale_since: dict[str, float]
) -> dict[str, Any]:
    """What the sidebar shows of one pool: its state file's fields plus ages, the notebook, and rank states."""
    stale = bool(data.get("stale"))
    started = float(data.get("started") or now)
    engines_started = float(data.get("engines_started") or started)
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
        "engines_started": engines_started,
        "uptime": round(now - engines_started, 1),  # of the engines running now: a restart starts it again
        "updated_age": round(now - updated, 1),
        "cell": data.get("cell"),
        "cell_own": bool(data.get("cell_own")),
        "ranks": ranks,
        "straggler": data.get("straggler"),
        "nonfinite": data.get("nonfinite"),
        "where": data.get("where"),
        "problems": data.get("problems") or [],
        "kept": data.get("kept") or [],
        "snapshots": int(data.get("snapshots") or 0),
        "kept_bytes": int(data.get("kept_bytes") or 0),
        "journal_entries": int(data.get("journal_entries") or 0),
        "cell_started": float(data.get("cell_started") or 0),
    }
