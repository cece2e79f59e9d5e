"""pdb on a rank from the notebook, the IPython way: the rank's prompts arrive as input requests and are answered in
the notebook's input box, as with IPython's `%debug`.

`%hvd_debug [--rank R]` opens a post-mortem in the frame where that rank's last failed cell raised; a running cell's
`breakpoint()` on a rank is answered while the cell runs (kernel/cell.py hands its prompts here). The rank side is
jupyter_hvd/engine/debugger.py. Runs in the user's kernel.
"""

from __future__ import annotations

import sys
import time

from IPython.core.error import UsageError

from .. import wire
from .channel import ChannelError
from .pool import Pool

TICK_S = 0.25


def answer(pool: Pool, request: wire.InputRequest) -> None:
    """Ask the notebook for the command a rank's pdb prompt waits for, and send it there ('c', continue, where the
    front end takes no input, or on the stop button)."""
    try:
        text = input(request.prompt)
    except KeyboardInterrupt:
        text = "q" if request.n else "c"
    except Exception:  # a front end without an input box (nbclient, a terminal without stdin)
        print(f"jupyter-hvd: this front end takes no input: rank {request.rank} continues.", file=sys.stderr)
        text = "q" if request.n else "c"
    if pool.channel is not None:
        try:
            pool.channel.send(request.rank, wire.InputReply(request.n, text))
        except ChannelError:
            pass


def show(event: wire.Output) -> None:
    """pdb's own output, as it comes."""
    sys.stdout.write(event.text)
    sys.stdout.flush()


def post_mortem(pool: Pool, rank: int, n: int) -> None:
    """Debug session `n`: pdb on `rank` in the frame where its last failed cell raised, until the user quits."""
    channel = pool.channel
    if channel is None:
        raise UsageError("The pool has no cell channel: %hvd_restart first.")
    print(f"jupyter-hvd: pdb on rank {rank}, in the frame where its last failed cell raised (q leaves).", flush=True)
    channel.send(rank, wire.Debug(n))
    next_check = time.monotonic() + TICK_S
    while True:
        event = channel.receive(TICK_S)
        if isinstance(event, wire.Output) and event.rank == rank and event.cell == n:
            show(event) if event.stream == "pdb" else sys.stdout.write(event.text)
        elif isinstance(event, wire.InputRequest) and event.rank == rank and event.n == n:
            answer(pool, event)
        elif isinstance(event, wire.Debugged) and event.rank == rank and event.n == n:
            if event.error:
                raise UsageError(f"Nothing to debug on rank {rank}: {event.error}.")
            return
        if time.monotonic() >= next_check:
            next_check = time.monotonic() + TICK_S
            if rank in pool.dead_ranks():
                raise UsageError(f"Rank {rank} died while in the debugger: {pool.death_report()}")
