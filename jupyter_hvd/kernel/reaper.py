"""Kills a pool's processes when the kernel that owns it dies without stopping it.

Started by the kernel with a pipe on stdin and its own session (so a Ctrl-C in the kernel cannot reach
it). The pipe reaches EOF when the kernel exits for any reason, `kill -9` included; the reaper then kills
what the pool's state file names (controller, mpiexec, engines and their children) and removes the file.
A pool that was stopped cleanly has removed its file already, and the reaper just exits.
"""

from __future__ import annotations

import sys
from pathlib import Path

import psutil

from jupyter_hvd import state


def reap(path: Path) -> int:
    """Kill every live process recorded in the state file at `path`; return how many were found."""
    data = state.read_pool(path)
    if data is None:
        return 0
    roots = state.recorded_processes(data)
    procs = list(roots)
    for p in roots:
        try:
            procs += p.children(recursive=True)
        except psutil.Error:
            pass
    state.kill_processes(procs)
    state.remove(path)
    return len(procs)


def main() -> None:
    path = Path(sys.argv[1])
    try:
        while sys.stdin.buffer.read(4096):
            pass
    except (OSError, KeyboardInterrupt):
        pass
    reap(path)


if __name__ == "__main__":
    main()
