"""The live view's numbers: one curve per metric and rank, and the status line's step, samples/s and ETA.

Pure logic (no widgets). Points come from three sources, weakest first: printed lines (parsed), progress bars
(engine/cell/progress.py: tqdm's position and set_postfix values) and `report()`. For any one metric of a rank the
strongest source seen wins: its first point replaces the curve read from a weaker one, whose later points are
ignored. The same holds for the status line's step. New points are handed out once by `take_new()`.

Each curve's x is what the training said it is, and named so: the step, else the epoch, else the samples seen, else
the seconds since the cell started.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from ..metrics import ParsedLine

RATE_WINDOW_S = 10.0  # samples/s and steps/s are measured over this much recent time
# Steps that arrived closer together than this say how the output was batched on its way, not how fast the ranks
# step (20 printed steps in one flush made "16,047 steps/s"): no rate is shown until the steps span this long.
MIN_RATE_SPAN_S = 1.0
SOURCES = {"print": 0, "progress": 1, "report": 2}  # what wins over what
SPLITS = ("train", "training", "val", "valid", "validation", "test", "eval")  # a family's members: val_loss is a loss


class Trend:
    """A curve's smoothed values (static_plot.smooth, TensorBoard's debiased moving average), kept and extended as the
    curve grows: each saved copy of a running cell's view costs its new points, not the whole run. Shared by a curve
    and the copies the saved views take of it (their values are a prefix of its), hence the lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._weight: float | None = None
        self._ema = 0.0
        self._count = 0  # finite values seen: the debiasing divides by 1 - weight ** count
        self._values: list[float] = []

    def values(self, ys: list[float], weight: float) -> list[float]:
        """The smoothed values of `ys` (the curve's values, or a prefix of them) at `weight`."""
        with self._lock:
            if weight != self._weight:  # the user moved the slider: from the start
                self._weight, self._ema, self._count, self._values = weight, 0.0, 0, []
            for y in ys[len(self._values) :]:
                if math.isfinite(y):
                    self._count += 1
                    self._ema = self._ema * weight + (1 - weight) * y
                    self._values.append(self._ema / (1 - weight**self._count))
                else:
                    self._values.append(y)  # a gap stays a gap and does not move the average
            return self._values[: len(ys)]


@dataclass
class Curve:
    """One metric of one rank: its points, x and y, what x is, and how many the view already has."""

    name: str
    source: str  # a key of SOURCES
    rank: int = 0
    x_kind: str = "step"  # step | epoch | samples | time
    xs: list[float] = field(default_factory=list)
    ys: list[float] = field(default_factory=list)
    sent: int = 0
    reset: bool = False  # the view must drop what it has of this curve before appending
    x_offset: float = 0.0  # printed steps that restart each epoch are continued, so x keeps increasing
    last_raw_x: float | None = None
    trend: Trend = field(default_factory=Trend, compare=False, repr=False)  # its smoothed values, as it grows

    def prefix(self, n: int) -> Curve:
        """Its first `n` points, as a curve of their own that shares its smoothed values (a saved copy's)."""
        return Curve(self.name, self.source, self.rank, self.x_kind, self.xs[:n], self.ys[:n], trend=self.trend)

    @property
    def key(self) -> str:
        """How the view names the curve: `loss`, or `loss@1` for rank 1's."""
        return f"{self.name}@{self.rank}"

    def add(self, x: float, y: float) -> None:
        if self.source == "print" and self.x_kind == "step":
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


def family(name: str) -> str:
    """The panel a metric is drawn in when every metric is plotted: `val_loss` and `loss` in `loss`, `lr` alone.
    widgets-js/src/series.js has the same function (tests/test_smoothing.py holds them to the same answers)."""
    head, _, rest = name.partition("_")
    return rest if rest and head in SPLITS else name


def panels(names: list[str], patterns: list[str]) -> list[tuple[str, list[str]]]:
    """The plot panels and the metrics in each, in the order metrics first came: one per pattern of `--plot`, or
    with `--plot all` one per family."""
    if patterns == ["all"]:
        order: dict[str, list[str]] = {}
        for name in names:
            order.setdefault(family(name), []).append(name)
        return list(order.items())
    return [(p, [n for n in names if plot_matches(p, n)]) for p in patterns]


