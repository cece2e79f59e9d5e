"""How failures reach the user: what happened, on which ranks, and what to type next.

IPython shows an exception through its `_render_traceback_` when it has one (ipyparallel's RemoteError does
the same), so these errors print our message only, never a traceback through jupyter-hvd's own code.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

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
    (kernel/lifecycle.py does, and says what came back)."""

    def __init__(self, message: str, hint: str = "", interrupted: bool = False, lost: Failure | None = None) -> None:
        super().__init__(message, hint)
        self.interrupted = interrupted
        self.lost = lost


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
