"""What the pool does when it is lost (an engine died, ranks would not stop, collectives that only a restart of
Horovod releases) or a restart is asked for (%hvd_restart, the sidebar): fresh engines with the same options, and
one line that says what happened.

Runs in the user's kernel.
"""

from __future__ import annotations

import sys
import time

from .pool import Pool, set_current


def recover(pool: Pool, what: str) -> str:
    """Restart a pool that was lost during a cell; returns what the cell's error says of it."""
    t0 = time.monotonic()
    print(f"jupyter-hvd: {what}. Restarting the pool with the same options...", file=sys.stderr, flush=True)
    pool.restart()
    return (
        f"{what[0].upper()}{what[1:]}. The pool was restarted in {time.monotonic() - t0:.1f} s: worker state "
        "(models, variables) was lost; run the cells that define it again."
    )


def restart(pool: Pool) -> Pool:
    """Restart as asked (%hvd_restart, the sidebar); a pool stopped by a failed restart is started anew with the same
    options. Returns the running pool."""
    if pool.stopped:
        pool = Pool.start(pool.options)
        set_current(pool)
    else:
        pool.restart()
    return pool
