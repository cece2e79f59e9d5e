"""What comes back after a restart (automatic, %hvd_restart, the sidebar's): the setup journal (setup cells and
pushes) is replayed on the fresh engines, the kept names are loaded from the snapshot to restore, and one line says
what came back and from when, and what did not.

A crash while coming back (an engine that dies during the replay or the restore) restarts the engines again and
comes back again from the same snapshot, a few times at most. A replay or a restore that fails pins the snapshot it
could not restore: it is not dropped for newer ones, and the next restart (once the cause is mended) restores it.

Runs in the user's kernel. The pool calls `bring_back` after every restart (Pool.bring_back); `restart` is what
%hvd_restart does, `rewind` what %hvd_rewind does.
"""

from __future__ import annotations

import shutil

from .. import wire
from . import restore, transfer
from .keep import Cell, Push
from .pool import LOST, Pool, set_current
from .snapshots import Generation

ATTEMPTS = 3  # times the engines may be lost while coming back before the pool gives up


def bring_back(pool: Pool) -> str:
    """Replay the setup journal on fresh engines, then restore the kept names; what came back, in words."""
    said = ""
    for _ in range(ATTEMPTS):
        started = pool.engines_started
        said = _bring_back_once(pool)  # an interrupt leaves `coming_back` saying where it stopped
        pool.coming_back = ""
        if pool.engines_started == started:
            return said
    return (
        f"the engines were lost {ATTEMPTS} times while the setup journal was replayed or the kept names restored "
        f"(the last time: {said}); nothing more was tried. %hvd_restart tries again from the same snapshot"
    )


def _bring_back_once(pool: Pool) -> str:
    keeper = pool.keeper
    started = pool.engines_started
    said: list[str] = []
    replayed = 0
    target = keeper.snapshots.target()
    if target is not None and keeper.names:
        keeper.snapshots.pin(target)  # until it is back whole: an interrupt or a failure must not let it expire
    replay_failed = False
    for i, entry in enumerate(keeper.journal, 1):
        pool.coming_back = f"replaying setup entry {i} of {len(keeper.journal)}"
        failed = _replay(pool, entry)
        if pool.stopped:
            return f"the pool was stopped during the replay of setup entry {i}: %hvd_restart starts it again"
        if pool.engines_started != started:
            return f"the engines were lost during the replay of setup entry {i} ({failed})"
        if failed:
            later = len(keeper.journal) - i
            what = f"push of {', '.join(entry.names)}" if isinstance(entry, Push) else "setup cell"
            said.append(
                f"{what} {i} (cell [{entry.count}]) failed on replay: {failed}"
                + (f"; the {later} entr{'ies' if later > 1 else 'y'} after it were not replayed" if later else "")
            )
            replay_failed = True
            break
        replayed += 1
    if keeper.journal:
        said.insert(0, _replayed(keeper.journal[:replayed], len(keeper.journal)))
    if pool.stopped:
        return "the pool was stopped during the replay: %hvd_restart starts it again"
    configure(pool)
    if keeper.names:
        if target is None:
            said.append(f"no snapshot of {', '.join(keeper.names)} was written yet, so nothing was restored")
        else:
            pool.coming_back = f"restoring {', '.join(keeper.names)}"
            result = restore.load(pool, target, str(pool.kept_dir), keeper.names)
            while result.get("unreadable") and pool.engines_started == started and not pool.stopped:
                # Its files are gone (a disk cleaned, a node changed): the newest snapshot before it instead.
                gone = target
                keeper.snapshots.drop(gone)
                target = keeper.snapshots.target()
                said.append(f"snapshot #{gone.number} could not be read on any rank (its files are gone)")
                if target is None:
                    break
                keeper.snapshots.pin(target)
                result = restore.load(pool, target, str(pool.kept_dir), keeper.names)
            if pool.stopped:
                return "the pool was stopped during the restore: %hvd_restart starts it again"
            if pool.engines_started != started:
                return f"the engines were lost during the restore ({restore.words(result)})"
            if target is None:
                said.append("no other snapshot is left, so nothing was restored")
                return "; ".join(said)
            said.append(restore.words(result))
            whole = not result["error"] and not result["failed"]
            if whole and not replay_failed:
                keeper.snapshots.unpin()
            else:
                said.append(
                    f"snapshot #{target.number} stays the one to restore until a restore of it succeeds: mend the "
                    "cause, then %hvd_restart"
                )
    return "; ".join(said) if said else LOST


