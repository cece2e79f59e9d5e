"""How this rank spends a training step: computing, or waiting in a collective for the other ranks.

In data-parallel training the slowest rank sets the pace: the others wait for it in every gradient allreduce. A step
is the interval between two successive waits for gradient synchronisation (a DistributedOptimizer's synchronize(),
which step() calls) or two successive blocking collectives (hvd.allreduce(...), any hvd.synchronize(handle)) of the
cell's thread, but for a model's or an object's broadcast (hvd.broadcast_parameters(...) sets up, it does not train);
compute is the time between waits, wait the time inside one. Means over about `SEND_EVERY_S` go to the kernel with
the report() records (engine/cell/report.py), where kernel/cell/straggler.py names a rank that computes much longer
per step than the others, with the steps counted so far in the cell: every rank's step in the sidebar, also on ranks
that print nothing.

A light wrap, not Horovod's timeline: two clock reads and a few additions per step (see bench/pace_overhead.py).
On GPUs, compute is what the Python thread does; GPU kernels still running when it waits count as wait.
Imported on the engines only.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from typing import Any

from ... import compat
from .. import outbox

SEND_EVERY_S = 0.5  # means over this much training go to the kernel

_main = threading.main_thread().ident
_clock = time.perf_counter
_inside = False  # in an optimizer's synchronize() (its per-tensor waits are one wait) or a broadcast (none)
_cell: Any = None  # the cell the sums below belong to
_last_end: float | None = None  # when the main thread's last wait ended (None: no step yet in this cell)
_compute = 0.0
_wait = 0.0
_steps = 0
_cell_steps = 0  # steps timed in the cell so far
_window_start = 0.0
_sent = False  # a mean went to the kernel in this cell
_installed = False


def install() -> None:
    """Time the main thread's waits in Horovod's synchronize and in DistributedOptimizer.synchronize. Idempotent.

    Call before any DistributedOptimizer is made: Horovod copies the optimizer class's methods when it wraps one.
    """
    global _installed
    if _installed:
        return
    compat.wrap_synchronize(_timed_wait)
    from . import report

    report.before_flush.append(end_of_cell)
    for cls in compat.optimizer_classes():
        cls.synchronize = _timed_optimizer_sync(cls.synchronize)
    compat.wrap_parameter_syncs(_no_step)
    _installed = True


def _timed_wait(real: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(real)
    def synchronize(handle: Any) -> Any:
        if _inside or threading.get_ident() != _main:
            return real(handle)
        start = _clock()
        try:
            return real(handle)
        finally:
            _step(start, _clock())

    return synchronize


def _timed_optimizer_sync(real: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(real)
    def synchronize(self: Any) -> Any:
        global _inside
        if _inside or threading.get_ident() != _main:
            return real(self)
        _inside = True
        start = _clock()
        try:
            return real(self)
        finally:
            _inside = False
            _step(start, _clock())

    return synchronize


def _no_step(real: Callable[..., Any]) -> Callable[..., Any]:
    """A model's or an object's broadcast (a setup cell's broadcast_parameters) waits in synchronize once per tensor:
    none of those waits ends a training step."""

    @functools.wraps(real)
    def sync(*args: Any, **kwargs: Any) -> Any:
        global _inside
        if _inside or threading.get_ident() != _main:
            return real(*args, **kwargs)
        _inside = True
        try:
            return real(*args, **kwargs)
        finally:
            _inside = False

    return sync


def _step(start: float, end: float) -> None:
    """One wait of the main thread ended: the time since the last one was compute."""
    global _cell, _last_end, _compute, _wait, _steps, _window_start, _cell_steps, _sent
    cell = _running_cell()
    if cell != _cell:  # a new cell: the time between cells is no step
        _cell, _last_end, _compute, _wait, _steps, _window_start, _cell_steps = cell, None, 0.0, 0.0, 0, start, 0
        _sent = False
    if cell is None:
        return
    _cell_steps += 1  # every wait ends a step, the first one too (its compute began with the cell)
    if _last_end is not None:
        _compute += start - _last_end
        _wait += end - start
        _steps += 1
    _last_end = end
    if _steps and end - _window_start >= SEND_EVERY_S:
        _summarise(end)


def _summarise(now: float, means: bool = True) -> None:
    global _compute, _wait, _steps, _window_start, _sent
    summary: dict[str, Any] = {"steps": _steps, "cell_steps": _cell_steps}
    if means:
        summary |= {"compute_ms": _compute / _steps * 1e3, "wait_ms": _wait / _steps * 1e3}
        _sent = True
    _send(summary)
    _compute, _wait, _steps, _window_start = 0.0, 0.0, 0, now


def end_of_cell() -> None:
    """The cell ends on this rank: its step count is final. The means of the steps since the last summary go too
    only where none went yet: a tail of a few steps (the last one a rank-0 broadcast that waits for nobody) would
    replace a half second's means with noise (seen: rank 0 'waited 1.7 ms' per step behind a rank 30 ms slower)."""
    if _steps and _cell is not None and _cell == _running_cell():
        now = _clock()
        _summarise(now, means=not _sent or now - _window_start >= SEND_EVERY_S / 2)


def waited(start: float, end: float) -> None:
    """The main thread waited in a blocking collective of another backend (torch.distributed) from start to end."""
    if not _inside and threading.get_ident() == _main:
        _step(start, end)


# DDP's buckets are allreduced while backward runs (engine/distributed/hooks.py times them): a step is forward to
# forward, its wait the time the buckets' allreduces took (as they overlap backward, an upper bound of the time waited).
_ddp_wait = 0.0
_ddp_lock = threading.Lock()


def ddp_wait(seconds: float) -> None:
    """One DDP bucket's allreduce took `seconds` (any thread)."""
    global _ddp_wait
    with _ddp_lock:
        _ddp_wait += seconds


def ddp_step() -> None:
    """A DDP model's forward: the step before it ended (main thread only)."""
    global _ddp_wait
    if threading.get_ident() != _main:
        return
    now = _clock()
    with _ddp_lock:
        wait, _ddp_wait = _ddp_wait, 0.0
    if _last_end is None or _cell != _running_cell():
        _step(now, now)  # the first step of a cell starts here
        return
    wait = min(wait, now - _last_end)
    _step(now - wait, now)


def _running_cell() -> Any:
    return outbox.running_cell()  # None outside a pool: then nothing is measured


def _send(summary: dict[str, Any]) -> None:
    from . import report

    report.publish_pace(summary)
