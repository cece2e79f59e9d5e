"""What jupyter-hvd tells the notebook besides a cell's own output, in one of two voices.

News (stdout) is what happened or happens as the user asked or can expect: where the ranks are, a rank in the
debugger, a restart and what came back. A warning (stderr) is something that went wrong and may need the user:
notebook front ends show stderr on a red background, as an error, so only warnings go there.

Runs in the user's kernel.
"""

from __future__ import annotations

import sys
from typing import NamedTuple


class Said(NamedTuple):
    """A line for the notebook and its voice (`trouble`: a warning)."""

    text: str
    trouble: bool = False


def news(text: str) -> None:
    """`jupyter-hvd: text` on stdout."""
    print(f"jupyter-hvd: {text}", flush=True)


def warning(text: str) -> None:
    """`jupyter-hvd: text` on stderr."""
    print(f"jupyter-hvd: {text}", file=sys.stderr, flush=True)


def say(said: Said) -> None:
    """`said` in its voice."""
    (warning if said.trouble else news)(said.text)