def _replayed(done: list[Cell | Push], of: int) -> str:
    """'replayed 2 setup cells and 1 push', or 'replayed 1 of 3 setup entries'."""
    if len(done) < of:
        return f"replayed {len(done)} of {of} setup entries"
    cells = sum(isinstance(e, Cell) for e in done)
    pushes = len(done) - cells
    parts = [f"{cells} setup cell{'s' if cells != 1 else ''}"] if cells else []
    parts += [f"{pushes} push{'es' if pushes != 1 else ''}"] if pushes else []
    return f"replayed {' and '.join(parts)}"


def _replay(pool: Pool, entry: Cell | Push) -> str:
    """Replay one journal entry; '' or why it failed."""
    if isinstance(entry, Push):
        try:
            transfer.send(pool, transfer.load(pool.pushed_dir / entry.file))
        except (OSError, transfer.TransferError) as exc:
            return str(exc)
        return ""
    _, failed = restore.run_quietly(pool, entry.source, entry.count)
    return failed


def configure(pool: Pool) -> None:
    """Tell every rank what to keep and where its snapshots go."""
    if pool.channel is None:
        return
    pool.keeper.snapshots.ranks = len(pool.ranks)
    request = wire.Keep(list(pool.keeper.names), str(pool.kept_dir))
    for r in pool.ranks:
        pool.channel.send(r.rank, request)


def journal_push(pool: Pool, payload: transfer.Payload, count: int | None, cell_id: str) -> None:
    """A push reached every rank: keep its values for the replay after a restart, in the journal's order."""
    number = sum(isinstance(e, Push) for e in pool.keeper.journal) + len(pool.keeper.cells) + 1
    file = f"push-{number}-{'-'.join(payload.names)[:60]}.bin"
    transfer.save(payload, pool.pushed_dir / file)
    replaced = [e for e in pool.keeper.journal if isinstance(e, Push) and cell_id and e.cell_id == cell_id]
    pool.keeper.record_push(Push(list(payload.names), file, count, cell_id, payload.nbytes))
    for old in replaced:
        (pool.pushed_dir / old.file).unlink(missing_ok=True)


def rewind(pool: Pool, generation: Generation) -> str:
    """%hvd_rewind: load an earlier snapshot into the running pool, without a restart."""
    with pool.lock:
        configure(pool)
        result = restore.load(pool, generation, str(pool.kept_dir), pool.keeper.names)
    if not result["error"] and not result["failed"]:
        pool.keeper.snapshots.unpin()
    return restore.words(result)


def restart(pool: Pool, fresh: bool = False) -> tuple[Pool, str]:
    """%hvd_restart: fresh engines with the same options, the journal replayed and kept names restored (with `fresh`,
    nothing: the journal and the kept names are forgotten). A pool stopped by a failed restart is started anew.
    Returns the running pool and what came back."""
    if fresh:
        pool.keeper.clear()
        shutil.rmtree(pool.kept_dir, ignore_errors=True)
        shutil.rmtree(pool.pushed_dir, ignore_errors=True)
    if pool.stopped:
        old = pool
        pool = Pool.start(old.options)
        pool.keeper = old.keeper  # what the old pool kept comes back on the new one
        for old_dir, new_dir in ((old.kept_dir, pool.kept_dir), (old.pushed_dir, pool.pushed_dir)):
            if old_dir.is_dir():
                shutil.copytree(old_dir, new_dir, dirs_exist_ok=True)
        shutil.rmtree(old.directory, ignore_errors=True)
        pool.bring_back = bring_back
        set_current(pool)
        return pool, bring_back(pool) if (pool.keeper.journal or pool.keeper.names) else LOST
    return pool, pool.restart(planned=True)
