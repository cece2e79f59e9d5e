"""Where this rank is now, for the kernel's "where" (the stop button, a stall, %hvd_where, the sidebar): its main
thread's stack from the cell down, and the collective it waits in.

Read by the channel's reading thread with `sys._current_frames()` while the cell runs on: nothing is signalled or
stopped, so taking the picture never disturbs the rank. A rank whose main thread holds the GIL in native code cannot
answer; the kernel then reads its stack from outside (kernel/diagnose/where.py, py-spy).

Imported on the engines only.
"""

from __future__ import annotations

import sys
import threading
import traceback
from typing import Any

from ... import wire
from ...wire import Frame, Place
from .. import collectives

MAX_FRAMES = 100  # the innermost ones, of a deep recursion: a place stays a small message


SNAPSHOT_TRIES = 5


def place(rank: int, n: int, cell: int | None, debugging: bool) -> Place:
    """This rank's answer to Where `n`: the main thread's frames from the running cell's down (none between cells)."""
    if cell is None:
        return Place(rank, n, cell, [], "", debugging)
    # The main thread runs on while its frames are read: a collective it waits in is the one of those frames only
    # where it waited in it both before and after (else the picture named one collective at another's line).
    for _ in range(SNAPSHOT_TRIES):
        before = collectives.main_thread_wait(at_least=0.0)
        frames = _main_frames()
        wait = collectives.main_thread_wait(at_least=0.0)
        if _same_wait(before, wait):
            break
    return Place(rank, n, cell, frames, waiting(wait), debugging)


def waiting(wait: dict[str, Any] | None) -> str:
    """A collective in words: "allreduce 'grad_sync'", 'allreduce (an unnamed tensor)' (where Horovod starts again
    for it, before it names the tensor), 'dist.all_reduce', or '' for none."""
    if wait is None:
        return ""
    kind, name = wait.get("kind"), wait["name"]
    if not kind:
        return str(name)
    return f"{kind} '{name}'" if name != kind else f"{kind} (an unnamed tensor)"


def _same_wait(a: dict[str, Any] | None, b: dict[str, Any] | None) -> bool:
    if a is None or b is None:
        return a is b
    return (a["name"], a["number"]) == (b["name"], b["number"]) and a["waited"] <= b["waited"]


def _main_frames() -> list[Frame]:
    """The main thread's frames from the outermost cell frame down, innermost last."""
    main = sys._current_frames().get(threading.main_thread().ident or 0)
    if main is None:
        return []
    stack = traceback.extract_stack(main)
    first = next((i for i, f in enumerate(stack) if wire.cell_number(f.filename) is not None), len(stack))
    return [
        Frame(
            file=f.filename,
            line=f.lineno or 0,
            function=f.name,
            code=(f.line or "").strip()[:200],
            library=wire.library_file(f.filename),
        )
        for f in stack[first:][-MAX_FRAMES:]
    ]
