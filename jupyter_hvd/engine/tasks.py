"""The one dispatcher of the kernel's tasks on an engine (wire.Task): each typed task to the module that does it.

Tasks come on the cell channel inside a RunCell (engine/cell/runner.py runs them as it runs a cell) or through
ipyparallel (wire.perform). The start of an engine is not one of them: it opens the channel they come on
(wire.start, engine/bootstrap.py). Imported on the engines only.
"""

from __future__ import annotations

from typing import Any

from .. import wire


def perform(task: wire.Task, *buffers: Any) -> Any:
    """Do `task`; its result (what the kernel reads back). `buffers`: the values sent beside a Receive."""
    if isinstance(task, wire.RestorePrepare):
        from .keep import restore

        return restore.prepare(task.plan, task.directory, task.resize)
    if isinstance(task, wire.RestoreApply):
        from .keep import restore

        return restore.apply(task.names)
    if isinstance(task, (wire.TimelineStart, wire.TimelineStop, wire.TimelineRead)):
        from .horovod import timeline

        if isinstance(task, wire.TimelineStart):
            return timeline.start(task.path)
        if isinstance(task, wire.TimelineStop):
            return timeline.stop(task.path)
        return timeline.read(task.path)
    if isinstance(task, (wire.ProfileStart, wire.ProfileStop)):
        from .diagnose import profile

        return profile.start() if isinstance(task, wire.ProfileStart) else profile.stop(task.folder)
    if isinstance(task, (wire.Stage, wire.Take, wire.Receive)):
        from . import transfer

        if isinstance(task, wire.Stage):
            return transfer.stage(task.name)
        if isinstance(task, wire.Take):
            return transfer.take()
        return transfer.receive(task.names, task.headers, task.counts, *buffers)
    raise TypeError(f"not a task of this jupyter-hvd version: {type(task).__name__}")
