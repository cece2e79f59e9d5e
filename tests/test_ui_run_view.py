"""What a data scientist sees of a run, in a real JupyterLab and a real Notebook 7 (headless Chromium, 1440x900) on a
real 2-rank pool: a status line from a silent cell's first second; a notebook saved mid-run (as autosave does) that
reopens without its kernel with the plot and the log up to the save, and never "model not found"; a page reloaded
mid-run that shows the run as saved, during the run and after it; the log's last line in view when the cell ends; a
log scale that draws what it can of a loss that reached 0 and says what it left out; and only metrics in the plots
(no prose, warning or traceback), a learning rate drawn as it is.

The browser part is ui-tests/run_view.mjs. Screenshots: artifacts/run_view/ (lab-* and notebook-*).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from lab import ROOT, jupyterlab, run_browser

ARTIFACTS = ROOT / "artifacts" / "run_view"
pytestmark = pytest.mark.timeout(720)  # a pool, two trainings, a second tab, two reloads: 1-3 min on 2 busy cores

SILENT = "%%hvd\nimport time\ntime.sleep(4)"

STEPS, ZERO_FROM = 400, 300  # the loss is printed as 0.00000 from step ZERO_FROM on (as DDP printed it)
TRAIN = f"""%%hvd
import os, time, traceback, warnings
print("next cell works on rank", rank, "x =", 3)
warnings.warn("The .grad attribute of a Tensor that is not a leaf Tensor is being accessed. (Triggered internally at "
              "/pytorch/torch/csrc/autograd/generated/python_variable_methods.cpp:822.)")
try:
    x = 3
    raise ValueError(f"x = {{x}}")
except ValueError:
    traceback.print_exc()
for step in range({STEPS}):
    time.sleep(0.1 if not os.path.exists(GO_FILE) else 0.002)  # at a steady pace until the page has looked
    loss = max(0.0, 1.0 - step / {ZERO_FROM})
    print(f"step {{step}} loss={{loss:.5f}} lr={{0.1 * 0.99 ** step:.5f}}")
print("done")
"""

RELOAD = """%%hvd
import os, time
for step in range(300):
    time.sleep(0.1 if not os.path.exists(GO_FILE) else 0.002)
    print(f"step {step} loss={1 / (step + 1):.5f}")
print("done")
"""


def cells(go: Path) -> list[str]:
    """The notebook: each training cell keeps a steady pace until its file in `go` exists (the page makes it once it
    has looked at the run in progress), then ends at once."""
    train, reload = (
        src.replace("GO_FILE", repr(str(go / name))) for src, name in ((TRAIN, "train"), (RELOAD, "reload"))
    )
    return ["%load_ext jupyter_hvd\n%hvd_start -np 2", SILENT, train, reload]


ERRORS = ("model not found", "Error displaying widget")


def seconds(status: str) -> int:
    """The elapsed time a status line says (`· 0:02 elapsed`), in seconds."""
    match = re.search(r"(\d+):(\d\d) elapsed", status)
    assert match, status
    return int(match[1]) * 60 + int(match[2])


def panel(seen: dict, title: str) -> dict:
    """The panel `title` of what a view showed (ui-tests/run_view.mjs look()), or an empty one."""
    return next((p for p in seen.get("panels", []) if p["title"] == title), {"points": 0})


def this_checkouts_labextension(tmp_path: Path) -> dict[str, str]:
    """Env that makes JupyterLab serve this checkout's build of the labextension (the saved view's renderer), ahead of
    the one `jupyter labextension develop` linked into the venv (which may be another checkout's)."""
    path = tmp_path / "jupyter-path"
    (path / "labextensions").mkdir(parents=True)
    (path / "labextensions" / "jupyter-hvd").symlink_to(ROOT / "jupyter_hvd" / "labextension")
    return {"JUPYTER_PATH": str(path), "PYTHONPATH": str(ROOT)}


@pytest.fixture(params=["lab", "notebook"])
def app(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, object]]:
    """JupyterLab or Notebook 7 serving the notebook of CELLS (tests/lab.py), and its name."""
    env = this_checkouts_labextension(tmp_path)
    go = tmp_path / "go"
    go.mkdir()
    with jupyterlab(tmp_path, "run.ipynb", cells(go), env=env, app=request.param) as info:
        yield {**info, "app": request.param, "go": go}


