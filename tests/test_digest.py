"""A cell's output is read once (jupyter_hvd/digest.py): the lines a terminal shows, parsed once, and the sidebar's
figures and the NaN warning come from the same lines the view plots."""

from __future__ import annotations

from jupyter_hvd.digest import Digest


def test_lines_split_across_chunks_are_joined_and_parsed_once() -> None:
    digest = Digest()
    first = digest.feed(0, "stdout", "epoch 1 lo")
    assert first.lines == [] and first.partial == "epoch 1 lo"
    second = digest.feed(0, "stdout", "ss=0.5\nepoch 2 loss=0.25\n")
    assert [(line.text, line.ended) for line in second.lines] == [
        ("epoch 1 loss=0.5", True),
        ("epoch 2 loss=0.25", True),
    ]
    assert [line.parsed.values["loss"] for line in second.lines] == [0.5, 0.25]
    assert second.partial == ""


def test_each_rank_and_stream_has_its_own_line() -> None:
    digest = Digest()
    digest.feed(0, "stdout", "rank zero ")
    digest.feed(1, "stdout", "rank one\n")
    digest.feed(0, "stderr", "warning\n")
    assert [line.text for line in digest.feed(0, "stdout", "says\n").lines] == ["rank zero says"]


def test_a_progress_bar_hands_out_each_rewritten_state_once() -> None:
    digest = Digest()
    chunks = [digest.feed(0, "stderr", f"\r{i}/3 [00:01<00:02, loss={1 / (i + 1)}]") for i in range(4)]
    lines = [line for c in chunks for line in c.lines]
    assert [line.text for line in lines] == [f"{i}/3 [00:01<00:02, loss={1 / (i + 1)}]" for i in range(3)]
    assert not any(line.ended for line in lines)
    assert chunks[-1].partial.startswith("3/3")
