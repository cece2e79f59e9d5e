"""The live training view of a running `%%hvd` cell: status line, plots and the shown ranks' log, in one widget.

Runs in the user's kernel. The cell runner calls `output()`, `metrics()` and `close()` on the kernel's main
thread; they only update in-memory buffers. A flusher thread sends what changed to the front end (a change after
a quiet spell at once, at most `UPDATES_PER_S` times a second under load), as one custom message carrying only new
lines and new points (binary).

The cell's output is, from its first moment, a copy of the view (static_plot.saved_bundle: the view as data, which
jupyter-hvd's renderer draws without a kernel, and HTML and text twins) with the widget beside it in the same output.
A thread of its own refreshes the copy (update_display) every COPY_EVERY_S while something changed, so a notebook
saved at any moment (JupyterLab autosaves every 2 minutes) reopens with the run up to then, in JupyterLab, Notebook 7,
nbviewer and GitHub. jupyter-hvd's renderer draws that output from the live widget's data while the widget is on the
page (widgets-js/src/live.js); other widget front ends (VS Code) draw the widget. When the cell ends the output
becomes the final copy, without the widget, and the widget is closed: the saved notebook holds one output per cell
and no widget. A failed cell always ends with its status line, whether or not it had shown anything.
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
from .schema import CurveUpdate, LiveUpdate, LogMessage, Status
from .static_plot import SAVED_LOG_LINES, saved_bundle
from .status import status, status_text

# Well above a loop printing at 20 Hz: with the gap equal to the print interval, one late send made every later line
# wait for the gap (measured: 16 ms median at 20/s, 2 ms at 30/s).
UPDATES_PER_S = 30.0
SHOW_AFTER_S = 0.25  # a cell with no output and no metrics shows its view (its status line) after this long
STATIC_LOG_LINES = 40  # log lines in the HTML and text twins of the saved copy
COPY_EVERY_S = 2.0  # the copy in the notebook is at most about this old mid-run (autosave may come at any moment)
COPY_COST_SHARE = 0.05  # ...and costs the kernel at most this share of its time: a long run's copies come less often
COPY_IDLE_S = 30.0  # a cell that shows nothing new still gets a copy this often (its elapsed time)
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
STATIC = Path(__file__).parent / "static"


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
        self.doing: str | None = None  # what the ranks do while the cell is quiet (the cell runner's words)
        self.seq = 0
        self.log_lines = log_lines
        self.widget: TrainingView | None = None
        self.display_id = uuid.uuid4().hex
        self._lock = threading.Lock()
        self._dirty = threading.Event()
        self._closed = False
        self._noted = False
        self._thread: threading.Thread | None = None
        self._changes = 0  # counts what the copy in the notebook may not have yet (under _lock)
        self._copied = 0  # _changes when the last copy was taken
        self._copy_due = 0.0  # monotonic time of the next copy, where something changed
        self._copied_at = 0.0  # monotonic time of the last copy
        self._copy_lock = threading.Lock()  # one copy published at a time, none after the final one
        self._copy_stop = threading.Event()  # the cell ended: no more copies
        self._final = False
        self.copy_seconds: list[float] = []  # what each copy cost the kernel (built and sent)

    def show(self) -> None:
        """Display the view (a copy of it, with the widget beside it) and start sending updates at once (what arrived
        before is sent in the first update), so the status line shows from the cell's first moments.

        Called at the first output or metric, or once the cell has run for SHOW_AFTER_S: a quick silent cell
        (defining a model, say) shows nothing, as a plain cell would, and costs no widget (about 9 ms).
        """
        if self.widget is not None:
            return
        self.widget = TrainingView(
            view_id=uuid.uuid4().hex, plots=self.plots, ranks=self.show_ranks, log_lines=self.log_lines
        )
        self.widget.on_msg(self._on_front_end_msg)
        with self._lock:
            bundle = self.saved_copy()
            self._copied = self._changes
        display(bundle, raw=True, display_id=self.display_id)
        self._copied_at = time.monotonic()
        self._copy_due = self._copied_at + COPY_EVERY_S
        self._dirty.set()
        self._thread = threading.Thread(target=self._flush_loop, name="jupyter-hvd-live-view", daemon=True)
        self._thread.start()
        threading.Thread(target=self._copy_loop, name="jupyter-hvd-live-view-copy", daemon=True).start()

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
            self._changes += 1
        self._dirty.set()

    def nonfinite(self, message: str) -> None:
        """Shown on the status line."""
        with self._lock:
            self.curves.nonfinite = message
            self._changes += 1
        self._dirty.set()

    def metrics(self, rank: int, data: Any) -> None:
        """A batch of `report()` records from `rank`."""
        self.show()
        with self._lock:
            try:
                self.curves.add_reports(rank, data)
            except Exception as exc:
                self._note(f"report() values from rank {rank} could not be plotted ({type(exc).__name__}: {exc})")
            self._changes += 1
        self._dirty.set()

    def activity(self, text: str | None) -> None:
        """What the ranks do while the cell prints nothing (None: it printed again), under the status line."""
        with self._lock:
            if text == self.doing:
                return
            self.doing = text
            self._changes += 1
        self._dirty.set()

    def straggler(self, message: str | None) -> None:
        """The rank that sets the pace (or None once the ranks are even again), for the status line."""
        with self._lock:
            self.curves.straggler = message
            self._changes += 1
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
        """The cell ended (ok False: error, interrupt or restart): the output becomes the final copy of the view."""
        self._closed = True
        self._copy_stop.set()
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
            pass  # the front end went away (kernel shutting down): the final copy below still records the cell
        with self._lock:
            bundle = self.finished_view()
        self._publish_copy(bundle, final=True)
        try:
            self.widget.close()  # nothing in the notebook refers to it any more
        except Exception:
            pass

    def finished_view(self) -> dict[str, Any]:
        """The output the cell ends with: the view as data, HTML and text (static_plot.saved_bundle), no widget."""
        return self._copy_of(self._snapshot())

    def saved_copy(self) -> dict[str, Any]:
        """The output while the cell runs: the view as data, HTML and text, with the widget in the same output
        (jupyter-hvd's renderer draws the widget's data while it is on the page, other front ends the widget)."""
        return self._with_widget(self._copy_of(self._snapshot()))

    def _with_widget(self, bundle: dict[str, Any]) -> dict[str, Any]:
        # The widget's own entry in the output (as display(widget) writes it: its model's id), beside the copy.
        if self.widget is not None:
            bundle[WIDGET_VIEW] = {"version_major": 2, "version_minor": 0, "model_id": self.widget.model_id}
        return bundle

    def _snapshot(self) -> dict[str, Any]:
        # What a copy shows (under _lock: the main thread appends while the copy is built). Curves only
        # grow, so their lengths now are enough: _copy_of takes those first points, outside the lock.
        tail = self.log.tail(STATIC_LOG_LINES)
        widget = self.widget
        return {
            "curves": [(c, len(c.ys)) for c in self.curves.plotted(self.plots)],
            "status": self.status(),
            "status_text": self.status_text(),
            "log": LogMessage(append=list(self.log.lines)[-SAVED_LOG_LINES:], partials=[], total=self.log.total),
            "tail": tail,
            "dropped": self.log.total - len(tail),
            "smoothing": widget.smoothing if widget is not None else None,
            "log_y": bool(widget.log_y) if widget is not None else False,
            "view_id": widget.view_id if widget is not None and not self._closed else None,
        }

    def _copy_of(self, snap: dict[str, Any]) -> dict[str, Any]:
        # The snapshot as the output's bundle (static_plot.saved_bundle); its view_id names the live widget's view.
        return saved_bundle(
            [curve.prefix(n) for curve, n in snap["curves"]],
            self.plots,
            snap["status"],
            snap["status_text"],
            snap["log"],
            snap["tail"],
            snap["dropped"],
            self.show_ranks,
            snap["smoothing"],
            snap["log_y"],
            snap["view_id"],
        )

    def _refresh_copy(self) -> None:
        # A new copy in the notebook, built outside the lock; the next one is due in COPY_EVERY_S, or later where
        # this one cost more than COPY_COST_SHARE of that.
        t0 = time.perf_counter()
        with self._lock:
            changes = self._changes
            snap = self._snapshot()
        self._publish_copy(self._with_widget(self._copy_of(snap)))
        cost = time.perf_counter() - t0
        self.copy_seconds.append(cost)
        self._copied = changes
        self._copied_at = time.monotonic()
        self._copy_due = self._copied_at + max(COPY_EVERY_S, cost / COPY_COST_SHARE)

    def _next_copy(self) -> float:
        # When the next copy is due: soon where something changed, else only for the elapsed time.
        return self._copy_due if self._changes != self._copied else self._copied_at + COPY_IDLE_S

    def _publish_copy(self, bundle: dict[str, Any], final: bool = False) -> None:
        # The output becomes `bundle`; once the final copy is out, a late refresh is dropped.
        with self._copy_lock:
            if self._final:
                return
            self._final = final
            update_display(bundle, display_id=self.display_id, raw=True)

    # ---- status --------------------------------------------------------------------------------------------

    def status(self) -> Status:
        """What the status line shows, as numbers (the front end formats them)."""
        return status(self.curves, self.state, self.ranks, (self.ended or time.time()) - self.started, self.doing)

    def status_text(self) -> str:
        """The status line as plain text (for the HTML and text twins)."""
        return status_text(self.status(), running="saved while running")

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
                return  # the comm is gone; close() still writes the final copy

    def _copy_loop(self) -> None:
        # The copy in the notebook, refreshed on a thread of its own: building one (tens of milliseconds for a long
        # run) never holds back an update. Checked at least twice a second: a change makes a copy due.
        while not self._copy_stop.wait(min(0.5, max(0.0, self._next_copy() - time.monotonic()))):
            if time.monotonic() < self._next_copy():
                continue
            try:
                self._refresh_copy()
            except Exception:  # a copy that failed: the next one may not
                self._copied_at = time.monotonic()
                self._copy_due = self._copied_at + COPY_EVERY_S

    def _take_update(self, full: bool = False) -> tuple[LiveUpdate, list[bytes]]:
        """The next message: new points per curve (x and y as float64 buffers), new log lines, the status."""
        curves: list[CurveUpdate] = []
        buffers: list[bytes] = []
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
        content: LiveUpdate = {
            "type": "update",
            "seq": self.seq,
            "full": full,
            "curves": curves,
            "log": delta.as_message() if delta is not None else None,
            "status": self.status(),
        }
        return content, buffers

    def _send(self, update: tuple[LiveUpdate, list[bytes]]) -> None:
        content, buffers = update
        assert self.widget is not None
        self.widget.send(content, buffers)

    def _on_front_end_msg(self, _widget: Any, content: Any, _buffers: Any) -> None:
        # A view created after updates were sent (a reloaded page) asks for everything once.
        if isinstance(content, dict) and content.get("type") == "sync":
            with self._lock:
                update = self._take_update(full=True)
            self._send(update)
