"""A `%%hvd` cell's view in a kernel whose front end draws no widgets (nbclient, `nbconvert --execute`).

Output streams as plain text, as without a live view; metrics are still collected, and when the cell ends the
final curves and status are displayed once (static_plot.saved_bundle: the view as data for jupyter-hvd's renderer,
and as SVG images), so an executed notebook keeps them.
"""

from __future__ import annotations

import time
from typing import Any

from IPython.display import display

from ..digest import Chunk
from .curves import Curves
from .plain import OutputRouter, show_display
from .schema import LogMessage, Status
from .static_plot import saved_bundle


class TextView:
    """A CellView with plain text output and a final static summary."""

    def __init__(self, ranks: int, show_ranks: list[int], plots: list[str], batch_size: int | None = None) -> None:
        self.router = OutputRouter(show_ranks)
        self.show_ranks = sorted(show_ranks)
        self.curves = Curves(ranks, batch_size, self.show_ranks)
        self.plots = plots
        self.ranks = ranks
        self.started = time.time()

    def output(self, chunk: Chunk) -> None:
        """Write the text to the cell's stream; the metrics of the lines it finished go to the curves."""
        self.router.feed(chunk.rank, chunk.stream, chunk.text)
        for line in chunk.lines:
            self.curves.add_printed(line.parsed, rank=chunk.rank)

    def nonfinite(self, message: str) -> None:
        """Shown in the final status line."""
        self.curves.nonfinite = message

    def metrics(self, rank: int, data: Any) -> None:
        """A batch of `report()` records from `rank`."""
        self.curves.add_reports(rank, data)

    def straggler(self, message: str | None) -> None:
        """The rank that sets the pace: the cell runner prints it under the cell; kept for the final status."""
        self.curves.straggler = message

    def display(self, rank: int, data: dict[str, Any], metadata: dict[str, Any]) -> None:
        """A rank's display(), in the notebook (the first shown rank's)."""
        show_display(rank, self.show_ranks, data, metadata)

    def tick(self) -> None:
        """Nothing to do while the cell runs: text is written as it arrives."""

    def close(self, ok: bool) -> None:
        """Flush the text; show the final curves once, if there are any."""
        self.router.close()
        curves = self.curves.plotted(self.plots)
        if not curves:
            return  # nothing that would be plotted
        c = self.curves
        elapsed = time.time() - self.started
        state = "finished" if ok else "stopped (error or interrupt)"
        step = f" · step {c.step:g}" if c.step is not None else ""
        text = f"{state} · {self.ranks} ranks{step} · {elapsed:.1f} s"
        if c.nonfinite:
            text += f" · ⚠ {c.nonfinite}"
        if c.straggler:
            text += f" · {c.straggler}"
        status: Status = {
            "state": "done" if ok else "failed",
            "ranks": self.ranks,
            "step": c.step,
            "epoch": c.epoch,
            "total": c.total,
            "desc": c.desc,
            "samples_per_s": c.samples_per_second(),
            "steps_per_s": c.steps_per_second(),
            "elapsed": elapsed,
            "eta": None,
            "latest": {k: v for k, v in c.latest.items() if v == v},
            "warning": c.nonfinite,
            "straggler": c.straggler,
        }
        log: LogMessage = {"append": [], "partials": [], "total": 0}  # the log is in the cell's text output
        display(saved_bundle(curves, self.plots, status, text, log, [], 0, self.show_ranks), raw=True)
