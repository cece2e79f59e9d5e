"""The sidebar end to end: a real JupyterLab, a real kernel and 2-rank pool, headless Chromium (playwright-core).

The browser part is labextension/ui-tests/sidebar.e2e.mjs; this test starts JupyterLab for it, checks what it
reports, and that no engine process is left once the sidebar's Stop was clicked. Screenshots are saved under
artifacts/sidebar/.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from conftest import wait_until_gone
from lab import CHROMIUM, browser_skips, jupyterlab

ROOT = Path(__file__).resolve().parents[1]
LABEXT = ROOT / "labextension"
ARTIFACTS = ROOT / "artifacts" / "sidebar"

pytestmark = [
    *browser_skips(LABEXT),
    pytest.mark.skipif(
        not (ROOT / "jupyter_hvd" / "labextension" / "package.json").exists(),
        reason="the labextension is not built: cd labextension && npm run build",
    ),
]

LONG_CELL = """%%hvd
import time
for i in range(600):
    print(f"step {i}", flush=True)
    time.sleep(0.5)
"""


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[dict[str, object]]:
    """JupyterLab serving the demo notebook (see tests/lab.py)."""
    with jupyterlab(tmp_path, "sidebar_demo.ipynb", ["%load_ext jupyter_hvd\n%hvd_start -np 2", LONG_CELL]) as info:
        yield info


def kernel_pids(server: subprocess.Popen[bytes]) -> list[int]:
    return [p.pid for p in psutil.Process(server.pid).children(recursive=True) if "ipykernel" in " ".join(p.cmdline())]


def test_sidebar_shows_busy_ranks_interrupts_and_stops(lab: dict[str, object]) -> None:
    env = {
        **os.environ,
        "LAB_URL": str(lab["url"]),
        "TOKEN": str(lab["token"]),
        "NOTEBOOK": "sidebar_demo.ipynb",
        "ARTIFACTS": str(ARTIFACTS),
        "CHROMIUM": CHROMIUM,
    }
    shutil.rmtree(ARTIFACTS, ignore_errors=True)  # only this run's screenshots
    out = subprocess.run(
        ["node", str(LABEXT / "ui-tests" / "sidebar.e2e.mjs")],
        cwd=LABEXT,
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
    )
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shutil.copy(str(lab["log"]), ARTIFACTS / "lab.log")  # the server's and the kernel's log, kept with the screenshots
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    assert lines, f"the browser script printed no result:\n{out.stdout}\n{out.stderr}"
    result = json.loads(lines[-1])
    print("sidebar timings:", json.dumps(result.get("timings")))
    assert result["ok"], f"{result}\n{out.stderr[-3000:]}\nserver log:\n{Path(str(lab['log'])).read_text()[-3000:]}"
    t = result["timings"]
    assert t["sidebar_two_ranks_after_ready_s"] < 5, "the sidebar should show the ranks within a few seconds"
    assert (ARTIFACTS / "2-ranks-busy.png").exists() and (ARTIFACTS / "6-stopped.png").exists()
    # Stop from the sidebar: no engine (nor controller, mpiexec) of the kernel's pool is left.
    kernels = kernel_pids(lab["server"])  # type: ignore[arg-type]
    assert kernels, "the notebook's kernel should still be running (only the pool was stopped)"
    for kpid in kernels:
        assert wait_until_gone(f"hvd-{kpid}-") == []
    for pid in result["rankPids"]:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
