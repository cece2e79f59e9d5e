"""Everything the kernel does with kept names, for one pool, in one place: keep and forget names, have the ranks
snapshot them (at a cell's end, at %hvd_keep), let old snapshots expire, say what the snapshots have to say, bring
the setup journal and the kept names back after a restart, rewind, and journal pushes. The magics, the cell's owner
(kernel/owner.py) and the restart all go through it.

What is kept is the keeper's (kernel/keep/journal.py), the generations the snapshots' (kernel/keep/snapshots.py); what
comes back after a restart kernel/keep/bring_back.py's. The ranks' side is engine/keep/.

Runs in the user's kernel.
"""

from __future__ import annotations

import sys
from dataclasses import replace

from ... import wire
from .. import transfer
from ..cell.run import next_number
from ..channel import ChannelError
from ..launch.pool import Pool
from . import bring_back
from .journal import Cell
from .snapshots import Generation


class Keep:
    """The keep service of `pool`."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.keeper = pool.keeper
        self.snapshots = pool.keeper.snapshots

    # ---- names -----------------------------------------------------------------------------------------------

    def keep(self, names: list[str], count: int | None) -> None:
        """%hvd_keep NAME...: keep them from now on, with a snapshot now (behind whatever the ranks were asked
        before), every rank's part written before this returns."""
        with self.pool.lock:
            self.keeper.keep(names)
            self.configure()
            self._commit(count)
            self.settle()

    def forget(self, names: list[str]) -> list[str]:
        """Stop keeping `names`; those that were not kept."""
        with self.pool.lock:
            unknown = self.keeper.forget(names)
            self.configure()
            self.settle()
        return unknown

    def configure(self) -> None:
        """Tell every rank what to keep and where its snapshots go."""
        bring_back.configure(self.pool)

    def settle(self) -> None:
        """Every rank's reports so far are read: each snapshot part asked for before is known (written or failed)."""
        if self.pool.channel is not None:
            self.pool.channel.settle(len(self.pool.ranks))  # a Pong follows a rank's Committed

    # ---- snapshots -----------------------------------------------------------------------------------------

    def after_cell(self, source: str, count: int | None, cell_id: str, setup: bool, commits: dict[int, int]) -> None:
        """Every rank ran a user's cell to its end: keep it for the export (and the journal when it is a setup cell),
        and snapshot the kept names."""
        with self.pool.lock:
            said = self.keeper.record(Cell(source, count, cell_id, setup))
            if said:
                print(f"jupyter-hvd: {said}; %hvd_setup lists the journal.", flush=True)
            self.snapshots.commits_differ(count, commits)
            if self.keeper.names and self.pool.channel is not None:
                try:  # behind this cell on each rank; each copies what changed, a thread writes it
                    self._commit(count)
                except ChannelError:
                    pass  # a rank that died after its end: the next cell finds out
            self.say_news()
            self.expire()

    def _commit(self, count: int | None) -> None:
        assert self.pool.channel is not None
        gen = (next_number(), 0)  # after the cell's own commit() generations
        self.pool.channel.send_all(wire.Commit(count, gen))

    def expire(self) -> None:
        """Snapshots beyond those kept (and parts of ones that will never complete) are removed on their ranks."""
        channel = self.pool.channel
        try:
            size = len(self.pool.ranks)
            for rank, prune in self.snapshots.expire().items():
                if channel is None or not size:
                    continue
                if rank < size:
                    channel.send(rank, prune)
                else:  # a rank gone since the pool was resized to fewer: one of its peers deletes its parts
                    channel.send(rank % size, replace(prune, rank=rank))
        except ChannelError:
            pass

    def say_news(self) -> None:
        """What the snapshots had to say (a write that failed, a name that cannot be kept, ranks that differ), once
        each, after reading what the ranks reported between cells."""
        if self.pool.channel is not None and self.pool.lock.acquire(blocking=False):
            try:
                self.pool.channel.drain()
            finally:
                self.pool.lock.release()
        news = self.snapshots.news
        while news:
            print(f"jupyter-hvd: {news.pop(0)}", file=sys.stderr, flush=True)

    def listing(self) -> str:
        """%hvd_snapshots: every snapshot, after expiring old ones."""
        with self.pool.lock:
            if self.pool.channel is not None:
                self.pool.channel.drain()
            self.expire()
        return self.snapshots.listing(self.pool.disk_used())

    def find(self, which: str | None) -> Generation | None:
        """The snapshot %hvd_rewind names (a number or a tag; None: the newest), once every part written so far is
        known. LookupError: there is none such."""
        with self.pool.lock:
            self.settle()
        return self.snapshots.find(which) if which is not None else self.snapshots.newest()

    # ---- coming back -----------------------------------------------------------------------------------------

    def bring_back(self) -> str:
        """After a restart: the setup journal replayed, the kept names restored; what came back, in words."""
        return bring_back.bring_back(self.pool)

    def rewind(self, generation: Generation) -> str:
        """%hvd_rewind: `generation` loaded into the running pool, without a restart; what came back, in words."""
        return bring_back.rewind(self.pool, generation)

    def journal_push(self, payload: transfer.Payload, count: int | None, cell_id: str) -> None:
        """A push reached every rank: its values are kept for the replay after a restart. OSError: they could not be
        written."""
        bring_back.journal_push(self.pool, payload, count, cell_id)
