"""One owner of the kernel's pool and its life, as ipyparallel's Cluster owns its engines: it starts a pool, runs its
cells, restarts it (asked for, or because a cell lost it), starts a stopped one again, stops it, and carries out the
sidebar's asks, which wait in one typed queue (kernel/asks.py). What the notebook is told outside any cell is `Notices`.

The pool (kernel/launch/pool.py) is the record of what runs and knows how to launch and end its processes; what comes
back after a restart is the keep service's (kernel/keep/service.py); how a cell runs is kernel/cell/run.py's.

Runs in the user's kernel, on its main thread (the watcher hands the sidebar's Restart and Stop to the main loop).
"""

from __future__ import annotations

import errno
import logging
import os
import re
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from .asks import Ask, Asks
from .cell.run import CellOptions, CellRun
from .errors import CellFailed
from .keep.journal import Keeper
from .keep.service import Keep
from .launch.options import HvdPool
from .launch.pool import Pool
from .watcher import PoolWatcher

log = logging.getLogger("jupyter_hvd")


class Notices:
    """What the notebook is told outside any cell: what happened between cells (a Restart from the sidebar), said under
    the next cell or magic, and why the last pool ended where it ended outside any cell (said when the notebook next
    asks for a pool)."""

    def __init__(self) -> None:
        self._pending: list[str] = []
        self.last_words = ""

    def add(self, text: str) -> None:
        self._pending.append(text)

    def say(self) -> None:
        while self._pending:
            print(f"jupyter-hvd: {self._pending.pop(0)}", file=sys.stderr, flush=True)


