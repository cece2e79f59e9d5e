"""A snapshot loaded into the pool's engines, whole or not at all: after a restart, and for %hvd_rewind.

Two steps, each a task run as a cell the user does not see (wire.RestorePrepare, wire.RestoreApply; the ranks' side
is engine/keep/restore.py): every rank prepares its part of the generation without touching its namespace, and says
which names it could bring back; then every rank applies the names that every rank could. The stop button during the
first step leaves every rank as it was; the second cannot be stopped half way (it only copies into memory), so ranks
never end up some at the snapshot and some not.

Runs in the user's kernel.
"""

from __future__ import annotations

import contextlib
import re
import signal
import threading
from collections.abc import Iterator
from typing import Any

from ... import wire
from ...widgets import QuietView
from ..cell.run import CellOptions, CellRun
from ..errors import CellFailed
from ..failures import PoolLost
from ..launch.pool import Pool
from ..ranks import format_ranks
from .snapshots import Generation, describe

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def run_quietly(
    pool: Pool, source: str, count: int | None = None, every_value: bool = False, task: wire.CellTask | None = None
) -> tuple[Any, str]:
    """Run `source` (or `task`) on every rank without showing it; (rank 0's last value, or every rank's with
    `every_value`; '' or why it failed, in one line). PoolLost: the pool was lost with it."""
    options = CellOptions(
        view=QuietView(),
        count=count,
        record=False,
        display_value=False,
        every_value=every_value,
        time_limit=pool.options.timeout,  # a replay or a restore nobody watches must end by itself too
        interactive=False,
        task=task,
    )
    try:
        return CellRun(pool, source, options).run(), ""
    except CellFailed as exc:
        if exc.lost is not None:  # whoever asked restarts the pool (kernel/keep/service.py, kernel/owner.py)
            raise PoolLost(exc.lost) from None
        if exc.interrupted:  # the stop button: what runs quietly for the user stops too
            raise KeyboardInterrupt from None
        lines = [ln.strip() for ln in _ANSI.sub("", exc.message).splitlines() if ln.strip()]
        return None, lines[0] if lines else "it failed"


def load(pool: Pool, generation: Generation, directory: str, kept: list[str]) -> dict[str, Any]:
    """Load the `kept` names of `generation` into every rank: {"restored": names, "failed": {name: why}, "absent":
    {name: why}, "error": why nothing came back (or ''), "interrupted": whether the stop button was pressed while it
    was put in place, and the generation's count, at, mid_cell}."""
    result: dict[str, Any] = {
        "restored": [],
        "failed": {},  # names in the snapshot that did not come back, and why
        "absent": {},  # kept names the snapshot does not hold, and why
        "error": "",
        "interrupted": False,
        "count": generation.count,
        "at": generation.at,
        "mid_cell": generation.mid_cell,
        "resized": None,  # (old, new): the snapshot was taken on another number of ranks
        "per_rank": [],  # names kept per rank: they cannot map to another number of ranks (left as the setup made them)
        "notes": [],  # what a restore at another size did besides (whose copy was taken, a rescaled learning rate)
    }
    skipped = generation.skipped()
    result["absent"] = {
        name: f"not in the snapshot: {skipped.get(name, 'kept after it was taken')}"
        for name in kept
        if name not in generation.names()
    }
    plan = dict(generation.parts)
    resize = wire.Resize(len(plan), len(pool.ranks)) if len(plan) != len(pool.ranks) else None
    task = wire.RestorePrepare(plan, directory, resize)
    answers, failed = run_quietly(pool, "", every_value=True, task=task)
    if failed or not isinstance(answers, dict):
        result["error"] = f"the snapshot could not be read: {failed or 'the ranks said nothing'}"
        return result
    names = [n for n in generation.names() if n in kept]
    prepared = {
        r: {n: why for n, why in a.get("failed", {}).items() if n in kept or n == "*"} for r, a in answers.items()
    }
    result["failed"].update(_failures(prepared, len(pool.ranks)))
    result["unreadable"] = all("*" in a.get("failed", {}) for a in answers.values())
    ready = [n for n in names if all(n in a.get("ok", []) for a in answers.values())]
    if resize is not None:
        sharded = {n for a in answers.values() for n in a.get("sharded", [])}
        ready = _resized(generation, ready, sharded, resize, result)
        first = answers.get(0) or next(iter(answers.values()))
        rescaled = [f"{name}'s {said}" for name, said in first.get("rescaled", {}).items() if name in ready]
        if rescaled:
            result["notes"].append(f"the setup scales the learning rate by the size: {', '.join(rescaled)}")
    if not ready:
        return result
    with _interrupts_wait() as caught:
        applied, failed = run_quietly(pool, "", every_value=True, task=wire.RestoreApply(ready))
    result["interrupted"] = bool(caught)
    if failed or not isinstance(applied, dict):
        result["error"] = f"the snapshot could not be put in place: {failed or 'the ranks said nothing'}"
        return result
    result["failed"].update(_failures({r: a.get("failed", {}) for r, a in applied.items()}, len(pool.ranks)))
    result["restored"] = [n for n in ready if all(n in a.get("applied", []) for a in applied.values())]
    return result


