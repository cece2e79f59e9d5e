"""The live view's numbers: one curve per metric, and the status line's step, samples/s and ETA.

Pure logic (no widgets). Curves come from `report()` (explicit) or from printed lines (parsed); for any one
metric, explicit reports win: the first report of `loss` replaces the `loss` curve parsed so far, and
printed `loss` values are ignored from then on. New points are handed out once by `take_new()`.
"""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from ..metrics import ParsedLine

RATE_WINDOW_S = 10.0  # samples/s and steps/s are measured over this much recent time


@dataclass
class Curve:
    """One metric's points, x (step, epoch or call count) and y, with how many the view already has."""

    name: str
    source: str  # "report" | "print"
    xs: list[float] = field(default_factory=list)
    ys: list[float] = field(default_factory=list)
    sent: int = 0
    reset: bool = False  # the view must drop what it has of this curve before appending
    x_offset: float = 0.0  # printed steps that restart each epoch are continued, so x keeps increasing
    last_raw_x: float | None = None

    def add(self, x: float | None, y: float) -> None:
        if x is None:
            x = (self.xs[-1] + 1) if self.xs else 0.0
        elif self.source == "print":
            if self.last_raw_x is not None and x < self.last_raw_x and self.xs:
                self.x_offset = self.xs[-1]
            self.last_raw_x = x
            x += self.x_offset
        self.xs.append(float(x))
        self.ys.append(float(y))


def plot_matches(pattern: str, name: str) -> bool:
    """Whether metric `name` belongs in the plot asked for by `pattern` (`loss` matches `val_loss`)."""
    pattern = pattern.strip().lower()
    return name == pattern or any(word.startswith(pattern) for word in name.split("_"))


class Curves:
    """Every metric of one cell, and the measures the status line shows."""

    def __init__(self, ranks: int, batch_size: int | None = None) -> None:
        self.ranks = ranks
        self.batch_size = batch_size
        self.curves: dict[str, Curve] = {}
        self.latest: dict[str, float] = {}
        self.step: float | None = None
        self.total: int | None = None
        self._samples: dict[int, deque[tuple[float, int]]] = {}
        self._steps: deque[tuple[float, float]] = deque()
        self.steps_reported = False  # once report() gives steps, printed step numbers no longer move the status
        self.changed = False
        self.nonfinite: str | None = None  # where a metric first became NaN or Inf (said once; the plot has a gap)
        self.straggler: str | None = None  # the rank that sets the pace, named by the cell runner (kernel/straggler.py)

    # ---- intake --------------------------------------------------------------------------------------------

    def add_reports(self, rank: int, batch: Any) -> None:
        """Records published by `report()` on `rank` (a list of dicts: t, m, and maybe step, samples, total)."""
        if not isinstance(batch, list):
            return
        for record in batch:
            if not isinstance(record, dict):
                continue
            t = float(record.get("t", time.time()))
            if "samples" in record:
                window = self._samples.setdefault(rank, deque())
                window.append((t, int(record["samples"])))
                _trim(window, t)
            if rank != 0:
                continue  # the plot shows rank 0, as the log does; other ranks count towards samples/s
            step = record.get("step")
            if "total" in record:
                self.total = int(record["total"])
            for name, value in record.get("m", {}).items():
                curve = self.curves.get(name)
                if curve is None or curve.source != "report":
                    curve = self.curves[name] = Curve(name, "report", reset=curve is not None)
                curve.add(step, value)
                self.latest[name] = value
                self._check_finite(name, value, step, rank)
            if step is not None:
                self.steps_reported = True
                self._at_step(t, float(step))
        self.changed = True

    def add_printed(self, parsed: ParsedLine, now: float | None = None) -> None:
        """Metrics read from a printed line; ignored for metrics that `report()` already sends."""
        if not parsed:
            if parsed.step is not None and not self.steps_reported:
                self._at_step(now if now is not None else time.time(), parsed.step)
            return
        x = parsed.step if parsed.step is not None else parsed.epoch
        if parsed.total is not None and self.total is None:
            self.total = parsed.total
        for name, value in parsed.values.items():
            curve = self.curves.get(name)
            if curve is not None and curve.source == "report":
                continue
            if curve is None:
                curve = self.curves[name] = Curve(name, "print")
            curve.add(x, value)
            self.latest[name] = value
            self._check_finite(name, value, x, None)
        if parsed.step is not None and not self.steps_reported:
            self._at_step(now if now is not None else time.time(), parsed.step)
        self.changed = True

    def _check_finite(self, name: str, value: float, step: float | None, rank: int | None) -> None:
        if self.nonfinite is None and not math.isfinite(value):
            where = f" at step {step:g}" if step is not None else ""
            self.nonfinite = f"{name} became {value}{where}" + (f" on rank {rank}" if rank is not None else "")

    def _at_step(self, t: float, step: float) -> None:
        if self._steps and step < self._steps[-1][1]:
            self._steps.clear()  # the step count restarted (a new epoch's batch index): rates start over
        self.step = step
        self._steps.append((t, step))
        _trim(self._steps, t)

    # ---- what the view needs -------------------------------------------------------------------------------

    def take_new(self, patterns: list[str]) -> list[Curve]:
        """Curves with points the view has not received yet (only those `patterns` plot)."""
        out = []
        for curve in self.curves.values():
            if not any(plot_matches(p, curve.name) for p in patterns):
                continue
            if curve.sent < len(curve.xs) or curve.reset:
                out.append(curve)
        return out

    def samples_per_second(self) -> float | None:
        """Samples/s of all ranks together: from `report(samples=...)`, else steps/s x declared batch x ranks."""
        rates = [_rate(w) for w in self._samples.values() if len(w) >= 2]
        if rates:
            return sum(rates)
        steps = self.steps_per_second()
        if steps is not None and self.batch_size:
            return steps * self.batch_size * self.ranks
        return None

    def steps_per_second(self) -> float | None:
        """Rank 0's recent steps per second, or None before two steps were seen."""
        if len(self._steps) < 2:
            return None
        (t0, s0), (t1, s1) = self._steps[0], self._steps[-1]
        return (s1 - s0) / (t1 - t0) if t1 > t0 else None

    def eta_seconds(self) -> float | None:
        """Time left until `total` steps, where the total and a step rate are known."""
        rate = self.steps_per_second()
        if self.total is None or self.step is None or not rate or rate <= 0:
            return None
        return max(0.0, (self.total - self.step) / rate)


def _trim(window: deque[tuple[float, Any]], now: float) -> None:
    while len(window) > 2 and window[0][0] < now - RATE_WINDOW_S:
        window.popleft()


def _rate(window: deque[tuple[float, int]]) -> float:
    # The first record's samples were processed before the window started.
    span = window[-1][0] - window[0][0]
    done = sum(n for _, n in list(window)[1:])
    return done / span if span > 0 else 0.0


def finite(values: list[float]) -> list[float]:
    """The values that can be drawn (NaN and infinities are left out of plots and summaries)."""
    return [v for v in values if math.isfinite(v)]
