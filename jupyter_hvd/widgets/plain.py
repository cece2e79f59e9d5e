"""A `%%hvd` cell's output as plain text in the notebook cell (a terminal IPython, or no live view asked for).

Rank 0's text goes through raw (so `\\r` progress bars work); other ranks' lines are prefixed `[rank N]`.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from IPython.display import publish_display_data

from .. import compat
from ..digest import Chunk


def show_display(rank: int, show_ranks: list[int], data: dict[str, Any], metadata: dict[str, Any]) -> None:
    """A rank's `display()` in the notebook, where the cell shows that rank first (every shown view does this)."""
    if rank == min(show_ranks):
        publish_display_data(data, metadata)


class OutputRouter:
    """Writes engine output into the notebook cell's stdout and stderr."""

    # ipykernel's OutStream sends what was written 0.2 s after the first write. Here a line after a quiet spell is
    # flushed at once (leading edge); under load the stream's own timer sends every THROTTLE_S at most.
    THROTTLE_S = 0.02

    def __init__(self, show_ranks: list[int]) -> None:
        self.prefix = len(show_ranks) > 1 or show_ranks != [0]
        self._partial: dict[tuple[int, str], str] = {}
        self._wrote = False
        self._flushed_at: dict[str, float] = {}
        self._intervals: dict[Any, Any] = {}  # stream -> its own flush_interval, put back by close()

    def feed(self, rank: int, name: str, text: str) -> None:
        """Write `text` that `rank` wrote to its `name` stream (stdout or stderr)."""
        out = sys.stderr if name == "stderr" else sys.stdout
        self._wrote = True
        if not self.prefix:
            self._write(name, out, text)
            return
        buf = self._partial.get((rank, name), "") + text
        *lines, rest = buf.split("\n")
        self._partial[(rank, name)] = rest
        if lines:
            self._write(name, out, "".join(f"[rank {rank}] {line}\n" for line in lines))

    def _write(self, name: str, out: Any, text: str) -> None:
        if out not in self._intervals:
            self._intervals[out] = compat.flush_interval(out)
            compat.set_flush_interval(out, self.THROTTLE_S)
        out.write(text)
        now = time.monotonic()
        if now - self._flushed_at.get(name, 0.0) >= self.THROTTLE_S:
            self._flushed_at[name] = now
            out.flush()  # waits for the kernel's IO thread (~1 ms); at most once per THROTTLE_S

    def close(self) -> None:
        """Write what is left of unfinished lines, and put the streams' own flush timers back."""
        for (rank, name), rest in self._partial.items():
            if rest:
                (sys.stderr if name == "stderr" else sys.stdout).write(f"[rank {rank}] {rest}\n")
        self._partial.clear()
        for out, interval in self._intervals.items():
            if interval is not None:
                compat.set_flush_interval(out, interval)
        self._intervals.clear()
        if self._wrote:  # output before the cell's error message; a flush waits for the kernel's IO thread (~1 ms)
            sys.stdout.flush()
            sys.stderr.flush()


class PlainView:
    """The CellView of a cell shown as text only: output as it arrives; metrics, pace and ticks are not shown."""

    def __init__(self, show_ranks: list[int]) -> None:
        self.router = OutputRouter(show_ranks)
        self.show_ranks = sorted(show_ranks)

    def output(self, chunk: Chunk) -> None:
        self.router.feed(chunk.rank, chunk.stream, chunk.text)

    def nonfinite(self, message: str) -> None:
        pass  # the cell runner says it under the cell

    def metrics(self, rank: int, records: Any) -> None:
        pass  # the cell runner keeps step and loss for the sidebar; there is no plot here

    def straggler(self, message: str | None) -> None:
        pass  # the cell runner prints the straggler under the cell

    def display(self, rank: int, data: dict[str, Any], metadata: dict[str, Any]) -> None:
        show_display(rank, self.show_ranks, data, metadata)

    def activity(self, text: str | None) -> None:
        pass  # plain text has no line that could be updated in place

    def tick(self) -> None:
        pass

    def close(self, ok: bool) -> None:
        self.router.close()
