"""The straggler named: a rank that computes much longer per step than the others, for 10 s.

Unit tests of the detector (kernel/cell/straggler.py), then 2 real CPU ranks: rank 1 sleeps 30 ms in each step of a
DistributedOptimizer loop and is named in the pool file and under the cell; an even run names nobody.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from jupyter_hvd.kernel.cell.straggler import HOLD_S, StragglerDetector


def _feed(d: StragglerDetector, t: float, paces: dict[int, tuple[float, float]]) -> bool:
    changed = False
    for rank, (compute, wait) in paces.items():
        changed |= d.add(rank, compute, wait, t)
    return changed


def test_a_slow_rank_is_named_after_it_stays_slow_for_the_hold_time():
    d = StragglerDetector()
    t = 0.0
    while t < HOLD_S - 0.5:
        assert not _feed(d, t, {0: (10.0, 30.0), 1: (40.0, 1.0), 2: (11.0, 29.0)}), t
        assert d.straggler is None
        t += 0.5
    t += 0.5
    assert _feed(d, t, {0: (10.0, 30.0), 1: (40.0, 1.0), 2: (11.0, 29.0)})
    assert d.straggler is not None and d.straggler.rank == 1
    assert abs(d.straggler.ratio - 40 / 10.5) < 1e-9
    assert d.straggler.message == "rank 1 is the straggler: 3.8x the others' compute per step"
    assert d.stats()[0] == {"compute_ms": 10.0, "wait_ms": 30.0}


def test_even_ranks_and_small_or_short_differences_name_nobody():
    d = StragglerDetector()
    for i in range(60):  # 30 s: 1.2x is below the threshold, 0.5 ms gaps are noise
        _feed(d, i * 0.5, {0: (10.0, 2.0), 1: (12.0, 1.0)})
    assert d.straggler is None
    tiny = StragglerDetector()
    for i in range(60):
        _feed(tiny, i * 0.5, {0: (0.4, 0.1), 1: (0.9, 0.0)})  # 2.2x, but half a millisecond
    assert tiny.straggler is None
    bursty = StragglerDetector()
    for i in range(60):  # slow for 5 s, even for 5 s, again and again: never 10 s in a row
        slow = (i // 10) % 2 == 0
        _feed(bursty, i * 0.5, {0: (10.0, 5.0), 1: (30.0 if slow else 10.0, 1.0)})
    assert bursty.straggler is None


def test_the_straggler_is_cleared_after_the_ranks_are_even_for_the_hold_time():
    d = StragglerDetector()
    for i in range(25):
        _feed(d, i * 0.5, {0: (10.0, 20.0), 1: (30.0, 0.0)})
    assert d.straggler and d.straggler.rank == 1
    t0 = 25 * 0.5
    for i in range(19):
        _feed(d, t0 + i * 0.5, {0: (10.0, 1.0), 1: (10.5, 1.0)})
    assert d.straggler is not None  # even for 9 s only
    assert _feed(d, t0 + 10.0, {0: (10.0, 1.0), 1: (10.5, 1.0)})
    assert d.straggler is None


def test_a_rank_that_stopped_sending_is_left_out():
    d = StragglerDetector()
    d.add(1, 50.0, 0.0, 0.0)
    for i in range(30):
        d.add(0, 10.0, 1.0, 5.0 + i * 0.5)  # rank 1's cell ended at 0 s
    assert d.straggler is None and d.slowest(20.0) is None


def test_the_status_line_names_the_straggler():
    from jupyter_hvd.widgets.live_view import LiveView

    view = LiveView(2, [0], 100, ["loss"])
    message = "rank 1 is the straggler: 1.8x the others' compute per step"
    view.straggler(message)
    assert view.status()["straggler"] == message
    assert view.status_text().endswith(" · " + message)
    view.straggler(None)
    assert "straggler" not in view.status_text()


TRAIN = """
import os
import time
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(128, 512), torch.nn.ReLU(), torch.nn.Linear(512, 4))
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                               named_parameters=model.named_parameters())
x, y = torch.randn(256, 128), torch.randint(0, 4, (256,))


def train_step():
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    if rank == SLOW:
        time.sleep(0.03)
    opt.step()


