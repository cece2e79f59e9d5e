"""What the sidebar asks of the kernel's pool (Interrupt, Restart, Stop, Where), waiting in one typed queue until
the running cell or, between cells, the owner (kernel/owner.py) and the watcher take it.

Runs in the user's kernel.
"""

from __future__ import annotations

import threading

from ..state import Action, Ask

__all__ = ["Action", "Ask", "Asks"]


class Asks:
    """The sidebar's asks not carried out yet: one that ends the running cell (Interrupt, Restart, Stop: the newest
    counts) and a Where. The watcher's thread puts them; the running cell takes them, between cells the owner and the
    watcher do."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ending: Action | None = None
        self._where: bool | None = None  # True: with library frames

    def put(self, action: Action) -> None:
        with self._lock:
            if action.ask in (Ask.WHERE, Ask.WHERE_FULL):
                self._where = action.ask is Ask.WHERE_FULL
            else:
                self._ending = action

    def ending(self) -> Action | None:
        """The Interrupt, Restart or Stop that waits, if any (left in place)."""
        return self._ending

    def take_ending(self) -> Action | None:
        with self._lock:
            action, self._ending = self._ending, None
            return action

    def take_interrupt(self) -> bool:
        """Take a waiting Interrupt (a Restart or Stop stays, for after the cell); whether there was one."""
        with self._lock:
            if self._ending is not None and self._ending.ask is Ask.INTERRUPT:
                self._ending = None
                return True
            return False

    def where(self) -> bool | None:
        """A waiting Where (True: with library frames), left in place; None if none waits."""
        return self._where

    def take_where(self) -> bool | None:
        with self._lock:
            full, self._where = self._where, None
            return full

    def clear(self) -> None:
        with self._lock:
            self._ending = self._where = None
