"""What comes back after a restart (automatic, %hvd_restart, the sidebar's): the setup journal is replayed on the
fresh engines, the kept names are restored from the latest snapshot, and one line says what came back and from when.

Runs in the user's kernel. The pool calls `bring_back` after every restart (Pool.bring_back); `restart` is what
%hvd_restart does.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

from .. import wire
from .cell import CellOptions, run_cell
from .errors import CellFailed
from .keep import origin
from .pool import LOST, Pool, set_current
from .words import age_text

RESTORE = "__import__('jupyter_hvd.engine.keep', fromlist=['restore']).restore()"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class _Quiet:
    """The CellView of a cell the user did not type (a replay, the restore): its output is kept, not shown."""

    def __init__(self) -> None:
        self.text: list[str] = []

    def output(self, rank: int, name: str, text: str) -> None:
        if rank == 0:
            self.text.append(text)

    def metrics(self, rank: int, records: Any) -> None:
        pass

    def straggler(self, message: str | None) -> None:
        pass

    def tick(self) -> None:
        pass

    def close(self, ok: bool) -> None:
        pass


def _run_quietly(pool: Pool, source: str, count: int | None = None) -> tuple[Any, str]:
    """Run `source` on every rank without showing it; (rank 0's last value, '' or why it failed in one line)."""
    options = CellOptions(view=_Quiet(), count=count, record=False, display_value=False)
    try:
        return run_cell(pool, source, options), ""
    except CellFailed as exc:
        lines = [ln.strip() for ln in _ANSI.sub("", exc.message).splitlines() if ln.strip()]
        return None, lines[0] if lines else "it failed"


def bring_back(pool: Pool) -> str:
    """Replay the setup journal on fresh engines, then restore the kept names; what came back, in words."""
    keeper = pool.keeper
    said = []
    replayed = 0
    for i, cell in enumerate(keeper.journal, 1):
        _, failed = _run_quietly(pool, cell.source, cell.count)
        if failed:
            later = len(keeper.journal) - i
            said.append(
                f"setup cell {i} (cell [{cell.count}]) failed on replay: {failed}"
                + (f"; the {later} setup cell{'s' if later > 1 else ''} after it were not replayed" if later else "")
            )
            break
        replayed += 1
    if keeper.journal:
        said.insert(0, f"replayed {replayed} setup cell{'s' if replayed != 1 else ''}")
    if keeper.names:
        said.append(_restore(pool))
    return "; ".join(said) if said else LOST


def _restore(pool: Pool) -> str:
    keeper = pool.keeper
    configure(pool)
    result, failed = _run_quietly(pool, RESTORE)
    if failed or not isinstance(result, dict):
        return f"the kept names were not restored: {failed or 'the restore said nothing'}"
    if result.get("missing"):
        return f"no snapshot of {', '.join(keeper.names)} was written yet, so nothing was restored"
    said = []
    if result["restored"]:
        when = f", {age_text(result['at'])} ago" if result.get("at") else ""
        said.append(f"restored {', '.join(result['restored'])} {origin(result.get('cell'), result['mid_cell'])}{when}")
    for name, why in result["failed"].items():
        said.append(f"not restored: {name} ({why})")
    return "; ".join(said) or "nothing was kept in the last snapshot"


def kept_directory(pool: Pool) -> Path:
    """Where rank 0 writes the snapshots: in the pool's private directory (beside its channel's sockets)."""
    return pool.directory / "kept"


def configure(pool: Pool) -> None:
    """Tell every rank what to keep and where its snapshots go."""
    if pool.channel is None:
        return
    request = wire.Keep(list(pool.keeper.names), str(kept_directory(pool)))
    for r in pool.ranks:
        pool.channel.send(r.rank, request)


def restart(pool: Pool, fresh: bool = False) -> tuple[Pool, str]:
    """%hvd_restart: fresh engines with the same options, the journal replayed and kept names restored (with `fresh`,
    nothing: the journal and the kept names are forgotten). A pool stopped by a failed restart is started anew.
    Returns the running pool and what came back."""
    if fresh:
        pool.keeper.clear()
        shutil.rmtree(kept_directory(pool), ignore_errors=True)
    if pool.stopped:
        old = pool
        pool = Pool.start(old.options)
        pool.keeper = old.keeper  # what the old pool kept comes back on the new one
        if kept_directory(old).is_dir():
            shutil.copytree(kept_directory(old), kept_directory(pool), dirs_exist_ok=True)
        shutil.rmtree(old.directory, ignore_errors=True)
        pool.bring_back = bring_back
        set_current(pool)
        return pool, bring_back(pool) if (pool.keeper.journal or pool.keeper.names) else LOST
    return pool, pool.restart(planned=True)