t0 = time.monotonic()
while True:
    for _ in range(10):
        train_step()
    # Rank 0 decides for every rank (they must run as many steps): once the test is done watching, or after SECONDS.
    if hvd.broadcast_object(os.path.exists(STOP) or time.monotonic() - t0 > SECONDS, root_rank=0):
        break
"""


def _run(ip, pool, slow: int, seconds: float, stop: Path, seen: dict | None = None) -> tuple[float, float]:
    """Run TRAIN for `seconds` at most, until the pool file named a straggler; seconds from the cell's start until
    then, and from the first per-rank measurement in it until then (NaN: never named). `seen` gets the pool file's
    ranks, by rank, as the sidebar read them when the straggler was named."""
    from jupyter_hvd import state

    named_at: list[float] = []
    measured_at: list[float] = []  # when every rank's compute per step was first in the pool file
    t0, wall0 = time.monotonic(), time.time()
    done = False

    def watch() -> None:  # the pool file, as the sidebar reads it, while the cell runs
        while not done:
            data = state.read_pool(pool.file.path) or {}
            fresh = data.get("updated", 0) > wall0 + 0.2  # written after this cell began (it clears the field)
            running = fresh and data.get("state") == "running"
            if running and not measured_at and all(r.get("compute_ms") for r in data.get("ranks", [])):
                measured_at.append(time.monotonic() - t0)
            if running and data.get("straggler") and not named_at:
                named_at.append(time.monotonic() - t0)
                if seen is not None:
                    seen.update({r["rank"]: r for r in data["ranks"]})
                stop.touch()
            time.sleep(0.1)

    import threading

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    try:
        cell = TRAIN.replace("SECONDS", str(seconds)).replace("SLOW", str(slow)).replace("STOP", repr(str(stop)))
        ip.run_cell_magic("hvd", "", cell)
    finally:
        done = True
        thread.join()
    nan = float("nan")
    return (named_at[0] if named_at else nan), (named_at[0] - measured_at[0] if named_at and measured_at else nan)


def test_the_slow_rank_is_named_in_the_pool_file_and_under_the_cell(ip, pool, capsys, tmp_path):
    seen: dict = {}
    named_after, after_measured = _run(ip, pool, slow=1, seconds=90, stop=tmp_path / "stop", seen=seen)
    err = capsys.readouterr().err
    m = re.search(r"jupyter-hvd: rank 1 is the straggler: ([\d.]+)x the others' compute per step", err)
    assert m, err
    assert float(m.group(1)) >= 1.3
    # Named once the slow rank stayed slow for HOLD_S (10 s) after both ranks' first means reached the kernel, not
    # before. How soon after that is a figure (printed below, in bench/RESULTS.md), not a bound a loaded machine fails.
    assert after_measured >= HOLD_S - 1.0, after_measured
    data = json.loads(pool.file.path.read_text())
    assert data["straggler"]["rank"] == 1, data["straggler"]
    # What the sidebar showed while the ranks trained, and still shows after the cell (the tail of a few steps
    # after the last half second's means does not replace them).
    for ranks in (seen, {r["rank"]: r for r in data["ranks"]}):
        paces = {r: (round(v["compute_ms"], 1), round(v["wait_ms"], 1)) for r, v in ranks.items()}
        assert ranks[1]["compute_ms"] >= 25 > ranks[0]["compute_ms"], paces  # its 30 ms sleep overlaps its allreduce
        assert ranks[0]["wait_ms"] >= 20 > ranks[1]["wait_ms"], paces  # rank 0 waits for rank 1 at each step
    print(f"named {named_after:.1f} s after the cell started, {after_measured:.1f} s after the first measurement")


def test_an_even_run_names_nobody(ip, pool, capsys, tmp_path):
    named_after, _ = _run(ip, pool, slow=-1, seconds=13, stop=tmp_path / "stop")
    assert "straggler" not in capsys.readouterr().err
    data = json.loads(pool.file.path.read_text())
    assert data["straggler"] is None and named_after != named_after  # NaN: never named
    compute = [r["compute_ms"] for r in data["ranks"]]
    assert all(c > 0 for c in compute), compute  # measured on every rank, and nobody named for it
    # How alike the ranks' few milliseconds measure depends on what else runs on these 2 cores (2.4 against 5.0 ms
    # once, beside the other worker's tests): a timing, not a behaviour. That a wait is not counted as compute is
    # asserted above, at a 30 ms scale.
    print(f"compute per step (ms) by rank: {compute}")
