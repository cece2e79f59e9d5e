"""What a finished cell leaves in the notebook in place of its live widget: one output, no widget.

A bundle of three representations of the same view, and a front end shows the richest it can:
- `application/vnd.jupyter-hvd.view+json`: the curves, status and log as data, which jupyter-hvd's own renderer
  (labextension/src/mime.ts, the live view's code) draws interactively in JupyterLab and Notebook 7, with no kernel;
- `text/html`: the curves as SVG images, the status line and the log's tail, for nbviewer, GitHub and nbconvert;
- `text/plain`: the log's tail and a summary line, for a terminal.

The smoothed curve is TensorBoard's debiased exponential moving average, off below SMOOTH_FROM points: the same
numbers as the live view's (widgets-js/src/smooth.js; tests/test_smoothing.py holds the two to each other).
"""

from __future__ import annotations

import base64
import html
import math
import re
from typing import Any

from .curves import Curve, panels
from .schema import LogMessage, SavedCurve, SavedView, Status

SMOOTHING = 0.6  # TensorBoard's default weight
SMOOTH_FROM = 20  # fewer points than this are drawn as they are: a moving average of a few points only lags
# Words of a metric's name that make it a schedule (set, not measured) or a bounded metric (an accuracy moves in steps
# between 0 and 1): drawn as they are unless the user picks a weight. widgets-js/src/smooth.js AS_IS is the same set.
AS_IS = frozenset(
    "lr learning momentum wd decay warmup temperature beta beta1 beta2 eps epsilon scale "
    "acc accuracy acc1 acc5 top1 top5 precision prec prec1 prec5 recall f1 auc auroc iou miou dice map".split()
)
MIME = "application/vnd.jupyter-hvd.view+json"
VERSION = 1
SAVED_POINTS = 5000  # per curve in the saved data (more are thinned, keeping each stretch's lowest and highest)
SVG_POINTS = 400  # per curve in the SVG image
SAVED_LOG_LINES = 1000
WIDTH, HEIGHT = 720, 250
LEFT, RIGHT, TOP, BOTTOM = 58, 16, 30, 38
COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"]
X_LABELS = {"step": "step", "epoch": "epoch", "samples": "samples", "time": "time (s)"}
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def smooth(ys: list[float], weight: float = SMOOTHING) -> list[float]:
    """TensorBoard's debiased exponential moving average; NaN and infinities stay (a gap) and do not move it."""
    out, last, n = [], 0.0, 0
    for y in ys:
        if not math.isfinite(y):
            out.append(y)
            continue
        n += 1
        last = last * weight + (1 - weight) * y
        out.append(last / (1 - weight**n))
    return out


def smoothed_by_default(name: str) -> bool:
    """Whether the curve of metric `name` gets the automatic smoothing: not a schedule (`lr`), not bounded (`acc`)."""
    return not any(word in AS_IS for word in re.split(r"[^a-z0-9]+", name.lower()))


def smoothing_for(points: int, chosen: float | None = None, name: str = "") -> float:
    """The weight a curve of `points` points of metric `name` is smoothed with: the user's choice (the view's
    slider), else SMOOTHING from SMOOTH_FROM points on for a metric smoothed by default, else none."""
    if chosen is not None:
        return min(max(float(chosen), 0.0), 0.999)
    return SMOOTHING if points >= SMOOTH_FROM and smoothed_by_default(name) else 0.0


