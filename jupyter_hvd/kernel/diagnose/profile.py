"""`%%hvd --profile`: record one cell with torch.profiler on every rank and show, under the cell, where each rank's
time went (compute, waiting in collectives, collectives running), its busiest operations, and its trace file.

The torch.distributed counterpart of `%%hvd --timeline` (Horovod's timeline, kernel/diagnose/timeline.py); it works on
any pool. Runs in the user's kernel; the engines record (jupyter_hvd/engine/diagnose/profile.py).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from IPython.core.error import UsageError

from ... import wire
from ..launch.pool import Pool

PROFILE_DIR = "hvd_profiles"  # beside the notebook (the kernel's working directory)


def folder(requested: str) -> str:
    """Where the ranks' traces go: the folder asked for, else a new one under hvd_profiles/."""
    return os.path.abspath(requested or os.path.join(PROFILE_DIR, time.strftime("profile-%Y%m%d-%H%M%S")))


def _on_ranks(pool: Pool, task: wire.Task) -> list[Any]:
    assert pool.view is not None
    return pool.view.apply_async(wire.perform, task).get(timeout=120)


def summary(rows: list[dict[str, Any]]) -> str:
    """The table shown under the cell."""
    lines = [
        "Where the time went (torch.profiler, every rank):",
        f"{'rank':>4}  {'cell s':>7}  {'compute':>8}  {'waiting':>8}  {'in collectives':>15}  busiest operations",
    ]
    for row in sorted(rows, key=lambda r: r.get("rank", 0)):
        if row.get("error"):
            lines.append(f"{row.get('rank', '?'):>4}  {row['error']}")
            continue
        wall = row["wall"] or 1e-9
        top = ", ".join(f"{name} {seconds * 1000:.0f} ms" for name, seconds in row["top"][:3])
        lines.append(
            f"{row['rank']:>4}  {row['wall']:>7.2f}  {row['compute'] / wall:>7.0%}  {row['waiting'] / wall:>7.0%}  "
            f"{row['communication']:>13.2f} s  {top}"
        )
    lines.append(
        "compute: the cell's time outside collectives; waiting: blocked in one (for the other ranks); in "
        "collectives: time collectives ran, on any thread (DDP's overlap the backward pass)."
    )
    paths = sorted({os.path.dirname(r["path"]) for r in rows if r.get("path")})
    if paths:
        lines.append(f"Traces: {paths[0]}/rank*.json (open them in https://ui.perfetto.dev).")
    return "\n".join(lines)


def record(pool: Pool, requested: str, run: Callable[[], Any]) -> Any:
    """Run `run()` (the cell) with torch.profiler recording on every rank, then print the summary under the cell."""
    where = folder(requested)
    engines = pool.engine_ids()
    try:
        _on_ranks(pool, wire.ProfileStart())
    except Exception as exc:
        raise UsageError(f"Could not start torch.profiler on the ranks ({type(exc).__name__}: {exc}).") from None
    try:
        return run()
    finally:
        if pool.view is None or pool.engine_ids() != engines:
            print("The pool was restarted during the cell, so its profile was lost.")
        else:
            try:
                print(summary(_on_ranks(pool, wire.ProfileStop(where))), flush=True)
            except Exception as exc:
                print(f"Could not stop torch.profiler on the ranks ({type(exc).__name__}: {exc}).")
