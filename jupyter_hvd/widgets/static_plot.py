"""What a saved notebook shows where widgets do not render (nbconvert, GitHub, a reopened notebook).

The final curves as an SVG image, the status as a line of text, and the last lines of the log:
an HTML bundle with a plain-text twin, written once when the cell ends.
"""

from __future__ import annotations

import base64
import html
import math
import re

from .curves import Curve, finite, plot_matches

WIDTH, HEIGHT, PAD = 640, 220, 44
COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"]
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def smooth(ys: list[float], weight: float = 0.8) -> list[float]:
    """TensorBoard's debiased exponential moving average (the same the live plot draws)."""
    out, last, n = [], 0.0, 0
    for y in ys:
        if not math.isfinite(y):
            out.append(y)
            continue
        n += 1
        last = last * weight + (1 - weight) * y
        out.append(last / (1 - weight**n))
    return out


def _thin(xs: list[float], ys: list[float], limit: int = 400) -> tuple[list[float], list[float]]:
    if len(xs) <= limit:
        return xs, ys
    step = len(xs) / limit
    idx = sorted({int(i * step) for i in range(limit)} | {len(xs) - 1})
    return [xs[i] for i in idx], [ys[i] for i in idx]


def _fmt(v: float) -> str:
    return f"{v:.4g}"


def curves_svg(curves: list[Curve], title: str) -> str | None:
    """One panel of curves as a standalone SVG document; None when there is nothing finite to draw."""
    pts = [(x, y) for c in curves for x, y in zip(c.xs, c.ys, strict=True) if math.isfinite(y)]
    if not pts:
        return None
    x0, x1 = min(p[0] for p in pts), max(p[0] for p in pts)
    y0, y1 = min(p[1] for p in pts), max(p[1] for p in pts)
    if x1 == x0:
        x1 = x0 + 1
    if y1 == y0:
        y0, y1 = y0 - 0.5, y1 + 0.5

    def sx(x: float) -> float:
        return PAD + (x - x0) / (x1 - x0) * (WIDTH - PAD - 10)

    def sy(y: float) -> float:
        return HEIGHT - 24 - (y - y0) / (y1 - y0) * (HEIGHT - 24 - 22)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="11">',
        '<rect width="100%" height="100%" fill="white"/>',
        f'<text x="{PAD}" y="14" font-weight="bold">{html.escape(title)}</text>',
        f'<line x1="{PAD}" y1="{HEIGHT - 24}" x2="{WIDTH - 10}" y2="{HEIGHT - 24}" stroke="#888"/>',
        f'<line x1="{PAD}" y1="22" x2="{PAD}" y2="{HEIGHT - 24}" stroke="#888"/>',
        f'<text x="{PAD}" y="{HEIGHT - 8}">{_fmt(x0)}</text>',
        f'<text x="{WIDTH - 10}" y="{HEIGHT - 8}" text-anchor="end">{_fmt(x1)}</text>',
        f'<text x="{PAD - 4}" y="{HEIGHT - 24}" text-anchor="end">{_fmt(y0)}</text>',
        f'<text x="{PAD - 4}" y="30" text-anchor="end">{_fmt(y1)}</text>',
    ]
    for i, curve in enumerate(curves):
        colour = COLOURS[i % len(COLOURS)]
        # Smoothed over every point, then thinned: the saved copy's smoothed curve is the live view's.
        xs, ys = _thin(curve.xs, curve.ys)
        _, smoothed = _thin(curve.xs, smooth(curve.ys))
        for values, opacity, width in ((ys, 0.3, 1), (smoothed, 1.0, 1.6)):
            coords = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in zip(xs, values, strict=True) if math.isfinite(y))
            parts.append(
                f'<polyline class="curve" data-metric="{html.escape(curve.name)}" points="{coords}" fill="none" '
                f'stroke="{colour}" stroke-opacity="{opacity}" stroke-width="{width}"/>'
            )
        parts.append(
            f'<text x="{WIDTH - 10}" y="{30 + 14 * i}" text-anchor="end" fill="{colour}">'
            f"{html.escape(curve.name)} {_fmt(curve.ys[-1])}</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


def summary_line(curves: dict[str, Curve], status: str) -> str:
    """`loss 0.123 (min 0.101 at step 900) · acc 0.93 · status`, for text outputs."""
    bits = []
    for curve in curves.values():
        ys = finite(curve.ys)
        if not ys:
            continue
        lo = min(ys)
        at = curve.xs[curve.ys.index(lo)]
        bits.append(f"{curve.name} {_fmt(curve.ys[-1])} (min {_fmt(lo)} at {_fmt(at)}, {len(curve.ys)} points)")
    return " · ".join([*bits, status]) if bits else status


def fallback_bundle(
    curves: dict[str, Curve], patterns: list[str], status: str, log_tail: list[str], dropped: int
) -> dict[str, str]:
    """The final view as text/html (curves as SVG, status, log tail) and text/plain."""
    summary = summary_line(curves, status)
    images = []
    for pattern in patterns:
        chosen = [c for c in curves.values() if plot_matches(pattern, c.name)]
        svg = curves_svg(chosen, pattern)
        if svg is not None:
            data = base64.b64encode(svg.encode()).decode()
            images.append(f'<img alt="{html.escape(pattern)} curve" src="data:image/svg+xml;base64,{data}"/>')
    more = f"[{dropped} earlier lines not kept]\n" if dropped else ""
    log_text = "\n".join(_ANSI.sub("", line) for line in log_tail)
    page = (
        '<div class="jhvd-static">'
        f'<div class="jhvd-static-status"><b>jupyter-hvd</b> · {html.escape(summary)}</div>'
        + "".join(images)
        + (f"<pre>{html.escape(more + log_text)}</pre>" if log_tail else "")
        + "</div>"
    )
    plain = "\n".join([*([more.rstrip()] if more else []), *log_tail, f"[jupyter-hvd] {summary}"])
    return {"text/html": page, "text/plain": plain}
