"""What the sidebar reads from a pool file beside the pool's state: how many setup-journal entries a Restart replays
(its question says so), and when the running cell began (a Where picture older than it is not shown). The kernel's
writer (kernel/launch/pool_file.py) without a pool's processes, and the server's describe() that passes them on."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jupyter_hvd import state
from jupyter_hvd.kernel.keep.journal import Cell, Keeper
from jupyter_hvd.kernel.launch.pool_file import PoolFile
from jupyter_hvd.kernel.ranks import Rank
from jupyter_hvd.server.registry import describe


@dataclass
class FakePool:
    """What PoolFile.write reads of a pool (kernel/launch/pool_file.py PoolView), with one rank and a setup journal."""

    id: str = "hvd-1-7"
    started_at: float = field(default_factory=time.time)
    state: str = "idle"
    busy_cell: str | None = None
    busy_own: bool = False
    ranks: list[Rank] = field(default_factory=lambda: [Rank(0, 0, "h", 1, "cpu", "MPI", "MPI")])
    keeper: Keeper = field(default_factory=Keeper)

    @property
    def options_dict(self) -> dict[str, Any]:
        return {}

    @property
    def np(self) -> int:
        return 1

    def channel_problems(self) -> list[str]:
        return []

    def kept_summary(self) -> dict[str, Any]:
        return {"kept": [], "snapshots": 0, "kept_bytes": 0}


def test_the_pool_file_says_the_journal_size_and_when_the_running_cell_began(_state_dir: Path) -> None:
    pool = FakePool()
    pool.keeper.journal.extend([Cell("import torch", 1, "a", setup=True), Cell("x = 1", 2, "b", setup=True)])
    file = PoolFile(pool.id)

    def read() -> dict[str, Any]:
        data = state.read_pool(file.path)
        assert data is not None, f"no pool file at {file.path}"
        return data

    file.write(pool)
    before = read()
    assert before["journal_entries"] == 2 and before["cell_started"] == 0.0  # no cell yet

    t0 = time.time()
    file.update_ranks({0: {"step": 192, "last_line": "epoch 8 loss=0.005"}})
    # No write here: the watcher writes the file soon. The answer says the file shows the cell before's figures, so
    # a cell too short to be shown running has it written at its end (kernel/cell/run.py).
    assert file.start_of_cell() is True
    assert read()["cell_started"] == 0.0
    file.write(pool)
    data = read()
    assert t0 <= data["cell_started"] <= time.time()
    assert data["ranks"][0]["step"] is None and data["ranks"][0]["last_line"] is None
    assert file.start_of_cell() is False  # nothing left to clear: a run of empty cells writes nothing

    sent = describe(data, time.time(), {}, {})
    assert sent["journal_entries"] == 2 and sent["cell_started"] == data["cell_started"]
    file.remove()


def test_a_cell_that_starts_while_the_file_is_written_never_shows_the_cell_befores_figures(_state_dir: Path) -> None:
    """The watcher's thread writes the file while the main thread starts a cell: the file holds either the old cell's
    start with its figures or the new cell's start without them, never the new start with the old step."""

    class StartsACellMidWrite(FakePool):
        file: PoolFile | None = None
        starter: threading.Thread | None = None

        @property
        def options_dict(self) -> dict[str, Any]:  # read by the writer after the ranks' figures, before the start
            if self.file is not None and self.starter is None:
                self.starter = threading.Thread(target=self.file.start_of_cell)
                self.starter.start()
                self.starter.join(0.3)  # the start waits for the record to be made, or is done by now
            return {}

    pool = StartsACellMidWrite()
    file = pool.file = PoolFile(pool.id)
    file.update_ranks({0: {"step": 192}})
    file.write(pool)
    data = state.read_pool(file.path)
    assert data is not None
    assert data["cell_started"] == 0.0 and data["ranks"][0]["step"] == 192, data  # the cell before, consistent
    assert pool.starter is not None
    pool.starter.join(5)  # the cell has started
    file.write(pool)
    data = state.read_pool(file.path)
    assert data is not None and data["cell_started"] > 0.0 and data["ranks"][0]["step"] is None, data
    file.remove()
