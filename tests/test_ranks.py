"""Rank sets as users write them and as messages name them (pure logic)."""

import pytest

from jupyter_hvd.kernel.errors import group_errors
from jupyter_hvd.kernel.ranks import format_ranks, parse_ranks


@pytest.mark.parametrize(
    ("spec", "size", "ranks"),
    [("all", 4, [0, 1, 2, 3]), ("0", 2, [0]), ("0,2", 4, [0, 2]), ("1-3", 4, [1, 2, 3]), (" 3, 0-1 ", 4, [0, 1, 3])],
)
def test_parse_ranks(spec, size, ranks):
    assert parse_ranks(spec, size) == ranks


@pytest.mark.parametrize(
    ("spec", "message"), [("4", "ranks 0-3"), ("a", "write 'all'"), ("3-1", "ranks 0-3"), (",", "at least one")]
)
def test_parse_ranks_rejects(spec, message):
    with pytest.raises(ValueError, match=message):
        parse_ranks(spec, 4)


@pytest.mark.parametrize(
    ("ranks", "text"), [([2], "rank 2"), ([0, 1, 2, 3], "ranks 0-3"), ([5, 0, 2, 6, 7], "ranks 0,2,5-7")]
)
def test_format_ranks(ranks, text):
    assert format_ranks(ranks) == text


def test_group_errors_dedups_identical_and_keeps_distinct():
    tb = 'Traceback (most recent call last):\n  File "<hvd-cell-1>", line 1\nValueError: boom\n'
    errs = [{"rank": r, "ename": "ValueError", "evalue": "boom", "traceback": tb} for r in range(4)]
    errs.append({"rank": 4, "ename": "KeyError", "evalue": "'x'", "traceback": "tb"})
    text = group_errors(errs)
    assert "ranks 0-3: ValueError: boom" in text
    assert text.count("Traceback") == 1
    assert "rank 4: KeyError: 'x'" in text
