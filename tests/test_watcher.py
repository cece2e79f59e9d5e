"""The watcher's hand-off of a sidebar Restart or Stop (pure logic): a cell that ends while the ask is handed to it
must not leave the ask waiting for the next cell, which it would end."""

from __future__ import annotations

from typing import Any, cast

from jupyter_hvd.kernel.asks import Asks
from jupyter_hvd.kernel.watcher import PoolWatcher, Watched
from jupyter_hvd.state import Action, Ask


class EndingCell:
    """A pool whose running cell ends right after the watcher's first look."""

    id = "p"

    def __init__(self) -> None:
        self.looks = 0

    @property
    def busy_cell(self) -> str | None:
        self.looks += 1
        return "for epoch in range(3): ..." if self.looks == 1 else None


def test_a_restart_handed_to_a_cell_that_just_ended_is_carried_out_between_cells() -> None:
    acted: list[Action] = []
    asks = Asks()
    watcher = PoolWatcher(cast(Watched, EndingCell()), asks, acted.append)
    restart = Action(Ask.RESTART, None)
    watcher.carry_out(restart)
    assert acted == [restart] and asks.ending() is None


def test_a_restart_for_a_running_cell_waits_for_it() -> None:
    acted: list[Action] = []
    asks = Asks()
    busy: Any = type("Busy", (), {"id": "p", "busy_cell": "train()"})()
    PoolWatcher(cast(Watched, busy), asks, acted.append).carry_out(Action(Ask.STOP, None))
    assert acted == [] and asks.ending() == Action(Ask.STOP, None)
