"""The live training view in a real Jupyter Notebook 7 and headless Chromium (playwright-core), on a real 2-rank pool.

The JupyterLab twin is test_ui_live_view.py. The browser part is ui-tests/live_view_notebook7.mjs; this test
starts Notebook 7 for it (tests/lab.py, app="notebook") and checks what it saw: the jupyter-hvd pools
sidebar activated (no console error) and showed the pool, its commands are in the palette, the widget rendered in
the training cell's output, its plot gained points while the cell was still running, rank 0's log lines appeared,
the finished view replaced the widget when the cell ended, and a reloaded page draws it all again.
Screenshots: artifacts/live_view_notebook7/.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from lab import ROOT, jupyterlab, run_browser

ARTIFACTS = ROOT / "artifacts" / "live_view_notebook7"

STEPS = 200
TRAIN = f"""%%hvd --batch-size 32
import time
from jupyter_hvd import report
for step in range({STEPS}):
    time.sleep(0.03)
    report(step=step, loss=2.0 / (1 + step / 30), samples=32, total={STEPS})
    if step % 50 == 0:
        print(f"\\x1b[34mrank {{rank}} step {{step}}\\x1b[0m: loss={{2.0 / (1 + step / 30):.3f}}")
print(f"rank {{rank}} done")
"""
RANK0_LINES = [f"rank 0 step {s}: loss={2.0 / (1 + s / 30):.3f}" for s in range(0, STEPS, 50)] + ["rank 0 done"]


@pytest.fixture
def notebook7(tmp_path: Path) -> Iterator[dict[str, object]]:
    """Notebook 7 serving the demo notebook (see tests/lab.py)."""
    with jupyterlab(
        tmp_path,
        "live_view_demo.ipynb",
        ["%load_ext jupyter_hvd\n%hvd_start -np 2", TRAIN, "%hvd_stop"],
        app="notebook",
    ) as info:
        yield info


def test_live_view_in_notebook7(notebook7: dict[str, object]) -> None:
    env = {"NOTEBOOK_URL": str(notebook7["notebook_url"]), "ARTIFACTS": str(ARTIFACTS)}
    r, out = run_browser("live_view_notebook7.mjs", env, 400)
    server_log = Path(str(notebook7["log"])).read_text()[-3000:]
    assert r["ok"], f"{json.dumps(r)[:4000]}\n{out.stderr[-2000:]}\nserver log:\n{server_log}"
    # The page was Notebook 7's, not JupyterLab's.
    assert r["notebook7"]["appName"] == "Jupyter Notebook" and r["notebook7"]["appVersion"].startswith("7.")
    # The pools sidebar is in Notebook 7's left area, hidden until opened from the View menu; opened, it showed
    # this notebook's pool and its 2 ranks; its commands are in the command palette.
    sidebar = r["sidebar"]
    assert sidebar["attached"] and sidebar["hiddenAtFirst"] and sidebar["hiddenAfterClose"], sidebar
    assert sidebar["pools"] == ["live_view_demo.ipynb"] and sidebar["ranks"] == 2, sidebar
    commands = ["Interrupt jupyter-hvd pool", "Restart jupyter-hvd pool", "Stop jupyter-hvd pool"]
    assert all(any(label.startswith(c) for label in sidebar["palette"]) for c in commands), sidebar
    running = [s for s in r["samples"] if s["running"]]
    growth = sorted({s["points"] for s in running if s["points"] > 0})
    # The widget drew points while the cell was still running, and more of them later in the run: several
    # counts, one of them well inside the run (the printed "step N: loss=" lines alone plot only a few points).
    assert len(growth) >= 3, r["samples"]
    assert any(STEPS // 5 <= p <= STEPS * 4 // 5 for p in growth), r["samples"]
    assert growth[0] < STEPS and r["final"]["points"] == STEPS
    assert any(s["lines"] for s in running), r["samples"]  # rank 0's log arrived during the run too
    assert any("samples/s" in s["status"] and "ETA" in s["status"] for s in running)
    final = r["final"]
    assert final["widgets"] == 1 and final["canvas"] == 1 and final["state"] == "done"
    assert final["status"].startswith(f"✓ finished · 2 ranks · step {STEPS - 1}/{STEPS}")
    assert final["lines"] == RANK0_LINES  # rank 0's lines only, in order; rank 1's are not shown
    assert final["coloured"] == 4  # the ANSI-coloured parts kept their colour
    assert r["readout"].startswith("step ") and "loss" in r["readout"]
    # The finished view replaced the widget: drawn by jupyter-hvd's renderer, its HTML twin (for front ends without
    # it) not rendered.
    assert final["staticCopies"] == 0 and r["staticVisible"] is False
    assert r["cellText"].count("rank 0 done") == 1, r["cellText"]  # what the user sees: the log once
    # The reloaded page kept the notebook's kernel, and with it the pool that the last cell stopped.
    assert len(r["kernelBeforeReload"]) == 1 and r["kernelAfterReload"] == r["kernelBeforeReload"], r
    # After a page reload the finished view is drawn again from the saved notebook.
    again = r["afterReload"]
    assert again["points"] == STEPS and again["lines"] == RANK0_LINES and again["state"] == "done"
    assert again["status"].startswith("✓ finished") and r["staticVisibleAfterReload"] is False
    assert all((ARTIFACTS / f"{name}.png").exists() for name in ("0-sidebar", "1-running", "2-done"))
