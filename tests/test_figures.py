"""A running cell's figures (kernel/cell/figures.py): what the sidebar, the view and the line under the cell get from
the ranks' output and report() records. Pure logic: a fake pool records the stats written (its file is a real one,
never written)."""

from __future__ import annotations

from typing import Any

import pytest

from jupyter_hvd.digest import Digest
from jupyter_hvd.kernel.cell.figures import CellFigures
from jupyter_hvd.kernel.launch.pool_file import PoolFile
from jupyter_hvd.widgets import QuietView


class FakePool:
    """What the figures use of a pool (figures.Pool), remembering the stats they gave it."""

    def __init__(self) -> None:
        self.file = PoolFile("hvd-1-10")  # never written: nothing publishes here
        self.stats: dict[int, dict[str, Any]] = {}
        self.published = 0

    def update_rank_stats(self, stats: dict[int, dict[str, Any]], publish: bool = True) -> None:
        self.file.update_ranks(stats)  # refuses a name the pool file has no field for, as the pool's does
        for rank, values in stats.items():
            self.stats.setdefault(rank, {}).update(values)

    def publish(self) -> None:
        self.published += 1


class FakeView(QuietView):
    """The quiet view (the CellView protocol), remembering the NaN warnings it was given."""

    def __init__(self) -> None:
        super().__init__()
        self.warnings: list[str] = []

    def nonfinite(self, message: str) -> None:
        self.warnings.append(message)


def test_the_first_nan_is_said_once_under_the_cell_in_the_view_and_in_the_pool_file(
    capsys: pytest.CaptureFixture[str],
) -> None:
    pool, view, digest = FakePool(), FakeView(), Digest()
    figures = CellFigures(pool, view)
    figures.lines(digest.feed(1, "stdout", "step 1 loss=0.5\nstep 2 loss=nan\n"))
    figures.lines(digest.feed(1, "stdout", "step 3 loss=inf\n"))
    figures.records(0, [{"step": 4, "m": {"loss": float("nan")}}])
    assert view.warnings == ["loss became nan at step 2 on rank 1"]
    nonfinite = pool.file.nonfinite
    assert nonfinite is not None and nonfinite.rank == 1 and nonfinite.step == 2
    assert capsys.readouterr().err.count("became") == 1


def test_each_ranks_step_loss_and_last_line_and_reported_steps_beat_the_pace_count() -> None:
    pool, digest = FakePool(), Digest()
    figures = CellFigures(pool, FakeView())
    figures.lines(digest.feed(0, "stdout", "epoch 1 step 7 loss=0.25\nwriting checkpoint"))
    assert pool.stats[0] == {"last_line": "writing checkpoint", "step": 7, "loss": 0.25}
    figures.records(1, [{"pace": {"compute_ms": 5.0, "wait_ms": 1.0, "cell_steps": 3}}])
    assert pool.stats[1]["step"] == 3  # rank 1 prints nothing: its steps come from the pace timing
    figures.records(1, [{"step": 10, "m": {"loss": 0.125}}])
    figures.records(1, [{"pace": {"compute_ms": 5.0, "wait_ms": 1.0, "cell_steps": 4}}])
    assert pool.stats[1]["step"] == 10 and pool.stats[1]["loss"] == 0.125  # report() says the step from now on


def test_a_cells_final_step_count_alone_keeps_the_last_means() -> None:
    pool = FakePool()
    figures = CellFigures(pool, FakeView())
    figures.records(1, [{"pace": {"compute_ms": 31.0, "wait_ms": 0.5, "steps": 12, "cell_steps": 40}}])
    figures.records(1, [{"pace": {"steps": 2, "cell_steps": 42}}])  # the cell's end: its final count only
    assert pool.stats[1]["step"] == 42
    assert (pool.stats[1]["compute_ms"], pool.stats[1]["wait_ms"]) == (31.0, 0.5)
