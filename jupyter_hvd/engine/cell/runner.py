"""Runs one `%%hvd` cell on this engine and reports how it ended.

Imported on the engines only. The kernel ships already-transformed Python source (IPython syntax is
resolved kernel-side, where the syntax check happens too), so an engine only compiles and executes.
"""

from __future__ import annotations

import ast
import io
import linecache
import os
import pickle
import sys
import time
import traceback
from collections import deque
from collections.abc import Callable
from typing import Any

from ... import compat, wire
from ...wire import CellRecord, ErrorInfo
from .. import backend, collectives, outbox
from ..diagnose import debugger

TAIL_LINES = 20  # kept per rank for error context and the pool status, even when output is not shown
VALUE_BYTES = 4 * 2**20  # a cell's last value above this (pickled) is shown by its repr; the channel takes 8 MB
TEXT_CHARS = 100_000  # an error's message or traceback, or a value's repr, is cut here
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


class CellStream(io.TextIOBase):
    """Stands in for sys.stdout/sys.stderr during a cell: forwards up to a budget, then counts and keeps a tail.

    The budget is enforced here, on the engine, so an output flood never crosses the network.
    """

    def __init__(self, target: Any, show: bool, max_lines: int) -> None:
        self._target = target
        self._show = show
        self._max_lines = max_lines
        self._max_chars = max_lines * 400  # also bounds \r-only progress bars, which end no line
        self.lines = 0
        self.chars = 0
        self.dropped = 0
        self.tail: deque[str] = deque(maxlen=TAIL_LINES)
        self._partial = ""

    def writable(self) -> bool:
        return True

    def write(self, s: str) -> int:
        if not isinstance(s, str):
            raise TypeError(f"write() argument must be str, not {type(s).__name__}")
        n = s.count("\n")
        if self._show and self.lines < self._max_lines and self.chars < self._max_chars:
            shown = s[: self._max_chars - self.chars]  # one huge write must not cross the budget either
            self._target.write(shown)
            self.dropped += n - shown.count("\n")
        else:
            self.dropped += n
        self.lines += n
        self.chars += len(s)
        if n:
            parts = (self._partial + s).split("\n")
            self._partial = parts[-1][-400:]
            self.tail.extend(p[-400:] for p in parts[-TAIL_LINES - 1 : -1])
        else:
            self._partial = (self._partial + s)[-400:]
        return len(s)

    def flush(self) -> None:
        if self._show:
            self._target.flush()

    def isatty(self) -> bool:
        return False

    def finish(self) -> None:
        """Say what was dropped, with the last lines, so the end of a flood is still visible."""
        if self._show and self.dropped:
            tail = list(self.tail)[-10:]
            self._target.write(
                f"\n[jupyter-hvd] {self.dropped} more lines were not shown (limit: {self._max_lines} lines "
                f"per cell; change it with %%hvd --log-lines N). Last lines:\n" + "\n".join(tail) + "\n"
            )
            self._target.flush()


def _split_last_expression(src: str, filename: str) -> tuple[Any, Any]:
    """Compile a cell like IPython does: the value of a trailing expression is the cell's result."""
    tree = ast.parse(src, filename=filename)
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body[-1].value)
        tree.body.pop()
    body = compile(tree, filename, "exec")
    return body, (compile(last, filename, "eval") if last is not None else None)


def _pickled(value: Any) -> bytes:
    """The cell's value as the kernel unpickles it; its repr where it cannot be pickled or is too big to send."""
    try:
        data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:
        return pickle.dumps(_Repr(_capped(repr(value))))
    if len(data) <= VALUE_BYTES:
        return data
    note = f"\n[jupyter-hvd] the value is {len(data) / 2**20:.0f} MB: shown by its repr; %hvd_pull fetches big values"
    return pickle.dumps(_Repr(_capped(repr(value)) + note))


def _capped(text: str, limit: int = TEXT_CHARS) -> str:
    """`text`, cut to `limit` characters with a note saying how much was left out."""
    return text if len(text) <= limit else f"{text[:limit]}... [{len(text) - limit} more characters]"


def _shown(shell: Any, value: Any) -> wire.Shown:
    """`value` as a notebook shows a cell's result, formatted here by IPython as `display()` in a cell is; its text
    alone where all of it is too big to send."""
    try:
        data, metadata = shell.display_formatter.format(value)
    except Exception:  # a formatter that raises is reported by IPython itself; the repr still shows
        data, metadata = {}, {}
    # A widget's view names a model that lives on this engine, not in the notebook's kernel: it would show as
    # "model not found". Its text stands for it, as for a value that cannot be pickled.
    data.pop(WIDGET_VIEW, None)
    if "text/plain" not in data:
        try:
            data["text/plain"] = _capped(repr(value))
        except Exception as exc:
            data["text/plain"] = f"<{type(value).__name__}: its repr raised {type(exc).__name__}: {exc}>"
    size = len(pickle.dumps((data, metadata)))
    if size > VALUE_BYTES:
        note = f"\n[jupyter-hvd] the value is {size / 2**20:.0f} MB: shown by its repr; %hvd_pull fetches big values"
        data, metadata = {"text/plain": _capped(str(data["text/plain"])) + note}, {}
    return wire.Shown(data=data, metadata=metadata)


