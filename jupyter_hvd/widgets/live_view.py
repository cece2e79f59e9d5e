"""The live training view of a running `%%hvd` cell: status line, loss plot and rank-0 log, in one widget.

Runs in the user's kernel. The cell runner calls `output()`, `metrics()` and `close()` on the kernel's main
thread; they only update in-memory buffers. A flusher thread sends what changed to the front end (a change after
a quiet spell at once, at most `UPDATES_PER_S` times a second under load), as one custom message carrying only new
lines and new points (binary).
When the cell ends, a static copy (curves as SVG, status, log tail) is displayed next to the widget, for
front ends without widgets (nbconvert, a reopened notebook); the widget's CSS hides it where the widget runs.
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
from IPython.display import display

from ..metrics import parse_line
from .curves import Curves
from .log import LogBuffer, LogDelta
from .static_plot import fallback_bundle

# Well above a loop printing at 20 Hz: with the gap equal to the print interval, one late send made every later line
# wait for the gap (measured: 16 ms median at 20/s, 2 ms at 30/s).
UPDATES_PER_S = 30.0
SHOW_AFTER_S = 1.0  # a cell with no output and no metrics shows its view after this long
STATIC_LOG_LINES = 40  # log lines kept in the static copy saved with the notebook
STATIC = Path(__file__).parent / "static"


class TrainingView(anywidget.AnyWidget):
    """The widget the front end draws; all data arrives as incremental custom messages (see LiveView)."""

    _esm = STATIC / "live_view.js"
    _css = STATIC / "live_view.css"
    view_id = traitlets.Unicode().tag(sync=True)  # the front end keeps each model's data under this id
    plots = traitlets.List(traitlets.Unicode()).tag(sync=True)
    log_lines = traitlets.Int(10_000).tag(sync=True)
    updates = traitlets.Int(0).tag(sync=True)  # set when the cell ends: a view created later asks for a full copy

    def __repr__(self) -> str:
        return "jupyter-hvd live training view (a static copy follows for front ends without widgets)"


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
        self.log = LogBuffer(log_lines, prefix_ranks=len(show_ranks) > 1 or show_ranks != [0])
        self.curves = Curves(ranks, batch_size)
        self.ranks = ranks
        self.parse_rank = min(show_ranks)
        self.started = time.time()
        self.ended: float | None = None  # the elapsed time stops with the cell (a later full copy must agree)
        self.state = "running"
        self.seq = 0
        self.log_lines = log_lines
        self.widget: TrainingView | None = None
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
        self.widget = TrainingView(view_id=uuid.uuid4().hex, plots=self.plots, log_lines=self.log_lines)
        self.widget.on_msg(self._on_front_end_msg)
        display(self.widget)
        self._thread = threading.Thread(target=self._flush_loop, name="jupyter-hvd-live-view", daemon=True)
        self._thread.start()

    # ---- CellView ------------------------------------------------------------------------------------------

    def output(self, rank: int, name: str, text: str) -> None:
        """Output text of a shown rank: into the log; rank 0's finished lines are also read for metrics."""
        self.show()
        with self._lock:
            finished = self.log.feed(rank, name, text)
            if rank == self.parse_rank:
                now = time.time()
                for segment in finished:
                    try:
                        parsed = parse_line(segment)
                        if parsed or parsed.step is not None:
                            self.curves.add_printed(parsed, now)
                    except Exception as exc:  # a line we cannot read must not stop the cell's output
                        self._note(f"a printed line could not be read for metrics ({type(exc).__name__}: {exc})")
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

    def tick(self) -> None:
        """Called by the cell runner while the cell runs: a silent cell gets its view once it runs a while."""
        if self.widget is None and time.time() - self.started >= SHOW_AFTER_S:
            self.show()

    def _note(self, text: str) -> None:
        # Said once per cell, in the log, where the user is looking.
        if not self._noted:
            self._noted = True
            self.log.feed(-1, "stderr", f"[jupyter-hvd] {text}\n")

    def close(self, ok: bool) -> None:
        """The cell ended (ok False: error, interrupt or restart): last update, then the static copy."""
        self._closed = True
        if self.widget is None or self._thread is None:
            return  # a quick silent cell: nothing to show
        self._dirty.set()
        self._thread.join(timeout=2.0)
        with self._lock:
            self.state = "done" if ok else "failed"
            self.ended = time.time()
            self.log.finish()
            update = self._take_update()
        try:
            self._send(update)
            self.widget.updates = self.seq
        except Exception:
            pass  # the front end went away (kernel shutting down): the static copy below still records the cell
        tail = self.log.tail(STATIC_LOG_LINES)
        static = fallback_bundle(self.curves.curves, self.plots, self.status_text(), tail, self.log.total - len(tail))
        display(static, raw=True)

    # ---- status --------------------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """What the status line shows, as numbers (the front end formats them)."""
        c = self.curves
        return {
            "state": self.state,
            "ranks": self.ranks,
            "step": c.step,
            "total": c.total,
            "samples_per_s": c.samples_per_second(),
            "steps_per_s": c.steps_per_second(),
            "elapsed": (self.ended or time.time()) - self.started,
            "eta": c.eta_seconds() if self.state == "running" else None,
            "latest": {k: v for k, v in c.latest.items() if v == v},
            "warning": c.nonfinite,
            "straggler": c.straggler,
        }

    def status_text(self) -> str:
        """The status line as plain text (for the static copy)."""
        s = self.status()
        bits = [{"running": "running", "done": "finished", "failed": "stopped (error or interrupt)"}[s["state"]]]
        bits.append(f"{s['ranks']} ranks")
        if s["step"] is not None:
            bits.append(f"step {s['step']:g}" + (f"/{s['total']}" if s["total"] else ""))
        if s["samples_per_s"]:
            bits.append(f"{s['samples_per_s']:,.0f} samples/s")
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
                return  # the comm is gone; close() still writes the static copy

    def _take_update(self, full: bool = False) -> tuple[dict[str, Any], list[bytes]]:
        """The next message: new points per curve (x and y as float64 buffers), new log lines, the status."""
        curves, buffers = [], []
        chosen = self.curves.take_new(self.plots) if not full else self._all_curves()
        for curve in chosen:
            start = 0 if (full or curve.reset) else curve.sent
            n = len(curve.xs)
            curves.append({"name": curve.name, "start": start, "reset": full or curve.reset, "n": n - start})
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

    def _all_curves(self) -> list[Any]:
        from .curves import plot_matches

        return [c for c in self.curves.curves.values() if any(plot_matches(p, c.name) for p in self.plots)]

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
