"""What a data scientist sees of training, in a real JupyterLab and a real Notebook 7 (headless Chromium, 1440x900) on a
real 2-rank pool: the plots as honest as TensorBoard's, tqdm feeding them and the sidebar, a sidebar that shows the
running cell only, and a notebook that reopens clean after its kernel is gone.

The browser part is ui-tests/training_view.mjs. Screenshots: artifacts/training_view/ (lab-* and notebook-*).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
from lab import ROOT, jupyterlab, run_browser

ARTIFACTS = ROOT / "artifacts" / "training_view"

SHORT = """%%hvd
import time, math
for epoch in range(8):
    time.sleep(0.2)
    loss = 2.0 * math.exp(-epoch / 1.5) + 0.02
    print(f"epoch {epoch} loss={loss:.4f}")
"""
LAST_PRINTED = float(f"{2.0 * math.exp(-7 / 1.5) + 0.02:.4f}")

LONG = """%%hvd
import time
from jupyter_hvd import report
for step in range(300):
    time.sleep(0.005)
    report(step=step, loss=1.0 / (1 + step / 50) * (1 + 0.03 * ((step * 7919) % 11 - 5) / 5))
"""

TQDM = """%%hvd
import time
from tqdm.auto import tqdm
bar = tqdm(range(80), desc="train")
for i in bar:
    hvd.allreduce(torch.ones(2), name="sync")
    time.sleep(0.04)
    bar.set_postfix(loss=1.0 / (i + 1) + 0.01 * rank)
"""

NEXT = """%%hvd --ranks all
import time
time.sleep(2.5)
for i in range(60):
    hvd.allreduce(torch.ones(2), name="again")
    time.sleep(0.05)
    if i % 20 == 0:
        print(f"rank {rank} at {i}")
"""

CELLS = ["%load_ext jupyter_hvd\n%hvd_start -np 2", SHORT, LONG, TQDM, NEXT]


@pytest.fixture(params=["lab", "notebook"])
def app(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, object]:
    """JupyterLab or Notebook 7 serving the notebook of CELLS (tests/lab.py), and its name."""
    with jupyterlab(tmp_path, "training.ipynb", CELLS, app=request.param) as info:
        yield {**info, "app": request.param}


def is_number(text: str) -> bool:
    return bool(re.fullmatch(r"-?[\d.]+(e[-+]?\d+)?k?M?", text))


def test_training_reads_honestly_and_the_notebook_reopens_clean(app: dict[str, object]) -> None:
    env = {"NOTEBOOK_URL": str(app["notebook_url"]), "APP": str(app["app"]), "ARTIFACTS": str(ARTIFACTS)}
    r, out = run_browser("training_view.mjs", env, 560)
    server_log = Path(str(app["log"])).read_text()[-3000:]
    assert r["ok"], f"{json.dumps(r)[:4000]}\n{out.stderr[-2000:]}\nserver log:\n{server_log}"

    # A short printed run: the last point drawn is the last value printed, not smoothed (8 points), on an epoch axis
    # with whole-number ticks.
    (loss,) = [p for p in r["short"]["panels"] if p["title"] == "loss"]
    assert loss["points"] == 8 and loss["last"] == {"loss@0": LAST_PRINTED}
    assert loss["lastSmoothed"] == loss["last"], "a run of 8 points is drawn as it is"
    assert loss["xLabel"] == "epoch" and loss["xTicks"] and all(t == int(t) for t in loss["xTicks"]), loss
    assert r["short"]["state"] == "done" and r["short"]["widgets"] == 0  # the widget was replaced when it ended

    # A long run: smoothed (TensorBoard's debiased average), its end within 10 % of the raw end; a log scale on demand.
    (long,) = r["long"]["panels"]
    raw, smoothed = long["last"]["loss@0"], long["lastSmoothed"]["loss@0"]
    assert long["points"] == 300 and raw != smoothed and abs(smoothed - raw) <= 0.1 * raw, long
    assert long["xLabel"] == "step" and all(t == int(t) for t in long["xTicks"]), long
    assert r["longLog"] == ["loss (log scale)"]

    # tqdm on every rank: the plot grew while it ran, the status line had the bar's total and an ETA, and the sidebar
    # had every rank's step and loss; at the end the last point is the last postfix value.
    growing = sorted({s["points"] for s in r["tqdmRunning"] if s["points"]})
    assert len(growing) >= 3 and growing[0] < 80, r["tqdmRunning"]
    assert any("/80" in s["status"] and "ETA" in s["status"] and "train" in s["status"] for s in r["tqdmRunning"])
    assert r["tqdm"]["panels"][0]["last"] == {"loss@0": pytest.approx(1 / 80)}
    assert r["tqdm"]["status"].startswith("✓ finished · 2 ranks · train · step 80/80")
    every_rank = [s for s in r["sidebarRunning"] if all(is_number(x["step"]) and is_number(x["loss"]) for x in s)]
    assert every_rank, f"no moment with every rank's step and loss in the sidebar: {r['sidebarRunning'][-3:]}"
    after = r["sidebarAfterTqdm"]
    assert [x["loss"] for x in after] == ["0.0125", "0.0225"], after  # each rank's own last loss
    # The last line at the default width, in full, in a readable size; figures in the notebook's UI size.
    assert all(x["lineVisible"] for x in after if x["line"]), after
    assert after[0]["line"] and min(x["lineFontPx"] for x in after if x["line"]) >= 12, after
    assert min(x["figureFontPx"] for x in after) >= 12.5, after

    # A new cell: the last cell's figures are gone from the sidebar, and every rank's step comes (its steps timed).
    samples = r["sidebarNewCell"]
    cleared = next((i for i, s in enumerate(samples) if all(x["loss"] == "–" and x["step"] == "–" for x in s)), None)
    assert cleared is not None, f"the last cell's figures stayed: {samples[:4]}"
    assert not any(x["loss"] != "–" for s in samples[cleared:] for x in s), "the last cell's loss came back"
    assert any(all(is_number(x["step"]) for x in s) for s in samples[cleared:]), samples[-3:]
    assert [x["step"] for x in r["sidebarAfterNext"]] == ["60", "60"], r["sidebarAfterNext"]  # its 60 allreduces

    # --ranks all: a lane per rank, a tab per rank, and a search over the lines.
    lanes = r["lanes"]
    assert lanes["tabs"] == ["all ranks", "rank 0", "rank 1"]
    every = [[str(rank), f"rank {rank} at {i}"] for rank in (0, 1) for i in (0, 20, 40)]
    assert sorted(lanes["all"]) == every, lanes["all"]  # in the order they came, which differs between ranks
    assert lanes["rank1"] == [["1", f"rank 1 at {i}"] for i in (0, 20, 40)]
    assert sorted(lanes["search"]) == [["0", "rank 0 at 40"], ["1", "rank 1 at 40"]]

    # Saved, kernel shut down, opened again: no widget left, no "Error displaying widget", every view drawn.
    again = r["reopened"]
    assert "Error displaying widget" not in again["text"] and "model not found" not in again["text"]
    assert again["widgets"] == 0 and again["views"] >= 4
    assert again["points"][:3] == [8, 300, 80], again["points"]  # the short run, the long run, the tqdm run
    shots = ["1-short-run", "2-long-run-log-scale", "3-tqdm-running", "4-tqdm-done", "5-new-cell", "6-reopened"]
    assert all((ARTIFACTS / f"{app['app']}-{name}.png").exists() for name in shots)
