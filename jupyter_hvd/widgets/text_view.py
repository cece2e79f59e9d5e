"""A `%%hvd` cell's view in a kernel whose front end draws no widgets (nbclient, `nbconvert --execute`).

Output streams as plain text, as without a live view. A cell that prints nothing in its first SHOW_AFTER_S, or
nothing for a while later (the cell runner then says what the ranks do), gets its status line: one output refreshed
in place every second, with what the ranks do under it while the cell is quiet. Metrics are still
collected, and when the cell ends that output becomes the final curves and status (static_plot.saved_bundle: the
view as data for jupyter-hvd's renderer, and as SVG images), or the final status line alone, so an executed notebook
keeps them.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from IPython.display import display, update_display

from ..digest import Chunk
from .curves import Curves
from .plain import OutputRouter, show_display
from .schema import LogMessage, Status
from .static_plot import saved_bundle
from .status import status, status_text

SHOW_AFTER_S = 1.0  # a cell shows its status line from its first second (a quicker one shows nothing extra)
REFRESH_S = 1.0  # the status line's elapsed time, refreshed in place


class TextView:
    """A CellView with plain text output and a final static summary."""

    def __init__(self, ranks: int, show_ranks: list[int], plots: list[str], batch_size: int | None = None) -> None:
        self.router = OutputRouter(show_ranks)
        self.show_ranks = sorted(show_ranks)
        self.curves = Curves(ranks, batch_size, self.show_ranks)
        self.plots = plots
        self.ranks = ranks
        self.started = time.time()
        self.doing: str | None = None  # what the ranks do while the cell is quiet (the cell runner's words)
        self.display_id = uuid.uuid4().hex
        self._shown = ""  # the status text last shown ('' before the status line is shown)
        self._shown_at = 0.0  # seconds into the cell
        self._printed = False

    def output(self, chunk: Chunk) -> None:
        """Write the text to the cell's stream; the metrics of the lines it finished go to the curves."""
        self.router.feed(chunk.rank, chunk.stream, chunk.text)
        self._printed = True
        for line in chunk.lines:
            self.curves.add_printed(line.parsed, rank=chunk.rank)

    def nonfinite(self, message: str) -> None:
        """Shown in the status line."""
        self.curves.nonfinite = message

    def metrics(self, rank: int, data: Any) -> None:
        """A batch of `report()` records from `rank`."""
        self.curves.add_reports(rank, data)

    def straggler(self, message: str | None) -> None:
        """The rank that sets the pace: the cell runner prints it under the cell; kept for the status line."""
        self.curves.straggler = message

    def activity(self, text: str | None) -> None:
        """What the ranks do while the cell prints nothing (None: it printed again), under the status line."""
        self.doing = text
        if self._shown or text:
            self._show()

    def display(self, rank: int, data: dict[str, Any], metadata: dict[str, Any]) -> None:
        """A rank's display(), in the notebook (the first shown rank's)."""
        show_display(rank, self.show_ranks, data, metadata)

    def tick(self) -> None:
        """The status line of a cell silent from its start, from SHOW_AFTER_S on; its elapsed time refreshed every
        REFRESH_S once shown."""
        elapsed = time.time() - self.started
        if self._shown and elapsed - self._shown_at >= REFRESH_S:
            self._show()
        elif not self._shown and not self._printed and elapsed >= SHOW_AFTER_S:
            self._show()

    def _status(self, state: str) -> Status:
        return status(self.curves, state, self.ranks, time.time() - self.started, self.doing)

    def _show(self) -> None:
        text = f"[jupyter-hvd] {status_text(self._status('running'))}"
        self._shown_at = time.time() - self.started
        if text == self._shown:
            return
        (update_display if self._shown else display)({"text/plain": text}, display_id=self.display_id, raw=True)
        self._shown = text

    def close(self, ok: bool) -> None:
        """Flush the text; the status line becomes the final curves and status, or the final status alone."""
        self.router.close()
        state = "done" if ok else "failed"
        s = self._status(state)
        text = status_text(s)
        curves = self.curves.plotted(self.plots)
        if curves:
            log: LogMessage = {"append": [], "partials": [], "total": 0}  # the log is in the cell's text output
            bundle = saved_bundle(curves, self.plots, s, text, log, [], 0, self.show_ranks)
        elif self._shown:
            bundle = {"text/plain": f"[jupyter-hvd] {text}"}
        else:
            return  # a quick cell without curves: nothing more to show, as before
        if self._shown:
            update_display(bundle, display_id=self.display_id, raw=True)
        else:
            display(bundle, raw=True)
