"""What the live view computes in two languages is held to one definition: the smoothed curve (the live view's JS,
widgets-js/src/smooth.js and series.js, fed whole or one point at a time, at any weight the slider sets; the finished
view's Python, jupyter_hvd/widgets/static_plot.py), the rule that turns it on (from SMOOTH_FROM points), and which
panel a metric is drawn in (series.js family()/panels(); curves.py). Both run here on the same inputs, and any
difference fails the test.
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

from jupyter_hvd.widgets import curves, static_plot

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

WEIGHTS = [0.6, 0.3, 0.95]  # the default, and what the slider may set
POINTS = [0, 1, 19, 20, 21, 500]
NAMES = ["loss", "val_loss", "acc", "test_accuracy", "lr", "learning_rate", "train_loss", "eval_f1", "val", "img_sec"]
# Names the automatic smoothing leaves as they are (schedules, bounded metrics), and names it smooths.
AS_IS = ["lr", "learning_rate", "lr/pg0", "momentum", "weight_decay", "loss_scale", "acc", "val_accuracy", "top1",
         "Acc@5", "precision", "recall", "eval_f1", "auc", "miou", "mAP"]  # fmt: skip
SMOOTHED = ["loss", "val_loss", "train_loss", "grad_norm", "perplexity", "img_sec", "reward", "accumulated_loss"]
PATTERNS = [["all"], ["loss"], ["loss", "acc"], ["acc", "lr", "nothing"]]

# Node reads the series (non-finite values as strings: JSON has no NaN), smooths each whole with smooth() and
# point by point through the live view's SeriesStore (in pieces of 3, as updates arrive) at each weight, and says
# its smoothing rule and its panels; it prints them all.
NODE = """
const { smooth, smoothingFor, SMOOTHING, SMOOTH_FROM } = await import(process.argv[1]);
const { SeriesStore, family, panels } = await import(process.argv[2]);
const decode = (v) => (typeof v === "string" ? Number(v) : v);
const encode = (v) => (Number.isFinite(v) ? v : String(v));
const input = JSON.parse(await new Response(process.stdin).text());
const out = { weight: SMOOTHING, from: SMOOTH_FROM, whole: {}, incremental: {} };
for (const w of input.weights) {
  out.whole[w] = {};
  out.incremental[w] = {};
  for (const [name, raw] of Object.entries(input.series)) {
    const ys = raw.map(decode);
    out.whole[w][name] = smooth(ys, w).map(encode);
    const store = new SeriesStore();
    for (let i = 0; i < ys.length; i += 3) {
      const part = ys.slice(i, i + 3);
      store.apply(name, i, false, Float64Array.from(part, (_, k) => i + k), Float64Array.from(part));
      store.smoothed(store.series.get(name), w);
    }
    const s = store.series.get(name);
    out.incremental[w][name] = s ? Array.from(store.smoothed(s, w).subarray(0, s.n), encode) : [];
  }
}
out.rule = input.points.map((n) => [smoothingFor(n), smoothingFor(n, 0.9), smoothingFor(n, 0)]);
out.byName = input.byName.map((name) => [smoothingFor(500, null, name), smoothingFor(500, 0.9, name)]);
out.families = input.names.map(family);
out.panels = input.patterns.map((p) => panels(input.names, p));
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
        input=json.dumps(
            {
                "series": {name: [_encode(y) for y in ys] for name, ys in SERIES.items()},
                "weights": WEIGHTS,
                "points": POINTS,
                "names": NAMES,
                "byName": AS_IS + SMOOTHED,
                "patterns": PATTERNS,
            }
        ),
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


def test_the_same_smoothing_weight_and_rule(js: dict) -> None:
    assert inspect.signature(static_plot.smooth).parameters["weight"].default == js["weight"] == static_plot.SMOOTHING
    assert js["from"] == static_plot.SMOOTH_FROM
    python = [
        [static_plot.smoothing_for(n), static_plot.smoothing_for(n, 0.9), static_plot.smoothing_for(n, 0)]
        for n in POINTS
    ]
    assert python == js["rule"]


def test_schedules_and_bounded_metrics_are_drawn_as_they_are_unless_the_user_asks(js: dict) -> None:
    """The learning rate is set, not measured, and an accuracy moves in steps: neither gets the automatic smoothing;
    a weight the user picks applies to them too. The same answers in Python and JS."""
    python = [
        [static_plot.smoothing_for(500, None, n), static_plot.smoothing_for(500, 0.9, n)] for n in AS_IS + SMOOTHED
    ]
    assert python == [[0.0, 0.9]] * len(AS_IS) + [[static_plot.SMOOTHING, 0.9]] * len(SMOOTHED)
    assert python == js["byName"]


@pytest.mark.parametrize("weight", WEIGHTS)
@pytest.mark.parametrize("name", list(SERIES))
def test_python_and_js_smooth_alike(js: dict, name: str, weight: float) -> None:
    python = static_plot.smooth(SERIES[name], weight)
    for how in ("whole", "incremental"):
        bad = _differences(python, js[how][str(weight)][name])
        assert not bad, f"{name!r} at {weight}, JS {how}: " + "; ".join(bad[:5])


def test_python_and_js_draw_a_metric_in_the_same_panel(js: dict) -> None:
    assert [curves.family(n) for n in NAMES] == js["families"]
    assert [[list(p) for p in curves.panels(NAMES, patterns)] for patterns in PATTERNS] == js["panels"]


def test_the_saved_plot_smooths_every_point_before_it_thins_them() -> None:
    """More points than the static SVG draws: its smoothed curve is the live one's at the points it keeps."""
    import re

    from jupyter_hvd.widgets.curves import Curve

    rng = random.Random(7)
    ys = [3.0 * math.exp(-i / 400) + rng.gauss(0, 0.3) for i in range(2000)]
    curve = Curve("loss", "report", xs=[float(i) for i in range(2000)], ys=ys)
    svg = static_plot.panel_svg("loss", [curve], [0])
    assert svg is not None
    smoothed, raw = re.findall(r'points="([^"]*)"', svg)
    kept = raw.split()
    ys_px = [float(p.split(",")[1]) for p in smoothed.split()]
    whole = static_plot.smooth(ys)
    idx = static_plot.kept(ys, static_plot.SVG_POINTS)
    assert idx[-1] == 1999  # the last point is drawn
    # The image's y scale, from its raw line: two points give a line's offset and slope.
    raw_px = [float(p.split(",")[1]) for p in kept]
    i, j = 0, max(range(len(idx)), key=lambda k: abs(ys[idx[k]] - ys[idx[0]]))
    slope = (raw_px[j] - raw_px[i]) / (ys[idx[j]] - ys[idx[i]])
    expected = [raw_px[i] + (whole[k] - ys[idx[i]]) * slope for k in idx]
    assert len(kept) == len(ys_px) == len(expected)
    assert max(abs(a - b) for a, b in zip(ys_px, expected, strict=True)) < 0.15  # SVG keeps one decimal
