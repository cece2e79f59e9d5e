"""The kernel's book of snapshots (kernel/keep/snapshots.py): which generation is whole, which a restore takes, what is
deleted, what a failed write leaves, and which snapshot a number or a tag names. Pure logic: the ranks' reports are
made here."""

from __future__ import annotations

from jupyter_hvd.kernel.keep.snapshots import Snapshots
from jupyter_hvd.wire import CommitFailed, Committed, GenId


def written(rank: int, gen: GenId, tag: str = "", count: int = 1) -> Committed:
    return Committed(rank, gen, True, None, count, False, tag, 1.0, {"w": "value:Tensor"}, {"w": f"{rank}{gen}"})


def same(rank: int, gen: GenId, as_: GenId, tag: str = "") -> Committed:
    return Committed(rank, gen, False, as_, 1, False, tag, 1.0, {"w": "value:Tensor"}, {"w": "x"})


def book(ranks: int = 2, kept: int = 3, tags_kept: int = 10) -> Snapshots:
    s = Snapshots(kept, tags_kept)
    s.ranks = ranks
    return s


def test_a_failed_write_never_completes_its_generation_and_the_last_good_one_stays_the_target() -> None:
    s = book()
    for rank in (0, 1):
        s.note(written(rank, (1, 0)))
    assert s.target() is not None and s.target().gen == (1, 0)
    s.note(written(1, (2, 0), count=7))
    s.note(CommitFailed(0, (2, 0), "No space left on device", 300 * 2**20, 12 * 2**20))
    assert s.target().gen == (1, 0)
    said = "the snapshot of cell [7] could not be written on rank 0 (No space left on device: 300 MB to write, 12 MB"
    assert len(s.news) == 1 and said in s.news[0], s.news
    assert "snapshot #1" in s.news[0] and "stays the one to restore" in s.news[0], s.news
    s.note(CommitFailed(0, (3, 0), "No space left on device", 1, 1))
    assert len(s.news) == 1  # said once while the writes keep failing
    # Room again: rank 0 writes everything, rank 1's state is its part of the failed generation.
    s.note(written(0, (4, 0)))
    s.note(same(1, (4, 0), (2, 0)))
    assert s.target().gen == (4, 0) and s.target().parts == {0: (4, 0), 1: (2, 0)}
    assert "snapshots are written again: #2" in s.news[-1], s.news


def test_parts_of_generations_that_cannot_complete_are_deleted_unless_a_later_one_uses_them() -> None:
    s = book()
    for rank in (0, 1):
        s.note(written(rank, (1, 0)))
    s.note(written(1, (2, 0)))
    s.note(CommitFailed(0, (2, 0), "No space left on device"))
    s.note(written(1, (3, 0)))  # rank 1 changed again: its part of (2, 0) is used by nothing now
    s.note(CommitFailed(0, (3, 0), "No space left on device"))
    deleted = s.expire()
    assert deleted[1].gens == [(2, 0)], deleted  # (3, 0) is rank 1's newest: a later 'same as' may name it
    assert 0 not in deleted


def test_only_the_last_tags_kept_tagged_snapshots_stay_and_a_dropped_one_is_said() -> None:
    s = book(kept=1, tags_kept=2)
    for i, tag in enumerate(["a", "b", "c"], 1):
        for rank in (0, 1):
            s.note(written(rank, (i, 1), tag=tag))
    s.expire()
    assert [g.tag for g in s.complete()] == ["b", "c"]
    assert any("tagged snapshot #1 ('a'" in n and "c.HvdPool.tags_kept" in n for n in s.news), s.news


def test_a_tag_names_its_newest_snapshot_and_digits_name_numbers() -> None:
    s = book()
    for i, tag in enumerate(["best", "", "best"], 1):
        for rank in (0, 1):
            s.note(written(rank, (i, 1), tag=tag))
    assert s.find("best").number == 3
    assert s.find("2").number == 2
    try:
        s.find("9")
    except LookupError as exc:
        assert "there are 1 (best), 2, 3 (best)" in str(exc)
    else:
        raise AssertionError("no snapshot 9")


def test_a_snapshot_is_as_big_as_its_parts_where_they_were_written_values_included() -> None:
    # A snapshot of small values only said "0 bytes"; one whose parts were unchanged said "0 bytes" too.
    s = book()
    for rank in (0, 1):
        kinds = {"w": "state:Linear"}
        s.note(
            Committed(rank, (1, 0), True, None, 1, False, "", 1.0, kinds, {}, blobs={"ab": 4000}, manifest_bytes=300)
        )
    first = s.target()
    assert first is not None and s.size(first) == 4000 + 2 * 300  # the data both ranks share counted once
    s.note(Committed(0, (2, 0), True, None, 2, False, "", 2.0, kinds, {}, blobs={"cd": 8000}, manifest_bytes=300))
    s.note(same(1, (2, 0), (1, 0)))  # rank 1's part is the one it wrote for the first
    second = s.target()
    assert second is not None and second.gen == (2, 0) and s.size(second) == 8000 + 4000 + 2 * 300
    assert " 12 KB " in s.listing()
