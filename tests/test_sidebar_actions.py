"""The sidebar's actions and what it shows between cells, end to end: a real JupyterLab serving this checkout's build
of the sidebar, headless Chromium at 1440x900 (ui-tests/sidebar_actions.mjs), a real kernel and 2-rank pool.

- After an 8-epoch cell (24 allreduces an epoch) the ranks' count says its unit (192 steps), so it is not read as the
  live view's "epoch 8".
- Where asks no question; while it waits the sidebar says so in an informational note (not an error's or a warning's
  colours), then shows where the ranks are.
- A new cell shows neither the previous cell's figures (step, loss, last line) nor the Where picture taken before
  it, from its first moments (the page sees the cell begin; the pool file says so only within a second or so), and the
  old picture stays gone after the cell.
- Restart asks, naming what comes back (the setup journal's entry, the kept name from its newest snapshot) and what
  is lost; a Where picture of the old engines is gone after it.
- Stop asks, saying that everything goes, the snapshots with the pool's directory.

Screenshots: artifacts/sidebar-actions/ (1-after-8-epochs.png ... 10-stopped.png, result.json, lab.log).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from lab import ROOT, jupyterlab, run_browser, served_build, this_checkouts_sidebar

ARTIFACTS = ROOT / "artifacts" / "sidebar-actions"
NOTEBOOK = "sidebar_actions.ipynb"

TRAINING = """%%hvd
import time
for epoch in range(1, 9):
    for batch in range(24):
        loss = hvd.allreduce(torch.tensor(1.0 / (epoch * 24 + batch)), name="loss")
        time.sleep(0.01)
    if rank == 0:
        print(f"epoch {epoch} loss={loss.item():.3f}", flush=True)
"""
CELLS = [
    "%load_ext jupyter_hvd\n%hvd_start -np 2",
    "%%hvd --setup\nimport torch\ntorch.manual_seed(0)\nmodel = torch.nn.Linear(4, 2)",
    "%hvd_keep model",
    TRAINING,
    "%%hvd\nimport time\ntime.sleep(3)\nprint('next cell done')",
]


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[dict[str, object]]:
    with jupyterlab(tmp_path, NOTEBOOK, CELLS, env=this_checkouts_sidebar(tmp_path)) as info:
        yield info


def test_sidebar_actions_say_what_they_do_and_show_only_the_running_cell(lab: dict[str, object]) -> None:
    shutil.rmtree(ARTIFACTS, ignore_errors=True)
    assert "remoteEntry" in served_build(lab) and not served_build(lab).startswith("not "), (
        f"JupyterLab does not serve this checkout's sidebar ({served_build(lab)})"
    )
    env = {"NOTEBOOK_URL": str(lab["notebook_url"]), "NOTEBOOK": NOTEBOOK, "ARTIFACTS": str(ARTIFACTS)}
    r, out = run_browser("sidebar_actions.mjs", env, 420)
    shutil.copy(str(lab["log"]), ARTIFACTS / "lab.log")
    assert r["ok"], f"{r.get('error')}\n{json.dumps(r)[-4000:]}\n{out.stderr[-2000:]}"

    # An 8-epoch cell of 24 allreduces an epoch: 192 steps, said with their unit, beside the live view's epoch 8.
    assert r["afterTraining"]["steps"] == ["192", "192"], r["afterTraining"]
    assert r["stepsHeader"]["text"] == "steps" and "Not epochs" in r["stepsHeader"]["title"], r["stepsHeader"]
    assert "192 steps" in r["rank0Title"], r["rank0Title"]
    assert "epoch 8" in r["liveViewStatus"], r["liveViewStatus"]

    # Where: no question; an informational note while it waits, not in an error's or a warning's colours.
    assert r["whereDialog"] is None
    assert any(n.startswith("Asking the ranks where they are") for n in r["wherePending"]["notes"]), r["wherePending"]
    for seen in ("pendingColours", "whereColours", "restartingColours"):
        c = r[seen]
        assert c and not {c["color"], c["border"], c["background"]} & set(c["alarms"]), (seen, c)
    assert r["whereShown"]["where"].startswith("Where the ranks were at "), r["whereShown"]

    # The next cell: never the previous cell's figures or its Where picture once it runs, and none after it.
    assert r["nextCellRunningSamples"] > 10, r["nextCellSamples"]
    samples = r["nextCellSamples"]
    assert not r["previousFiguresShownMs"], f"the previous cell's figures shown as the running cell's: {samples}"
    assert not r["oldWhereShownMs"], f"a Where picture of before the cell shown while it ran: {samples}"
    assert any(s["state"] == "running" and s["steps"] == ["–", "–"] for s in samples), samples
    after = r["afterNextCell"]
    assert after["where"] is None and after["lines"] == ["next cell done"] * 2, after

    # Restart: what comes back and what is lost, in its own words.
    q = r["restartDialog"]
    assert q["title"] == f"Restart the pool of {NOTEBOOK}?" and q["accept"] == "Restart", q
    assert q["lines"] == [
        "Its 2 ranks start again as new processes, with the same options.",
        "Comes back: the setup journal's entry, replayed; then model from its newest snapshot.",
        "Lost: everything else in the ranks' namespaces (variables, models, data).",
    ], q
    assert r["restarting"]["notes"][0].startswith("Restarting the pool"), r["restarting"]
    assert r["afterRestart"]["where"] is None, "the Where picture of the old engines is still shown"
    # What the restart runs on the ranks is said in words, not as jupyter-hvd's code.
    assert not [c for c in r["restartCells"] if "__import__" in c], r["restartCells"]

    # Stop: everything goes, the snapshots with the pool's directory.
    q = r["stopDialog"]
    assert q["title"] == f"Stop the pool of {NOTEBOOK}?" and q["accept"] == "Stop", q
    assert q["lines"][0] == "Its 2 ranks end, and the pool with them.", q
    assert q["lines"][1] == (
        "Lost: everything in the ranks' namespaces, the setup journal's entry and the snapshot of model (< 1 MB): a "
        "stopped pool's directory is removed."
    ), q
    assert (ARTIFACTS / "10-stopped.png").exists()