class Owner:
    """The kernel's pool, from its start to its stop. `owner` below is the kernel's one."""

    def __init__(self) -> None:
        self.pool: Pool | None = None
        self.asks = Asks()
        self.notices = Notices()

    # ---- start and stop ------------------------------------------------------------------------------------

    def start(self, options: HvdPool, keeper: Keeper | None = None) -> Pool:
        """A new pool with `options`: its engines started and Horovod initialised, its watcher running; the kernel's
        pool from now on. `keeper`: what a stopped pool kept, to keep on the new one."""
        pool = Pool.start(options, keeper or Keeper())
        pool.watcher = PoolWatcher(pool, self.asks, act=lambda ask: self.act(pool, ask))
        pool.file.poke = pool.watcher.poke
        self.asks.clear()
        self.pool = pool
        self.notices.last_words = ""
        pool.watcher.start()
        return pool

    def stop(self, pool: Pool, why: str = "") -> None:
        """Stop `pool`'s engines, mpiexec and controller; no process is left. The kernel has no pool from the moment
        the stop is asked (a restart it cuts short, on another thread, then fails into no pool at all). `why`: said
        when the notebook next asks for a pool, where it ended outside any cell."""
        if self.pool is pool:
            self.pool = None
            self.asks.clear()
            if why:
                self.notices.last_words = why
        pool.end()

    def stop_at_exit(self) -> None:
        """Stop the kernel's pool when the kernel shuts down (a killed kernel is covered by the pool's reaper)."""
        if self.pool is not None:
            self.stop(self.pool)

    # ---- restart ---------------------------------------------------------------------------------------------

    def restart(self, pool: Pool, planned: bool = True, fresh: bool = False) -> tuple[Pool, str]:
        """Fresh engines with the same options, the setup journal replayed and the kept names restored; with `fresh`
        nothing comes back (the journal and the kept names are forgotten). A stopped pool (a failed restart) is started
        anew. Returns the running pool and what came back, in words. PoolError: the restart failed (the pool is
        stopped); KeyboardInterrupt: the user stopped it (Pool.interrupted_restart says where)."""
        if fresh:
            pool.keeper.clear()
            shutil.rmtree(pool.kept_dir, ignore_errors=True)
            shutil.rmtree(pool.pushed_dir, ignore_errors=True)
        if pool.stopped:
            pool = self._revive(pool)
        else:
            pool.replace_engines(planned)
        with pool.lock:
            return pool, Keep(pool).bring_back()

    def _revive(self, old: Pool) -> Pool:
        """Start a stopped pool again with its options; what it kept comes back on the new one."""
        pool = self.start(old.options, old.keeper)
        for old_dir, new_dir in ((old.kept_dir, pool.kept_dir), (old.pushed_dir, pool.pushed_dir)):
            if old_dir.is_dir():
                _move(old_dir, new_dir)
        shutil.rmtree(old.directory, ignore_errors=True)
        return pool

    def after_loss(self, pool: Pool, what: str) -> str:
        """Restart a pool that was lost (`what` happened: an engine died, ranks could not be released); what the user
        reads about it."""
        # The whole story is told once, under the cell when the restart is done; here only what is happening.
        headline = re.split(r"[:.(]\s", what, maxsplit=1)[0][:120]
        print(f"jupyter-hvd: {headline}: restarting the pool with the same options...", file=sys.stderr, flush=True)
        if self.asks.ending() is Ask.RESTART:
            self.asks.take_ending()  # this is that restart
        t0 = time.monotonic()
        what = f"{what[0].upper()}{what[1:]}"
        try:
            _, came_back = self.restart(pool, planned=False)
        except KeyboardInterrupt:
            return f"{what}. {pool.interrupted_restart()}"
        return f"{what}. The pool was restarted in {time.monotonic() - t0:.1f} s: {came_back}."

    # ---- cells -----------------------------------------------------------------------------------------------

    def run_cell(self, pool: Pool, source: str, options: CellOptions) -> Any:
        """Run a `%%hvd` cell on every rank (kernel/cell/run.py). A pool the cell lost is restarted, and the cell's
        error says what came back; a sidebar Restart or Stop asked for while the cell ran is carried out after it."""
        self.notices.say()
        run = CellRun(pool, source, options, self.asks)
        try:
            value = run.run()
            if options.record and run.succeeded:
                Keep(pool).after_cell(run.source, options.count, options.cell_id, options.setup, run.commits())
            return value
        except CellFailed as failed:
            if failed.lost is None:
                raise
            said = self.after_loss(pool, failed.lost.message)
            message = f"{failed.message}\n\n{said}" if failed.message else said
            raise CellFailed(message, "", failed.interrupted) from None
        finally:
            said = self._after_cell(pool)
            if said:
                print(f"jupyter-hvd: {said}", file=sys.stderr, flush=True)

    # ---- the sidebar -----------------------------------------------------------------------------------------

    def _after_cell(self, pool: Pool) -> str:
        """A Restart or Stop from the sidebar that waited for the running cell (or restart); what was done, in words."""
        ask = self.asks.take_ending()
        if ask is Ask.RESTART and not pool.stopped:
            t0 = time.monotonic()
            try:
                _, came_back = self.restart(pool)
            except KeyboardInterrupt:
                return pool.interrupted_restart()
            return f"the pool was restarted from the sidebar in {time.monotonic() - t0:.1f} s: {came_back}."
        if ask is Ask.STOP:
            self.stop(pool, "the pool was stopped from the sidebar")
            return "the pool was stopped from the sidebar; start a new one with %hvd_start -np N."
        return ""

    def act(self, pool: Pool, ask: Ask) -> None:
        """The sidebar's Restart or Stop between cells (on the kernel's main loop): said under the next cell."""
        if self.pool is not pool:
            return  # for a pool that ended meanwhile
        if pool.busy_cell is not None:  # a cell started in between: it stops, then carries the ask out
            self.asks.put(ask)
            return
        at = time.strftime("%H:%M:%S")
        if ask is Ask.RESTART:
            t0 = time.monotonic()
            try:
                _, came_back = self.restart(pool)
                self.notices.add(
                    f"the pool was restarted from the sidebar at {at}, in {time.monotonic() - t0:.1f} s: {came_back}."
                )
            except KeyboardInterrupt:  # the stop button, pressed while it ran between cells
                self.notices.add(f"the restart from the sidebar at {at} was interrupted. {pool.interrupted_restart()}")
            except Exception as exc:  # on the main loop nobody would see it: log it, keep it for %hvd_status
                log.exception("jupyter-hvd: the restart asked for from the sidebar failed")
                pool.note_problem(f"the restart asked for from the sidebar failed: {exc}")
                self.notices.add(f"the restart from the sidebar at {at} failed: {exc}")
            said = self._after_cell(pool)  # a Stop pressed while that restart ran
            if said:
                self.notices.add(said)
        elif ask is Ask.STOP:
            self.stop(pool, f"the pool was stopped from the sidebar at {at}")


def _move(old: Path, new: Path) -> None:
    """Give a new pool the snapshots or pushed values of the one it replaces: renamed, at once and whole (a copy
    would break the links that let snapshots share data, take the disk twice, and could be cut short); where the
    old directory is a mount point of its own, each file is linked or, on another file system, copied."""
    try:
        os.replace(old, new)
    except OSError as exc:
        if exc.errno not in (errno.EXDEV, errno.EBUSY):
            raise
        shutil.copytree(old, new, copy_function=_link_or_copy, dirs_exist_ok=True)


def _link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


owner = Owner()


def current() -> Pool | None:
    """The kernel's pool, if one is running (or stopped by a failed restart, which %hvd_restart starts again)."""
    return owner.pool
