"""What a running cell's ranks say about their training, for the sidebar, under the cell and in the view: each
rank's step, loss and last line, the first NaN or Inf, and the straggler.

The cell runner (kernel/cell/run.py) hands over the lines it digested (jupyter_hvd/digest.py) and the `report()`
records as they arrive; this writes them into the pool file (at most 4 times a second) and says what the user
must see once.
"""

from __future__ import annotations

import math
import sys
import time
from typing import Any, Protocol

from ... import state
from ...digest import Chunk
from ...widgets import CellView
from ..launch.pool_file import Published
from .straggler import StragglerDetector

PUBLISH_EVERY_S = 0.25  # the sidebar's figures are written at most 4 times a second


class Pool(Published, Protocol):
    """What the figures use of a pool (kernel/launch/pool.py)."""

    def update_rank_stats(self, stats: dict[int, dict[str, Any]], publish: bool = True) -> None: ...


class CellFigures:
    """One cell's figures, per rank."""

    def __init__(self, pool: Pool, view: CellView) -> None:
        self.pool = pool
        self.view = view
        self.last_lines: dict[int, str] = {}
        self.pace = StragglerDetector()  # which rank computes longest per step (kernel/cell/straggler.py)
        self._steps_said: set[int] = set()  # ranks whose step comes from report(), a bar or a printed line
        self._published = 0.0  # monotonic

    def lines(self, chunk: Chunk) -> None:
        """A rank's last line, step and loss, and the first NaN or Inf, from the lines a chunk of output finished."""
        rank = chunk.rank
        last = (
            chunk.partial
            if chunk.partial.strip()
            else next((line.text for line in reversed(chunk.lines) if line.text.strip()), "")
        )
        stats: dict[str, Any] = {}
        if last:
            self.last_lines[rank] = last[-200:]
            stats["last_line"] = self.last_lines[rank]
        for line in chunk.lines:
            parsed = line.parsed
            if parsed.step is not None:
                stats["step"] = parsed.step
                self._steps_said.add(rank)
            if "loss" in parsed.values:
                stats["loss"] = parsed.values["loss"]
            for name, value in parsed.values.items():
                self._nonfinite(rank, name, value, parsed.step)
        if stats:
            self._write(rank, stats)

    def records(self, rank: int, records: Any) -> None:
        """The latest step and loss of `report()` records and progress bars, else the steps the pace timing counted
        on that rank (engine/cell/pace.py: every rank's, also where a rank prints nothing); the pace itself."""
        stats: dict[str, Any] = {}
        for record in records if isinstance(records, list) else [records]:
            if not isinstance(record, dict):
                continue
            if record.get("step") is not None:
                stats["step"] = record["step"]
                self._steps_said.add(rank)
            if isinstance(record.get("m"), dict) and record["m"].get("loss") is not None:
                stats["loss"] = record["m"]["loss"]
            for name, value in (record.get("m") or {}).items():
                self._nonfinite(rank, name, value, record.get("step"))
            if isinstance(record.get("pace"), dict):
                if "compute_ms" in record["pace"]:  # a cell's end may send its final step count alone
                    self._pace(rank, record["pace"])
                if record["pace"].get("cell_steps") is not None and rank not in self._steps_said:
                    stats["step"] = record["pace"]["cell_steps"]
        if stats:
            self._write(rank, stats)

    def ended(self, rank: int, tail: list[str]) -> None:
        """A rank's end: the last line of its output where none came while the cell ran."""
        if tail and rank not in self.last_lines:
            self.last_lines[rank] = tail[-1][-200:]

    def _write(self, rank: int, stats: dict[str, Any]) -> None:
        self.pool.update_rank_stats({rank: stats}, publish=False)
        now = time.monotonic()
        if now - self._published >= PUBLISH_EVERY_S:
            self._published = now
            self.pool.publish()

    def _pace(self, rank: int, pace: dict[str, Any]) -> None:
        """A rank's recent compute and wait per step: into the pool file; a straggler is named under the cell, in the
        pool file and in the view's status line."""
        changed = self.pace.add(rank, pace.get("compute_ms", 0.0), pace.get("wait_ms", 0.0), time.monotonic())
        self.pool.update_rank_stats({rank: self.pace.stats()[rank]}, publish=False)
        if not changed:
            if self.pace.straggler is not None:
                self.pool.file.straggler = self.pace.straggler  # its ratio follows the latest means
            return
        self.pool.file.straggler = self.pace.straggler
        message = self.pace.straggler.message if self.pace.straggler else None
        if message:
            print(f"jupyter-hvd: {message}.", file=sys.stderr, flush=True)
        self.view.straggler(message)
        self.pool.publish()

    def _nonfinite(self, rank: int, metric: str, value: Any, step: Any) -> None:
        """Said once per cell: where a metric first became NaN or Inf (the plot shows a gap from there)."""
        if self.pool.file.nonfinite is not None or not isinstance(value, float) or math.isfinite(value):
            return
        where = f" at step {step:g}" if isinstance(step, (int, float)) else ""
        message = f"{metric} became {value}{where} on rank {rank}"
        self.pool.file.nonfinite = state.Nonfinite(rank, step, metric, message)
        self.view.nonfinite(message)
        print(f"jupyter-hvd: {message}.", file=sys.stderr, flush=True)
