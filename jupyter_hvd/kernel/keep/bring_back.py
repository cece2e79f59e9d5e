"""What comes back after a restart (automatic, %hvd_restart, the sidebar's): the setup journal (setup cells and
pushes) is replayed on the fresh engines, the kept names are loaded from the snapshot to restore, and one line says
what came back and from when, and what did not.

A crash while coming back (an engine that dies during the replay or the restore) restarts the engines again and
comes back again from the same snapshot, a few times at most. A replay or a restore that fails pins the snapshot it
could not restore: it is not dropped for newer ones, and the next restart (once the cause is mended) restores it.

Runs in the user's kernel, behind the keep service (kernel/keep/service.py): `bring_back` after every restart,
`rewind` for %hvd_rewind.
"""

from __future__ import annotations

import secrets

from ... import wire
from .. import tell, transfer
from ..failures import PoolLost
from ..launch.pool import Pool
from . import restore
from .journal import Cell, Push
from .snapshots import Generation

ATTEMPTS = 3  # times the engines may be lost while coming back before the pool gives up
LOST = "worker state (models, variables) was lost; run the cells that define it again"


def bring_back(pool: Pool) -> str:
    """Replay the setup journal on fresh engines, then restore the kept names; what came back, in words. Engines lost
    meanwhile are replaced and it starts over, ATTEMPTS times at most (PoolError: a replacement failed, and the pool
    is stopped)."""
    if not (pool.keeper.journal or pool.keeper.names):
        return LOST
    said = ""
    for _ in range(ATTEMPTS):
        try:
            said = _bring_back_once(pool)  # an interrupt leaves `coming_back` saying where it stopped
            pool.coming_back = ""
            return said
        except PoolLost as lost:
            said = f"the engines were lost while {pool.coming_back} ({lost.failure.message.splitlines()[0]})"
            pool.coming_back = ""
            tell.news(f"{said}: restarting the pool again...")
            pool.replace_engines()
    return (
        f"the engines were lost {ATTEMPTS} times while the setup journal was replayed or the kept names restored "
        f"(the last time: {said}); nothing more was tried. %hvd_restart tries again from the same snapshot"
    )


def _bring_back_once(pool: Pool) -> str:
    keeper = pool.keeper
    said: list[str] = []
    replayed = 0
    target = keeper.snapshots.target()
    if target is not None and keeper.names:
        keeper.snapshots.pin(target)  # until it is back whole: an interrupt or a failure must not let it expire
    replay_failed = False
    for i, entry in enumerate(keeper.journal, 1):
        pool.coming_back = f"replaying setup entry {i} of {len(keeper.journal)}"
        failed = _replay(pool, entry)
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
    configure(pool)
    if keeper.names:
        if target is None:
            said.append(f"no snapshot of {', '.join(keeper.names)} was written yet, so nothing was restored")
        else:
            pool.coming_back = f"restoring {', '.join(keeper.names)}"
            result = restore.load(pool, target, str(pool.kept_dir), keeper.names)
            while result.get("unreadable"):
                # Its files are gone (a disk cleaned, a node changed): the newest snapshot before it instead.
                gone = target
                keeper.snapshots.drop(gone)
                target = keeper.snapshots.target()
                said.append(f"snapshot #{gone.number} could not be read on any rank (its files are gone)")
                if target is None:
                    break
                keeper.snapshots.pin(target)
                result = restore.load(pool, target, str(pool.kept_dir), keeper.names)
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
    pool.channel.send_all(wire.Keep(list(pool.keeper.names), str(pool.kept_dir)))


def journal_push(pool: Pool, payload: transfer.Payload, count: int | None, cell_id: str) -> None:
    """A push reached every rank: keep its values for the replay after a restart, in the journal's order."""
    # A name of its own: a push that replaces another must not write over the file that one is deleted with.
    file = f"push-{count if count is not None else 'x'}-{secrets.token_hex(4)}-{'-'.join(payload.names)[:60]}.bin"
    transfer.save(payload, pool.pushed_dir / file)
    _, replaced = pool.keeper.record_push(Push(list(payload.names), file, count, cell_id, payload.nbytes))
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
