"""Where this rank is now, for the kernel's "where" (the stop button, a stall, the sidebar): its main thread's stack
from the cell down, and the collective it waits in.

Read by the channel's reading thread with `sys._current_frames()` while the cell runs on: nothing is signalled or
stopped, so taking the picture never disturbs the rank. A rank whose main thread holds the GIL in native code cannot
answer; the kernel then reads its native stack from outside (kernel/where.py, py-spy).

Imported on the engines only.
"""

from __future__ import annotations

import os
import sys
import sysconfig
import threading
import traceback

from ..wire import Frame, Place
from . import collectives

# Where the standard library, installed packages and jupyter-hvd live: their frames are folded unless asked for.
_LIBRARY = tuple(
    os.path.realpath(p)
    for p in {
        sysconfig.get_paths()["stdlib"],
        sysconfig.get_paths()["purelib"],
        sysconfig.get_paths()["platlib"],
        os.path.dirname(os.path.dirname(__file__)),
    }
    if p
)


def library(path: str) -> bool:
    """Whether a frame's file is the standard library's, an installed package's or jupyter-hvd's own."""
    if path.startswith("<"):
        return not path.startswith("<hvd-cell-")
    return os.path.realpath(path).startswith(_LIBRARY)


def place(rank: int, n: int, cell: int | None, debugging: bool) -> Place:
    """This rank's answer to Where `n`: the main thread's frames from the running cell's down (none between cells)."""
    frames: list[Frame] = []
    main = sys._current_frames().get(threading.main_thread().ident or 0)
    if main is not None and cell is not None:
        stack = traceback.extract_stack(main)
        first = next((i for i, f in enumerate(stack) if f.filename.startswith("<hvd-cell-")), None)
        for f in stack[first:] if first is not None else []:
            frames.append(
                Frame(
                    file=f.filename,
                    line=f.lineno or 0,
                    function=f.name,
                    code=(f.line or "").strip()[:200],
                    library=library(f.filename),
                )
            )
    wait = collectives.main_thread_wait(at_least=0.0) if cell is not None else None
    waiting = ""
    if wait is not None:
        waiting = f"{wait['kind']} '{wait['name']}'" if wait.get("kind") else wait["name"]
    return Place(rank, n, cell, frames, waiting, debugging)
