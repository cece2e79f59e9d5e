"""The smoothed curve is computed in two languages: the live view's JS (widgets-js/src/smooth.js, fed whole or one
point at a time as the view's series store does) and the static copy's Python (jupyter_hvd/widgets/static_plot.py).
Both run here on the same series, and any difference fails the test.
"""

from __future__ import annotations

import inspect
import json
import math
import random
import shutil
import subprocess
from pathlib import Path

import pytest

from jupyter_hvd.widgets import static_plot

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "widgets-js" / "src"

_rng = random.Random(19)
SERIES: dict[str, list[float]] = {
    "empty": [],
    "one point": [0.7],
    "constant": [2.5] * 20,
    "decreasing loss": [2.0 / (1 + i / 30) for i in range(300)],
    "noisy, 1000 points": [2.0 / (1 + i / 100) + _rng.gauss(0, 0.2) for i in range(1000)],
    "NaN gap": [3.0, 2.0, math.nan, math.nan, 1.5, 1.0],
    "starts with NaN": [math.nan, 4.0, 3.0],
    "only NaN": [math.nan, math.nan],
    "infinities": [1.0, math.inf, 0.5, -math.inf, 0.25],
    "large and negative": [1e300, -1e300, 5e-310, -3.0, 7.0],
}

# Node reads the series (non-finite values as strings: JSON has no NaN), smooths each whole with smooth() and
# point by point through the live view's SeriesStore (in pieces of 3, as updates arrive), and prints them.
NODE = """
const { smooth, SMOOTHING } = await import(process.argv[1]);
const { SeriesStore } = await import(process.argv[2]);
const decode = (v) => (typeof v === "string" ? Number(v) : v);
const encode = (v) => (Number.isFinite(v) ? v : String(v));
const series = JSON.parse(await new Response(process.stdin).text());
const out = { weight: SMOOTHING, whole: {}, incremental: {} };
for (const [name, raw] of Object.entries(series)) {
  const ys = raw.map(decode);
  out.whole[name] = smooth(ys).map(encode);
  const store = new SeriesStore();
  for (let i = 0; i < ys.length; i += 3) {
    const part = ys.slice(i, i + 3);
    store.apply(name, i, false, Float64Array.from(part, (_, k) => i + k), Float64Array.from(part));
  }
  const s = store.series.get(name);
  out.incremental[name] = s ? Array.from(s.sm.subarray(0, s.n), encode) : [];
}
console.log(JSON.stringify(out));
"""


def _encode(v: float) -> float | str:
    return v if math.isfinite(v) else {math.inf: "Infinity", -math.inf: "-Infinity"}.get(v, "NaN")


@pytest.fixture(scope="module")
def js() -> dict:
    """What the live view's JS computes for every series."""
    if not shutil.which("node"):
        pytest.fail("the smoothing check needs node (Node.js 20; scripts/setup.sh expects it)", pytrace=False)
    out = subprocess.run(
        ["node", "--input-type=module", "-e", NODE, (SRC / "smooth.js").as_uri(), (SRC / "series.js").as_uri()],
        input=json.dumps({name: [_encode(y) for y in ys] for name, ys in SERIES.items()}),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _differences(python: list[float], js: list[float | str]) -> list[str]:
    if len(python) != len(js):
        return [f"{len(python)} values in Python, {len(js)} in JS"]
    bad = []
    for i, (p, j) in enumerate(zip(python, js, strict=True)):
        same = _encode(p) == j if isinstance(j, str) or not math.isfinite(p) else math.isclose(p, j, rel_tol=1e-12)
        if not same:
            bad.append(f"point {i}: Python {p!r}, JS {j!r}")
    return bad


def test_the_same_smoothing_weight(js: dict) -> None:
    assert inspect.signature(static_plot.smooth).parameters["weight"].default == js["weight"]


@pytest.mark.parametrize("name", list(SERIES))
def test_python_and_js_smooth_alike(js: dict, name: str) -> None:
    python = static_plot.smooth(SERIES[name])
    for how in ("whole", "incremental"):
        bad = _differences(python, js[how][name])
        assert not bad, f"{name!r}, JS {how}: " + "; ".join(bad[:5])


def test_the_saved_plot_smooths_every_point_before_it_thins_them() -> None:
    """More points than the static SVG draws: its smoothed curve is the live one's at the points it keeps."""
    import re

    from jupyter_hvd.widgets.curves import Curve

    rng = random.Random(7)
    ys = [3.0 * math.exp(-i / 400) + rng.gauss(0, 0.3) for i in range(2000)]
    curve = Curve("loss", "report", xs=[float(i) for i in range(2000)], ys=ys)
    svg = static_plot.curves_svg([curve], "loss")
    assert svg is not None
    raw, smoothed = re.findall(r'points="([^"]*)"', svg)
    kept = raw.split()
    ys_px = [float(p.split(",")[1]) for p in smoothed.split()]
    whole = static_plot.smooth(ys)
    xs, _ = static_plot._thin(curve.xs, whole)
    lo, hi = min(ys), max(ys)
    expected = [static_plot.HEIGHT - 24 - (whole[int(x)] - lo) / (hi - lo) * (static_plot.HEIGHT - 46) for x in xs]
    assert len(kept) == len(ys_px) == len(expected)
    assert max(abs(a - b) for a, b in zip(ys_px, expected, strict=True)) < 0.06  # SVG keeps one decimal
