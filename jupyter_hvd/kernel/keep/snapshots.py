"""A pool's snapshots as the kernel sees them: generations put together from every rank's part, which one a restore
uses, which stay on disk, and what `%hvd_snapshots` shows.

Each rank writes its own part of a generation, or says its state is that of an earlier part of its own (nothing of
it changed): a generation is complete when every rank has said. Only complete generations are restored. A rank that
could not write its part (a full disk) says so: that generation never completes, the other ranks' parts of it go
(unless a later generation uses them), and the rank writes everything at its next snapshot. The last `kept`
generations stay, with the last `tags_kept` tagged ones (`jupyter_hvd.commit(tag=...)`) and the one a failed restore
could not bring back (pinned until a restore of it succeeds), so the last good snapshot is never replaced by state
that was not restored. What is dropped is deleted by the ranks that wrote it (`expire`).

Runs in the user's kernel; plain records, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...wire import CommitFailed, Committed, GenId, Prune
from ..ranks import format_ranks
from ..words import age_text, size_text


@dataclass
class Generation:
    """One snapshot: every rank's part of it."""

    gen: GenId
    count: int | None = None  # the notebook's execution count of the cell it was taken in (or at the end of)
    mid_cell: bool = False  # taken by jupyter_hvd.commit() inside the cell
    tag: str = ""
    at: float = 0.0
    parts: dict[int, GenId] = field(default_factory=dict)  # rank -> the generation whose part holds its state
    reports: dict[int, Committed] = field(default_factory=dict)
    number: int = 0  # as %hvd_snapshots shows it, once complete

    def names(self) -> list[str]:
        names: list[str] = []
        for report in self.reports.values():
            names += [n for n in report.kinds if n not in names and n not in report.skipped]
        return names

    def skipped(self) -> dict[str, str]:
        skipped: dict[str, str] = {}
        for rank, report in sorted(self.reports.items()):
            for name, why in report.skipped.items():
                skipped.setdefault(name, f"{why} (rank {rank})" if len(self.reports) > 1 else why)
        return skipped

    def origin(self) -> str:
        return origin(self.count, self.mid_cell)


