"""`report(step=..., loss=..., samples=...)`: training code tells the notebook's live view how training goes.

Imported on the engines only. A call only appends a record to a list (microseconds); a background thread
publishes the records to the kernel in batches, at most `PUBLISH_HZ` times a second, so the training step
never waits on the network. The cell runner flushes what is left when a cell ends.
"""

from __future__ import annotations

import numbers
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

from .. import outbox

PUBLISH_HZ = 20.0

# Set by the modules that feed this one (they import it, not the other way round): engine/cell/progress.py's reading of
# a loop's total, and engine/cell/pace.py's last summary of a cell.
loop_total: Callable[[FrameType | None], int | None] | None = None
before_flush: list[Callable[[], None]] = []

_pending: list[dict[str, Any]] = []
_wake = threading.Event()
_lock = threading.Lock()  # one publisher at a time: the thread, or flush() at the end of a cell
_thread: threading.Thread | None = None


def report(
    step: int | float | None = None,
    loss: Any = None,
    samples: int | None = None,
    *,
    total: int | None = None,
    average: bool = False,
    **metrics: Any,
) -> None:
    """Record this step's metrics for the live plot and status line of the running `%%hvd` cell.

    `step`: the x of the plot (training step or epoch). `loss` and any other keyword (`acc=0.9`, `lr=1e-3`)
    are plotted by name; Python numbers, NumPy scalars and one-element tensors are accepted (a CUDA
    tensor is read later on the publishing thread, so the GPU is not synchronised here). `samples`: how
    many samples this rank processed since its last report, for samples/s. `total`: the step count the
    training will reach, for the ETA (without it, a loop `for step in range(N)` around the call gives N).
    `average=True` averages the metrics across ranks with a Horovod allreduce first: every rank must then call
    report() with the same metric names, and the call synchronises the ranks (avoid it at every step of a fast
    loop).
    """
    values = dict(metrics)
    if loss is not None:
        values["loss"] = loss
    numbers_ = {name: _number(name, value) for name, value in values.items()}
    if average and numbers_:
        numbers_ = _average(numbers_)
    record: dict[str, Any] = {"t": time.time(), "m": numbers_}
    if step is not None:
        record["step"] = float(step)
        if total is None and loop_total is not None:
            total = loop_total(sys._getframe(1))
    if samples is not None:
        record["samples"] = int(samples)
    if total is not None:
        record["total"] = int(total)
    _queue(record)


def progress(step: float, total: int | None, desc: str | None, metrics: dict[str, Any]) -> None:
    """A progress bar's position (engine/cell/progress.py), with the metrics of its set_postfix(); marked `auto`, so
    what the user reports with report() wins."""
    record: dict[str, Any] = {"t": time.time(), "m": {n: _number(n, v) for n, v in metrics.items()}, "auto": True}
    record["step"] = float(step)
    if total is not None:
        record["total"] = int(total)
    if desc:
        record["desc"] = desc
    _queue(record)


def _queue(record: dict[str, Any]) -> None:
    _pending.append(record)
    if not _wake.is_set():
        _wake.set()
    if _thread is None:
        _start_publisher()


def publish_pace(summary: dict[str, Any]) -> None:
    """Send this rank's recent compute and wait per step (engine/cell/pace.py) with the next batch of records."""
    _queue({"t": time.time(), "m": {}, "pace": summary})


def flush() -> int:
    """Publish every pending record now (the cell runner calls this as a cell ends); returns how many."""
    for hook in before_flush:
        hook()
    with _lock:
        try:
            return _publish()
        except Exception as exc:
            _pending.clear()  # a metric that cannot be read must not turn a finished cell into a failed one
            dropped(exc)
            return 0


def _number(name: str, value: Any) -> Any:
    if type(value) is float:  # the common case first: an ABC check costs more than the rest of report()
        return value
    if isinstance(value, numbers.Real):
        return float(value)
    item = getattr(value, "item", None)
    if item is None:
        raise TypeError(f"report({name}=...) needs a number or a one-element tensor, not {type(value).__name__}")
    if getattr(value, "is_cuda", False):
        return value.detach().clone()  # read on the publishing thread: .item() here would wait for the GPU
    return float(item())


def _average(values: dict[str, Any]) -> dict[str, Any]:
    import torch

    from .. import backend

    names = sorted(values)
    local = torch.tensor([float(values[n]) for n in names], dtype=torch.float64)
    # Named by its metrics, so it cannot be confused with the user's own unnamed collectives.
    averaged = backend.average(local, "jupyter_hvd.report." + ",".join(names))
    return dict(zip(names, averaged.tolist(), strict=True))


def _publish() -> int:
    if not _pending:
        return 0
    batch = _pending[:]
    del _pending[: len(batch)]
    for record in batch:
        for name, value in record["m"].items():
            if not isinstance(value, float):
                record["m"][name] = float(value.item())
    outbox.send_metrics(batch)
    return len(batch)


def _publisher() -> None:
    interval = 1.0 / PUBLISH_HZ
    while True:
        _wake.wait()
        time.sleep(interval)  # collect what the next steps report into the same batch
        _wake.clear()
        try:
            with _lock:
                _publish()
        except Exception as exc:
            # A metric that cannot be read, or the engine shuts down: the records are dropped, and the user told.
            _pending.clear()
            dropped(exc)


def _start_publisher() -> None:
    global _thread
    with _lock:
        if _thread is None:
            _thread = threading.Thread(target=_publisher, name="jupyter-hvd-report", daemon=True)
            _thread.start()


def dropped(exc: BaseException) -> None:
    """Tell the kernel (once per kind of failure) that report() records were dropped, and why."""

    key = f"{type(exc).__name__}: {exc}"
    if key not in _told and outbox.channel is not None:
        _told.add(key)
        outbox.problem(f"report() records were dropped: {key}")


_told: set[str] = set()
