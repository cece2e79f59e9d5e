"""Where every rank is, in the user's words: the cell line and function, the collective it waits in, identical places
grouped, library frames folded unless asked for:

    ranks 0, 2, 3: waiting in allreduce 'grad_sync' (cell line 6)
    rank 1: in load_batch() (cell line 3) -> time.sleep

Shown when the stop button ends a running cell, when Horovod reports a stall, by %hvd_where and by the sidebar's
Where. Each rank answers from a thread of its own (engine/where.py), without being stopped; a rank that cannot
answer (frozen by SIGSTOP, or holding the GIL in native code) is named as such, with the stack py-spy reads from
outside. py-spy rather than faulthandler: it reads a stopped process and never runs code in the target (faulthandler
needs a signal handled by the rank itself, which a frozen rank never runs). Its Python frames only: native frames
need the target paused by ptrace, which a stopped process refuses and a running one would feel.

Runs in the user's kernel.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from .. import wire
from .channel import ChannelError
from .ranks import format_ranks


class Pooled(Protocol):
    """What taking the picture reads of a pool (kernel/pool.py)."""

    channel: Any
    ranks: list[Any]

    def frozen_ranks(self) -> list[int]: ...

    def dead_ranks(self) -> list[int]: ...


ANSWER_S = 1.0  # how long ranks have to answer before py-spy reads them from outside
PYSPY_S = 5.0
_numbers = iter(range(1, 1 << 62))


def cell_line(filename: str) -> bool:
    """Whether a frame's file is a %%hvd cell (engine/runner.py runs cells as `<hvd-cell-N>`)."""
    return filename.startswith("<hvd-cell-")


def at(frame: wire.Frame) -> str:
    """'cell line 6' (as the notebook numbers the cell's lines: %%hvd is line 1), or 'data.py:12'."""
    if cell_line(frame["file"]):
        return f"cell line {frame['line'] + 1}"
    return f"{Path(frame['file']).name}:{frame['line']}"


def describe(place: wire.Place, full: bool = False) -> str:
    """One rank's place in words: 'waiting in allreduce 'x' (cell line 6)', 'in f() (cell line 3) -> time.sleep'."""
    if place.cell is None:
        return "idle (no cell running)"
    if place.debugger:
        prefix = "in the debugger (pdb), "
    else:
        prefix = ""
    frames = place.frames
    user = [f for f in frames if not f["library"]]
    innermost = frames[-1] if frames else None
    where = ""
    if user:
        last = user[-1]
        where = f"{last['function']}() ({at(last)})" if last["function"] != "<module>" else f"({at(last)})"
    if full:
        chain = " -> ".join(_frame(f) for f in frames) or "(no Python frames)"
        return f"{prefix}{'waiting in ' + place.waiting + ': ' if place.waiting else ''}{chain}"
    if place.waiting:
        return f"{prefix}waiting in {place.waiting} {where}".rstrip()
    tail = ""
    if innermost is not None and innermost["library"]:
        tail = f" -> {_module(innermost['file'])}.{innermost['function']}"
    elif innermost is not None and innermost["code"]:  # the call it is in (a builtin has no frame of its own)
        tail = f" -> {innermost['code'][:80]}"
    return f"{prefix}in {where or 'the cell'}{tail}"


def _frame(f: wire.Frame) -> str:
    return f"{f['function']} ({at(f) if cell_line(f['file']) else f['file'] + ':' + str(f['line'])})"


def _module(path: str) -> str:
    """'time' for a frame of time.py, 'torch.nn.modules.module' for site-packages/torch/nn/modules/module.py."""
    parts = Path(path).with_suffix("").parts
    for anchor in ("site-packages", "dist-packages"):
        if anchor in parts:
            return ".".join(parts[parts.index(anchor) + 1 :])
    return Path(path).stem


def grouped(lines: dict[int, str]) -> str:
    """Ranks with the same place on one line, in rank order."""
    groups: dict[str, list[int]] = {}
    for rank in sorted(lines):
        groups.setdefault(lines[rank], []).append(rank)
    return "\n".join(f"{format_ranks(ranks)}: {text}" for text, ranks in groups.items())


def ask(pool: Pooled, full: bool = False, other: Callable[[wire.Event], None] | None = None) -> str:
    """Where every rank of `pool` is now, in words (grouped); `other` gets the events that arrive meanwhile (a running
    cell's output), so none is lost."""
    channel = pool.channel
    if channel is None or not pool.ranks:
        return "The pool has no ranks running."
    n = next(_numbers)
    asked = []
    for r in pool.ranks:
        try:
            channel.send(r.rank, wire.Where(n, full))
            asked.append(r.rank)
        except ChannelError:
            pass
    places: dict[int, wire.Place] = {}
    deadline = time.monotonic() + ANSWER_S
    while len(places) < len(asked) and time.monotonic() < deadline:
        event = channel.receive(max(0.0, deadline - time.monotonic()))
        if isinstance(event, wire.Place) and event.n == n:
            places[event.rank] = event
        elif event is not None and other is not None:
            other(event)
    lines = {rank: describe(place, full) for rank, place in places.items()}
    frozen = set(pool.frozen_ranks())
    dead = set(pool.dead_ranks())
    for r in pool.ranks:
        if r.rank in lines:
            continue
        if r.rank in dead:
            lines[r.rank] = "dead (its engine process is gone)"
            continue
        state = "frozen (stopped by SIGSTOP or Ctrl-Z)" if r.rank in frozen else "not answering (busy in native code)"
        stack = outside_stack(r.pid, r.host)
        lines[r.rank] = f"{state}{': ' + stack if stack else ''}"
    return grouped(lines)


def outside_stack(pid: int, host: str) -> str:
    """The innermost Python frames of a local process, read by py-spy without pausing it or running anything in it
    ('' where py-spy cannot: another host, not installed, not permitted)."""
    import socket

    spy = shutil.which("py-spy", path=os.path.dirname(sys.executable)) or shutil.which("py-spy")
    if not spy or host not in (socket.gethostname(), "localhost", "127.0.0.1"):
        return ""
    args = [spy, "dump", "--pid", str(pid), "--nonblocking"]
    try:
        out = subprocess.run(args, capture_output=True, text=True, timeout=PYSPY_S).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""
    main = re.sub(r"\x1b\[[0-9;]*m", "", out).split("Thread ", 2)
    frames = []
    for line in (main[1] if len(main) > 1 else "").splitlines()[1:]:
        found = re.match(r"\s+(\S+) \((.*):(\d+)\)", line)
        if not found:
            continue
        function, path, number = found.groups()
        if cell_line(path):
            frames.append(f"{function} (cell line {int(number) + 1})")
            break  # what called the cell is the engine's own
        frames.append(f"{function} ({Path(path).name}:{number})")
    if len(frames) > 2:  # the innermost frame and the cell's line say it; the library frames between are folded
        frames = [frames[0], "...", frames[-1]]
    return " <- ".join(frames)