def _resized(
    generation: Generation, ready: list[str], sharded: set[str], resize: wire.Resize, result: dict[str, Any]
) -> list[str]:
    """Which of the `ready` names come back on a pool of another size: what every old rank kept alike, and modules
    and optimizers (data-parallel training keeps them alike; where their copies differed, rank 0's is taken, said);
    sharded state laid out anew. Other values whose copies differed were per rank and cannot map to the new ranks:
    named in `result`, not restored."""
    back = []
    differed = []
    result["resized"] = (resize.old, resize.new)
    for name in ready:
        digests = {r.digests.get(name) for r in generation.reports.values()}
        label = {r.kinds.get(name, "").split(":")[0] for r in generation.reports.values()}
        if len(digests) <= 1 or name in sharded:
            back.append(name)
        elif label & {"module", "optimizer"}:
            back.append(name)
            differed.append(name)
        else:
            result["per_rank"].append(name)
    if differed:
        result["notes"].append(
            f"the old ranks' copies of {', '.join(differed)} differed (e.g. BatchNorm statistics): rank "
            f"{resize.source}'s was taken"
        )
    return back


def _failures(by_rank: dict[int, dict[str, str]], ranks: int) -> dict[str, str]:
    """name -> why it did not come back, naming the ranks where not all of them failed alike."""
    out: dict[str, dict[str, list[int]]] = {}
    for rank, failed in sorted(by_rank.items()):
        for name, why in failed.items():
            out.setdefault(name, {}).setdefault(why, []).append(rank)
    said = {}
    for name, whys in out.items():
        parts = [why if len(rs) == ranks else f"{format_ranks(rs)}: {why}" for why, rs in whys.items()]
        key = "this rank's snapshot" if name == "*" else name
        said[key] = "; ".join(parts)
    return said


def words(result: dict[str, Any]) -> str:
    """What a load brought back, in one line."""
    if result["error"]:
        return result["error"]
    said = []
    if result["restored"]:
        resized = result.get("resized")
        whose = (
            f", on every rank from rank 0's copy (it was taken on {resized[0]} ranks; the random generators stay as "
            "the setup cells left them)"
            if resized
            else ""
        )
        said.append(describe(result) + whose)
    said += result.get("notes", [])
    for name, why in {**result["failed"], **result["absent"]}.items():
        said.append(f"not restored: {name} ({why})")
    if result.get("per_rank"):
        said.append(
            f"kept per rank, so not restored at another size: {', '.join(result['per_rank'])} (as the setup cells "
            "built them for this size)"
        )
    if result["interrupted"]:
        said.append("the stop button was pressed while the snapshot was put in place, which finished first")
    return "; ".join(said) or "nothing was kept in the snapshot"


@contextlib.contextmanager
def _interrupts_wait() -> Iterator[list[int]]:
    """Ctrl-C is noted, not raised, while the block runs (on the main thread; elsewhere none can land)."""
    caught: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield caught
        return
    saved = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        yield caught
    finally:
        signal.signal(signal.SIGINT, saved)
