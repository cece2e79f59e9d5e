"""Every replay survives what a setup cell does: it prints, displays a table and a picture, warns, draws tqdm bars
and stops at a breakpoint(); a restart (asked for, from a crash, and from the sidebar's Restart) and a rewind replay it
and bring the kept names back with no traceback of jupyter-hvd's own, and what the replay printed is not shown again.
A replay that raises is named with its cell and what to type, and the last good snapshot stays.

Real kernels with real 2-rank CPU pools.
"""

from __future__ import annotations

import threading
import time

import pytest
from conftest import Kernel, new_kernel, wait_until_gone

START = "%load_ext jupyter_hvd\n%config HvdPool.live_view = 'text'\n%hvd_start -np 2"

# Everything a real setup cell does with its output.
SETUP = """%%hvd --setup
import warnings
from IPython.display import HTML, SVG, display
from tqdm.auto import tqdm
model = torch.nn.Linear(4, 1)
print(f"built the model: {sum(p.numel() for p in model.parameters())} parameters")
display(HTML("<b>dataset</b>: 1000 samples"))
display(SVG('<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"><rect width="10" height="10"/></svg>'))
warnings.warn("this setup cell warns")
for _ in tqdm(range(50), desc="loading"):
    pass
if rank == 1:
    breakpoint()
"""
TRAIN = "%%hvd\nwith torch.no_grad():\n    model.weight += 1 + rank\nw = model.weight.sum().item()"


def weights(k: Kernel) -> list[float]:
    """Each rank's model weights, summed."""
    r = k.run("%%hvd\nw = model.weight.sum().item()")
    assert r.status == "ok", r.error_text
    out = []
    for rank in (0, 1):
        got = k.run(f"%hvd_pull w --rank {rank}\nprint('@@', round(w, 4))")
        assert got.status == "ok", got.error_text
        out.append(float(got.stdout.split("@@ ", 1)[1]))
    return out


def no_traceback_of_ours(text: str) -> None:
    assert "Traceback" not in text and "TypeError" not in text and "jupyter_hvd/" not in text, text


@pytest.fixture
def kernel():
    k = new_kernel()
    k.run(START, timeout=120).check()
    r = k.run(SETUP, inputs=["c"])
    assert r.status == "ok", r.error_text
    assert "built the model: 5 parameters" in r.stdout, r.stdout
    k.run("%hvd_keep model").check()
    k.run(TRAIN).check()
    yield k
    k.shutdown()
    assert wait_until_gone(f"hvd-{k.pid}-") == []


def test_hvd_restart_replays_a_setup_cell_that_prints_displays_warns_and_stops_at_a_breakpoint(kernel):
    k = kernel
    before = weights(k)
    r = k.run("%hvd_restart", timeout=180)
    said = r.stdout + r.stderr + r.error_text
    assert r.status == "ok", said
    assert "replayed 1 setup cell" in said and "restored model" in said, said
    no_traceback_of_ours(said)
    assert "built the model" not in said and "Pdb" not in said and not r.outputs, said  # the replay is not shown
    assert weights(k) == before


def test_a_crash_replays_it_too_and_the_cell_says_what_came_back(kernel):
    k = kernel
    before = weights(k)
    r = k.run("%%hvd\nimport os\nif rank == 1:\n    os._exit(3)\nimport time; time.sleep(30)", timeout=180)
    said = r.stdout + r.stderr + r.error_text
    assert r.status == "error" and "restored model" in said, said
    no_traceback_of_ours(said.replace("os._exit", ""))
    assert weights(k) == before


def test_the_sidebars_restart_replays_it_too(kernel):
    k = kernel
    before = weights(k)
    k.request_action("restart")
    deadline = time.monotonic() + 10
    while k.action_pending():  # taken between cells (a cell running then would be ended by it)
        assert time.monotonic() < deadline, "the kernel did not take the sidebar's restart within 10 s"
        time.sleep(0.1)
    said = ""
    deadline = time.monotonic() + 120
    while "restarted from the sidebar" not in said and time.monotonic() < deadline:
        time.sleep(1)
        said += k.run("%%hvd\npass").stdout  # what happened between cells is said under the next one
    assert "restarted from the sidebar" in said and "restored model" in said, said
    no_traceback_of_ours(said)
    assert weights(k) == before


def test_a_setup_cell_that_raises_on_replay_is_named_and_the_snapshot_stays(kernel, tmp_path):
    k = kernel
    flag = tmp_path / "present"
    flag.write_text("1")
    r = k.run(f"%%hvd --setup\nimport os\nassert os.path.exists({str(flag)!r}), 'the data is gone'\nprint('data ok')")
    assert r.status == "ok", r.error_text
    before = weights(k)
    flag.unlink()
    r = k.run("%hvd_restart", timeout=180)
    said = r.stdout + r.stderr + r.error_text
    assert r.status == "ok", said
    assert "setup cell 2 (cell [" in said, said
    assert "failed on replay: ranks 0-1: AssertionError: the data is gone" in said, said
    assert "stays the one to restore until a restore of it succeeds" in said and "%hvd_restart" in said, said
    no_traceback_of_ours(said)
    flag.write_text("1")
    r = k.run("%hvd_restart", timeout=180)
    assert r.status == "ok" and "restored model" in r.stdout, r.stdout + r.error_text
    assert weights(k) == before


def test_a_restart_shows_the_pool_restarting_until_what_was_kept_is_back(kernel):
    """The sidebar waits for the new engines to be idle: the pool file must not say idle before the setup journal is
    replayed and the kept names restored (at the same size, and at another, where a new pool takes the old one's
    place)."""
    k = kernel
    seen: list[tuple[str, str, tuple[int, ...]]] = []
    sampling = threading.Event()

    def sample() -> None:
        while sampling.is_set():
            for p in k.pools():
                seen.append((p["id"], p["state"], tuple(r["pid"] for r in p.get("ranks", []))))
            time.sleep(0.005)

    for restart in ("%hvd_restart", "%hvd_restart -np 3"):
        before = k.pool()
        old = {r["pid"] for r in before["ranks"]}
        seen.clear()
        sampling.set()
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            r = k.run(restart, timeout=180)
            deadline = time.monotonic() + 10  # the file is rewritten within milliseconds of the end
            while not any(s == "idle" and pids and not old & set(pids) for _, s, pids in seen[-5:]):
                assert time.monotonic() < deadline, seen[-5:]
                time.sleep(0.05)
        finally:
            sampling.clear()
            sampler.join()
        assert r.status == "ok" and "restored model" in r.stdout, r.stdout + r.error_text
        # The states the new engines went through, each change once: idle comes last, and only once.
        fresh = [s for _, s, pids in seen if pids and not old & set(pids)]
        changes = [s for i, s in enumerate(fresh) if i == 0 or s != fresh[i - 1]]
        assert changes and changes[-1] == "idle" and changes.count("idle") == 1, (restart, changes)
