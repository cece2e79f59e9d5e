"""A cell's output, read once: each rank's text split into the lines a terminal shows, each line parsed for metrics
once (jupyter_hvd/metrics.py; a stream's LineReader skips the source lines a traceback or a warning quotes). The cell
runner feeds every chunk that arrives; the view, the sidebar's figures and the NaN check all take the same lines.

Pure logic. `\\n` ends a line; `\\r` rewrites the line being written, so a tqdm bar stays one line, and each state
it rewrites is handed out once as a finished (not ended) line, for its metrics.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .metrics import LineReader, ParsedLine

_BREAKS = re.compile(r"(\r\n|\n|\r)")
MAX_LINE_CHARS = 4000  # a line that never ends (a bar without \r, a flood) keeps only its last characters


@dataclass(frozen=True)
class Line:
    """A finished line of one rank's stream."""

    text: str
    ended: bool  # ended by a newline; False: a progress bar's state that `\r` rewrote
    parsed: ParsedLine


@dataclass(frozen=True)
class Chunk:
    """One piece of output as it arrived, digested."""

    rank: int
    stream: str  # "stdout" or "stderr"
    text: str  # as the rank wrote it
    lines: list[Line]  # the lines it finished, in order
    partial: str  # the line still being written after it ("" where none)
    unreadable: str | None = None  # why a line could not be read for metrics (said once by the view)


@dataclass
class _Partial:
    text: str = ""
    rewind: bool = False  # a `\r` came: the next text replaces the line
    reader: LineReader = field(default_factory=LineReader)  # knows when the stream quotes source (a traceback)


@dataclass
class Digest:
    """Every rank's and stream's line being written, across the chunks of one cell."""

    _partials: dict[tuple[int, str], _Partial] = field(default_factory=dict)

    def feed(self, rank: int, stream: str, text: str) -> Chunk:
        """Split and parse a chunk of `rank`'s `stream`."""
        part = self._partials.setdefault((rank, stream), _Partial())
        finished: list[tuple[str, bool]] = []
        for piece in _BREAKS.split(text):
            if not piece:
                continue
            if piece in ("\n", "\r\n"):
                finished.append((part.text, True))
                part.text, part.rewind = "", False
            elif piece == "\r":
                part.rewind = True
            elif part.rewind:
                if part.text:
                    finished.append((part.text, False))
                part.text, part.rewind = piece[-MAX_LINE_CHARS:], False
            else:
                part.text = (part.text + piece)[-MAX_LINE_CHARS:]
        lines, unreadable = [], None
        for line, ended in finished:
            try:
                parsed = part.reader.read(line)
            except Exception as exc:  # a line we cannot read must not stop the cell's output
                parsed = ParsedLine()
                unreadable = f"a printed line could not be read for metrics ({type(exc).__name__}: {exc})"
            lines.append(Line(line, ended, parsed))
        return Chunk(rank, stream, text, lines, part.text, unreadable)
