"""Restart at another number of ranks from the sidebar, end to end: a real JupyterLab serving this checkout's build of
the sidebar, headless Chromium at 1440x900 (ui-tests/sidebar_resize.mjs), a real kernel and 2-rank CPU pool that keeps
a model and its optimizer (the learning rate scaled by hvd.size()).

- The Restart dialog asks at how many ranks: a number field labelled Ranks, prefilled with 2 and focused; what is not a
  number of ranks (empty, 0, 2.5) disables Restart with a short reason, Enter does not restart, nothing is lost.
- At 3 the dialog says what another size does; Restart sends {"np": 3}; while it runs the sidebar says "Restarting
  the pool at 3 ranks", and then shows the pool with 3 rank rows. The next cell, on every rank, sees 3 ranks with the
  weights trained before and the learning rate 0.03; the kernel says under it that the pool was restarted on 3 ranks.
- A size the host cannot run is refused with the reason, by the kernel before anything stops: the sidebar says why,
  the pool keeps its 3 ranks (the same processes), no traceback shows under the cell that ran last, and the next cell
  says the restart failed and runs on 3 ranks.
- The dialog is laid out in full at 1440x900: the field beside its label, no text cut, Restart's states distinct, a
  field that holds no number of ranks drawn in the error colour.
- The page logs no error and no request fails.

Screenshots: artifacts/sidebar-resize/ (1-two-ranks-trained.png ... 12-next-cell-after-refusal.png, the dialog alone
in *-dialog.png, result.json, lab.log).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from lab import ROOT, jupyterlab, run_browser, served_build, this_checkouts_sidebar

ARTIFACTS = ROOT / "artifacts" / "sidebar-resize"
NOTEBOOK = "sidebar_resize.ipynb"
TOO_MANY = max(999, (os.cpu_count() or 1) * 4 + 1)  # more than this host's cores x 4 (kernel/launch/options.py)

# Each rank prints its size, a digest of the model's weights and the optimizer's learning rate.
WEIGHTS = (
    "digest = hashlib.sha1(b''.join(p.detach().numpy().tobytes() for p in model.parameters())).hexdigest()[:12]\n"
    "print(f\"rank {hvd.rank()} of {hvd.size()}: weights {digest} lr {opt.param_groups[0]['lr']:.4f}\", flush=True)\n"
)
CELLS = [
    "%load_ext jupyter_hvd\n%hvd_start -np 2 --cpu",
    "%%hvd --setup\nimport hashlib\nimport torch\ntorch.manual_seed(0)\nmodel = torch.nn.Linear(4, 2)\n"
    "opt = torch.optim.SGD(model.parameters(), lr=0.01 * hvd.size())",
    "%hvd_keep model opt",
    # Data-parallel training: each rank its own batch, the gradients averaged, so the ranks' weights stay alike.
    "%%hvd --ranks all\ntorch.manual_seed(100 + hvd.rank())\nfor step in range(5):\n    opt.zero_grad()\n"
    "    model(torch.randn(8, 4)).pow(2).mean().backward()\n    for i, p in enumerate(model.parameters()):\n"
    "        p.grad = hvd.allreduce(p.grad, name=f'grad.{i}')\n    opt.step()\n" + WEIGHTS,
    "%%hvd --ranks all\n" + WEIGHTS,
    "%%hvd\nprint(f'still {hvd.size()} ranks', flush=True)",
]
RANK_LINE = re.compile(r"rank (\d+) of (\d+): weights ([0-9a-f]{12}) lr ([0-9.]+)")


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[dict[str, object]]:
    with jupyterlab(tmp_path, NOTEBOOK, CELLS, env=this_checkouts_sidebar(tmp_path)) as info:
        yield info


def ranks_said(output: str) -> dict[int, tuple[int, str, float]]:
    """rank -> (size, weights digest, learning rate), from a cell's output."""
    return {int(r): (int(n), digest, float(lr)) for r, n, digest, lr in RANK_LINE.findall(output)}


