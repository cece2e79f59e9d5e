"""A `%%hvd` cell's view in a kernel whose front end draws no widgets (nbclient, `nbconvert --execute`).

Output streams as plain text, as without a live view; metrics are still collected, and when the cell ends the
final curves and status are displayed once as a static image, so an executed notebook keeps them.
"""

from __future__ import annotations

import time
from typing import Any

from IPython.display import display

from ..metrics import parse_line
from .curves import Curves
from .plain import OutputRouter
from .static_plot import fallback_bundle


class TextView:
    """A CellView with plain text output and a final static summary."""

    def __init__(self, ranks: int, show_ranks: list[int], plots: list[str], batch_size: int | None = None) -> None:
        self.router = OutputRouter(show_ranks)
        self.curves = Curves(ranks, batch_size)
        self.plots = plots
        self.ranks = ranks
        self.parse_rank = min(show_ranks)
        self.started = time.time()
        self._partial = ""

    def output(self, rank: int, name: str, text: str) -> None:
        """Write the text to the cell's stream; read rank 0's finished lines for metrics."""
        self.router.feed(rank, name, text)
        if rank != self.parse_rank:
            return
        *done, self._partial = (self._partial + text).replace("\r\n", "\n").replace("\r", "\n").split("\n")
        for line in done:
            parsed = parse_line(line)
            if parsed or parsed.step is not None:
                self.curves.add_printed(parsed)

    def metrics(self, rank: int, data: Any) -> None:
        """A batch of `report()` records from `rank`."""
        self.curves.add_reports(rank, data)

    def straggler(self, message: str | None) -> None:
        """The rank that sets the pace: the cell runner prints it under the cell; kept for the final status."""
        self.curves.straggler = message

    def tick(self) -> None:
        """Nothing to do while the cell runs: text is written as it arrives."""

    def close(self, ok: bool) -> None:
        """Flush the text; show the final curves once, if there are any."""
        self.router.close()
        if not self.curves.take_new(self.plots):
            return  # nothing that would be plotted
        state = "finished" if ok else "stopped (error or interrupt)"
        step = f" · step {self.curves.step:g}" if self.curves.step is not None else ""
        status = f"{state} · {self.ranks} ranks{step} · {time.time() - self.started:.1f} s"
        if self.curves.nonfinite:
            status += f" · ⚠ {self.curves.nonfinite}"
        if self.curves.straggler:
            status += f" · {self.curves.straggler}"
        display(fallback_bundle(self.curves.curves, self.plots, status, [], 0), raw=True)
