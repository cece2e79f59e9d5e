"""What goes into a pool's file (jupyter_hvd/state/): the pool as the sidebar and the reaper see it.

Runs in the user's kernel. The cell runner and the watcher hand in per-rank measurements as they come; the file is
written by the watcher thread (`publish`), so a cell never waits for file IO, and at once (`write`) when the
processes change, since the reaper kills what the file names.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import asdict, fields
from typing import TYPE_CHECKING, Any, Protocol

from ... import state
from ..ranks import Rank

if TYPE_CHECKING:
    from ..keep.journal import Keeper

_RANK_FIELDS = {f.name for f in fields(state.RankRecord)}

CELL_FIGURES = ("step", "loss", "compute_ms", "wait_ms", "last_line")  # state.RankRecord's fields of the running cell


class PoolView(Protocol):
    """What the writer reads of a pool (kernel/launch/pool.py)."""

    id: str
    started_at: float
    state: str
    busy_cell: str | None
    busy_own: bool
    ranks: list[Rank]
    keeper: Keeper  # its setup journal: how many entries a restart replays

    @property
    def options_dict(self) -> dict[str, Any]: ...

    @property
    def np(self) -> int: ...

    def channel_problems(self) -> list[str]: ...

    def kept_summary(self) -> dict[str, Any]: ...


class PoolFile:
    """The pool file of one pool and the measurements only it keeps (step, loss, load per rank; NaN and straggler
    notes; failed threads)."""

    def __init__(self, pool_id: str) -> None:
        self.path = state.pool_file(pool_id)
        self.rank_stats: dict[int, dict[str, Any]] = {}
        self.kernel_problems: list[str] = []
        self.nonfinite: state.Nonfinite | None = None  # where a metric of the running or last cell became NaN/Inf
        self.straggler: state.Straggler | None = None  # the rank that set the pace of the running or last cell
        self.where: state.WhereReport | None = None  # where the ranks were when last asked (kernel/diagnose/where.py)
        self.processes: list[dict[str, Any]] = []
        self.slurm_job = ""  # the engines' SLURM job, for the reaper to cancel if the kernel dies
        # _lock: the figures and the record made of them change as one (a write between a cell's start and its
        # figures' reset showed the cell before's step under the new cell's start). _io: one writer at a time, in
        # order, without making the cell wait for the disk.
        self._lock = threading.Lock()
        self._io = threading.Lock()
        self._identity = state.kernel_identity()
        self._engines: tuple[int, ...] = ()  # the engines' pids: new ones mean a restart
        self.engines_started = 0.0
        self.cell_started = 0.0  # epoch s: when the running (or last) cell started (the sidebar's clock for it)
        self.poke: Callable[[], None] | None = None  # the watcher's: write soon, from its thread

    def update_ranks(self, stats: dict[int, dict[str, Any]]) -> None:
        """Merge per-rank measurements (fields of state.RankRecord). A name that is not a field is a bug here: it
        would only fail later, when the file is written from the watcher's thread, where nobody sees it."""
        for values in stats.values():
            unknown = set(values) - _RANK_FIELDS
            if unknown:
                raise ValueError(f"not fields of a rank's record: {sorted(unknown)}")
        with self._lock:
            for rank, values in stats.items():
                self.rank_stats.setdefault(rank, {}).update(values)

    def start_of_cell(self) -> bool:
        """A cell starts: the figures of the one before (step, loss, per-step times, last line) are not this one's.
        Returns whether there were any (then the file should be written again, even for a cell too short to show)."""
        with self._lock:
            self.cell_started = time.time()  # no write here: the sidebar dates figures and Where by it
            cleared = False
            for stats in self.rank_stats.values():
                for name in CELL_FIGURES:
                    cleared |= stats.pop(name, None) is not None
            return cleared

    def end_of_cell(self) -> None:
        """A stall ends with its cell, as does a breakpoint()'s pdb."""
        with self._lock:
            for stats in self.rank_stats.values():
                if stats.get("state") == "stalled":
                    del stats["state"]
                stats.pop("stalled_on", None)
                if stats.get("state") == "debugger":
                    del stats["state"]

    def end_of_debugging(self, rank: int) -> None:
        """A breakpoint()'s pdb let `rank` go: its state is the pool's again."""
        with self._lock:
            if self.rank_stats.get(rank, {}).get("state") == "debugger":
                del self.rank_stats[rank]["state"]

    def note_problem(self, text: str) -> bool:
        """Keep what failed in the kernel (newest first, 20 at most); False when it was the last one noted."""
        if self.kernel_problems[:1] == [text[:2000]]:
            return False
        self.kernel_problems = [text[:2000], *self.kernel_problems][:20]
        return True

    def problems(self, pool: PoolView) -> list[str]:
        """What failed in jupyter-hvd's own threads or in users' threads, newest first (kernel's, then ranks')."""
        return [*self.kernel_problems, *pool.channel_problems()]

    def write(self, pool: PoolView) -> None:
        """Write the file as the pool is now."""
        with self._io:
            with self._lock:
                record = self._record(pool)
            state.write_pool(self.path, record)

    def _record(self, pool: PoolView) -> state.PoolRecord:
        """The record of the pool as it is now (under _lock)."""
        engines = tuple(r.pid for r in pool.ranks)
        if engines and engines != self._engines:
            self._engines, self.engines_started = engines, time.time()
        ranks = [state.RankRecord(**{**asdict(r), **self.rank_stats.get(r.rank, {})}) for r in pool.ranks]
        return state.PoolRecord(
            id=pool.id,
            state=pool.state,
            np=pool.np,
            options=pool.options_dict,
            started=pool.started_at,
            backend=pool.ranks[0].tensor_ops if pool.ranks else "",
            hosts=sorted({r.host for r in pool.ranks}),
            ranks=ranks,
            processes=[state.ProcessEntry(**p) for p in self.processes],
            slurm_job=self.slurm_job,
            cell=pool.busy_cell,
            cell_own=pool.busy_own,
            problems=self.problems(pool),
            nonfinite=self.nonfinite,
            straggler=self.straggler,
            engines_started=self.engines_started or pool.started_at,
            where=self.where,
            cell_started=self.cell_started,
            journal_entries=len(pool.keeper.journal),
            **pool.kept_summary(),
            **self._identity,
        )

    def publish(self, pool: PoolView) -> None:
        """Have the file rewritten soon (by the watcher's thread, within milliseconds), or now without a watcher."""
        if self.poke is not None:
            self.poke()
        else:
            self.write(pool)

    def remove(self) -> None:
        """The pool stopped: its file goes."""
        state.remove(self.path)


class Published(Protocol):
    """A pool as those who change what its file shows see it (kernel/launch/pool.py): the file, rewritten soon."""

    file: PoolFile

    def publish(self) -> None: ...
