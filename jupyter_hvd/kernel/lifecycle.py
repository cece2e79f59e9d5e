"""One owner of a pool's life: it starts, restarts (when a cell lost the pool, or when asked), starts a stopped pool
again, and stops, and carries out the sidebar's Restart and Stop. The magics, a cell that lost its pool and the
pool's watcher all come here; the pool (kernel/launch/pool.py) knows how to start and end processes, restart.py what
comes back after a restart, cell.py how a cell runs.

Runs in the user's kernel, on its main thread (the watcher hands the sidebar's actions to the main loop).
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

from .. import wire
from .cell.run import CellOptions, CellRun, next_number, say_snapshot_news
from .channel import ChannelError
from .errors import CellFailed
from .keep import bring_back as coming_back
from .keep.journal import Cell, Keeper
from .launch.options import HvdPool
from .launch.pool import Pool, current, set_current
from .watcher import PoolWatcher

log = logging.getLogger("jupyter_hvd")


def start(options: HvdPool, keeper: Keeper | None = None) -> Pool:
    """A new pool with `options`: its engines started and Horovod initialised, its watcher running; the kernel's
    pool from now on. `keeper`: what a stopped pool kept, to keep on the new one."""
    pool = Pool.start(options, keeper or Keeper())
    _watch(pool)
    set_current(pool)
    return pool


def _watch(pool: Pool) -> None:
    pool.watcher = PoolWatcher(pool, act=lambda action: act(pool, action))
    pool.file.poke = pool.watcher.poke
    pool.watcher.start()


def restart(pool: Pool, planned: bool = True, fresh: bool = False) -> tuple[Pool, str]:
    """Fresh engines with the same options, the setup journal replayed and the kept names restored; with `fresh`
    nothing comes back (the journal and the kept names are forgotten). A stopped pool (a failed restart) is started
    anew. Returns the running pool and what came back, in words. PoolError: the restart failed (the pool is stopped);
    KeyboardInterrupt: the user stopped it (Pool.interrupted_restart says where)."""
    if fresh:
        pool.keeper.clear()
        shutil.rmtree(pool.kept_dir, ignore_errors=True)
        shutil.rmtree(pool.pushed_dir, ignore_errors=True)
    if pool.stopped:
        old = pool
        pool = start(old.options, old.keeper)  # what the old pool kept comes back on the new one
        for old_dir, new_dir in ((old.kept_dir, pool.kept_dir), (old.pushed_dir, pool.pushed_dir)):
            if old_dir.is_dir():
                _move(old_dir, new_dir)
        shutil.rmtree(old.directory, ignore_errors=True)
    else:
        pool.replace_engines(planned)
    with pool.lock:
        return pool, coming_back.bring_back(pool)


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


def run_cell(pool: Pool, source: str, options: CellOptions) -> Any:
    """Run a `%%hvd` cell on every rank (kernel/cell/run.py). A pool the cell lost is restarted, and the cell's error
    says what came back; a sidebar Restart or Stop asked for while the cell ran is carried out after it."""
    run = CellRun(pool, source, options)
    try:
        value = run.run()
        if options.record and run.succeeded:
            _kept_after(pool, run, options)
        return value
    except CellFailed as failed:
        if failed.lost is None:
            raise
        said = after_loss(pool, failed.lost.message)
        raise CellFailed(f"{failed.message}\n\n{said}" if failed.message else said, "", failed.interrupted) from None
    finally:
        said = _carry_out_pending(pool)
        if said:
            print(f"jupyter-hvd: {said}", file=sys.stderr, flush=True)


def _kept_after(pool: Pool, run: CellRun, options: CellOptions) -> None:
    """Every rank ran the cell to its end: keep it for the export (and the journal), and snapshot the kept names."""
    with pool.lock:
        keeper = pool.keeper
        said = keeper.record(Cell(run.source, options.count, options.cell_id, options.setup))
        if said:
            print(f"jupyter-hvd: {said}; %hvd_setup lists the journal.", flush=True)
        keeper.snapshots.commits_differ(options.count, run.commits())
        if keeper.names and pool.channel is not None:
            gen = (next_number(), 0)  # after this cell's own commit() generations
            try:  # behind this cell on each rank; each copies what changed, a thread writes it
                pool.channel.send_all(wire.Commit(options.count, gen))
            except ChannelError:
                pass  # a rank that died after its end: the next cell finds out
        say_snapshot_news(pool)
        try:
            for rank, prune in keeper.snapshots.expire().items():
                if pool.channel is not None and rank < len(pool.ranks):
                    pool.channel.send(rank, prune)
        except ChannelError:
            pass


def after_loss(pool: Pool, what: str) -> str:
    """Restart a pool that was lost (`what` happened: an engine died, ranks could not be released); what the user
    reads about it."""
    # The whole story is told once, under the cell when the restart is done; here only what is happening.
    headline = re.split(r"[:.(]\s", what, maxsplit=1)[0][:120]
    print(f"jupyter-hvd: {headline}: restarting the pool with the same options...", file=sys.stderr, flush=True)
    if pool.pending_action == "restart":
        pool.pending_action = None  # this is that restart
    t0 = time.monotonic()
    what = f"{what[0].upper()}{what[1:]}"
    try:
        _, came_back = restart(pool, planned=False)
    except KeyboardInterrupt:
        return f"{what}. {pool.interrupted_restart()}"
    return f"{what}. The pool was restarted in {time.monotonic() - t0:.1f} s: {came_back}."


def _carry_out_pending(pool: Pool) -> str:
    """A Restart or Stop from the sidebar that waited for the running cell (or restart); what was done, in words."""
    action, pool.pending_action = pool.pending_action, None
    if action == "restart" and not pool.stopped:
        t0 = time.monotonic()
        try:
            _, came_back = restart(pool)
        except KeyboardInterrupt:
            return pool.interrupted_restart()
        return f"the pool was restarted from the sidebar in {time.monotonic() - t0:.1f} s: {came_back}."
    if action == "stop":
        stop(pool, "the pool was stopped from the sidebar")
        return "the pool was stopped from the sidebar; start a new one with %hvd_start -np N."
    return ""


def act(pool: Pool, action: str) -> None:
    """The sidebar's Restart or Stop between cells (on the kernel's main loop): said under the next cell."""
    if pool.busy_cell is not None:  # a cell started in between: it stops, then carries the action out
        pool.pending_action = action
        return
    at = time.strftime("%H:%M:%S")
    if action == "restart":
        t0 = time.monotonic()
        try:
            _, came_back = restart(pool)
            pool.announcements.append(
                f"the pool was restarted from the sidebar at {at}, in {time.monotonic() - t0:.1f} s: {came_back}."
            )
        except KeyboardInterrupt:  # the stop button, pressed while it ran between cells
            pool.announcements.append(
                f"the restart from the sidebar at {at} was interrupted. {pool.interrupted_restart()}"
            )
        except Exception as exc:  # on the main loop nobody would see it: log it, keep it for %hvd_status
            log.exception("jupyter-hvd: the restart asked for from the sidebar failed")
            pool.note_problem(f"the restart asked for from the sidebar failed: {exc}")
            pool.announcements.append(f"the restart from the sidebar at {at} failed: {exc}")
        said = _carry_out_pending(pool)  # a Stop pressed while that restart ran
        if said:
            pool.announcements.append(said)
    elif action == "stop":
        stop(pool, f"the pool was stopped from the sidebar at {at}")


def stop(pool: Pool, why: str = "") -> None:
    """Stop the pool's engines, mpiexec and controller; no process is left. `why`: said when the notebook next asks
    for a pool, where it ended outside any cell."""
    pool.stop()
    if why:
        pool.said_goodbye(why)


def stop_at_exit() -> None:
    """Stop the kernel's pool when the kernel shuts down (a killed kernel is covered by the pool's reaper)."""
    pool = current()
    if pool is not None:
        pool.stop()
