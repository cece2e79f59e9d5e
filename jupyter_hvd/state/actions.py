"""Actions from outside the kernel (the sidebar): the server writes `pool-<id>.action.json`, which the kernel's pool
watcher takes (removing the file) and carries out.

Actions: interrupt, restart, stop, and where / where-full (where every rank is, without or with library frames: the
answer goes into the pool file's `where`, and under the running cell). The server never runs code in a kernel; it can
only ask for these.
"""

from __future__ import annotations

import enum
import time
from pathlib import Path

from .private import checked_pool_id, read_pool, remove, state_dir, write_json


class Ask(enum.Enum):
    """What the sidebar may ask of a pool."""

    INTERRUPT = "interrupt"
    RESTART = "restart"
    STOP = "stop"
    WHERE = "where"
    WHERE_FULL = "where-full"


ACTIONS = tuple(ask.value for ask in Ask)


def action_file(pool_id: str) -> Path:
    """Where the server leaves an action for pool `pool_id`."""
    return state_dir() / f"pool-{checked_pool_id(pool_id)}.action.json"


def request_action(pool_id: str, action: str) -> None:
    """Ask the kernel that owns pool `pool_id` to interrupt, restart or stop it, or to say where its ranks are."""
    if action not in ACTIONS:
        raise ValueError(f"unknown action {action!r}; expected one of {', '.join(ACTIONS)}")
    write_json(action_file(pool_id), {"action": action, "requested": time.time()})


def take_action(pool_id: str) -> Ask | None:
    """The pending action for pool `pool_id`, removed so it is carried out once; None if there is none, or if the
    file is not this user's own (read_pool refuses it)."""
    path = action_file(pool_id)
    data = read_pool(path)
    remove(path)
    action = data.get("action") if data else None
    return Ask(action) if action in ACTIONS else None
