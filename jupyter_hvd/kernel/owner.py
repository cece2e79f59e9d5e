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
import time
from pathlib import Path
from typing import Any

from . import tell
from .asks import Action, Ask, Asks
from .cell.run import CellOptions, CellRun
from .errors import CellFailed, PoolError
from .keep.journal import Keeper
from .keep.service import Keep
from .launch.options import HvdPool
from .launch.pool import Pool
from .tell import Said
from .watcher import PoolWatcher

log = logging.getLogger("jupyter_hvd")


class Notices:
    """What the notebook is told outside any cell: what happened between cells (a Restart from the sidebar), said under
    the next cell or magic, and why the last pool ended where it ended outside any cell (said when the notebook next
    asks for a pool)."""

    def __init__(self) -> None:
        self._pending: list[Said] = []
        self.last_words = ""

    def add(self, said: Said) -> None:
        self._pending.append(said)

    def say(self) -> None:
        while self._pending:
            tell.say(self._pending.pop(0))


class Owner:
    """The kernel's pool, from its start to its stop. `owner` below is the kernel's one."""

    def __init__(self) -> None:
        self.pool: Pool | None = None
        self.asks = Asks()
        self.notices = Notices()

    # ---- start and stop ------------------------------------------------------------------------------------

    def start(self, options: HvdPool, keeper: Keeper | None = None, bringing_back: bool = False) -> Pool:
        """A new pool with `options`: its engines started and Horovod initialised, its watcher running; the kernel's
        pool from now on. `keeper`: what a stopped pool kept, to keep on the new one; `bringing_back`: a restart
        brings it back next (Pool.start)."""
        pool = Pool.start(options, keeper or Keeper(), bringing_back)
        pool.watcher = PoolWatcher(pool, self.asks, act=lambda action: self.act(pool, action))
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

    def restart(
        self, pool: Pool, planned: bool = True, fresh: bool = False, options: HvdPool | None = None
    ) -> tuple[Pool, str]:
        """Fresh engines, the setup journal replayed and the kept names restored; with `fresh` nothing comes back (the
        journal and the kept names are forgotten). `options`: another placement (a resize: another -np, other hosts),
        checked before anything stops; else the same options. A stopped pool (a failed restart) is started anew.
        Returns the running pool and what came back, in words. PoolError: the restart failed (the pool is stopped,
        its snapshots kept); KeyboardInterrupt: the user stopped it (Pool.interrupted_restart says where)."""
        resize = options is not None and options.placement() != pool.options.placement()
        if resize:
            assert options is not None
            Pool.check(options)  # a size the host cannot run is refused while the pool still runs
        if fresh:
            pool.keeper.clear()
            shutil.rmtree(pool.kept_dir, ignore_errors=True)
            shutil.rmtree(pool.pushed_dir, ignore_errors=True)
        try:
            if resize or pool.stopped:
                if not pool.stopped:
                    if planned and pool.channel is not None and pool.ranks and not pool.dead_ranks():
                        pool.channel.settle(len(pool.ranks), timeout=30.0)  # snapshots being written are not lost
                    pool.end(keep_directory=True)
                pool = self._revive(pool, options)
            else:
                pool.bringing_back = True
                pool.replace_engines(planned)
            with pool.lock:
                return pool, Keep(pool).bring_back()
        finally:
            pool.brought_back()

    def _revive(self, old: Pool, options: HvdPool | None = None) -> Pool:
        """Start a stopped pool again, with its options or `options`; what it kept comes back on the new one (at
        another size, kernel/keep/restore.py lays it out for the new ranks)."""
        try:
            pool = self.start(options or old.options, old.keeper, bringing_back=True)
        except PoolError as exc:
            size = f" with -np {options.np}" if options is not None else ""
            raise PoolError(
                f"The restart{size} failed: {exc.message} The pool is stopped; its setup journal and snapshots are "
                "kept.",
                f"{exc.hint}\n%hvd_restart starts it again (add -np N for another size).".strip(),
            ) from None
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
        tell.news(f"{headline}: restarting the pool with the same options...")
        waiting = self.asks.ending()
        if waiting is not None and waiting.ask is Ask.RESTART and waiting.np in (None, pool.np):
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
            if failed.lost is not None:
                said = self.after_loss(pool, failed.lost.message)
            elif run.ended_for is not None:  # the sidebar's Restart or Stop ended the cell: the error ends with it
                after = self._after_cell(pool)
                said = f"{after.text[:1].upper()}{after.text[1:]}" if after else ""
            else:
                said = ""
            if not said:
                raise
            message = f"{failed.message}\n\n{said}" if failed.message else said
            raise CellFailed(message, "", failed.interrupted) from None
        finally:
            after = self._after_cell(pool)
            if after:
                tell.say(after)

    # ---- the sidebar -----------------------------------------------------------------------------------------

    def _after_cell(self, pool: Pool) -> Said | None:
        """A Restart or Stop from the sidebar that waited for the running cell (or restart); what was done, in words."""
        action = self.asks.take_ending()
        if action is not None and action.ask is Ask.RESTART and not pool.stopped:
            return self._restart_from_sidebar(pool, action, "")
        if action is not None and action.ask is Ask.STOP:
            self.stop(pool, "the pool was stopped from the sidebar")
            return Said("the pool was stopped from the sidebar; start a new one with %hvd_start -np N.")
        return None

    def act(self, pool: Pool, action: Action) -> None:
        """The sidebar's Restart or Stop between cells (on the kernel's main loop): said under the next cell."""
        if self.pool is not pool:
            return  # for a pool that ended meanwhile
        if pool.busy_cell is not None:  # a cell started in between: it stops, then carries the ask out
            self.asks.put(action)
            return
        at = time.strftime("%H:%M:%S")
        if action.ask is Ask.RESTART:
            self.notices.add(self._restart_from_sidebar(pool, action, f" at {at}"))
            after = self._after_cell(self.pool or pool)  # a Stop pressed while that restart ran
            if after:
                self.notices.add(after)
        elif action.ask is Ask.STOP:
            self.stop(pool, f"the pool was stopped from the sidebar at {at}")

    def _restart_from_sidebar(self, pool: Pool, action: Action, at: str) -> Said:
        """The sidebar's Restart (at its size field's number of ranks, where given); what happened, in words."""
        t0, was = time.monotonic(), pool.np
        try:
            options = pool.options.placed(np=action.np) if action.np not in (None, pool.np) else None
            if options is not None:
                Pool.check(options)
        except (ValueError, PoolError) as exc:
            # A size this host cannot run, refused while the pool runs on: the user's input, not a crash to log.
            pool.note_problem(f"the restart asked for from the sidebar failed: {exc}")
            return Said(f"the restart from the sidebar{at} failed: {exc}", True)
        try:
            pool, came_back = self.restart(pool, options=options)
        except KeyboardInterrupt:  # the stop button, pressed while it ran
            return Said(f"the restart from the sidebar{at} was interrupted. {pool.interrupted_restart()}", True)
        except Exception as exc:  # on the main loop nobody would see it: log it, keep it for %hvd_status
            log.exception("jupyter-hvd: the restart asked for from the sidebar failed")
            pool.note_problem(f"the restart asked for from the sidebar failed: {exc}")
            return Said(f"the restart from the sidebar{at} failed: {exc}", True)
        size = f" on {pool.np} ranks (it had {was})" if pool.np != was else ""
        took = time.monotonic() - t0
        return Said(f"the pool was restarted from the sidebar{at}{size}, in {took:.1f} s: {came_back}.")


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
