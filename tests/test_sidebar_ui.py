"""The sidebar end to end: a real JupyterLab, headless Chromium (playwright-core).

test_sidebar_shows_busy_ranks_interrupts_and_stops: a real kernel and 2-rank pool, driven by ui-tests/sidebar.mjs;
no engine process is left once the sidebar's Stop was clicked.
Interrupt and restart from the sidebar leave a line in the notebook; while the restart runs the pool's buttons wait;
the uptime is the new engines'. Screenshots: artifacts/sidebar/ (1-pool-idle.png ... 7-stopped.png, and lab.log).

test_sidebar_fits_eight_ranks_and_shows_warnings: a pool file with 8 ranks (a straggler, a stalled rank, a NaN
loss, a failed thread) seen at the sidebar's default width (JupyterLab at 1440x900) by ui-tests/sidebar_layout.mjs:
each rank's figures on one line, its last line under them in full, no figure cut, text at a readable size.
Screenshots: artifacts/sidebar-layout/ (lab-8-ranks.png, sidebar-8-ranks.png, measurements.json).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from conftest import wait_until_gone
from lab import ROOT, jupyterlab, run_browser

from jupyter_hvd import state

ARTIFACTS = ROOT / "artifacts" / "sidebar"
LAYOUT_ARTIFACTS = ROOT / "artifacts" / "sidebar-layout"


@pytest.fixture(autouse=True)
def built_sidebar() -> None:
    """The sidebar must be built into the package; a test that cannot see it fails rather than skips."""
    if not (ROOT / "jupyter_hvd" / "labextension" / "package.json").exists():
        pytest.fail("the sidebar is not built: npm run build (in the repository root)", pytrace=False)


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
    shutil.rmtree(ARTIFACTS, ignore_errors=True)  # only this run's screenshots
    env = {"NOTEBOOK_URL": str(lab["notebook_url"]), "NOTEBOOK": "sidebar_demo.ipynb", "ARTIFACTS": str(ARTIFACTS)}
    result, out = run_browser("sidebar.mjs", env, 280)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shutil.copy(str(lab["log"]), ARTIFACTS / "lab.log")  # the server's and the kernel's log, kept with the screenshots
    print("sidebar timings:", json.dumps(result.get("timings")))
    assert result["ok"], f"{result}\n{out.stderr[-3000:]}\nserver log:\n{Path(str(lab['log'])).read_text()[-3000:]}"
    t = result["timings"]
    assert t["sidebar_two_ranks_after_ready_s"] < 5, "the sidebar should show the ranks within a few seconds"
    assert (ARTIFACTS / "2-ranks-busy.png").exists() and (ARTIFACTS / "7-stopped.png").exists()
    # Stop from the sidebar: no engine (nor controller, mpiexec) of the kernel's pool is left.
    kernels = kernel_pids(lab["server"])  # type: ignore[arg-type]
    assert kernels, "the notebook's kernel should still be running (only the pool was stopped)"
    for kpid in kernels:
        assert wait_until_gone(f"hvd-{kpid}-") == []
    for pid in result["rankPids"]:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def eight_rank_pool(state_dir: Path, kernel_id: str) -> dict[str, object]:
    """A running 8-rank GPU pool's file as the kernel writes it, owned by this (live) test process, as the pool of
    the server's kernel `kernel_id` (a server lists only its own kernels' pools)."""
    now, me = time.time(), psutil.Process()
    ranks = [
        {
            "rank": i,
            "engine_id": i,
            "host": "gpu-node-01",
            "pid": 40100 + i,
            "device": f"cuda:{i}",
            "controller": "MPI",
            "tensor_ops": "NCCL",
            "local_rank": i,
            "cross_rank": 0,
            "state": "busy",
            "step": 12345,
            "loss": 0.2345 + i / 1000,
            "last_line": f"epoch 3 step 12345 loss {0.2345 + i / 1000:.4f} lr 0.0008 (rank {i} of 8, 1.2 s/epoch)",
            "cpu_percent": 101.0,
            "rss_mb": 3100.0,
            "gpu_mem_mb": 30500.0,
            "gpu_mem_total_mb": 81920.0,
            "gpu_util": 97.0,
            "heartbeat": now,
            "compute_ms": 25.4,
            "wait_ms": 3.2,
        }
        for i in range(8)
    ]
    ranks[5].update(compute_ms=41.2, wait_ms=0.4)  # the straggler: the others wait for it
    ranks[3].update(state="stalled", stalled_on="allreduce.module.fc2.weight_grad", compute_ms=None, wait_ms=None)
    data = {
        "id": "hvd-999999-1",
        "state": "running",
        "np": 8,
        "options": {},
        "started": now - 600,
        "backend": "NCCL",
        "hosts": ["gpu-node-01"],
        "cell": "for epoch in range(100):",
        "kernel_pid": me.pid,
        "kernel_started": state.started(me),
        "boot_id": state.boot_id(),
        "kernel_id": kernel_id,
        "notebook": "train_resnet.ipynb",
        "ranks": ranks,
        "straggler": {"rank": 5, "ratio": 1.62, "message": "rank 5 is 1.6x slower than the others (41 ms per step)"},
        "nonfinite": {"rank": 0, "step": 12, "metric": "loss", "message": "loss became nan at step 12 on rank 0"},
        "problems": ["the metric reporter on rank 2 failed: OSError: [Errno 28] No space left on device"],
        "processes": [],
    }
    state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    state.write_json(state_dir / f"pool-{data['id']}.json", data)
    return data


def start_kernel(lab: dict) -> str:
    """A kernel of the lab's server (through its REST API); its id."""
    request = urllib.request.Request(
        f"{lab['url']}api/kernels", data=b"{}", method="POST", headers={"Authorization": f"token {lab['token']}"}
    )
    with urllib.request.urlopen(request, timeout=60) as answer:
        return json.loads(answer.read())["id"]


