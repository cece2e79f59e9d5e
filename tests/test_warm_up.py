"""The engine's own background work before its first cell (engine/preload.py: torch and Horovod imported, the
device warmed up by engine/bootstrap.py) never runs beside user code, and never changes the user's numbers."""

from __future__ import annotations

import torch
from conftest import Kernel

from jupyter_hvd.engine.bootstrap import _warm_up


def test_the_warm_up_leaves_torchs_random_numbers_alone() -> None:
    """It may run while the user types the first cell, which seeds torch: it must draw no random number, or a seeded
    notebook and its exported script would train to different numbers."""
    torch.manual_seed(0)
    expected = torch.rand(4)
    torch.manual_seed(0)
    _warm_up(torch, torch.device("cpu"))
    assert torch.equal(torch.rand(4), expected)


def test_the_first_cell_runs_after_the_engines_background_work() -> None:
    """A cell sent the moment %hvd_start returns finds no preload or warm-up thread running on any rank."""
    k = Kernel()
    try:
        r = k.run("%load_ext jupyter_hvd\n%hvd_start -np 2", timeout=120)
        assert r.status == "ok", r.error_text
        cell = "%%hvd --ranks all\nimport threading\n"
        cell += "print(rank, sorted(t.name for t in threading.enumerate() if t.name.startswith('jupyter-hvd ')))"
        r = k.run(cell, timeout=120)
        assert r.status == "ok", r.error_text
        lines = [ln for ln in r.stdout.splitlines() if ln.startswith("[rank ")]
        assert sorted(ln.split("]")[0] for ln in lines) == ["[rank 0", "[rank 1"], r.stdout  # both ranks answered
        assert "preload" not in r.stdout and "warm-up" not in r.stdout, r.stdout
        k.run("%hvd_stop", timeout=60)
    finally:
        k.shutdown()