def kept(ys: list[float], limit: int) -> list[int]:
    """The indices of at most about `limit` points: in each stretch the lowest and the highest (a spike stays a
    spike) and its first and last NaN or Inf (a gap stays a gap), and always the first and the last point (the last
    value drawn is the last value reported)."""
    n = len(ys)
    if n <= limit:
        return list(range(n))
    buckets = max(1, limit // 2)
    keep = {0, n - 1}
    for b in range(buckets):
        lo, hi = b * n // buckets, (b + 1) * n // buckets
        seg = ys[lo:hi]
        if seg and math.isfinite(sum(seg)):  # the common stretch, in C: every value finite (a huge sum may say not)
            keep.update((lo + seg.index(min(seg)), lo + seg.index(max(seg))))
            continue
        idx = [i for i in range(lo, hi) if math.isfinite(ys[i])]
        gaps = [i for i in range(lo, hi) if not math.isfinite(ys[i])]
        if gaps:
            keep.update((gaps[0], gaps[-1]))
        if not idx:
            continue
        keep.add(min(idx, key=lambda i: ys[i]))
        keep.add(max(idx, key=lambda i: ys[i]))
    return sorted(keep)


def nice_ticks(lo: float, hi: float, count: int = 5, integer: bool = False) -> list[float]:
    """About `count` round values between lo and hi (1, 2 or 5 times a power of ten; whole numbers if `integer`)."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo] if math.isfinite(lo) else []
    raw = (hi - lo) / max(1, count)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    if integer:
        step = max(1.0, round(step))
    first = math.ceil(lo / step) * step
    ticks = []
    v = first
    while v <= hi + step * 1e-9:
        ticks.append(round(v, 12))
        v += step
    return ticks


def _fmt(v: float) -> str:
    """Four significant digits, or an exponent for tiny and huge values (as the live view's formatNumber)."""
    if not math.isfinite(v):
        return str(v)
    a = abs(v)
    if a != 0 and (a < 1e-3 or a >= 1e5):
        return f"{v:.2e}".replace("e-0", "e-").replace("e+0", "e+")
    return f"{float(f'{v:.4g}'):g}"


def _tick(v: float, integer: bool) -> str:
    if integer and float(v).is_integer():
        return f"{int(v):,}"
    return _fmt(v)


def curve_label(curve: Curve, ranks: list[int]) -> str:
    """`loss`, or `loss · rank 1` where several ranks' curves are drawn."""
    return f"{curve.name} · rank {curve.rank}" if len(ranks) > 1 else curve.name


def panel_svg(
    title: str, curves: list[Curve], ranks: list[int], weight: float | None = None, log_y: bool = False
) -> str | None:
    """One panel as a standalone SVG document: raw values as the lines, the smoothed trend under them, axes with
    round ticks (whole numbers for steps and epochs) and the x axis named; None when nothing finite is to be drawn.
    A log scale draws the values above 0 and says in the title how many it left out (as the live view does)."""
    extents = [e for e in (_extent(c.ys) for c in curves) if e is not None]
    if not extents:
        return None
    scale = ""
    if log_y:  # the y range is the raw values above 0 (the smoothed trend of a loss that reached 0 tends to 1e-25)
        positive = [y for c in curves for y in c.ys if 0 < y < math.inf]
        left = sum(1 for c in curves for y in c.ys if -math.inf < y <= 0)
        if not positive:
            scale = " (log scale: no value above 0, drawn linear)"
        elif left:
            scale = f" (log scale; {left:,} value{'' if left == 1 else 's'} ≤ 0 left out)"
        else:
            scale = " (log scale)"
        log_y = bool(positive)
    kind = curves[0].x_kind
    integer = kind in ("step", "epoch", "samples")
    x0, x1 = min(min(c.xs) for c in curves if c.xs), max(max(c.xs) for c in curves if c.xs)
    if log_y:
        y0, y1 = math.log10(min(positive)), math.log10(max(positive))
    else:
        y0, y1 = min(e[0] for e in extents), max(e[1] for e in extents)
    if x1 == x0:
        x0, x1 = x0 - 0.5, x1 + 0.5
    if y1 == y0:
        y0, y1 = y0 - 0.5, y1 + 0.5
    pad = (y1 - y0) * 0.05
    y0, y1 = y0 - pad, y1 + pad
    right, bottom = WIDTH - RIGHT, HEIGHT - BOTTOM

    def sx(x: float) -> float:
        return LEFT + (x - x0) / (x1 - x0) * (right - LEFT)

    def sy(y: float) -> float:
        v = math.log10(y) if log_y else y
        return bottom - (v - y0) / (y1 - y0) * (bottom - TOP)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" '
        'font-family="sans-serif" font-size="11" fill="#444">',
        '<rect width="100%" height="100%" fill="white"/>',
        f'<clipPath id="plot"><rect x="{LEFT}" y="{TOP}" width="{right - LEFT}" height="{bottom - TOP}"/></clipPath>',
        f'<text x="{LEFT}" y="16" font-weight="bold" font-size="12" fill="#222">{html.escape(title + scale)}</text>',
    ]
    y_ticks = [t for t in range(math.floor(y0), math.ceil(y1) + 1) if y0 <= t <= y1] if log_y else nice_ticks(y0, y1, 4)
    for t in y_ticks:
        py = bottom - (t - y0) / (y1 - y0) * (bottom - TOP)
        label = _fmt(10**t) if log_y else _fmt(t)
        parts.append(f'<line x1="{LEFT}" y1="{py:.1f}" x2="{right}" y2="{py:.1f}" stroke="#e6e6e6"/>')
        parts.append(f'<text x="{LEFT - 6}" y="{py + 4:.1f}" text-anchor="end">{label}</text>')
    for t in nice_ticks(x0, x1, 8, integer):
        px = sx(t)
        parts.append(f'<line x1="{px:.1f}" y1="{TOP}" x2="{px:.1f}" y2="{bottom}" stroke="#f0f0f0"/>')
        parts.append(f'<text x="{px:.1f}" y="{bottom + 15}" text-anchor="middle">{_tick(t, integer)}</text>')
    parts.append(f'<line x1="{LEFT}" y1="{bottom}" x2="{right}" y2="{bottom}" stroke="#999"/>')
    parts.append(
        f'<text x="{(LEFT + right) / 2:.0f}" y="{HEIGHT - 6}" text-anchor="middle" fill="#666">'
        f"{X_LABELS.get(kind, kind)}</text>"
    )
    legend_x = right
    for i, curve in reversed(list(enumerate(curves))):
        colour = COLOURS[i % len(COLOURS)]
        w = smoothing_for(len(curve.ys), weight, curve.name)
        idx = kept(curve.ys, SVG_POINTS)
        xs = [curve.xs[i] for i in idx]
        layers = [([curve.ys[i] for i in idx], 1.0, 1.6)]
        if w > 0:  # smoothed over every point, then thinned: the saved image's trend is the live view's
            trend = curve.trend.values(curve.ys, w)
            layers.insert(0, ([trend[i] for i in idx], 0.35, 3.5))
        for values, opacity, width in layers:
            coords = " ".join(
                f"{sx(x):.1f},{sy(y):.1f}"
                for x, y in zip(xs, values, strict=True)
                if math.isfinite(y) and (y > 0 or not log_y)
            )
            role = "raw" if opacity == 1.0 else "smoothed"
            parts.append(
                f'<polyline class="curve {role}" data-metric="{html.escape(curve.key)}" points="{coords}" fill="none" '
                f'stroke="{colour}" stroke-opacity="{opacity}" stroke-width="{width}" stroke-linejoin="round" '
                'clip-path="url(#plot)"/>'
            )
        last = _last_finite(curve.ys)
        text = f"{curve_label(curve, ranks)} {_fmt(last) if last is not None else '–'}"
        parts.append(
            f'<text x="{legend_x}" y="16" text-anchor="end" fill="{colour}" font-weight="bold">'
            f"{html.escape(text)}</text>"
        )
        legend_x -= 7 * len(text) + 18
    parts.append("</svg>")
    return "".join(parts)


def _extent(values: list[float]) -> tuple[float, float] | None:
    """The lowest and highest finite value (None: none), in C where every value is finite (a long run's copy)."""
    if values and math.isfinite(sum(values)):
        return min(values), max(values)
    ok = [v for v in values if math.isfinite(v)]
    return (min(ok), max(ok)) if ok else None


def _last_finite(values: list[float]) -> float | None:
    """The last value that can be drawn (the legend's), looking back from the end."""
    return next((v for v in reversed(values) if math.isfinite(v)), None)


def summary_line(curves: list[Curve], status: str, ranks: list[int]) -> str:
    """`loss 0.123 (min 0.101 at step 900, 901 points) · status`, for text outputs."""
    bits = []
    for curve in curves:
        extent = _extent(curve.ys)
        if extent is None:
            continue
        lo = extent[0]
        at = curve.xs[curve.ys.index(lo)]
        where = f"{X_LABELS.get(curve.x_kind, curve.x_kind)} {_fmt(at)}"
        bits.append(
            f"{curve_label(curve, ranks)} {_fmt(curve.ys[-1])} (min {_fmt(lo)} at {where}, {len(curve.ys)} points)"
        )
    return " · ".join([*bits, status]) if bits else status


def _json_number(v: float) -> float | None:
    return v if math.isfinite(v) else None  # JSON has no NaN: a gap is null


def view_data(
    curves: list[Curve],
    patterns: list[str],
    status: Status,
    status_text: str,
    log: LogMessage,
    ranks: list[int],
    smoothing: float | None = None,
    log_y: bool = False,
    view_id: str | None = None,
) -> SavedView:
    """The saved view as JSON (the MIME type's data): what labextension/src/mime.ts draws (widgets-js/src/saved.js
    and store.js Store.fromSaved read it). Fields: version; plots (the --plot patterns); ranks (the shown ranks);
    smoothing (null: automatic) and log_y (the user's choices); status (live_view.LiveView.status() and its text);
    curves (name, rank, x_kind, x, y with null for a gap, points: how many before thinning); log (append: the last
    [text, stream, rank] lines, partials, total); view_id: the live widget's view while the cell runs (the renderer
    draws the widget's data while it is on the page), null once it ended."""
    saved: list[SavedCurve] = []
    for c in curves:
        idx = kept(c.ys, SAVED_POINTS)
        saved.append(
            {
                "name": c.name,
                "rank": c.rank,
                "x_kind": c.x_kind,
                "x": [c.xs[i] for i in idx],
                "y": [_json_number(c.ys[i]) for i in idx],
                "points": len(c.xs),
            }
        )
    return {
        "version": VERSION,
        "plots": patterns,
        "ranks": ranks,
        "smoothing": smoothing,
        "log_y": log_y,
        "status": {**status, "text": status_text},
        "curves": saved,
        "log": log,
        "view_id": view_id,
    }


def saved_bundle(
    curves: list[Curve],
    patterns: list[str],
    status: Status,
    status_text: str,
    log: LogMessage,
    log_tail: list[str],
    dropped: int,
    ranks: list[int],
    smoothing: float | None = None,
    log_y: bool = False,
    view_id: str | None = None,
) -> dict[str, Any]:
    """A cell's output, mid-run or finished: the view as data for jupyter-hvd's renderer, and HTML and text twins."""
    summary = summary_line(curves, status_text, ranks)
    images = []
    for title, names in panels(list(dict.fromkeys(c.name for c in curves)), patterns):
        chosen = [c for c in curves if c.name in names]
        svg = panel_svg(title, chosen, ranks, smoothing, log_y) if chosen else None
        if svg is not None:
            data = base64.b64encode(svg.encode()).decode()
            images.append(
                f'<img alt="{html.escape(title)} curve" style="max-width: 100%" '
                f'src="data:image/svg+xml;base64,{data}"/>'
            )
    more = f"[{dropped} earlier lines not kept]\n" if dropped else ""
    log_text = "\n".join(_ANSI.sub("", line) for line in log_tail)
    page = (
        '<div class="jhvd-static">'
        f'<div class="jhvd-static-status"><b>jupyter-hvd</b> · {html.escape(summary)}</div>'
        + "".join(f"<div>{img}</div>" for img in images)
        + (f'<pre style="white-space: pre-wrap">{html.escape(more + log_text)}</pre>' if log_tail else "")
        + "</div>"
    )
    plain = "\n".join([*([more.rstrip()] if more else []), *log_tail, f"[jupyter-hvd] {summary}"])
    return {
        MIME: view_data(curves, patterns, status, status_text, log, ranks, smoothing, log_y, view_id),
        "text/html": page,
        "text/plain": plain,
    }
