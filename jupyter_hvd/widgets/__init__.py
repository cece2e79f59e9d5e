"""Kernel-side views of a running `%%hvd` cell: the live training view (widget), its text twin, and plain text.

The kernel talks to this room through `CellView` and `view_for_cell` only; nothing here imports the kernel's code.
"""

from __future__ import annotations

import os
from typing import Any, Protocol

from ..digest import Chunk
from .quiet import QuietView

__all__ = ["VIEW_MODES", "CellView", "QuietView", "front_end_draws_widgets", "plain_view", "view_for_cell"]

VIEW_MODES = ("auto", "widget", "text", "off")  # auto: the widget where the front end draws widgets, else text


class CellView(Protocol):
    """What a running cell shows: the cell runner hands it output and metrics as they arrive, on the main thread."""

    def output(self, chunk: Chunk) -> None:
        """Text that a rank wrote to stdout or stderr, with the lines it finished (jupyter_hvd/digest.py)."""

    def metrics(self, rank: int, records: Any) -> None:
        """A batch of `report()` records from `rank`."""

    def nonfinite(self, message: str) -> None:
        """Where a metric first became NaN or Inf ("loss became nan at step 12 on rank 0"), said once per cell."""

    def straggler(self, message: str | None) -> None:
        """The rank that sets the pace ("rank 1 is the straggler: ..."), or None once there is none."""

    def activity(self, text: str | None) -> None:
        """What the ranks do while the cell prints nothing ("rank 0: waiting in allreduce 'grad' (Cell In[7], line
        6)", a line per place), or None once it printed again."""

    def display(self, rank: int, data: dict[str, Any], metadata: dict[str, Any]) -> None:
        """A `display()` (a plot, a table, a widget) made on `rank`."""

    def tick(self) -> None:
        """Called at least every quarter second while the cell runs."""

    def close(self, ok: bool) -> None:
        """The cell ended (ok: on every rank, without error or interrupt)."""


def front_end_draws_widgets(shell: Any) -> bool:
    """Whether the notebook front end running this cell renders widgets (JupyterLab, Notebook 7, VS Code).

    Those front ends send the cell's id with each execution and start kernels through a Jupyter server or
    VS Code; headless runners (nbclient, `nbconvert --execute`, jupyter_client scripts) do neither.
    """
    kernel = getattr(shell, "kernel", None)
    if kernel is None:
        return False
    metadata = (kernel.get_parent() or {}).get("metadata") or {}
    return bool(metadata.get("cellId") or os.environ.get("JPY_SESSION_NAME") or os.environ.get("VSCODE_PID"))


def plain_view(show_ranks: list[int]) -> CellView:
    """Output as plain text in the cell, rank 0 raw and other ranks' lines prefixed `[rank N]`."""
    from .plain import PlainView

    return PlainView(show_ranks)


def view_for_cell(
    shell: Any,
    ranks: int,
    show_ranks: list[int],
    log_lines: int,
    plots: list[str],
    batch_size: int | None,
    mode: str = "auto",
) -> CellView:
    """The view of a `%%hvd` cell: the live widget, the text view with a final plot, or plain text (a terminal, or
    `mode` "off")."""
    if mode == "off" or getattr(shell, "kernel", None) is None:
        return plain_view(show_ranks)
    if mode == "widget" or (mode != "text" and front_end_draws_widgets(shell)):
        try:
            from .live_view import LiveView
        except ImportError as exc:  # anywidget missing: text output still works
            print(f"jupyter-hvd: no live view ({exc}); `pip install anywidget` for it.", flush=True)
        except OSError as exc:  # a checkout whose front end was never built
            print(f"jupyter-hvd: no live view ({exc}); build it with `npm ci && npm run build`.", flush=True)
        else:
            return LiveView(ranks, show_ranks, log_lines, plots, batch_size)
    from .text_view import TextView

    return TextView(ranks, show_ranks, plots, batch_size)
