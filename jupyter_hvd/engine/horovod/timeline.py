"""Horovod's dynamic timeline around one `%%hvd --timeline` cell.

Imported on the engines only. Horovod records a timeline only when HOROVOD_TIMELINE=DYNAMIC was set at hvd.init(),
and merely enabling it cost about 27% of training throughput, so pools start without it. A timeline cell sets the
variable and starts Horovod again on every rank (rest.wake(): shutdown, init, a few ms on CPU ranks); when the cell
ends the variable is removed, and the next cell (or the idle rest) starts Horovod without it. Pools that cannot
restart Horovod (rest.can_rest() false) need it from %hvd_start --timeline. Rank 0 (Horovod's coordinator) writes
the Chrome-trace file; every rank calls start and stop, as Horovod expects.
"""

from __future__ import annotations

import os
import socket
import time
from typing import Any

TIMELINE = "HOROVOD_TIMELINE"
_switched_on = False  # this module set HOROVOD_TIMELINE for the running cell (the pool did not start with it)


def start(path: str, mark_cycles: bool = False) -> None:
    """Begin recording Horovod's timeline into `path` (rank 0 writes it); every rank calls this at once."""
    global _switched_on
    import horovod.torch as hvd

    from . import rest

    if not os.environ.get(TIMELINE):
        rest.set_horovod_env({TIMELINE: "DYNAMIC"})
        _switched_on = True
    rest.wake()  # starts Horovod, with the timeline, where it rests or was started without it
    if rest.horovod_env(TIMELINE) != "DYNAMIC":
        why = "a thread of this rank (or another) still uses Horovod" if rest.can_rest() else "Horovod cannot restart"
        stop_switch()
        raise RuntimeError(f"Horovod could not be started again with its timeline on: {why}")
    if hvd.rank() == 0:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    hvd.start_timeline(path, mark_cycles=mark_cycles)


def _complete(path: str) -> bool:
    """Horovod's writer thread closes the JSON array when it stops; until then the file is still being written."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 16))
            return f.read().rstrip().endswith(b"]")
    except OSError:
        return False


def stop(path: str, wait_s: float = 10.0) -> dict[str, Any]:
    """Stop recording; on rank 0, wait until the trace file is closed. Returns where it is and whether it is whole."""
    import horovod.torch as hvd

    hvd.stop_timeline()
    stop_switch()
    rank = hvd.rank()
    if rank != 0:
        return {"rank": rank}
    # The stop takes effect at Horovod's next background cycle, then its writer thread flushes and closes the file.
    deadline = time.monotonic() + wait_s
    while not _complete(path) and time.monotonic() < deadline:
        time.sleep(0.01)
    size = os.path.getsize(path) if os.path.exists(path) else 0
    return {"rank": 0, "path": path, "host": socket.gethostname(), "complete": _complete(path), "bytes": size}


def stop_switch() -> None:
    """Remove HOROVOD_TIMELINE if a timeline cell set it: the next cell starts Horovod without it (rest.wake())."""
    global _switched_on
    from . import rest

    if _switched_on:
        rest.set_horovod_env({TIMELINE: None})
        _switched_on = False


def read(path: str) -> str:
    """The trace file's text (for a kernel on another host than rank 0)."""
    with open(path, encoding="utf-8") as f:
        return f.read()
