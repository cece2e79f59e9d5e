"""Where every rank is, in the user's words: the cell line and function, the collective it waits in, identical places
grouped, library frames folded unless asked for:

    ranks 0,2,3: waiting in allreduce 'grad_sync' (Cell In[7], line 6)
    rank 1: in load_batch() (Cell In[7], line 3) -> time.sleep(1)

Shown when the stop button ends a running cell, when Horovod reports a stall, by %hvd_where and by the sidebar's
Where (the pool file's `where`). Each rank answers from a thread of its own (engine/diagnose/where.py), without being
stopped; a rank that cannot answer (frozen by SIGSTOP, or holding the GIL in native code) is named as such, with the
stack py-spy reads from outside. py-spy rather than faulthandler: faulthandler needs a signal handled by the rank
itself, which a frozen rank never runs and which would land in the user's code; py-spy reads a stopped process's Python
frames without touching it, and a running one's native frames too (ptrace pauses it briefly; no signal).

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

from ... import state, wire
from .. import failures
from ..asks import Asks
from ..channel import Channel, ChannelError
from ..errors import frame_location
from ..launch.hosts import is_this_host
from ..launch.pool_file import Published
from ..ranks import Rank, format_ranks

ANSWER_S = 1.0  # how long ranks have to answer before py-spy reads them from outside
# For every rank py-spy reads, together; a cap, not a wait. A native read loads the symbols of every library the rank
# mapped (torch's are large): 0.7 s on a quiet machine, 3-5 s (8 s seen) with both cores busy (a rank spinning in
# native code, the other polling in its allreduce); 5 s left "py-spy could not read its stack" in 1 test round of 2.
PYSPY_S = 10.0
_numbers = iter(range(1, 1 << 62))
_PYSPY_FRAME = re.compile(r"^\s+(\S.*?) \((.*?)(?::(\d+))?\)\s*$")


class Pool(failures.Processes, Published, Protocol):
    """What "where" uses of a pool (kernel/launch/pool.py)."""

    lock: Any
    busy_cell: str | None

    @property  # read-only, so a pool's CellChannel fits, as does a test's fake
    def channel(self) -> Channel | None: ...


def at(frame: wire.Frame) -> str:
    """'Cell In[7], line 6' (a cell's frame, named as tracebacks and pdb name it), or 'data.py:12'."""
    in_cell = frame_location(frame["file"], frame["line"])
    if in_cell is not None:
        return in_cell
    return f"{Path(frame['file']).name}:{frame['line']}" if frame["line"] else Path(frame["file"]).name


def describe(place: wire.Place, full: bool = False) -> str:
    """One rank's place in words: "waiting in allreduce 'x' (Cell In[7], line 6)", 'in f() (Cell In[7], line 3) ->
    time.sleep(1)';
    with `full`, every frame below on lines of their own."""
    if place.cell is None and not place.debugger:
        return "idle (no cell running)"
    frames = place.frames
    user = [i for i, f in enumerate(frames) if not f["library"]]
    last = frames[user[-1]] if user else None
    spot = ""  # 'in load_batch() (Cell In[7], line 3)', or 'at Cell In[7], line 6' in the cell itself
    if last is not None:
        where = at(last)
        spot = f"at {where}" if last["function"] == "<module>" else f"in {last['function']}() ({where})"
    if place.debugger:
        text = f"in the debugger (pdb){' ' + spot if spot else ''}"
    elif place.waiting:
        text = f"waiting in {place.waiting}"
        if last is not None:
            text += f" ({at(last)})" if spot.startswith("at ") else f" {spot}"
    else:
        text = f"{spot or 'in library code'}{_tail(frames, user[-1] if user else -1)}"
    if full:
        text += "".join(f"\n      {_frame(f)}" for f in frames) or "\n      (no Python frames)"
    return text


def _tail(frames: list[wire.Frame], last_user: int) -> str:
    """What the user's innermost frame is in: ' -> time.sleep(60)' (a call without a frame of its own: its line), or
    ' -> re.match -> ... -> sre_ucs1_match' (what it called, ... where that is now)."""
    below = [f for f in frames[last_user + 1 :] if not f["function"].startswith("0x")]
    if not below:
        code = frames[last_user]["code"] if frames and last_user >= 0 else ""
        return f" -> {code[:80]}" if code else ""
    called, now = _name(below[0]), _name(below[-1])
    if len(below) == 1:
        return f" -> {called}"
    return f" -> {called}{' -> ...' if len(below) > 2 else ''} -> {now}"


def _name(frame: wire.Frame) -> str:
    """'time.sleep', 'torch.nn.modules.module._call_impl', or a native function: 'sre_ucs1_match'."""
    if not frame["line"]:  # native code (read by py-spy --native): a function of a shared library
        return frame["function"]
    return f"{_module(frame['file'])}.{frame['function']}"


def _frame(f: wire.Frame) -> str:
    if wire.cell_number(f["file"]) is not None:
        return f"{f['function']} ({at(f)})"
    return f"{f['function']} ({f['file']}{':' + str(f['line']) if f['line'] else ''})"


def _module(path: str) -> str:
    """'time' for a frame of time.py, 'torch.nn.modules.module' for site-packages/torch/nn/modules/module.py."""
    parts = Path(path).with_suffix("").parts
    for i, part in enumerate(parts):  # an installed package, or the standard library (lib/python3.X/re/__init__.py)
        if part in ("site-packages", "dist-packages") or re.fullmatch(r"python3\.\d+", part):
            inner = [p for p in parts[i + 1 :] if p != "__init__"]
            if inner and inner[0] not in ("site-packages", "dist-packages"):
                return ".".join(inner)
    if "jupyter_hvd" in parts:  # an editable install of jupyter-hvd
        return ".".join(p for p in parts[parts.index("jupyter_hvd") :] if p != "__init__")
    return Path(path).stem


def grouped(lines: dict[int, str]) -> str:
    """Ranks with the same place on one line, in rank order."""
    groups: dict[str, list[int]] = {}
    for rank in sorted(lines):
        groups.setdefault(lines[rank], []).append(rank)
    return "\n".join(f"{format_ranks(ranks)}: {text}" for text, ranks in groups.items())


def ask(
    pool: Pool,
    full: bool = False,
    other: Callable[[wire.Event], None] | None = None,
    source: tuple[int, str] | None = None,
    ended: dict[int, str] | None = None,
) -> dict[int, str]:
    """Where every rank of `pool` is now, in words, by rank; `other` gets the events that arrive meanwhile (a running
    cell's output), so none is lost; `source`: the running cell's number and source, for the lines of the stacks
    read from outside; `ended`: what the running cell's ranks that are done with it did, in words."""
    channel = pool.channel
    if channel is None or not pool.ranks:
        return {}
    meanwhile: list[wire.Event] = []  # handed on after the picture: handling one may wait (a pdb prompt does)
    try:
        n, places = _answers(pool, channel, meanwhile)
        silent = [r for r in pool.ranks if r.rank not in places]
        outside = _from_outside(pool, silent, full, source) if silent else {}
        # A rank slow to answer on a loaded machine (not busy in native code) answers while py-spy reads it: its own
        # answer is the better picture.
        places.update(_arrived(channel, n, meanwhile))
        lines = {rank: describe(place, full) for rank, place in places.items()}
        for rank, place in places.items():
            if source is not None and place.cell is None and not place.debugger:
                # The cell was sent: this rank is done with it, or has not begun it (busy with what came before).
                lines[rank] = (ended or {}).get(rank, "has not begun this cell yet")
        lines.update({rank: line for rank, line in outside.items() if rank not in lines})
    finally:
        if other is not None:
            for event in meanwhile:
                other(event)
    return lines


def _answers(pool: Pool, channel: Channel, meanwhile: list[wire.Event]) -> tuple[int, dict[int, wire.Place]]:
    """The ranks' own answers to a new Where (its number, and the answers by rank), within ANSWER_S; other events
    that arrive go to `meanwhile`."""
    n = next(_numbers)
    asked = []
    for r in pool.ranks:
        try:
            channel.send(r.rank, wire.Where(n))
            asked.append(r.rank)
        except ChannelError:
            pass
    places: dict[int, wire.Place] = {}
    deadline = time.monotonic() + ANSWER_S
    while len(places) < len(asked) and time.monotonic() < deadline:
        event = channel.receive(max(0.0, deadline - time.monotonic()))
        if isinstance(event, wire.Place):
            if event.n == n:
                places[event.rank] = event
        elif event is not None:
            meanwhile.append(event)
    return n, places


def _arrived(channel: Channel, n: int, meanwhile: list[wire.Event]) -> dict[int, wire.Place]:
    """Answers to Where `n` already received, without waiting; other events go to `meanwhile`."""
    places: dict[int, wire.Place] = {}
    event = channel.receive(0)
    while event is not None:
        if isinstance(event, wire.Place):
            if event.n == n:
                places[event.rank] = event
        else:
            meanwhile.append(event)
        event = channel.receive(0)
    return places


class Glimpse:
    """Where every rank is, asked without waiting while a cell runs quiet: the answers come among the cell's events
    (the cell hands them to `take`); a rank that does not answer within ANSWER_S is not read from outside (py-spy
    pauses it, too much for a look taken every few seconds)."""

    def __init__(self, pool: Pool) -> None:
        self.n = next(_numbers)
        self.asked = time.monotonic()
        self.ranks: list[int] = []
        self.places: dict[int, wire.Place] = {}
        channel = pool.channel
        for r in pool.ranks:
            if channel is None:
                break
            try:
                channel.send(r.rank, wire.Where(self.n))
                self.ranks.append(r.rank)
            except ChannelError:
                pass  # a rank that died: the cell's liveness check says so

    def take(self, place: wire.Place) -> None:
        """A rank's answer (answers to another Where are left alone)."""
        if place.n == self.n:
            self.places[place.rank] = place

    def done(self) -> bool:
        """Whether every rank answered, or ANSWER_S passed."""
        return len(self.places) >= len(self.ranks) or time.monotonic() - self.asked > ANSWER_S

    def text(self, ended: dict[int, str]) -> str:
        """The ranks' places, grouped; `ended`: what the ranks that are done with the cell did, in words."""
        lines = {}
        for rank in self.ranks:
            place = self.places.get(rank)
            if rank in ended:
                lines[rank] = ended[rank]
            elif place is None:
                lines[rank] = "not answering (busy in native code, or the machine is busy)"
            elif place.cell is None and not place.debugger:
                lines[rank] = "has not begun this cell yet"
            else:
                lines[rank] = describe(place)
        return grouped(lines)


def _from_outside(pool: Pool, silent: list[Rank], full: bool, source: tuple[int, str] | None) -> dict[int, str]:
    """Ranks that did not answer, named for why, with the stack py-spy reads where it can."""
    found_dead, found_frozen = failures.Dead.among(pool), failures.Frozen.among(pool)
    dead = set(found_dead.ranks if found_dead else ())
    frozen = set(found_frozen.ranks if found_frozen else ())
    local = {r.pid: r.rank in frozen for r in silent if r.rank not in dead and is_this_host(r.host)}
    stacks = outside_stacks(local)
    lines = {}
    for r in silent:
        if r.rank in dead:
            lines[r.rank] = "dead (its engine process is gone)"
            continue
        if r.rank in frozen:
            what = "frozen (stopped by SIGSTOP or Ctrl-Z)"
        elif r.pid in local:
            what = "not answering (busy in native code)"
        else:  # on another host: py-spy reads local processes only
            what = "not answering (frozen, or busy in native code); on another host, its stack cannot be read"
        frames = stacks.get(r.pid)
        if frames is None:
            lines[r.rank] = what if r.pid not in local else f"{what}; py-spy could not read its stack"
            continue
        cell = source[0] if source else None
        if source:  # py-spy gives no code: the running cell's own lines are known here
            code = source[1].splitlines()
            for f in frames:
                if wire.cell_number(f["file"]) == cell and 0 < f["line"] <= len(code):
                    f["code"] = code[f["line"] - 1].strip()[:200]
        lines[r.rank] = f"{what}, read from outside: {describe(wire.Place(r.rank, 0, cell, frames), full)}"
    return lines


def report(
    pool: Pool,
    why: str,
    full: bool = False,
    other: Callable[[wire.Event], None] | None = None,
    source: tuple[int, str] | None = None,
    ended: dict[int, str] | None = None,
) -> str:
    """Where every rank is (`ask`), grouped, as the notebook shows it; kept in the pool file for the sidebar, with
    `why` (what asked, in words)."""
    lines = ask(pool, full, other, source, ended)
    if not lines:
        return "The pool has no ranks running."
    text = grouped(lines)
    pool.file.where = state.WhereReport(time.time(), why, full, text, [lines.get(r.rank, "") for r in pool.ranks])
    pool.publish()
    return text


def indented(text: str) -> str:
    """The lines of a report, indented under the line that says why it is shown."""
    return "\n".join(f"  {line}" for line in text.splitlines())


def answer_sidebar(pool: Pool, asks: Asks) -> bool:
    """The sidebar's Where, between cells (from the watcher's thread): into the pool file; False when the pool is busy
    (a cell that runs takes it itself, a restart leaves it for later)."""
    if asks.where() is None or not pool.lock.acquire(blocking=False):
        return False
    try:
        if pool.busy_cell is not None:
            return False
        full = asks.take_where()
        if full is None:
            return False
        report(pool, "the sidebar asked", full)
        return True
    finally:
        pool.lock.release()


def outside_stacks(pids: dict[int, bool]) -> dict[int, list[wire.Frame]]:
    """The main thread's frames of local processes (pid -> whether it is stopped), innermost last, from the cell's
    down, read by py-spy without running anything in them; a pid py-spy cannot read (not installed, not permitted)
    is left out. A stopped process gives its Python frames only (py-spy cannot pause it further), a running one its
    native frames too: read again (up to NATIVE_TRIES times, within PYSPY_S) where the native unwinding failed at the
    instruction it caught, which leaves the Python frames only."""
    spy = shutil.which("py-spy", path=os.path.dirname(sys.executable)) or shutil.which("py-spy")
    if not spy or not pids:
        return {}
    deadline = time.monotonic() + PYSPY_S
    stacks: dict[int, list[wire.Frame]] = {}
    todo = dict(pids)
    for _ in range(NATIVE_TRIES):
        for pid, frames in _dump(spy, todo, deadline).items():
            stacks[pid] = frames
        todo = {pid: False for pid, stopped in todo.items() if not stopped and not _native_inside(stacks.get(pid))}
        if not todo or time.monotonic() > deadline - 0.5:
            break
    return stacks


# py-spy's native unwinding stops at some instructions, at a bare libc address (1 dump in 8 to 15 of a regex match).
NATIVE_TRIES = 8


def _native_inside(frames: list[wire.Frame] | None) -> bool:
    """Whether py-spy read the innermost frame in native code by its name (or read nothing to try again for): a bare
    address (its unwinding stopped in a libc function without symbols) says nothing and is read again."""
    return not frames or (frames[-1]["line"] == 0 and not frames[-1]["function"].startswith("0x"))


def _dump(spy: str, pids: dict[int, bool], deadline: float) -> dict[int, list[wire.Frame]]:
    runs = {}
    for pid, stopped in pids.items():
        args = [spy, "dump", "--pid", str(pid), "--full-filenames", "--nonblocking" if stopped else "--native"]
        try:
            runs[pid] = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        except OSError:
            continue
    stacks = {}
    for pid, run in runs.items():
        try:
            out, _ = run.communicate(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            run.kill()
            run.communicate()
            continue
        frames = _main_thread(out, pid)
        if frames:
            stacks[pid] = frames
    return stacks


def _main_thread(dump: str, pid: int) -> list[wire.Frame]:
    """The frames of `py-spy dump`'s main thread (its thread id is the pid), innermost last, from the outermost cell
    frame down (what runs the cell is the engine's own)."""
    blocks = re.split(r"^Thread ", re.sub(r"\x1b\[[0-9;]*m", "", dump), flags=re.M)[1:]
    main = next((b for b in blocks if b.split(None, 1)[0] in (str(pid), hex(pid))), blocks[0] if blocks else "")
    frames: list[wire.Frame] = []
    for line in main.splitlines()[1:]:
        found = _PYSPY_FRAME.match(line)
        if not found:
            continue
        function, where, number = found.groups()
        frames.append(
            wire.Frame(
                file=where,
                line=int(number) if number else 0,
                function=function,
                code="",
                library=number is None or wire.library_file(where),
            )
        )
    frames.reverse()
    first = next((i for i, f in enumerate(frames) if wire.cell_number(f["file"]) is not None), None)
    return frames[first:] if first is not None else []
