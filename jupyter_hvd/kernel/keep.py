"""What a pool keeps across restarts, in the kernel: the setup journal (`%%hvd --setup` cells, in order), the kept
names (`%hvd_keep`), what the latest snapshot holds, and the successful cells of the pool's life (for
`%hvd_export`).

Runs in the user's kernel; plain records, no I/O. The snapshots themselves are files written by rank 0
(jupyter_hvd/engine/keep.py); the restore after a restart is kernel/restart.py's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .words import age_text, size_text


@dataclass
class Cell:
    """A `%%hvd` cell that succeeded on every rank."""

    source: str  # as the ranks ran it (IPython syntax already transformed)
    count: int | None  # the notebook's execution count, as in [7]
    cell_id: str  # the front end's id of the notebook cell ('' where it sends none)
    setup: bool = False


@dataclass
class Snapshot:
    """What rank 0 last wrote (a wire.Committed event)."""

    seq: int
    cell: int | None  # execution count of the cell it was taken in (or at the end of)
    kinds: dict[str, str]  # name -> module | optimizer | value
    skipped: dict[str, str]  # kept names left out, and why
    nbytes: int
    seconds: float
    at: float  # epoch s
    mid_cell: bool = False  # taken by jupyter_hvd.commit() inside the cell
    copy_seconds: float = 0.0  # what the training thread waited for it


@dataclass
class Keeper:
    """One pool's journal, kept names and cells."""

    journal: list[Cell] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    snapshot: Snapshot | None = None
    cells: list[Cell] = field(default_factory=list)

    def record(self, cell: Cell) -> str:
        """A cell succeeded on every rank: keep it for the export, and in the journal if it is a setup cell (the same
        notebook cell run again replaces its entry). Returns what the journal did ('' for other cells)."""
        self.cells.append(cell)
        if not cell.setup:
            return ""
        for i, entry in enumerate(self.journal):
            if (cell.cell_id and entry.cell_id == cell.cell_id) or (not cell.cell_id and entry.source == cell.source):
                self.journal[i] = cell
                return f"setup cell {i + 1} of {len(self.journal)} replaced"
        self.journal.append(cell)
        return f"setup cell {len(self.journal)} recorded"

    def remove(self, number: int) -> Cell:
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
        self.snapshot = None

    def note(self, committed: Any) -> None:
        """Rank 0 wrote a snapshot (a wire.Committed event)."""
        if self.snapshot is None or committed.seq >= self.snapshot.seq:
            self.snapshot = Snapshot(
                committed.seq,
                committed.count,
                dict(committed.kinds),
                dict(committed.skipped),
                committed.nbytes,
                committed.seconds,
                committed.at,
                committed.mid_cell,
                committed.copy_seconds,
            )

    def listing(self) -> str:
        """What %hvd_keep with no names shows."""
        if not self.names:
            return "Nothing is kept. %hvd_keep NAME [NAME ...] keeps names of the ranks' namespaces across restarts."
        lines = [f"Kept: {', '.join(self.names)}"]
        snap = self.snapshot
        if snap is None:
            lines.append("No snapshot yet: one is taken at the end of the next successful %%hvd cell.")
        else:
            held = ", ".join(f"{n} ({k})" for n, k in snap.kinds.items()) or "nothing"
            when = f"{origin(snap.cell, snap.mid_cell)}, {age_text(snap.at)} ago"
            lines.append(
                f"Last snapshot: {held}, {when}, {size_text(snap.nbytes)} (training waited {snap.copy_seconds:.2f} s "
                f"for the copy; written in the background in {snap.seconds:.2f} s)."
            )
            for name, why in snap.skipped.items():
                lines.append(f"  {name}: not in it ({why})")
        return "\n".join(lines)

    def journal_listing(self) -> str:
        """What %hvd_setup shows."""
        if not self.journal:
            return "The setup journal is empty. Cells run with %%hvd --setup are replayed after every restart."
        lines = [f"Setup journal ({len(self.journal)} cells, replayed in this order after a restart):"]
        for i, cell in enumerate(self.journal, 1):
            first = next((ln.strip() for ln in cell.source.splitlines() if ln.strip()), "")
            lines.append(f"  {i}. cell [{cell.count if cell.count is not None else '?'}]  {first[:70]}")
        return "\n".join(lines)


def origin(count: int | None, mid_cell: bool) -> str:
    """'from the end of cell [7]' or 'from commit() in cell [8]'."""
    cell = f"[{count}]" if count is not None else "(no number)"
    return f"from commit() in cell {cell}" if mid_cell else f"from the end of cell {cell}"
