"""Actions from outside the kernel (the sidebar): the server writes `pool-<id>.action.json`, which the kernel's pool
watcher takes (removing the file) and carries out.

Actions: interrupt, restart, stop, and where / where-full (where every rank is, without or with library frames: the
answer goes into the pool file's `where`, and under the running cell). The server never runs code in a kernel; it can
only ask for these.
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass
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
MAX_RANKS = 4096  # a size field asking for more is a typo, not a pool


@dataclass(frozen=True)
class Action:
    """One ask from the sidebar; `np`: a Restart at another number of ranks (the Restart dialog's size)."""

    ask: Ask
    np: int | None = None


def action_file(pool_id: str) -> Path:
    """Where the server leaves an action for pool `pool_id`."""
    return state_dir() / f"pool-{checked_pool_id(pool_id)}.action.json"


def request_action(pool_id: str, action: str, np: int | None = None) -> None:
    """Ask the kernel that owns pool `pool_id` to interrupt, restart (at `np` ranks where given) or stop it, or to say
    where its ranks are."""
    if action not in ACTIONS:
        raise ValueError(f"unknown action {action!r}; expected one of {', '.join(ACTIONS)}")
    if np is not None and (action != Ask.RESTART.value or not _good_np(np)):
        raise ValueError(f"a number of ranks goes with a restart only, from 1 to {MAX_RANKS} (got {np!r})")
    request: dict[str, object] = {"action": action, "requested": time.time()}
    if np is not None:
        request["np"] = np
    write_json(action_file(pool_id), request)


def _good_np(np: object) -> bool:
    return isinstance(np, int) and not isinstance(np, bool) and 1 <= np <= MAX_RANKS


def take_action(pool_id: str) -> Action | None:
    """The pending action for pool `pool_id`, removed so it is carried out once; None if there is none, or if the
    file is not this user's own (read_pool refuses it)."""
    path = action_file(pool_id)
    data = read_pool(path)
    remove(path)
    action = data.get("action") if data else None
    if action not in ACTIONS:
        return None
    np = data.get("np") if data else None
    return Action(Ask(action), np if action == Ask.RESTART.value and _good_np(np) else None)
