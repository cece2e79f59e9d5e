"""A user's whole journey in a real Jupyter Notebook 7 and a real JupyterLab (headless Chromium, 1440x900) on a
real 2-rank pool, one cell after another as a user runs them: a setup cell that prints and a kept model, training,
Restart from the sidebar (its question says what comes back; the next cell says the restart happened and finds the
model as trained), a stuck cell ended with the stop button (where each rank was, said while it ran too), a cell that
raises on rank 1 (which rank, which line, in IPython's form), `%hvd_debug` in that rank's frame and `breakpoint()` in
a cell, answered in the page's input box, then `%hvd_stop`. No step may leave the page with an error of ours.

The browser part is ui-tests/journey.mjs. Screenshots: artifacts/journey/notebook/ and artifacts/journey/lab/.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from lab import ROOT, jupyterlab, run_browser, this_checkouts_sidebar

ARTIFACTS = ROOT / "artifacts" / "journey"
pytestmark = pytest.mark.timeout(600)

CELLS = [
    "%load_ext jupyter_hvd\n%hvd_start -np 2",
    # A setup cell as real ones are: it prints what it built.
    "%%hvd --setup\ntorch.manual_seed(0)\nmodel = torch.nn.Linear(4, 1)\n"
    "opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),\n"
    "                               named_parameters=model.named_parameters())\n"
    "hvd.broadcast_parameters(model.state_dict(), root_rank=0)\n"
    "print(f'built the model: {sum(p.numel() for p in model.parameters())} parameters')",
    "%hvd_keep model opt",
    "%%hvd\ntorch.manual_seed(1)\nfor step in range(20):\n    opt.zero_grad()\n"
    "    loss = (model(torch.randn(16, 4)) - 1).pow(2).mean()\n    loss.backward()\n    opt.step()\n"
    "    print(f'step {step} loss={loss.item():.4f}')\n"
    "print('trained: weight sum', round(model.weight.sum().item(), 4))",
    "%%hvd\nprint('after the restart: weight sum', round(model.weight.sum().item(), 4))",
    # Rank 0 waits in an allreduce rank 1 never joins; rank 1 sits in user code.
    "%%hvd\nimport time\nif rank == 0:\n    hvd.allreduce(torch.ones(1), name='grad_sync')\nelse:\n    time.sleep(60)",
    "%%hvd\ndef f(x):\n    local_value = x * 7\n    if rank == 1:\n        raise ValueError('boom')\n"
    "    return local_value\nf(6)",
    "%hvd_debug",
    "%%hvd\ny = 5\nif rank == 1:\n    breakpoint()\n    y = 99\n"
    "print('rank', rank, 'y', y, hvd.allreduce(torch.ones(1), op=hvd.Sum, name='after_bp').item())",
    "%hvd_stop",
]


@pytest.fixture(params=["notebook", "lab"])
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, object]]:
    """Notebook 7 or JupyterLab serving the journey's notebook, with this checkout's sidebar."""
    sidebar = this_checkouts_sidebar(tmp_path)
    with jupyterlab(tmp_path, "journey.ipynb", CELLS, env=sidebar, app=request.param) as info:
        yield {**info, "app": request.param}


def test_a_users_journey(server: dict[str, object]) -> None:
    artifacts = ARTIFACTS / str(server["app"])
    env = {"NOTEBOOK_URL": str(server["notebook_url"]), "APP": str(server["app"]), "ARTIFACTS": str(artifacts)}
    r, out = run_browser("journey.mjs", env, 540)
    server_log = Path(str(server["log"])).read_text()[-3000:]
    assert r["ok"], f"{json.dumps(r)[:6000]}\n{out.stderr[-2000:]}\nserver log:\n{server_log}"

    # The setup cell's print shows once (rank 0's), and nothing is drawn as an error.
    assert r["setup"]["text"].count("built the model: 5 parameters") == 1, r["setup"]
    assert not r["setup"]["errors"], r["setup"]
    trained = re.search(r"trained: weight sum (-?[\d.]+)", r["train"]["text"])
    assert trained and "step 19 loss=" in r["train"]["text"], r["train"]

    # Restart's question names what comes back: the setup cell replayed, then the kept names.
    dialog = " ".join(r["restartDialog"]["lines"])
    assert r["restartDialog"]["title"].startswith("Restart the pool"), r["restartDialog"]
    assert "Comes back: the setup journal's entry, replayed" in dialog and "model, opt from their newest" in dialog, (
        dialog
    )
    # The next cell says what happened, and finds the model as training left it.
    after = r["afterRestart"]["text"]
    assert "the pool was restarted from the sidebar at" in after, after
    assert f"after the restart: weight sum {trained.group(1)}" in after, after

    # The stop button on a stuck cell: where each rank was, in the cell's own words.
    stuck = r["stuck"]["text"]
    assert "where the ranks were when you interrupted:" in stuck, stuck
    assert re.search(r"rank 0: waiting in allreduce 'grad_sync' \(Cell In\[\d+\], line 3\)", stuck), stuck
    assert re.search(r"rank 1: at Cell In\[\d+\], line 5 -> time.sleep\(60\)", stuck), stuck
    # The same picture while it ran, before the stop: a cell that printed nothing says what the ranks are doing.
    assert "no output yet; where the ranks are:" in r["stuckWhileRunning"]["text"], r["stuckWhileRunning"]

    # The error names the rank and the line; %hvd_debug opens pdb in that frame, in the page's input box.
    error = r["error"]["text"]
    assert "rank 1: ValueError: boom" in error, error
    # IPython's own form, with the cell's prompt number and the line as the user counts it under %%hvd.
    assert re.search(r"Cell In\[\d+\], line 4, in f\(x\)\n.*\n.*\n----> 4     raise ValueError\('boom'\)", error), error
    # The sidebar says the pool is idle as soon as the short cell ended, and while pdb waits for the user.
    assert r["sidebarAfterError"] == {"state": "idle", "cell": None}, r["sidebarAfterError"]
    assert r["sidebarDuringDebug"] == {"state": "idle", "cell": None}, r["sidebarDuringDebug"]
    assert r["debugPrompts"] == ["(Pdb rank 1) "] * 2, r["debugPrompts"]
    assert "raise ValueError('boom')" in r["debug"]["text"] and "\n42\n" in f"\n{r['debug']['text']}\n", r["debug"]

    # breakpoint() stops rank 1 alone; rank 0 waits in its allreduce until `c`; then both finish.
    assert r["breakpointPrompts"] == ["(Pdb rank 1) "] * 2, r["breakpointPrompts"]
    assert "rank 1 is in the debugger (pdb)" in r["breakpoint"]["text"], r["breakpoint"]
    assert "rank 0 y 5 2.0" in r["breakpoint"]["text"], r["breakpoint"]

    assert "stopped" in r["stop"]["text"].lower(), r["stop"]