class Snapshots:
    """The generations of one pool, newest last."""

    def __init__(self, kept: int = 3, tags_kept: int = 10) -> None:
        self.kept = kept
        self.tags_kept = tags_kept
        self.ranks = 0  # how many parts make a generation
        self.generations: dict[GenId, Generation] = {}
        self.written: dict[int, set[GenId]] = {}  # rank -> its parts on disk
        self.newest_part: dict[int, GenId] = {}
        self.pinned: GenId | None = None  # the last good generation, while a restore of it failed
        self.news: list[str] = []  # to say under the next cell
        self._said: set[tuple[str, str]] = set()
        self._numbers = 0
        self.failed: dict[GenId, dict[int, CommitFailed]] = {}  # generations a rank could not write, never complete
        self._failing = False  # a failed write was said; the next complete generation says the writes work again

    def clear(self) -> None:
        self.generations.clear()
        self.written.clear()
        self.newest_part.clear()
        self.failed.clear()
        self.pinned = None

    # ---- what the ranks say ---------------------------------------------------------------------------------

    def note(self, report: Committed | CommitFailed) -> None:
        """A rank wrote its part of a generation, said it is the same as an earlier part of its own, or could not
        write it."""
        gen: GenId = (int(report.gen[0]), int(report.gen[1]))
        if isinstance(report, CommitFailed):
            self._write_failed(gen, report)
            return
        if gen in self.failed:  # another rank's part of a generation that cannot complete: only its files count
            if report.changed:
                self.written.setdefault(report.rank, set()).add(gen)
                self.newest_part[report.rank] = max(gen, self.newest_part.get(report.rank, gen))
            return
        g = self.generations.setdefault(gen, Generation(gen))
        if report.changed:
            self.written.setdefault(report.rank, set()).add(g.gen)
            g.parts[report.rank] = g.gen
            self.newest_part[report.rank] = max(g.gen, self.newest_part.get(report.rank, g.gen))
        elif report.same_as is not None:
            g.parts[report.rank] = (int(report.same_as[0]), int(report.same_as[1]))
        g.reports[report.rank] = report
        g.count, g.mid_cell, g.at = report.count, report.mid_cell, max(g.at, report.at)
        g.tag = g.tag or report.tag
        for name, why in report.skipped.items():
            if why != "not defined":
                self._say(name, f"{name} is not kept: {why}. The other kept names are.")
        # A part said to be "the same as" an earlier one may still be on its way to disk: complete in order.
        for waiting in sorted(self.generations.values(), key=lambda w: w.gen):
            if not waiting.number and self._whole(waiting):
                self._completed(waiting)

    def _write_failed(self, gen: GenId, report: CommitFailed) -> None:
        """Rank `report.rank` could not write its part of `gen`: that generation will never complete."""
        self.failed.setdefault(gen, {})[report.rank] = report
        g = self.generations.pop(gen, None)
        count = g.count if g is not None else None
        if self._failing:
            return
        self._failing = True
        ranks = format_ranks(sorted(self.failed[gen]))
        need = f": {size_text(report.needed)} to write, {size_text(report.free)} free" if report.needed else ""
        last = self.target()
        stays = f"snapshot #{last.number} ({last.origin()}) stays the one to restore" if last else "nothing is kept yet"
        cell = f" of cell [{count}]" if count is not None else ""
        self.news.append(
            f"the snapshot{cell} could not be written on {ranks} ({report.why}{need}): training goes on, {stays}; "
            "each cell's end (and commit()) writes it again, whether or not it changed, until it succeeds."
        )

    def _whole(self, g: Generation) -> bool:
        return (
            bool(self.ranks)
            and len(g.parts) == self.ranks
            and all(part in self.written.get(rank, ()) for rank, part in g.parts.items())
        )

    def _completed(self, g: Generation) -> None:
        newest = self.newest()
        if newest is not None and newest.gen != g.gen and newest.parts == g.parts and not g.tag:
            del self.generations[g.gen]  # nothing changed on any rank: the same snapshot again
            return
        if not g.number:
            self._numbers += 1
            g.number = self._numbers
        if self._failing:
            self._failing = False
            self.news.append(f"snapshots are written again: #{g.number} ({g.origin()}) is on disk on every rank.")
        for name in g.names():
            kinds = {r.kinds.get(name, "").split(":")[0] for r in g.reports.values()}
            digests = {r.rank: r.digests.get(name) for r in g.reports.values() if r.digests.get(name)}
            if kinds & {"module", "optimizer"} and len(set(digests.values())) > 1:
                ranks = sorted(digests)
                self._say(
                    name,
                    f"{name} differs between ranks {', '.join(map(str, ranks))} (e.g. buffers such as BatchNorm "
                    "statistics that training does not synchronise): each rank's own is kept.",
                )

    def _say(self, key: str, text: str) -> None:
        if (key, text) not in self._said:
            self._said.add((key, text))
            self.news.append(text)

    def commits_differ(self, count: int | None, commits: dict[int, int]) -> None:
        """At a cell's end: how many times each rank called commit(); a generation without every rank is named."""
        if len(set(commits.values())) <= 1:
            return
        said = ", ".join(f"{n} on rank {r}" for r, n in sorted(commits.items()))
        self._say(
            f"commits {count}",
            f"jupyter_hvd.commit() ran {said} in cell [{count}]: a snapshot holds every rank's state, so only the "
            f"first {min(commits.values())} could be kept. Call commit() on every rank.",
        )

    # ---- which generation -----------------------------------------------------------------------------------

    def complete(self) -> list[Generation]:
        return sorted((g for g in self.generations.values() if g.number), key=lambda g: g.gen)

    def newest(self) -> Generation | None:
        done = self.complete()
        return done[-1] if done else None

    def size(self, g: Generation) -> int:
        """Bytes of what `g` holds: each rank's part, where it was written (an unchanged part is an earlier
        generation's), tensor data shared by ranks counted once."""
        blobs: dict[str, int] = {}
        values = 0
        for rank, part in g.parts.items():
            report = self.generations[part].reports.get(rank) if part in self.generations else None
            report = report or g.reports.get(rank)
            if report is not None:
                blobs.update(report.blobs)
                values += report.manifest_bytes
        return sum(blobs.values()) + values

    def target(self) -> Generation | None:
        """What a restore brings back: the pinned generation, else the newest complete one."""
        if self.pinned is not None and self.pinned in self.generations:
            return self.generations[self.pinned]
        return self.newest()

    def find(self, ref: str) -> Generation:
        """The generation %hvd_snapshots numbers `ref` (all digits), else the newest tagged `ref`; LookupError naming
        what there is."""
        done = self.complete()
        if ref.isdigit():
            found = [g for g in done if g.number == int(ref)]
        else:
            found = [g for g in done if g.tag == ref]
        if found:
            return found[-1]
        there = ", ".join(f"{g.number}" + (f" ({g.tag})" if g.tag else "") for g in done)
        raise LookupError(f"no snapshot {ref}: there are {there}" if there else "there is no snapshot yet")

    def drop(self, g: Generation) -> None:
        """Forget a generation that cannot be read any more (unpinned if it was pinned)."""
        self.generations.pop(g.gen, None)
        if self.pinned == g.gen:
            self.pinned = None

    def pin(self, g: Generation) -> None:
        self.pinned = g.gen

    def unpin(self) -> None:
        self.pinned = None

    def expire(self) -> dict[int, Prune]:
        """Drop what is no longer kept; per rank, the request to delete its parts of it."""
        done = self.complete()
        tagged = [g for g in done if g.tag]
        keep = {g.gen for g in done[-self.kept :]} | {g.gen for g in tagged[len(tagged) - self.tags_kept :]}
        if self.tags_kept == 0:
            keep -= {g.gen for g in tagged}
        if self.pinned is not None:
            keep.add(self.pinned)
        for g in tagged:
            if g.gen not in keep and g.gen in self.generations:
                self.news.append(
                    f"tagged snapshot #{g.number} ({g.tag!r}, {g.origin()}) was deleted: {self.tags_kept} tagged ones "
                    "are kept (c.HvdPool.tags_kept)."
                )
        newest = done[-1].gen if done else None
        for gen, g in list(self.generations.items()):
            if gen in keep:
                continue
            if g.number or (newest is not None and gen < newest):
                del self.generations[gen]  # older ones, and ones some rank never completed
        live: dict[int, set[GenId]] = {}
        for g in self.generations.values():
            for rank, part in g.parts.items():
                live.setdefault(rank, set()).add(part)
        delete: dict[int, Prune] = {}
        for rank, parts in self.written.items():
            # A rank's newest part is what its next unchanged snapshot refers to; a rank gone since a resize has none.
            newest_kept = {self.newest_part.get(rank)} if rank < self.ranks or not self.ranks else set()
            keep_parts = live.get(rank, set()) | newest_kept
            pending = {gen for gen in self.generations if not self.generations[gen].number}
            gone = sorted(p for p in parts if p not in keep_parts and p not in pending)
            if gone:
                delete[rank] = Prune(gone)
                parts.difference_update(gone)
        for gen in [gen for gen in self.failed if all(gen not in parts for parts in self.written.values())]:
            del self.failed[gen]  # every rank's part of it is gone
        return delete

    # ---- what the user sees ---------------------------------------------------------------------------------

    def listing(self, disk: int | None = None) -> str:
        done = self.complete()
        if not done:
            return "No snapshot yet: one is taken at the end of the next successful %%hvd cell."
        target = self.target()
        lines = [f"{'#':>3}  {'taken':<26} {'age':>8}  {'size':>9}  names"]
        for g in reversed(done):
            mark = ""
            if g.tag:
                mark += f"  tag {g.tag!r}"
            if target is not None and g.gen == target.gen:
                mark += "  <- a restart restores this one" + (" (last good: pinned)" if self.pinned else "")
            lines.append(
                f"{g.number:>3}  {g.origin()[5:]:<26} {age_text(g.at):>8}  {size_text(self.size(g)):>9}  "
                f"{', '.join(g.names())}{mark}"
            )
        kept = f"The last {self.kept} are kept, and the last {self.tags_kept} tagged ones (jupyter_hvd.commit(tag=...))"
        lines.append(kept + (f"; {size_text(disk)} on disk." if disk is not None else "."))
        lines.append("%hvd_rewind N (or TAG) loads one into the running pool.")
        return "\n".join(lines)


def origin(count: int | None, mid_cell: bool) -> str:
    """'from the end of cell [7]' or 'from commit() in cell [8]'."""
    cell = f"[{count}]" if count is not None else "(no number)"
    return f"from commit() in cell {cell}" if mid_cell else f"from the end of cell {cell}"


def describe(result: dict[str, Any]) -> str:
    """'restored model, opt from commit() in cell [8], 3 s ago'."""
    when = f", {age_text(result['at'])} ago" if result.get("at") else ""
    return f"restored {', '.join(result['restored'])} {origin(result.get('count'), bool(result.get('mid_cell')))}{when}"