def test_what_a_run_shows_live_saved_and_reopened(app: dict[str, object]) -> None:
    env = {"NOTEBOOK_URL": str(app["notebook_url"]), "APP": str(app["app"]), "ARTIFACTS": str(ARTIFACTS)}
    r, out = run_browser("run_view.mjs", {**env, "GO_DIR": str(app["go"])}, 600)
    server_log = Path(str(app["log"])).read_text()[-3000:]
    assert r["ok"], f"{json.dumps(r)[:4000]}\n{out.stderr[-2000:]}\nserver log:\n{server_log}"
    print(json.dumps({k: v for k, v in r.items() if k != "errors"}, indent=1)[:20000])

    # A silent cell says it runs from its first second (the kernel's status came before the cell had run 1 s; the
    # key press to the status line takes longer on a loaded machine: the browser and the server are in it), and
    # counts its time.
    silent = r["silent"]
    assert "failed" not in silent, f"no status line while the silent cell ran: {silent}"
    assert silent["status"].startswith("● running · 2 ranks"), silent
    assert silent["firstElapsed"] < 1.0 and silent["statusAfterMs"] < 3000, silent
    assert seconds(r["silentLater"]) >= seconds(silent["status"]) + 2, (silent["status"], r["silentLater"])

    # Saved mid-run: the file holds the view up to the save (data for the renderer, SVG for the rest), still running.
    assert r["runningAtSave"], "the cell had ended before the save"
    saved = r["savedMidRun"]
    assert saved["state"] == "running" and saved["html"], saved
    assert saved["points"] >= panel(r["beforeSave"], "loss")["points"] // 2 and saved["logLines"] >= 10, saved

    # A copy of that file opened with a kernel of its own: the plot and the log up to the save, no widget error.
    copy = r["copyMidRun"]
    assert not any(e in copy.get("page", "") for e in ERRORS), copy
    assert copy["views"] == 1 and panel(copy, "loss")["points"] > 0 and copy["lines"] >= 10, copy
    assert "saved while running" in copy["status"], copy["status"]

    # Only metrics are plotted: no panel for the prose's "x =", the warning's file:line or the traceback's "x = 3";
    # the learning rate is drawn as it is (a schedule is not smoothed), the loss is.
    end = r["end"]
    assert [p["title"] for p in end["panels"]] == ["loss", "lr"], end["panels"]
    loss, lr = end["panels"]
    assert lr["lastSmoothed"] == lr["last"], lr
    assert loss["points"] == STEPS and loss["lastSmoothed"] != loss["last"], loss

    # The end: the log's last line is in view.
    assert end["state"] == "done" and end["lastLine"] == "done" and end["lastLineVisible"], end

    # The log scale with zeros: axes drawn (ink left of and below the plot), hover works, and it says what it left out.
    log = r["logScale"]
    assert "failed" not in log, log
    assert log["titleText"].startswith("loss (log scale)"), log
    assert log["after"]["left"] >= 0.3 * log["before"]["left"] > 0, log
    assert log["after"]["bottom"] >= 0.3 * log["before"]["bottom"] > 0, log
    assert "loss" in log["readout"], log
    assert f"{STEPS - ZERO_FROM} values ≤ 0" in log["note"], log

    # The page reloaded mid-run: the output as saved (the copy up to the save), no widget error, while the cell runs
    # and after it ended (a reloaded page gets no more of the outputs of a cell it did not run).
    reload = r["reloadMidRun"]
    assert "failed" not in reload, reload
    during, after = reload["during"], reload["after"]
    assert during["busy"], "the cell had ended before the page was reloaded"
    for seen in (during, after):
        assert not any(e in seen["page"] for e in ERRORS), seen["page"][-2000:]
        assert panel(seen, "loss")["points"] >= 10 and seen["lines"] >= 10, seen
        assert "saved while running" in seen["status"], seen["status"]

    # Reopened after its kernel was shut down: drawn from the notebook, its last line in view, no widget error; the
    # run whose page was reloaded as it was saved.
    again = r["reopened"]
    assert not any(e in again["page"] for e in ERRORS), again["page"][-2000:]
    assert [p["points"] for p in again["panels"]] == [STEPS, STEPS], again["panels"]
    assert again["state"] == "done" and again["lastLine"] == "done" and again["lastLineVisible"], again
    assert "saved while running" in again["reloadCell"]["status"] and panel(again["reloadCell"], "loss")["points"]
    shots = ["1-silent-cell", "2-running", "3-copy-saved-mid-run", "4-end-log", "5-log-scale", "6-reloaded-mid-run"]
    assert all((ARTIFACTS / f"{app['app']}-{s}.png").exists() for s in [*shots, "7-reloaded-page-after-the-run"])
