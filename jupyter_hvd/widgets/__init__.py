"""Kernel-side views of a running `%%hvd` cell: the live training view (widget) and its plain-text twin."""

from __future__ import annotations

import os
from typing import Any

LIVE_VIEW_ENV = "JUPYTER_HVD_LIVE_VIEW"  # widget | text | off; unset: decided from the front end


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


def view_for_cell(
    shell: Any, ranks: int, show_ranks: list[int], log_lines: int, plots: list[str], batch_size: int | None
) -> Any:
    """The LiveSink for a `%%hvd` cell: the live widget, the text view with a final plot, or None (terminal)."""
    mode = os.environ.get(LIVE_VIEW_ENV, "").strip().lower()
    if mode == "off" or getattr(shell, "kernel", None) is None:
        return None  # a terminal IPython: plain text, as the cell runner writes it
    if mode == "widget" or (mode != "text" and front_end_draws_widgets(shell)):
        try:
            from .live_view import LiveView
        except ImportError as exc:  # anywidget missing: text output still works
            print(f"jupyter-hvd: no live view ({exc}); `pip install anywidget` for it.", flush=True)
        else:
            return LiveView(ranks, show_ranks, log_lines, plots, batch_size)
    from .text_view import TextView

    return TextView(ranks, show_ranks, plots, batch_size)
