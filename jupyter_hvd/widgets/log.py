"""The live view's log: engine output turned into lines the way a terminal shows them.

Pure logic (no widgets); the lines come split by jupyter_hvd/digest.py.
Only the last `max_lines` finished lines are kept; what the view has not received yet is handed out by
`take_delta()`, so an update carries only new lines. Each line keeps the rank that wrote it (the view shows one
lane per rank); text for plain outputs is prefixed `[rank N]` where several ranks are shown.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from ..digest import Chunk
from .schema import LogMessage


@dataclass
class LogDelta:
    """What changed since the last delta: finished lines to append, and the lines still being written."""

    append: list[tuple[str, str, int]] = field(default_factory=list)  # (text, stream, rank; -1: jupyter-hvd's own)
    partials: list[tuple[str, str, int]] = field(default_factory=list)
    total: int = 0  # finished lines so far, shown or dropped

    def as_message(self) -> LogMessage:
        """The JSON the front end's log component applies."""
        return {"append": self.append, "partials": self.partials, "total": self.total}


class LogBuffer:
    """Lines of one cell's output, from one or more ranks, capped to the last `max_lines`."""

    def __init__(self, max_lines: int, prefix_ranks: bool = False) -> None:
        self.max_lines = max_lines
        self.prefix_ranks = prefix_ranks
        self.lines: deque[tuple[str, str, int]] = deque(maxlen=max_lines)
        self.total = 0
        self._unsent: deque[tuple[str, str, int]] = deque(maxlen=max_lines)
        self._partials: dict[tuple[int, str], str] = {}
        self._partials_changed = False

    def add(self, chunk: Chunk) -> None:
        """The lines a chunk of output ended, and the line it leaves being written (jupyter_hvd/digest.py)."""
        for line in chunk.lines:
            if line.ended:
                self._commit(chunk.rank, chunk.stream, line.text)
        if chunk.partial != self._partials.get((chunk.rank, chunk.stream), ""):
            self._partials[(chunk.rank, chunk.stream)] = chunk.partial
            self._partials_changed = True

    def say(self, text: str) -> None:
        """A line of jupyter-hvd's own, in the log where the user is looking."""
        self._commit(-1, "stderr", text)

    def _commit(self, rank: int, stream: str, text: str) -> None:
        line = (text, stream, rank)
        self.lines.append(line)
        self._unsent.append(line)
        self.total += 1

    def partial_lines(self) -> list[tuple[str, str, int]]:
        """The lines still being written (a progress bar), one per rank and stream, in a stable order."""
        return [(text, stream, rank) for (rank, stream), text in sorted(self._partials.items()) if text]

    def take_delta(self) -> LogDelta | None:
        """New finished lines and current partial lines since the last call; None when nothing changed."""
        if not self._unsent and not self._partials_changed:
            return None
        delta = LogDelta(list(self._unsent), self.partial_lines(), self.total)
        self._unsent.clear()
        self._partials_changed = False
        return delta

    def snapshot(self) -> LogDelta:
        """Everything still kept, for a view that starts from nothing."""
        return LogDelta(list(self.lines), self.partial_lines(), self.total)

    def finish(self) -> None:
        """The cell ended: lines still being written count as finished."""
        for (rank, stream), text in sorted(self._partials.items()):
            if text:
                self._commit(rank, stream, text)
                self._partials[(rank, stream)] = ""
                self._partials_changed = True

    def tail(self, n: int) -> list[str]:
        """The last `n` finished lines' text, `[rank N] `-prefixed where several ranks are shown."""
        return [self.plain(line) for line in list(self.lines)[-n:]]

    def plain(self, line: tuple[str, str, int]) -> str:
        """A line as plain text shows it."""
        text, _, rank = line
        return f"[rank {rank}] {text}" if self.prefix_ranks and rank >= 0 else text
