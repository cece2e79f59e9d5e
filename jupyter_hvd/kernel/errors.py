"""How failures reach the user: what happened, on which ranks, and what to type next.

IPython shows an exception through its `_render_traceback_` when it has one (ipyparallel's RemoteError does
the same), so these errors print our message only, never a traceback through jupyter-hvd's own code.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .. import wire
from .failures import Failure
from .ranks import format_ranks

RED, BOLD, RESET = "\x1b[31m", "\x1b[1m", "\x1b[0m"


class PoolError(Exception):
    """The pool could not do what was asked; `hint` says what to type next."""

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def _render_traceback_(self) -> list[str]:
        lines = [f"{RED}{BOLD}jupyter-hvd:{RESET} {self.message}"]
        if self.hint:
            lines.append(self.hint)
        return lines

    def __str__(self) -> str:
        return self.message + (f"\n{self.hint}" if self.hint else "")


class CellFailed(PoolError):
    """A `%%hvd` cell failed on one or more ranks (the rendered text already groups identical errors); `interrupted`:
    it ended because the user interrupted it; `lost`: the pool was lost with it, and must be restarted
    (kernel/owner.py does, and says what came back)."""

    def __init__(self, message: str, hint: str = "", interrupted: bool = False, lost: Failure | None = None) -> None:
        super().__init__(message, hint)
        self.interrupted = interrupted
        self.lost = lost


# The engines run cell number N (kernel/cell/run.py's CellRun.number) as the file `<hvd-cell-N>`; the user knows it by
# its prompt, In[count]. Kept for every cell of the kernel's life: a function defined in an earlier cell runs on.
_prompts: dict[int, int | None] = {}


def name_cell(number: int, count: int | None) -> None:
    """Cell number `number` runs the notebook's cell In[count] (None: a cell the user did not type)."""
    _prompts[number] = count


def cell_location(count: int | None, line: int, function: str | None = None) -> str:
    """IPython's own words for a place in a cell: `Cell In[4], line 3` (`, in f()` inside a function); `line` counts
    the cell's body, as the engines' tracebacks and pdb do."""
    return wire.cell_place(f"In[{count}]" if count is not None else "In[ ]", line, function)


def frame_location(filename: str, line: int, function: str | None = None) -> str | None:
    """`cell_location` of a frame of a `%%hvd` cell (`<hvd-cell-N>`); None for any other file."""
    number = wire.cell_number(filename)
    if number is None:
        return None
    return cell_location(_prompts.get(number), line, function)


def syntax_error_lines(exc: SyntaxError, count: int | None) -> list[str]:
    """A `%%hvd` cell that does not parse, as IPython shows a plain cell's: where, the line, a caret, the message."""
    text = (exc.text or "").rstrip("\n")
    out = [f"  {cell_location(count, exc.lineno or 0)}", f"    {text.strip()}"]
    if exc.offset:
        indent = len(text) - len(text.lstrip())
        out.append("    " + " " * max(0, exc.offset - 1 - indent) + "^")
    out.append(f"{type(exc).__name__}: {exc.msg}")
    return out


def group_errors(errors: Iterable[dict[str, Any]]) -> str:
    """One block per distinct error: `ranks 0-3: ValueError: boom` and then one traceback.

    Each error is a dict with rank, ename, evalue, traceback.
    """
    groups: dict[tuple[str, str, str], list[int]] = {}
    for e in errors:
        key = (e["ename"], e["evalue"], e.get("traceback", ""))
        groups.setdefault(key, []).append(e["rank"])
    blocks = []
    for (ename, evalue, tb), ranks in sorted(groups.items(), key=lambda kv: min(kv[1])):
        head = f"{RED}{BOLD}{format_ranks(ranks)}: {ename}{': ' + evalue if evalue else ''}{RESET}"
        blocks.append(head + ("\n" + tb.rstrip() if tb else ""))
    return "\n\n".join(blocks)
