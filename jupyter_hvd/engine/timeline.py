"""Horovod's dynamic timeline around one `%%hvd --timeline` cell.

Imported on the engines only. The pool starts Horovod with HOROVOD_TIMELINE=DYNAMIC (Horovod's documented switch
for `hvd.start_timeline`), so recording costs nothing until a cell asks for it. Rank 0 (Horovod's coordinator)
writes the Chrome-trace file; every rank calls start and stop, as Horovod expects.
"""

from __future__ import annotations

import os
import socket
import time
from typing import Any


def start(path: str, mark_cycles: bool = False) -> None:
    """Begin recording Horovod's timeline into `path` (rank 0 writes it)."""
    import horovod.torch as hvd

    from . import idle

    idle.wake()  # Horovod may rest while the pool is idle
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
    rank = hvd.rank()
    if rank != 0:
        return {"rank": rank}
    # The stop takes effect at Horovod's next background cycle, then its writer thread flushes and closes the file.
    deadline = time.monotonic() + wait_s
    while not _complete(path) and time.monotonic() < deadline:
        time.sleep(0.01)
    size = os.path.getsize(path) if os.path.exists(path) else 0
    return {"rank": 0, "path": path, "host": socket.gethostname(), "complete": _complete(path), "bytes": size}


def read(path: str) -> str:
    """The trace file's text (for a kernel on another host than rank 0)."""
    with open(path, encoding="utf-8") as f:
        return f.read()