def test_sidebar_fits_eight_ranks_and_shows_warnings(tmp_path: Path) -> None:
    """At the default width each of 8 ranks' figures is one line with its last line in full under it, no figure is
    cut, the text is readable, and the pool's warnings are shown."""
    with jupyterlab(tmp_path, "empty.ipynb", ["1"]) as lab:
        eight_rank_pool(Path(str(lab["state_dir"])), start_kernel(lab))
        shutil.rmtree(LAYOUT_ARTIFACTS, ignore_errors=True)
        lab_url = f"{lab['url']}lab?token={lab['token']}"
        env = {"LAB_URL": lab_url, "RANKS": "8", "ARTIFACTS": str(LAYOUT_ARTIFACTS)}
        m, _ = run_browser("sidebar_layout.mjs", env, 180)
    (LAYOUT_ARTIFACTS / "measurements.json").write_text(json.dumps(m, indent=1))
    assert m["ok"], m
    print(f"sidebar {m['sidebarWidth']:.0f} px wide, line {m['lineHeight']:.1f} px, rank rows {m['rankHeights']}")
    assert 200 <= m["sidebarWidth"] <= 320, "the sidebar should be at JupyterLab's default width"
    too_tall = [(i, h) for i, h in enumerate(m["rankHeights"]) if h >= 1.6 * m["lineHeight"]]
    assert not too_tall, f"figures taller than one line ({m['lineHeight']:.1f} px): {too_tall}; see {LAYOUT_ARTIFACTS}"
    assert not m["truncated"], f"figures cut at the default width: {m['truncated']}"
    assert m["horizontalOverflow"] <= 0, "the sidebar scrolls sideways at its default width"
    # The last line of every rank under its figures, in full, inside the sidebar (the stalled rank: what it waits in).
    assert [line["text"] for line in m["lastLines"]][:2] == [
        "epoch 3 step 12345 loss 0.2345 lr 0.0008 (rank 0 of 8, 1.2 s/epoch)",
        "epoch 3 step 12345 loss 0.2355 lr 0.0008 (rank 1 of 8, 1.2 s/epoch)",
    ]
    assert m["lastLines"][3]["text"] == "waits in allreduce.module.fc2.weight_grad"
    assert all(line["inside"] for line in m["lastLines"]), m["lastLines"]
    assert m["figureFontPx"] >= 12.5 and min(line["fontPx"] for line in m["lastLines"]) >= 12
    # Headers in words, each with its unit under it.
    assert m["headers"] == ["rank", "steps", "loss", "computems", "waitms", "load%, memory"]
    assert m["rowTexts"][0] == ["0", "12345", "0.234", "25", "3.2", "97% 30G"]
    assert "stalled in allreduce.module.fc2.weight_grad" in m["stalledTitle"]
    assert m["stragglers"] == [5], "the straggler's row should be highlighted"
    assert m["warnings"] == [
        ["nonfinite", "⚠ loss became nan at step 12 on rank 0"],
        ["straggler", "⚠ rank 5 is 1.6x slower than the others (41 ms per step)"],
        ["stalled", "⚠ rank 3 waits in allreduce.module.fc2.weight_grad"],
        ["problem", "⚠ the metric reporter on rank 2 failed: OSError: [Errno 28] No space left on device"],
    ], "the pool's warnings (server: jupyter_hvd/server/registry.py describe() must send them)"
