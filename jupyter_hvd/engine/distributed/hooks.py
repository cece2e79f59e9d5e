"""torch.distributed on the pool: what the kernel needs to watch the process group that every rank has beside
Horovod, or instead of it where Horovod is not installed (jupyter_hvd/prelude.py starts it: NCCL on GPU ranks, Gloo on
CPU ranks, Horovod's rank numbering; its rendezvous is a FileStore in the pool's private directory on one host, where
Gloo and NCCL also keep to loopback, and a TCPStore that rank 0 serves on the pool's address between hosts).

Watching: blocking collectives called from Python (`dist.all_reduce(...)`) are counted and their waits recorded, as
Horovod's are (engine/collectives.py), so the kernel names ranks whose collectives do not match; DDP's gradient
allreduce (started in C++ during backward) is timed by a communication hook, for the straggler check
(engine/cell/pace.py). A rank waiting in the ranks' check before a collective, or for DDP's bucket allreduces, is
released by the peers whose cell ended (decline()); one inside a collective whose peer failed cannot be (Gloo and
NCCL only end it when the peer's connection closes or the timeout passes), so the kernel restarts the pool instead.

Imported on the engines only.
"""

from __future__ import annotations

import functools
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from .. import collectives
from ..cell import pace
from . import matching

# Blocking collectives a cell may call, by their names in torch.distributed.
COLLECTIVES = (
    "all_reduce",
    "broadcast",
    "all_gather",
    "all_gather_into_tensor",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "reduce",
    "gather",
    "scatter",
    "all_to_all",
    "all_to_all_single",
    "barrier",
    "broadcast_object_list",
    "all_gather_object",
    "gather_object",
    "scatter_object_list",
)


def backend() -> str:
    """This rank's torch.distributed backend, as the pool table shows it ("Gloo", "NCCL"); '' without a group."""
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        return ""
    return {"gloo": "Gloo", "nccl": "NCCL"}.get(str(dist.get_backend()), str(dist.get_backend()))


def entered() -> int:
    """How many collectives this rank has entered on the default group (-1: no group). torch's own count (its
    sequence number, a private API: -1 where it is gone) covers what no wrapper here sees: DDP's buckets, ops a stop
    left running in Gloo's threads. A rank that entered one its peers did not leaves the group out of step: its next
    collective would pair with the wrong one."""
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        return -1
    try:
        group: Any = dist.distributed_c10d._get_default_group()  # the method is missing from torch's type stubs
        return int(group._get_sequence_number_for_group())
    except Exception:
        return -1


# ---- watching ---------------------------------------------------------------------------------------------------

_installed = False
_gather: Any = None  # torch.distributed's own all_gather, for the ranks' check; None where the check is off
_real: dict[str, Callable[..., Any]] = {}  # torch.distributed's own collectives, unwatched, by name


def decline(agreeing_at: int | None, owed: tuple[tuple[int, int, str], ...]) -> None:
    """This rank's cell ended while its peers wait for it: in the ranks' check before a collective at sequence number
    `agreeing_at` (it takes part calling nothing: matching.py), or for allreduces `owed` (it completes them with
    zeros, as Horovod's join does). Nothing where this rank's own sequence number is not that one: its collective
    would pair with another (Gloo pairs them by that number), and the kernel restarts the pool instead."""
    import torch
    import torch.distributed as dist

    if not dist.is_initialized() or dist.get_backend() != "gloo" or dist.get_world_size() < 2:
        return
    if agreeing_at is not None and _gather is not None and entered() == agreeing_at:
        matching.decline(_gather)
    for seq, elements, dtype in owed:
        if entered() != seq or not hasattr(torch, dtype):
            return
        _real["all_reduce"](torch.zeros(elements, dtype=getattr(torch, dtype)))


def _is_default_group(group: Any) -> bool:
    import torch.distributed as dist

    return group is None or group is dist.group.WORLD or group is dist.distributed_c10d._get_default_group()


def install() -> None:
    """Count and time the blocking collectives called from Python, and time DDP's gradient allreduce. Idempotent."""
    global _installed, _gather
    if _installed:
        return
    import torch.distributed as dist

    # The check's own all_gather, not watched; none where c.HvdPool.check_collectives is off.
    _gather = dist.all_gather if os.environ.get("JUPYTER_HVD_CHECK_COLLECTIVES", "1") != "0" else None
    for name in COLLECTIVES:
        real = getattr(dist, name, None)
        if real is not None:
            _real[name] = real
            setattr(dist, name, _watched(real, name, _gather))
    _time_ddp()
    _installed = True


def _watched(real: Callable[..., Any], name: str, gather: Any) -> Callable[..., Any]:
    kind = f"dist.{name}"

    @functools.wraps(real)
    def collective(*args: Any, **kwargs: Any) -> Any:
        collectives.started_one(kind)
        if kwargs.get("async_op"):
            return real(*args, **kwargs)
        if gather is not None:
            # A wait here, while a peer's cell has ended, is released by that peer's decline (matching.decline).
            with collectives.agreeing(kind, entered()):
                matching.check(name, real, args, kwargs, gather)  # a mismatch raises on every rank, not in Gloo
        with collectives.waiting(kind):
            if threading.get_ident() == threading.main_thread().ident:
                start = time.perf_counter()
                try:
                    return real(*args, **kwargs)
                finally:
                    pace.waited(start, time.perf_counter())
            return real(*args, **kwargs)

    return collective


def _time_ddp() -> None:
    """DDP's buckets are allreduced from C++ during backward: a communication hook times them, registered at a
    model's first forward unless the user registered one (which is then timed the same way)."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    real_forward = DDP.forward
    real_register = DDP.register_comm_hook

    @functools.wraps(real_forward)
    def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not getattr(self, "_jupyter_hvd_hooked", False):
            from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

            real_register(self, self.process_group, _timed_hook(default_hooks.allreduce_hook, plain=True))
            self._jupyter_hvd_hooked = True
        pace.ddp_step()
        return real_forward(self, *args, **kwargs)

    @functools.wraps(real_register)
    def register_comm_hook(self: Any, state: object, hook: Callable[..., Any]) -> None:
        real_register(self, state, _timed_hook(hook))
        self._jupyter_hvd_hooked = True

    DDP.forward = forward  # type: ignore[method-assign]
    DDP.register_comm_hook = register_comm_hook  # type: ignore[method-assign]


def _timed_hook(hook: Callable[..., Any], plain: bool = False) -> Callable[..., Any]:
    """`hook` timed; `plain`: it is torch's allreduce hook, so a rank waiting for it on the default group is owed an
    allreduce of the bucket's size and dtype, which peers whose cell ended can complete (decline())."""

    @functools.wraps(hook)
    def timed(state: Any, bucket: Any) -> Any:
        start = time.perf_counter()
        key = id(bucket)
        collectives.started_one("DDP gradient allreduce")
        owed = None
        if plain and _is_default_group(state):
            buffer = bucket.buffer()
            owed = (entered(), int(buffer.numel()), str(buffer.dtype).removeprefix("torch."))
        collectives.pending(key, f"DDP gradient allreduce (bucket {bucket.index()})", owed)
        future = hook(state, bucket)

        def done(f: Any) -> Any:
            collectives.done(key)
            pace.ddp_wait(time.perf_counter() - start)
            return f.value()

        return future.then(done)

    return timed
