"""What a pool keeps across restarts, in the kernel: the setup journal (`%%hvd --setup` cells and `%hvd_push`es, in
the order they happened), the kept names (`%hvd_keep`), their snapshots (kernel/keep/snapshots.py), and the successful
cells of the pool's life (for `%hvd_export`).

Runs in the user's kernel; plain records, no I/O. The snapshots themselves are files the ranks write
(jupyter_hvd/engine/keep/snapshot.py); what comes back after a restart is kernel/keep/bring_back.py's; pushed values are
in files of the pool's private directory (kernel/transfer.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..words import age_text, size_text
from .snapshots import Snapshots


@dataclass
class Cell:
    """A `%%hvd` cell that succeeded on every rank."""

    source: str  # as the ranks ran it (IPython syntax already transformed)
    count: int | None  # the notebook's execution count, as in [7]
    cell_id: str  # the front end's id of the notebook cell ('' where it sends none)
    setup: bool = False


@dataclass
class Push:
    """A `%hvd_push` that reached every rank: replayed with the setup cells, in order."""

    names: list[str]
    file: str  # the values, serialised, in the pool's private directory (kernel/transfer.py)
    count: int | None
    cell_id: str
    nbytes: int = 0


Entry = Cell | Push


@dataclass
class Keeper:
    """One pool's journal, kept names, snapshots and cells."""

    journal: list[Entry] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    snapshots: Snapshots = field(default_factory=Snapshots)
    cells: list[Cell] = field(default_factory=list)

    def record(self, cell: Cell) -> str:
        """A cell succeeded on every rank: keep it for the export, and in the journal if it is a setup cell (the same
        notebook cell run again replaces its entry). Returns what the journal did ('' for other cells)."""
        self.cells.append(cell)
        if not cell.setup:
            return ""
        return self._journal(cell, "setup cell")

    def record_push(self, push: Push) -> tuple[str, list[Push]]:
        """A push reached every rank: journaled once, in order. The pushes of an earlier run of the same notebook
        cell are replaced (the first one's place is this one's); a second push of the same run follows the first.
        What the journal did, and the pushes it replaced."""
        ours = {i: e for i, e in enumerate(self.journal) if isinstance(e, Push) and push.cell_id == e.cell_id != ""}
        earlier = [i for i, e in ours.items() if e.count != push.count]
        if earlier:
            replaced = [ours[i] for i in earlier]
            self.journal[earlier[0]] = push
            for i in reversed(earlier[1:]):
                del self.journal[i]
            return f"push {self.journal.index(push) + 1} of {len(self.journal)} in the setup journal replaced", replaced
        at = max(ours, default=len(self.journal) - 1) + 1
        self.journal.insert(at, push)
        return f"push recorded as entry {at + 1} of the setup journal", []

    def _journal(self, entry: Cell, what: str) -> str:
        for i, old in enumerate(self.journal):
            same = entry.cell_id and old.cell_id == entry.cell_id
            if not entry.cell_id:
                same = isinstance(old, Cell) and old.source == entry.source
            if isinstance(old, Cell) and same:
                self.journal[i] = entry
                return f"{what} {i + 1} of {len(self.journal)} in the setup journal replaced"
        self.journal.append(entry)
        return f"{what} recorded as entry {len(self.journal)} of the setup journal"

    def remove(self, number: int) -> Entry:
        """Remove journal entry `number` (1-based); raises IndexError naming the entries there are."""
        if not 1 <= number <= len(self.journal):
            raise IndexError(f"the setup journal has entries 1-{len(self.journal)}" if self.journal else "it is empty")
        return self.journal.pop(number - 1)

    def keep(self, names: list[str]) -> None:
        """Add `names` to what is kept (in order, once each)."""
        self.names += [n for n in names if n not in self.names]

    def forget(self, names: list[str]) -> list[str]:
        """Stop keeping `names`; returns those that were not kept."""
        unknown = [n for n in names if n not in self.names]
        self.names = [n for n in self.names if n not in names]
        return unknown

    def clear(self) -> None:
        """Start empty (%hvd_restart --fresh)."""
        self.journal.clear()
        self.names.clear()
        self.snapshots.clear()

    def listing(self) -> str:
        """What %hvd_keep with no names shows."""
        if not self.names:
            return "Nothing is kept. %hvd_keep NAME [NAME ...] keeps names of the ranks' namespaces across restarts."
        lines = [f"Kept: {', '.join(self.names)}"]
        snap = self.snapshots.target()
        if snap is None:
            lines.append("No snapshot yet: one is taken at the end of the next successful %%hvd cell.")
            return "\n".join(lines)
        copy = max((r.copy_seconds for r in snap.reports.values()), default=0.0)
        write = max((r.seconds for r in snap.reports.values()), default=0.0)
        size = size_text(self.snapshots.size(snap))
        lines.append(
            f"Last snapshot (#{snap.number}): {', '.join(snap.names()) or 'nothing'}, {snap.origin()}, "
            f"{age_text(snap.at)} ago, {size} (training waited {copy:.2f} s for the copy; "
            f"written in the background in {write:.2f} s). %hvd_snapshots lists them all."
        )
        for name, why in snap.skipped().items():
            lines.append(f"  {name}: not in it ({why})")
        return "\n".join(lines)

    def journal_listing(self) -> str:
        """What %hvd_setup shows."""
        if not self.journal:
            return (
                "The setup journal is empty. Cells run with %%hvd --setup, and %hvd_push, are replayed after every "
                "restart."
            )
        lines = [f"Setup journal ({len(self.journal)} entries, replayed in this order after a restart):"]
        for i, entry in enumerate(self.journal, 1):
            count = f"[{entry.count if entry.count is not None else '?'}]"
            if isinstance(entry, Push):
                lines.append(f"  {i}. cell {count}  %hvd_push {' '.join(entry.names)}")
            else:
                first = next((ln.strip() for ln in entry.source.splitlines() if ln.strip()), "")
                lines.append(f"  {i}. cell {count}  {first[:70]}")
        return "\n".join(lines)
