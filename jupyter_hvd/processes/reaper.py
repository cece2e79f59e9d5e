"""Ends a pool's processes (and its SLURM job) when the kernel that owns it dies without stopping it.

Started by the kernel with a pipe on stdin and its own session (so a Ctrl-C in the kernel cannot reach
it). The pipe reaches EOF when the kernel exits for any reason, `kill -9` included; the reaper then cancels
the engines' SLURM job (scancel) and kills what the pool's state file names (controller, mpiexec, engines and
their children, each recognised by its exact start time, never by the wall clock), and removes the file.
A pool that was stopped cleanly has removed its file already, and the reaper just exits.
"""

from __future__ import annotations

import sys
from pathlib import Path

from .. import state


def reap(path: Path) -> int:
    """End what the state file at `path` names (SLURM job, processes); return how many processes were found."""
    data = state.read_pool(path)
    if data is None:
        return 0
    return state.clean_up(path, data)


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
