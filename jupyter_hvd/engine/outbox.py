"""How engine code other than the channel reaches the kernel: which cell runs now, and sending it events.

The channel (engine/channel.py) registers itself here once it is open; report(), the pace timing and the snapshot
writer use these functions, so none of them imports the channel. Outside a pool (an exported script, a unit test)
nothing is registered: events are dropped and no cell runs. Imported on the engines only.
"""

from __future__ import annotations

from typing import Any

from .. import wire

channel: Any = None  # the engine's one channel, once open


def rank() -> int:
    """This engine's rank (0 outside a pool)."""
    return channel.rank if channel is not None else 0


def running_cell() -> int | None:
    """The kernel's number of the cell running now, if one is."""
    return channel.cell if channel is not None else None


def running_count() -> int | None:
    """The notebook's execution count of the cell running now, if one is."""
    return channel.count if channel is not None and channel.cell is not None else None


def send(event: wire.Event) -> None:
    """Send an event to the kernel, from any thread."""
    if channel is not None:
        channel.send(event)


def send_metrics(records: list[dict[str, Any]]) -> None:
    """Send `report()` records, tagged with the running cell."""
    if channel is not None:
        channel.send(wire.Metrics(channel.rank, channel.cell, records))


def problem(text: str) -> None:
    """Tell the kernel that something of jupyter-hvd's (or a user's thread) failed on this rank: it shows the line in
    the running cell, in %hvd_status and in the sidebar."""
    if channel is not None:
        channel.problem(text)
