"""A `%%hvd` cell's status line: as numbers, which the live view's front end formats (widgets-js/src/format.js, the
same words), and as plain text for the text view and the text twin of a saved copy.

Runs in the user's kernel.
"""

from __future__ import annotations

from .curves import Curves
from .schema import Status

STATES = {"running": "running", "done": "finished", "failed": "stopped (error or interrupt)"}


def status(curves: Curves, state: str, ranks: int, elapsed: float, activity: str | None = None) -> Status:
    """The status line as numbers: `state` running, done or failed; `activity`: what the ranks do while the cell
    prints nothing (the cell runner's words), shown under the line while it runs."""
    c = curves
    return {
        "state": state,
        "ranks": ranks,
        "step": c.step,
        "epoch": c.epoch,
        "steps": c.counted_steps,
        "total": c.total,
        "desc": c.desc,
        "samples_per_s": c.samples_per_second(),
        "steps_per_s": c.steps_per_second(),
        "elapsed": elapsed,
        "eta": c.eta_seconds() if state == "running" else None,
        "latest": {k: v for k, v in c.latest.items() if v == v},
        "warning": c.nonfinite,
        "straggler": c.straggler,
        "activity": activity if state == "running" else None,
    }


def status_text(s: Status, running: str = STATES["running"]) -> str:
    """The status line as text, and what the ranks do on the lines under it; `running`: the word for a running
    cell ('saved while running' in a copy kept in the notebook)."""
    bits = [running if s["state"] == "running" else STATES[s["state"]], f"{s['ranks']} ranks"]
    if s["desc"]:
        bits.append(s["desc"])
    if s["step"] is not None:
        bits.append(f"step {s['step']:g}" + (f"/{s['total']}" if s["total"] else ""))
    elif s["epoch"] is not None:
        bits.append(f"epoch {s['epoch']:.4g}")
    if s["step"] is None and s.get("steps"):
        bits.append(f"{s['steps']:,} steps")  # the optimizer steps counted: the sidebar's number, in its unit
    if s["samples_per_s"]:
        bits.append(f"{s['samples_per_s']:,.0f} samples/s")
    elif s["steps_per_s"]:
        bits.append(f"{steps_per_second_text(s['steps_per_s'])} steps/s")
    bits.append(f"{s['elapsed']:.1f} s")
    if s["warning"]:
        bits.append(f"⚠ {s['warning']}")
    if s["straggler"]:
        bits.append(s["straggler"])
    line = " · ".join(bits)
    return f"{line}\n{s['activity']}" if s.get("activity") else line


def steps_per_second_text(rate: float) -> str:
    """Steps per second with three significant digits: `4.37`, `0.0123`, `1,234` (widgets-js/src/format.js too)."""
    if rate >= 100:
        return f"{rate:,.0f}"
    return f"{float(f'{rate:.3g}'):g}"
