"""The live training view in a real JupyterLab 4 and headless Chromium (playwright-core), on a real 2-rank pool.

The browser part is ui-tests/live_view.mjs; this test starts JupyterLab for it and checks what it saw: the plot
gained points while the cell was still running, a tqdm bar stayed one line, hover and zoom work, the finished view
replaced the widget when the cell ended. Screenshots: artifacts/live_view/.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from lab import ROOT, jupyterlab, run_browser

ARTIFACTS = ROOT / "artifacts" / "live_view"

TRAIN = """%%hvd --batch-size 32
import sys, time
from tqdm import tqdm
from jupyter_hvd import report
for step in tqdm(range(300), file=sys.stderr, mininterval=0.05):
    time.sleep(0.025)
    report(step=step, loss=2.0 / (1 + step / 30) + 0.05 * ((step * 7919) % 13) / 13, samples=32, total=300)
    if step % 100 == 0:
        print(f"\\x1b[34mstep {step}\\x1b[0m: loss={2.0 / (1 + step / 30):.3f}")
print("done")
"""


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[dict[str, object]]:
    """JupyterLab serving the demo notebook (see tests/lab.py)."""
    with jupyterlab(
        tmp_path, "live_view_demo.ipynb", ["%load_ext jupyter_hvd\n%hvd_start -np 2", TRAIN, "%hvd_stop"]
    ) as info:
        yield info


def step_of(readout: str) -> float:
    """The step a hover readout names (`step 120 · loss 0.41 (smoothed 0.44)`)."""
    match = re.match(r"step (\S+) ", readout)
    assert match, readout
    return float(match.group(1))


def test_live_view_in_jupyterlab(lab: dict[str, object]) -> None:
    r, out = run_browser("live_view.mjs", {"NOTEBOOK_URL": str(lab["notebook_url"]), "ARTIFACTS": str(ARTIFACTS)}, 400)
    server_log = Path(str(lab["log"])).read_text()[-3000:]
    assert r["ok"], f"{json.dumps(r)[:4000]}\n{out.stderr[-2000:]}\nserver log:\n{server_log}"
    running = [s for s in r["samples"] if s["running"]]
    growth = sorted({s["points"] for s in running if s["points"] > 0})
    # The plot gained points several times while the cell was still running.
    assert len(growth) >= 3, r["samples"]
    assert growth[0] < 300 and r["final"]["points"] == 300
    # The tqdm bar is one element, rewritten in place; its states never pile up as finished lines.
    assert all(s["bars"] <= 1 for s in r["samples"]) and any(s["bars"] == 1 for s in running)
    assert all(s["barLines"] == 0 for s in running if s["bars"]), r["samples"]  # while the bar is live
    assert all(s["barLines"] <= 1 for s in r["samples"]), r["samples"]  # tqdm's close() ends it: one line
    assert sum("it/s" in line for line in r["final"]["lines"]) == 1  # the bar's last state, once
    assert any("samples/s" in s["status"] and "ETA" in s["status"] for s in running)
    assert r["final"]["status"].startswith("✓ finished · 2 ranks · step 299/300")
    assert r["final"]["coloured"] == 3  # the ANSI-coloured lines kept their colour
    assert r["readout"].startswith("step ") and "loss" in r["readout"]
    assert r["zoomedReadout"].startswith("step ")
    # Dragging over 30-60 % of the width zoomed into those steps; a double-click showed all 300 again.
    assert 20 <= step_of(r["readoutAtTenth"]) <= 40, r["readoutAtTenth"]
    assert 80 <= step_of(r["zoomedReadoutAtTenth"]) <= 120, r["zoomedReadoutAtTenth"]
    assert r["zoomedTitle"] == "loss  (zoomed: double-click to reset)" and r["resetTitle"] == "loss"
    assert 20 <= step_of(r["resetReadoutAtTenth"]) <= 40, r["resetReadoutAtTenth"]
    assert re.fullmatch(r"loss \S+", r["final"]["legend"]), r["final"]["legend"]  # the latest value
    # The finished view replaced the widget, drawn by jupyter-hvd's renderer (its HTML twin is not rendered here).
    assert r["final"]["staticCopies"] == 0 and r["staticVisible"] is False
    # After a page reload the finished view is drawn again from the saved notebook.
    assert r["afterReload"]["points"] == 300 and r["afterReload"]["lines"] == len(r["final"]["lines"])
    assert r["afterReload"]["status"].startswith("✓ finished") and r["staticVisibleAfterReload"] is False
    assert (ARTIFACTS / "1-running.png").exists() and (ARTIFACTS / "3-done.png").exists()
