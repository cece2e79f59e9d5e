"""The live training view of a running `%%hvd` cell: status line, plots and the shown ranks' log, in one widget.

Runs in the user's kernel. The cell runner calls `output()`, `metrics()` and `close()` on the kernel's main
thread; they only update in-memory buffers. A flusher thread sends what changed to the front end (a change after
a quiet spell at once, at most `UPDATES_PER_S` times a second under load), as one custom message carrying only new
lines and new points (binary).

When the cell ends, the widget's output is replaced by the finished view (static_plot.saved_bundle: the view as
data, which jupyter-hvd's renderer draws without a kernel, and HTML and text twins) and the widget is closed: the
saved notebook holds one output per cell and no widget, so it reopens clean in JupyterLab, Notebook 7, nbviewer and
GitHub. A failed cell always ends with its status line, whether or not it had shown anything.
"""

from __future__ import annotations

import threading
import time
import uuid
from array import array
from pathlib import Path
from typing import Any

import anywidget
import traitlets
from IPython.display import display, update_display

from ..digest import Chunk
from .curves import Curves
from .log import LogBuffer, LogDelta
from .plain import show_display
from .static_plot import SAVED_LOG_LINES, saved_bundle

# Well above a loop printing at 20 Hz: with the gap equal to the print interval, one late send made every later line
# wait for the gap (measured: 16 ms median at 20/s, 2 ms at 30/s).
UPDATES_PER_S = 30.0
SHOW_AFTER_S = 1.0  # a cell with no output and no metrics shows its view after this long
STATIC_LOG_LINES = 40  # log lines in the HTML and text twins of the finished view
STATIC = Path(__file__).parent / "static"
STATES = {"running": "running", "done": "finished", "failed": "stopped (error or interrupt)"}


class TrainingView(anywidget.AnyWidget):
    """The widget the front end draws; all data arrives as incremental custom messages (see LiveView)."""

    _esm = STATIC / "live_view.js"
    _css = STATIC / "live_view.css"
    view_id = traitlets.Unicode().tag(sync=True)  # the front end keeps each model's data under this id
    plots = traitlets.List(traitlets.Unicode()).tag(sync=True)
    ranks = traitlets.List(traitlets.Int()).tag(sync=True)  # the ranks whose output the cell shows
    log_lines = traitlets.Int(10_000).tag(sync=True)
    updates = traitlets.Int(0).tag(sync=True)  # set when the cell ends: a view created later asks for a full copy
    # The user's choices in the view, kept for the finished view: the smoothing slider (None: automatic) and log y.
    smoothing = traitlets.Float(None, allow_none=True).tag(sync=True)
    log_y = traitlets.Bool(False).tag(sync=True)

    def __repr__(self) -> str:
        return "jupyter-hvd live training view"


