"""pdb on a rank, driven from the notebook, the IPython way: `%hvd_debug` opens it in the frame where the rank's last
failed cell raised (a post-mortem), `breakpoint()` in a cell opens it where it is called.

pdb's output goes to the kernel with the cell's output; its prompt goes as an InputRequest, and the command the user
types in the notebook's input box comes back as an InputReply. pdb holds the rank's main thread meanwhile, so the
reply is taken by the channel's reading thread (engine/channel.py) and handed over here.

Imported on the engines only.
"""

from __future__ import annotations

import bdb
import io
import pdb
import queue
import sys
import threading
from types import FrameType, TracebackType
from typing import IO, Any, cast

from IPython import get_ipython

from ... import compat, wire
from .. import outbox

_replies: queue.Queue[tuple[int, str]] = queue.Queue()
_active = threading.Event()  # pdb holds this rank's main thread
_breakpoint_cell: int | None = None  # the cell whose breakpoint() holds this rank, as the kernel was told
last_failure: TracebackType | None = None  # where this rank's last failed cell raised (runner.py keeps it)


def active() -> bool:
    """Whether this rank is in the debugger now."""
    return _active.is_set()


def reply(message: wire.InputReply) -> None:
    """A command typed in the notebook for this rank's pdb (from the channel's reading thread)."""
    _replies.put((message.n, message.text))


def failed(exc: BaseException) -> None:
    """A cell raised `exc` on this rank: %hvd_debug opens pdb where it did (not for an interrupt, an exit or pdb's
    own quit, which are no failure of the user's code)."""
    global last_failure
    if not isinstance(exc, (KeyboardInterrupt, SystemExit, bdb.BdbQuit)) and exc.__traceback__ is not None:
        last_failure = exc.__traceback__.tb_next  # the cell's frames, without the runner's
    elif isinstance(exc, bdb.BdbQuit):
        last_failure = None  # nothing of the user's failed: an older failure's frames would mislead


class _Prompt(io.TextIOBase):
    """pdb's stdin: each line is asked of the notebook."""

    def __init__(self, n: int, cell: int | None) -> None:
        self._n = n
        self._cell = cell
        self.prompt = "(Pdb) "

    def readable(self) -> bool:
        return True

    # Text, as TextIOBase's readline is (typeshed's _IOBase says bytes).
    def readline(self, size: int | None = -1, /) -> str:  # type: ignore[override]
        while not _replies.empty():  # an answer to an earlier session's prompt
            _replies.get_nowait()
        outbox.send(wire.InputRequest(outbox.rank(), self._n, self._cell, self.prompt))
        try:
            while True:
                n, text = _replies.get()
                if n == self._n:
                    return text + "\n"
        except KeyboardInterrupt:  # the stop button (or the wind-down's SIGINT): leave pdb, as its quit does
            return "q\n"


class _Output(io.TextIOBase):
    """pdb's stdout: to the notebook as its own stream, shown whichever ranks the cell shows (the prompt goes with
    the input request instead)."""

    def __init__(self, prompt: _Prompt, cell: int | None) -> None:
        self._prompt = prompt
        self._cell = cell

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if text and text != self._prompt.prompt:
            outbox.send(wire.Output(outbox.rank(), self._cell, "pdb", text))
        return len(text)


class _RemotePdb(pdb.Pdb):
    def __init__(self, n: int, cell: int | None) -> None:
        prompt = _Prompt(n, cell)
        # Text streams of their own: pdb reads and writes lines through them (typeshed wants typing.IO).
        super().__init__(stdin=cast(IO[str], prompt), stdout=cast(IO[str], _Output(prompt, cell)), nosigint=True)
        self.use_rawinput = False
        self.prompt = prompt.prompt

    def get_stack(self, f: FrameType | None, t: TracebackType | None) -> tuple[list[tuple[FrameType, int]], int]:
        """The frames from the outermost cell's down: the engine's own below it are nothing the user can act on."""
        stack, i = super().get_stack(f, t)
        cells = (k for k, (frame, _) in enumerate(stack) if wire.cell_number(frame.f_code.co_filename) is not None)
        first = next(cells, 0)
        if i < first:  # stepped out of the cell into the engine: the whole stack, so the current frame is in it
            return stack, i
        return stack[first:], i - first

    def format_stack_entry(self, frame_lineno: tuple[FrameType, int], lprefix: str = ": ") -> str:
        """A frame of a cell as tracebacks name it, 'Cell In[7], line 4' (pdb's own: '<hvd-cell-3>(4)<module>()')."""
        text = super().format_stack_entry(frame_lineno, lprefix)
        frame, line = frame_lineno
        code = frame.f_code
        prompt = compat.cell_prompt(get_ipython(), code.co_filename)
        own = f"{self.canonic(code.co_filename)}({line!r}){code.co_name or '<lambda>'}()"
        if prompt is None or not text.startswith(own):
            return text
        return wire.cell_place(prompt, line, code.co_name) + text[len(own) :]


class _BreakpointPdb(_RemotePdb):
    """A breakpoint()'s pdb: the rank is in the debugger from the breakpoint until pdb stops tracing (continue
    without breakpoints left, quit) or the cell ends."""

    def set_continue(self) -> None:
        super().set_continue()
        if not self.breaks:
            _leave()

    def set_quit(self) -> None:
        super().set_quit()
        _leave()


def _enter(cell: int) -> None:
    global _breakpoint_cell
    _active.set()
    if _breakpoint_cell != cell:
        _breakpoint_cell = cell
        outbox.send(wire.Debugging(outbox.rank(), cell, True))


def _leave() -> None:
    global _breakpoint_cell
    _active.clear()
    if _breakpoint_cell is not None:
        outbox.send(wire.Debugging(outbox.rank(), _breakpoint_cell, False))
        _breakpoint_cell = None


def cell_ended() -> None:
    """The running cell ended: a breakpoint's session (breakpoints left, never reached again) ends with it."""
    if _breakpoint_cell is not None:
        sys.settrace(None)  # a session with breakpoints left traces until here: not into the engine's own code
        _leave()


def post_mortem(n: int) -> str:
    """Debug session `n`: pdb in the frame where the last failed cell raised, until the user quits; '' or why there
    is nothing to debug."""
    if last_failure is None:
        return f"no cell has failed on rank {outbox.rank()} since its engine started"
    _active.set()
    try:
        debugger = _RemotePdb(n, n)
        debugger.reset()
        debugger.interaction(None, last_failure)
    finally:
        _active.clear()
    return ""


def breakpointhook(*args: Any, **kwargs: Any) -> None:
    """`breakpoint()` in a cell: pdb on this rank where it is called; the other ranks go on until they need it."""
    cell = outbox.running_cell()
    if cell is None or threading.current_thread() is not threading.main_thread():
        # Between cells, or in a thread of the user's that may outlive its cell: nobody could answer its prompt.
        outbox.problem("breakpoint() was skipped: pdb opens in a running %%hvd cell's own thread only")
        return
    _enter(cell)
    _BreakpointPdb(0, cell).set_trace(sys._getframe(1))


def install() -> None:
    """`breakpoint()` opens the remote pdb (once, at the bootstrap)."""
    sys.breakpointhook = breakpointhook
