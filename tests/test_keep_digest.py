"""What a snapshot compares to know whether a kept tensor changed (engine/keep/content.py), and what it takes for a
shard (engine/keep/shards.py). Pure logic on CPU tensors: the device digest runs on the CPU too."""

from __future__ import annotations

import sys
import types

import pytest
import torch

from jupyter_hvd.engine.keep import content, shards


@pytest.mark.parametrize("digest", [content.of_tensor, content.on_device])
def test_any_change_of_the_bytes_changes_the_digest_and_equal_bytes_give_equal_digests(digest) -> None:
    t = torch.randn(3 * content.ROW + 5)
    before = digest(t)
    assert digest(t.clone()) == before
    for change in (
        lambda u: u.__setitem__(7, u[7] + 1),  # one value
        lambda u: u.__setitem__([3, 9], u[[9, 3]]),  # two values swapped in one row
        lambda u: u.__setitem__([2, content.ROW + 2], u[[content.ROW + 2, 2]]),  # swapped in one column
        lambda u: u.__setitem__(-1, u[-1] + 1),  # the tail that fills no row
        lambda u: u.numpy().__setitem__(0, 0.0),  # through numpy: torch's counter does not see it
    ):
        u = t.clone()
        change(u)
        assert digest(u) != before


def test_every_dtype_and_an_empty_tensor_have_a_digest() -> None:
    for dtype in (torch.bfloat16, torch.float16, torch.bool, torch.int8, torch.complex64, torch.float64):
        x = torch.zeros(5000, dtype=dtype)
        assert len(content.of_tensor(x)) == 16 and len(content.on_device(x)) == 16
    assert content.of_tensor(torch.empty(0)) == content.on_device(torch.empty(0))


def test_a_non_contiguous_tensor_is_digested_by_its_values() -> None:
    t = torch.arange(12.0).reshape(3, 4)
    assert content.of_tensor(t.t()) == content.of_tensor(t.t().contiguous())


def test_a_module_another_thread_is_still_importing_has_no_shards_yet(monkeypatch) -> None:
    # The engine's warm-up imports torch.distributed.tensor in a thread: until DTensor is defined, no DTensor exists.
    monkeypatch.setitem(sys.modules, "torch.distributed.tensor", types.ModuleType("torch.distributed.tensor"))
    assert shards.is_shard(torch.ones(2)) is False