class LiveView:
    """Shows one `%%hvd` cell while it runs; a CellView."""

    def __init__(
        self,
        ranks: int,
        show_ranks: list[int],
        log_lines: int,
        plots: list[str],
        batch_size: int | None = None,
    ) -> None:
        self.plots = plots
        self.show_ranks = sorted(show_ranks)
        self.log = LogBuffer(log_lines, prefix_ranks=len(show_ranks) > 1 or show_ranks != [0])
        self.curves = Curves(ranks, batch_size, self.show_ranks)
        self.ranks = ranks
        self.started = time.time()
        self.ended: float | None = None  # the elapsed time stops with the cell (a later full copy must agree)
        self.state = "running"
        self.seq = 0
        self.log_lines = log_lines
        self.widget: TrainingView | None = None
        self.display_id = uuid.uuid4().hex
        self._lock = threading.Lock()
        self._dirty = threading.Event()
        self._closed = False
        self._noted = False
        self._thread: threading.Thread | None = None

    def show(self) -> None:
        """Display the widget and start sending updates (what arrived before is sent in the first update).

        Called at the first output or metric, or once the cell has run for SHOW_AFTER_S: a quick silent cell
        (defining a model, say) shows nothing, as a plain cell would, and costs no widget (about 9 ms).
        """
        if self.widget is not None:
            return
        self.widget = TrainingView(
            view_id=uuid.uuid4().hex, plots=self.plots, ranks=self.show_ranks, log_lines=self.log_lines
        )
        self.widget.on_msg(self._on_front_end_msg)
        display(self.widget, display_id=self.display_id)
        self._thread = threading.Thread(target=self._flush_loop, name="jupyter-hvd-live-view", daemon=True)
        self._thread.start()

    # ---- CellView ------------------------------------------------------------------------------------------

    def output(self, chunk: Chunk) -> None:
        """Output of a shown rank: into the log; the metrics of the lines it finished go to the curves."""
        self.show()
        with self._lock:
            self.log.add(chunk)
            now = time.time()
            for line in chunk.lines:
                self.curves.add_printed(line.parsed, now, chunk.rank)
            if chunk.unreadable:
                self._note(chunk.unreadable)
        self._dirty.set()

    def nonfinite(self, message: str) -> None:
        """Shown on the status line."""
        with self._lock:
            self.curves.nonfinite = message
        self._dirty.set()

    def metrics(self, rank: int, data: Any) -> None:
        """A batch of `report()` records from `rank`."""
        self.show()
        with self._lock:
            try:
                self.curves.add_reports(rank, data)
            except Exception as exc:
                self._note(f"report() values from rank {rank} could not be plotted ({type(exc).__name__}: {exc})")
        self._dirty.set()

    def straggler(self, message: str | None) -> None:
        """The rank that sets the pace (or None once the ranks are even again), for the status line."""
        with self._lock:
            self.curves.straggler = message
        self._dirty.set()

    def display(self, rank: int, data: dict[str, Any], metadata: dict[str, Any]) -> None:
        """A rank's display(), in the notebook (the first shown rank's)."""
        show_display(rank, self.show_ranks, data, metadata)

    def tick(self) -> None:
        """Called by the cell runner while the cell runs: a silent cell gets its view once it runs a while."""
        if self.widget is None and time.time() - self.started >= SHOW_AFTER_S:
            self.show()

    def _note(self, text: str) -> None:
        # Said once per cell, in the log, where the user is looking.
        if not self._noted:
            self._noted = True
            self.log.say(f"[jupyter-hvd] {text}")

    def close(self, ok: bool) -> None:
        """The cell ended (ok False: error, interrupt or restart): the widget's output becomes the finished view."""
        self._closed = True
        with self._lock:
            self.state = "done" if ok else "failed"
            self.ended = time.time()
        if self.widget is None or self._thread is None:
            if not ok:
                display(self.finished_view(), raw=True)  # every failed cell ends with the same status line
            return  # a quick silent cell that succeeded: nothing to show
        self._dirty.set()
        self._thread.join(timeout=2.0)
        with self._lock:
            self.log.finish()
            update = self._take_update()
        try:
            self._send(update)
            self.widget.updates = self.seq
        except Exception:
            pass  # the front end went away (kernel shutting down): the finished view below still records the cell
        with self._lock:
            bundle = self.finished_view()
        update_display(bundle, display_id=self.display_id, raw=True)
        try:
            self.widget.close()  # nothing in the notebook refers to it any more
        except Exception:
            pass

    def finished_view(self) -> dict[str, Any]:
        """The output that replaces the widget: the view as data, HTML and text (static_plot.saved_bundle)."""
        tail = self.log.tail(STATIC_LOG_LINES)
        saved = list(self.log.lines)[-SAVED_LOG_LINES:]
        log = {"append": saved, "partials": [], "total": self.log.total}
        widget = self.widget
        return saved_bundle(
            self.curves.plotted(self.plots),
            self.plots,
            self.status(),
            self.status_text(),
            log,
            tail,
            self.log.total - len(tail),
            self.show_ranks,
            widget.smoothing if widget is not None else None,
            bool(widget.log_y) if widget is not None else False,
        )

    # ---- status --------------------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """What the status line shows, as numbers (the front end formats them)."""
        c = self.curves
        return {
            "state": self.state,
            "ranks": self.ranks,
            "step": c.step,
            "epoch": c.epoch,
            "total": c.total,
            "desc": c.desc,
            "samples_per_s": c.samples_per_second(),
            "steps_per_s": c.steps_per_second(),
            "elapsed": (self.ended or time.time()) - self.started,
            "eta": c.eta_seconds() if self.state == "running" else None,
            "latest": {k: v for k, v in c.latest.items() if v == v},
            "warning": c.nonfinite,
            "straggler": c.straggler,
        }

    def status_text(self) -> str:
        """The status line as plain text (for the HTML and text twins)."""
        s = self.status()
        bits = [STATES[s["state"]], f"{s['ranks']} ranks"]
        if s["step"] is not None:
            bits.append(f"step {s['step']:g}" + (f"/{s['total']}" if s["total"] else ""))
        elif s["epoch"] is not None:
            bits.append(f"epoch {s['epoch']:.4g}")
        if s["samples_per_s"]:
            bits.append(f"{s['samples_per_s']:,.0f} samples/s")
        elif s["steps_per_s"]:
            bits.append(f"{steps_per_second_text(s['steps_per_s'])} steps/s")
        bits.append(f"{s['elapsed']:.1f} s")
        if s["warning"]:
            bits.append(f"⚠ {s['warning']}")
        if s["straggler"]:
            bits.append(s["straggler"])
        return " · ".join(bits)

    # ---- sending -------------------------------------------------------------------------------------------

    def _flush_loop(self) -> None:
        # Leading edge: a change after a quiet spell is sent at once; under load one update per interval at most.
        interval = 1.0 / UPDATES_PER_S
        sent_at = 0.0
        while not self._closed:
            self._dirty.wait()
            if self._closed:
                return
            delay = sent_at + interval - time.monotonic()
            if delay > 0:
                time.sleep(delay)  # coalesce: whatever arrives meanwhile goes into this update
            self._dirty.clear()
            with self._lock:
                update = self._take_update()
            sent_at = time.monotonic()
            try:
                self._send(update)
            except Exception:
                return  # the comm is gone; close() still writes the finished view

    def _take_update(self, full: bool = False) -> tuple[dict[str, Any], list[bytes]]:
        """The next message: new points per curve (x and y as float64 buffers), new log lines, the status."""
        curves, buffers = [], []
        chosen = self.curves.plotted(self.plots) if full else self.curves.take_new(self.plots)
        for curve in chosen:
            start = 0 if (full or curve.reset) else curve.sent
            n = len(curve.xs)
            curves.append(
                {
                    "key": curve.key,
                    "name": curve.name,
                    "rank": curve.rank,
                    "x_kind": curve.x_kind,
                    "start": start,
                    "reset": full or curve.reset,
                    "n": n - start,
                }
            )
            buffers += [array("d", curve.xs[start:n]).tobytes(), array("d", curve.ys[start:n]).tobytes()]
            curve.sent, curve.reset = n, False
        delta: LogDelta | None = self.log.snapshot() if full else self.log.take_delta()
        self.seq += 1
        content = {
            "type": "update",
            "seq": self.seq,
            "full": full,
            "curves": curves,
            "log": delta.as_message() if delta is not None else None,
            "status": self.status(),
        }
        return content, buffers

    def _send(self, update: tuple[dict[str, Any], list[bytes]]) -> None:
        content, buffers = update
        assert self.widget is not None
        self.widget.send(content, buffers)

    def _on_front_end_msg(self, _widget: Any, content: Any, _buffers: Any) -> None:
        # A view created after updates were sent (a reloaded page) asks for everything once.
        if isinstance(content, dict) and content.get("type") == "sync":
            with self._lock:
                update = self._take_update(full=True)
            self._send(update)


def steps_per_second_text(rate: float) -> str:
    """Steps per second with three significant digits: `4.37`, `0.0123`, `1,234` (widgets-js/src/format.js too)."""
    if rate >= 100:
        return f"{rate:,.0f}"
    return f"{float(f'{rate:.3g}'):g}"