def test_sidebar_restarts_the_pool_at_another_size_and_keeps_the_work(lab: dict[str, object]) -> None:
    shutil.rmtree(ARTIFACTS, ignore_errors=True)
    assert not served_build(lab).startswith("not "), "JupyterLab does not serve this checkout's sidebar"
    env = {"NOTEBOOK_URL": str(lab["notebook_url"]), "TOO_MANY": str(TOO_MANY), "ARTIFACTS": str(ARTIFACTS)}
    r, out = run_browser("sidebar_resize.mjs", env, 600)
    shutil.copy(str(lab["log"]), ARTIFACTS / "lab.log")
    assert r["ok"], f"{r.get('error')}\n{json.dumps(r)[-4000:]}\n{out.stderr[-2000:]}"

    # Trained on 2 ranks: their weights alike, the learning rate 0.01 x 2.
    trained = ranks_said(r["trainingOutput"])
    assert sorted(trained) == [0, 1] and {v[0] for v in trained.values()} == {2}, r["trainingOutput"]
    assert len({v[1] for v in trained.values()}) == 1 and {v[2] for v in trained.values()} == {0.02}, trained
    assert r["before"]["ranks"] == [0, 1], r["before"]

    # The dialog asks at how many ranks: labelled, prefilled with the pool's size, focused, at least 1.
    q = r["dialogAsked"]
    assert q["title"] == f"Restart the pool of {NOTEBOOK}?", q
    assert q["label"].startswith("Ranks") and q["hint"] == "now 2; another number restarts the pool at that size", q
    assert q["input"]["value"] == "2" and q["input"]["type"] == "number" and q["input"]["min"] == "1", q
    assert q["input"]["focused"] and not q["accept"]["disabled"] and q["accept"]["text"] == "Restart", q
    assert q["lines"][0] == "Its 2 ranks start again as new processes, with the same options.", q
    assert q["problem"] == "", q

    # What is not a number of ranks: Restart disabled, with the reason; Enter restarts nothing; what was said stays.
    reasons = {
        "": "Say how many ranks: a whole number, 1 or more.",
        "0": "At least 1 rank.",
        "2.5": "A number of ranks is a whole number (1, 2, 3, ...).",
    }
    for seen in r["invalid"]:
        assert seen["problem"] == reasons[seen["text"]], seen
        assert seen["accept"]["disabled"] and seen["input"]["invalid"], seen
        # The field shows it too, while it still has the focus (JupyterLab's focus style would keep it blue).
        assert seen["input"]["ariaInvalid"] == "true" and seen["input"]["border"] != q["input"]["border"], seen
        assert seen["input"]["value"] == seen["text"] and seen["lines"] == q["lines"], seen
    assert r["afterEnterOnInvalid"] is not None, "Enter restarted the pool with no number of ranks"
    # The button's two states look different (JupyterLab dims a disabled button).
    assert r["invalid"][0]["accept"]["opacity"] != q["accept"]["opacity"], (r["invalid"][0]["accept"], q["accept"])

    # At 3 ranks the dialog says what another size does.
    q3 = r["dialogAtThree"]
    assert not q3["accept"]["disabled"] and q3["problem"] == "", q3
    assert q3["lines"] == [
        "Its 2 ranks end and 3 new ranks start in their place, with the same options otherwise.",
        "Comes back: the setup journal's entry, replayed at 3 ranks (hvd.size() is 3 in it); then model, opt from "
        "their newest snapshot, on every new rank from rank 0's copy.",
        "Kept values that differ from rank to rank (other than models and optimizers) do not come back at another "
        "size: they stay as the setup cells build them for 3 ranks. A learning rate the setup scales by hvd.size() "
        "is scaled to the new size.",
        "Lost: everything else in the ranks' namespaces (variables, models, data).",
    ], q3
    for seen in (q, q3, r["invalid"][0]):
        assert_laid_out(seen)

    # While it restarts the sidebar says at what size; then the pool has 3 rank rows.
    restarting = r["restarting"]
    assert any(n.startswith("Restarting the pool at 3 ranks (asked ") for n in restarting["notes"]), restarting
    after = r["after"]
    assert after["ranks"] == [0, 1, 2] and " 3 ranks " in after["meta"], after
    assert not set(after["pids"]) & set(r["before"]["pids"]), after
    # From the click until its new engines are idle, the pool is shown restarting (the first sample is before the click;
    # for a moment between the old pool's file and the new one's there is none).
    for s in r["duringRestart"][1:]:
        if s.get("state") is not None:
            assert s["notes"] or (s["ranks"] == [0, 1, 2] and s["state"] == "idle"), r["duringRestart"]
            assert not (s["notes"] and s["restartEnabled"]), r["duringRestart"]  # its buttons wait meanwhile

    # The next cell on every rank: 3 ranks, the weights trained before on each, the learning rate for 3 ranks.
    checked = ranks_said(r["checkOutput"])
    assert sorted(checked) == [0, 1, 2], r["checkOutput"]
    assert {v[0] for v in checked.values()} == {3}, checked
    assert {v[1] for v in checked.values()} == {trained[0][1]}, (checked, trained)
    assert {v[2] for v in checked.values()} == {0.03}, checked
    said = re.search(
        r"jupyter-hvd: the pool was restarted from the sidebar at \d\d:\d\d:\d\d on 3 ranks \(it had 2\)",
        r["checkOutput"],
    )
    assert said, r["checkOutput"]

    # A size this host cannot run: the dialog takes it (only the kernel knows the host), the kernel refuses it.
    assert not r["dialogTooMany"]["accept"]["disabled"], r["dialogTooMany"]
    asked = r["askedTooMany"]
    assert any(n.startswith(f"Restarting the pool at {TOO_MANY} ranks") for n in asked["notes"]), asked
    refused = r["refused"]
    why = [w for w in refused["warnings"] if "restart" in w]
    assert why and f"-np {TOO_MANY} asks for more ranks than this host runs" in why[0], refused
    assert refused["ranks"] == [0, 1, 2] and refused["pids"] == after["pids"] and refused["restartEnabled"], refused
    assert not refused["notes"], refused
    # Refused, not crashed: no traceback under the cell that ran last.
    assert "Traceback" not in r["refusedUnderLastCell"], r["refusedUnderLastCell"]
    notice = rf"jupyter-hvd: the restart from the sidebar at \d\d:\d\d:\d\d failed: .*-np {TOO_MANY} "
    assert re.search(notice, r["afterRefusalOutput"]), r["afterRefusalOutput"]
    assert "still 3 ranks" in r["afterRefusalOutput"], r["afterRefusalOutput"]
    assert r["afterRefusal"]["pids"] == after["pids"], r["afterRefusal"]

    # Nothing went wrong in the page (tests/lab.py's run_browser checks its console).
    assert not r["failed_requests"], r["failed_requests"]


