"""pdb on a rank from the notebook, the IPython way: the rank's prompts arrive as input requests and are answered in
the notebook's input box, as with IPython's `%debug`.

`%hvd_debug [--rank R]` opens a post-mortem in the frame where that rank's last failed cell raised; a running cell's
`breakpoint()` on a rank is answered while the cell runs (kernel/cell/run.py hands its prompts here). The rank side is
jupyter_hvd/engine/diagnose/debugger.py. Runs in the user's kernel.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Protocol

from IPython.core.error import UsageError

from ... import wire
from .. import failures, tell
from ..channel import Channel, ChannelError

TICK_S = 0.25
LEAVE_S = 5.0  # after the stop button, how long a rank's pdb may take to quit


class Pool(failures.Processes, Protocol):
    """What the debugger uses of a pool (kernel/launch/pool.py)."""

    @property  # read-only, so a pool's CellChannel fits, as does a test's fake
    def channel(self) -> Channel | None: ...

    def interrupt(self, ranks: list[int], cell: int) -> None: ...


def prompt(request: wire.InputRequest) -> str:
    """pdb's prompt, with the rank it comes from: '(Pdb rank 1) '."""
    return request.prompt.replace("(Pdb)", f"(Pdb rank {request.rank})", 1)


def answer(pool: Pool, request: wire.InputRequest) -> None:
    """Ask the notebook for the command a rank's pdb prompt waits for, and send it there. Where the front end takes
    no input the rank continues; the stop button raises KeyboardInterrupt here, the rank still at its prompt."""
    try:
        text = input(prompt(request))
    except Exception:  # a front end without an input box (nbclient, a terminal without stdin)
        tell.news(f"this front end takes no input: rank {request.rank} continues.")
        text = "q" if request.n else "c"
    send(pool, request, text)


def send(pool: Pool, request: wire.InputRequest, text: str) -> None:
    """`text` typed at `request`'s prompt, to its rank."""
    if pool.channel is not None:
        try:
            pool.channel.send(request.rank, wire.InputReply(request.n, text))
        except ChannelError:
            pass  # a rank that died: the cell (or the debug session) finds out


def show(event: wire.Output) -> None:
    """pdb's own output, as it comes."""
    sys.stdout.write(event.text)
    sys.stdout.flush()


def post_mortem(pool: Pool, rank: int, n: int) -> None:
    """Debug session `n`: pdb on `rank` in the frame where its last failed cell raised, until the user quits, or
    presses stop: the rank is interrupted (at its prompt, or in a command) and its pdb quits, within LEAVE_S."""
    channel = pool.channel
    if channel is None:
        raise UsageError("The pool has no cell channel: %hvd_restart first.")
    print(f"jupyter-hvd: pdb on rank {rank}, in the frame where its last failed cell raised (q leaves).", flush=True)
    channel.send(rank, wire.Debug(n))
    next_check = time.monotonic() + TICK_S
    leave_by: float | None = None
    while True:
        try:
            ended = _step(pool, channel, rank, n, leave_by is not None)
        except KeyboardInterrupt:
            if leave_by is not None:
                raise
            pool.interrupt([rank], n)  # at its prompt pdb quits; in a command it prompts again, answered q below
            leave_by = time.monotonic() + LEAVE_S
            continue
        if ended is not None:
            if ended.error:
                raise UsageError(f"Nothing to debug on rank {rank}: {ended.error}.")
            if leave_by is not None:
                raise KeyboardInterrupt  # the stop button ended the session: said as for any interrupted cell
            return
        if leave_by is not None and time.monotonic() > leave_by:
            raise UsageError(
                f"Rank {rank} did not leave pdb within {LEAVE_S:g} s of the stop button: %hvd_restart gives fresh "
                "engines (kept names come back)."
            )
        if time.monotonic() >= next_check:
            next_check = time.monotonic() + TICK_S
            dead = failures.Dead.among(pool, [rank])
            if dead is not None:
                raise UsageError(f"While in the debugger, {dead}")


def _step(pool: Pool, channel: Channel, rank: int, n: int, leaving: bool) -> wire.Debugged | None:
    """Handle the next event of debug session `n` (`leaving`: its prompts are answered q); its end, once it came."""
    event: Any = channel.receive(TICK_S)
    if getattr(event, "rank", None) != rank:
        return None
    if isinstance(event, wire.Output) and event.cell == n:
        show(event) if event.stream == "pdb" else sys.stdout.write(event.text)
    elif isinstance(event, wire.InputRequest) and event.n == n:
        send(pool, event, "q") if leaving else answer(pool, event)
    elif isinstance(event, wire.Debugged) and event.n == n:
        return event
    return None