class _Repr(str):
    """A rank-0 result that could not be pickled, shown by its repr."""

    def __repr__(self) -> str:
        return str(self)


def run_cell(
    src: str,
    filename: str,
    show_output: bool,
    max_lines: int,
    stdout: Any,
    stderr: Any,
    every_value: bool = False,
    task: Callable[[], Any] | None = None,
    count: int | None = None,
    formatted: bool = False,
) -> CellRecord:
    """Execute `src` in the engine's user namespace (or do `task`, whose result is then the value) and return a small
    record of how it ended.

    `stdout`/`stderr` receive the cell's output (up to `max_lines`, and only when `show_output`). Exceptions are
    caught and returned (not raised) so the kernel learns of a failure on one rank at once, while other ranks may
    still be running or waiting in a collective. A value of the last expression (rank 0's, or with `every_value`
    every rank's) comes pickled, or with `formatted` rank 0's as the notebook shows it. `count`: the notebook's
    prompt of the cell, In[count], which tracebacks and pdb name.
    """
    from IPython import get_ipython

    shell = get_ipython()
    ns = shell.user_ns
    rank = ns.get("rank", -1)
    # Tracebacks show the cell's lines and name it by its prompt, as they do for a local cell.
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    _name_cell(shell, filename, count)
    out = CellStream(stdout, show_output, max_lines)
    err = CellStream(stderr, show_output, max_lines)
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, err
    t0 = time.perf_counter()
    pid = os.getpid()
    record = CellRecord(rank=rank, ok=True)
    collectives.begin_cell()
    try:
        record.woke = backend.begin_cell()  # Horovod starts again at the cell's first use of it, unless asked now
        if task is not None:
            value = task()
        else:
            body, last = _split_last_expression(src, filename)
            exec(body, ns)
            value = eval(last, ns) if last is not None else None
        if value is not None and formatted and rank == 0 and not every_value:
            record.shown = _shown(shell, value)
        elif value is not None and (rank == 0 or every_value):
            record.value = _pickled(value)
    except BaseException as exc:
        record.ok = False
        record.error = describe_exception(exc)
        debugger.failed(exc)  # %hvd_debug opens pdb where it raised
    finally:
        if os.getpid() != pid:  # a child forked by the cell (os.fork, multiprocessing) never runs engine code
            os._exit(0 if record.ok else 1)
        debugger.cell_ended()
        out.finish()
        err.finish()
        sys.stdout, sys.stderr = saved
        if "jupyter_hvd.engine.cell.report" in sys.modules:  # the cell called report(): send what is still pending
            sys.modules["jupyter_hvd.engine.cell.report"].flush()
    record.seconds = time.perf_counter() - t0
    record.tail = list(out.tail)[-5:]
    record.lines = out.lines
    record.collectives = collectives.started()
    return record


_unnamed_said = False


def _name_cell(shell: Any, filename: str, count: int | None) -> None:
    global _unnamed_said
    compat.cell_is_main(filename)
    try:
        compat.name_cell(shell, filename, count)
    except compat.CompatError as exc:
        if not _unnamed_said:  # tracebacks still work, naming the cell's file: said once
            _unnamed_said = True
            outbox.problem(str(exc))


def describe_exception(exc: BaseException) -> ErrorInfo:
    """Name, message and traceback of `exc`, without this module's own frames. The traceback is IPython's own form, as
    a notebook shows a cell's error (cells named `Cell In[7], line 4`, the failing line among its neighbours)."""
    if isinstance(exc, SystemExit):
        # exit(), quit() and sys.exit() end the cell on this rank; the engine stays (a script would have ended).
        code = exc.code if exc.code is not None else 0
        return ErrorInfo(ename="SystemExit", evalue=f"exit code {code}", traceback="", where="", exit=str(code))
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    where = ""
    for frame in traceback.extract_tb(tb):
        if wire.cell_number(frame.filename) is not None:  # the innermost line of the user's cell
            place = wire.cell_place(_prompt(frame.filename) or "In[ ]", frame.lineno or 0)
            where = f"{place}: {(frame.line or '').strip()}"
    return ErrorInfo(
        ename=type(exc).__name__,
        evalue=_capped(str(exc)),
        traceback=_capped(_formatted(exc, tb)),
        where=_capped(where, 400),
    )


def _prompt(filename: str) -> str | None:
    from IPython import get_ipython

    return compat.cell_prompt(get_ipython(), filename)


def _formatted(exc: BaseException, tb: Any) -> str:
    """`exc` from `tb` down, as IPython's notebook shows it; Python's own form where IPython's formatter fails."""
    try:
        return compat.context_traceback(exc, tb)
    except Exception:  # a broken __repr__ or source IPython cannot read must not hide the user's error
        return "".join(traceback.format_exception(type(exc), exc, tb))


def warm_up() -> None:
    """Format a first exception: IPython's formatter imports and prepares what it needs at its first use (0.1 s),
    which would otherwise delay a cell's first error on this rank."""
    try:
        raise ValueError("warm-up")
    except ValueError as exc:
        _formatted(exc, exc.__traceback__)
