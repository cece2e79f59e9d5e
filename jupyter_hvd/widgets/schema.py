"""What the live view sends and what a saved view holds, defined once: the live update message (a widget's custom
message, with each curve's x and y as float64 buffers beside it) and the saved view (the data of a cell's output of
MIME type `application/vnd.jupyter-hvd.view+json`, drawn without a kernel). The producers (live_view.py,
static_plot.py) are typed by these and checked by mypy; the front end's reading of them is typed by
widgets-js/src/messages.d.ts, written from these by jupyter_hvd/widgets/schema_ts.py.
"""

from __future__ import annotations

from typing import Any, Literal, TypedDict

LogLine = tuple[str, str, int]  # text, stream, rank


class LogMessage(TypedDict):
    """New log lines (the whole log in a saved view), the unfinished last lines, and how many there were in all."""

    append: list[LogLine]
    partials: list[LogLine]
    total: int


class Status(TypedDict):
    """What the status line shows, as numbers: the front end formats them."""

    state: str  # running | done | failed
    ranks: int
    step: float | None
    epoch: float | None
    steps: int | None  # the steps the sidebar counts (the pace of the training loop), where none is printed
    total: int | None
    desc: str | None
    samples_per_s: float | None
    steps_per_s: float | None
    elapsed: float
    eta: float | None
    latest: dict[str, float]
    warning: str | None
    straggler: str | None
    activity: str | None  # what the ranks do while a running cell prints nothing


class SavedStatus(Status):
    text: str  # the status line as the text twin shows it


class CurveUpdate(TypedDict):
    """One curve's new points in a live update; its x and y follow as two float64 buffers, in the curves' order."""

    key: str
    name: str
    rank: int
    x_kind: str
    start: int  # the index of the first new point
    reset: bool  # the curve starts over (a full update, or the cell reset it)
    n: int


class LiveUpdate(TypedDict):
    type: Literal["update"]
    seq: int  # one more than the last: a gap makes the view ask for everything ({"type": "sync"})
    full: bool
    curves: list[CurveUpdate]
    log: LogMessage | None
    status: Status


class SavedCurve(TypedDict):
    name: str
    rank: int
    x_kind: str
    x: list[float]
    y: list[float | None]  # null: a gap (JSON has no NaN)
    points: int  # how many there were before thinning


class SavedView(TypedDict):
    version: int
    plots: list[str]  # the --plot patterns
    ranks: list[int]  # the shown ranks
    smoothing: float | None  # null: automatic
    log_y: bool
    status: SavedStatus
    curves: list[SavedCurve]
    log: LogMessage
    view_id: str | None  # the live widget's view while the cell runs; null once it ended


def fields(record: Any) -> set[str]:
    """The field names of one of the records above."""
    return set(record.__required_keys__) | set(record.__optional_keys__)