def assert_laid_out(seen: dict) -> None:
    """The dialog in full inside the window: the field beside its label's words, nothing cut or scrolled sideways."""
    box = seen["layout"]
    view, content, body = box["viewport"], box["content"], box["body"]
    assert 0 <= content["left"] and content["right"] <= view["width"], box
    assert 0 <= content["top"] and content["bottom"] <= view["height"], box
    scroll = box["bodyScroll"]
    assert scroll["scrollWidth"] <= scroll["clientWidth"], f"the dialog's text is cut at its right edge: {box}"
    assert scroll["scrollHeight"] <= scroll["clientHeight"], f"the dialog's text does not fit, it scrolls: {box}"
    words, field = box["labelWords"], box["input"]
    assert words["right"] <= field["left"], f"the label runs into the field: {box}"
    middle = lambda r: (r["top"] + r["bottom"]) / 2  # noqa: E731
    assert abs(middle(words) - middle(field)) <= 3, f"the label and the field are not on one line: {box}"
    assert field["height"] >= 24 and field["width"] >= 48, f"the field is too small to read: {box}"
    for rect in [field, box["hint"], *box["paragraphs"]]:
        assert body["left"] <= rect["left"] and rect["right"] <= body["right"] + 0.5, (rect, body)
    assert all(b["bottom"] <= content["bottom"] for b in box["buttons"]), box
