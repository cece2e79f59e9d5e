"""The engine's warm-up (engine/bootstrap.py) runs in a thread while the first cells may seed torch: it must draw no
random number, or a seeded notebook and its exported script would train to different numbers."""

from __future__ import annotations

import torch

from jupyter_hvd.engine.bootstrap import warm_up


def test_the_warm_up_leaves_torchs_random_numbers_alone() -> None:
    torch.manual_seed(0)
    expected = torch.rand(4)
    torch.manual_seed(0)
    warm_up(torch, torch.device("cpu"))
    assert torch.equal(torch.rand(4), expected)