class Curves:
    """Every metric of one cell, and the measures the status line shows.

    `plot_ranks`: whose metrics become curves (the ranks whose output the cell shows); the first of them sets the
    status line's step. Every rank's `samples` count towards samples/s.
    """

    def __init__(self, ranks: int, batch_size: int | None = None, plot_ranks: list[int] | None = None) -> None:
        self.ranks = ranks
        self.batch_size = batch_size
        self.plot_ranks = plot_ranks or [0]
        self.lead = min(self.plot_ranks)  # the rank whose step, total and ETA the status line shows
        self.started = time.time()
        self.curves: dict[str, Curve] = {}
        self.latest: dict[str, float] = {}
        self.step: float | None = None
        self.total: int | None = None
        self.desc: str | None = None  # the progress bar's description ("epoch 3")
        self.epoch: float | None = None  # the last epoch the status rank printed (the status line's, without a step)
        self.counted_steps: int | None = None  # the status rank's optimizer steps, as the pace timing counts them
        self._samples: dict[int, deque[tuple[float, int]]] = {}
        self._seen_samples: dict[int, float] = {}
        self._steps: deque[tuple[float, float]] = deque()
        self._step_source = -1  # the strongest source that gave the status line a step
        self._position: tuple[str, float] | None = None  # the last (kind, x) a printed line said, for lines without
        self.changed = False
        self.nonfinite: str | None = None  # where a metric first became NaN or Inf (the cell runner says; a gap)
        self.straggler: str | None = None  # the rank that sets the pace (kernel/cell/straggler.py)

    # ---- intake --------------------------------------------------------------------------------------------

    def add_reports(self, rank: int, batch: Any) -> None:
        """Records published on `rank` by `report()` and progress bars: dicts of t, m, and maybe step, samples,
        total, desc, and auto (a progress bar's, weaker than report()'s)."""
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
                self._seen_samples[rank] = self._seen_samples.get(rank, 0.0) + int(record["samples"])
            pace = record.get("pace")
            if rank == self.lead and isinstance(pace, dict) and isinstance(pace.get("cell_steps"), int):
                self.counted_steps = pace["cell_steps"]  # what the sidebar shows where no step was printed
            if rank not in self.plot_ranks or pace is not None:
                continue  # other ranks count towards samples/s only
            source = "progress" if record.get("auto") else "report"
            step = record.get("step")
            if step is not None:
                x, kind = float(step), "step"
            elif "samples" in record:
                x, kind = self._seen_samples[rank], "samples"
            else:
                x, kind = t - self.started, "time"
            for name, value in (record.get("m") or {}).items():
                self._point(rank, str(name), source, kind, x, float(value))
            if rank == self.lead:
                if "total" in record and SOURCES[source] >= self._step_source:
                    self.total = int(record["total"])
                if record.get("desc"):
                    self.desc = str(record["desc"])
                if step is not None:
                    self._at_step(t, float(step), source)
        self.changed = True

    def add_printed(self, parsed: ParsedLine, now: float | None = None, rank: int | None = None) -> None:
        """Metrics read from a line that `rank` printed (default: the status line's rank)."""
        rank = self.lead if rank is None else rank
        now = now if now is not None else time.time()
        if parsed.step is not None:
            position: tuple[str, float] | None = ("step", parsed.step)
        elif parsed.epoch is not None:
            position = ("epoch", parsed.epoch)
        else:
            position = None
        if rank == self.lead:
            if position is not None:
                self._position = position
            if parsed.epoch is not None:
                self.epoch = parsed.epoch
            if parsed.total is not None and self.total is None:
                self.total = parsed.total
            if parsed.step is not None:
                self._at_step(now, parsed.step, "print")
        if not parsed:
            return
        kind, x = position or self._position or ("time", now - self.started)
        for name, value in parsed.values.items():
            self._point(rank, name, "print", kind, x, value)
        self.changed = True

    def _point(self, rank: int, name: str, source: str, kind: str, x: float, value: float) -> None:
        key = f"{name}@{rank}"
        curve = self.curves.get(key)
        if curve is not None and SOURCES[curve.source] > SOURCES[source]:
            return  # a stronger source gives this metric
        if curve is None or curve.source != source:
            curve = self.curves[key] = Curve(name, source, rank, kind, reset=curve is not None)
        curve.add(x, value)
        if rank == self.lead:
            self.latest[name] = value

    def _at_step(self, t: float, step: float, source: str) -> None:
        strength = SOURCES[source]
        if strength < self._step_source:
            return  # report() gives the steps: printed or bar positions no longer move the status line
        if strength > self._step_source:
            self._step_source = strength
            self._steps.clear()
        if self._steps and step < self._steps[-1][1]:
            self._steps.clear()  # the step count restarted (a new epoch's batch index): rates start over
        self.step = step
        self._steps.append((t, step))
        _trim(self._steps, t)

    # ---- what the view needs -------------------------------------------------------------------------------

    def take_new(self, patterns: list[str]) -> list[Curve]:
        """Curves with points the view has not received yet (only those `patterns` plot)."""
        return [c for c in self.plotted(patterns) if c.sent < len(c.xs) or c.reset]

    def plotted(self, patterns: list[str]) -> list[Curve]:
        """The curves `patterns` plot (`all`: every curve)."""
        if not patterns:
            return []
        if patterns == ["all"]:
            return list(self.curves.values())
        return [c for c in self.curves.values() if any(plot_matches(p, c.name) for p in patterns)]

    def samples_per_second(self) -> float | None:
        """Samples/s of all ranks together: from `report(samples=...)`, else steps/s x declared batch x ranks."""
        rates = [_rate(w) for w in self._samples.values() if len(w) >= 2 and _span(w) >= MIN_RATE_SPAN_S]
        if rates:
            return sum(rates)
        steps = self.steps_per_second()
        if steps is not None and self.batch_size:
            return steps * self.batch_size * self.ranks
        return None

    def steps_per_second(self) -> float | None:
        """The status rank's recent steps per second, or None before steps were seen over MIN_RATE_SPAN_S."""
        if len(self._steps) < 2 or _span(self._steps) < MIN_RATE_SPAN_S:
            return None
        (t0, s0), (t1, s1) = self._steps[0], self._steps[-1]
        return (s1 - s0) / (t1 - t0)

    def eta_seconds(self) -> float | None:
        """Time left until `total` steps, where the total and a step rate are known."""
        rate = self.steps_per_second()
        if self.total is None or self.step is None or not rate or rate <= 0:
            return None
        return max(0.0, (self.total - self.step) / rate)


def _trim(window: deque[tuple[float, Any]], now: float) -> None:
    while len(window) > 2 and window[0][0] < now - RATE_WINDOW_S:
        window.popleft()


def _span(window: deque[tuple[float, Any]]) -> float:
    return window[-1][0] - window[0][0]


def _rate(window: deque[tuple[float, int]]) -> float:
    # The first record's samples were processed before the window started.
    span = window[-1][0] - window[0][0]
    done = sum(n for _, n in list(window)[1:])
    return done / span if span > 0 else 0.0


def finite(values: list[float]) -> list[float]:
    """The values that can be drawn (NaN and infinities are left out of plots and summaries)."""
    return [v for v in values if math.isfinite(v)]
