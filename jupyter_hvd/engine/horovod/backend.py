"""Horovod as a pool's backend (engine/backend.py): its collectives watched, a script's habits guarded, an idle
Horovod resting (rest.py), and after a failed cell its join, which releases peers waiting in an allreduce.

Imported on the engines only.
"""

from __future__ import annotations

import os
import time
from typing import Any

from ... import compat
from .. import collectives
from ..cell import pace
from . import guards, rest


class Horovod:
    name = "Horovod"

    def __init__(self, hvd: Any) -> None:
        self._hvd = hvd

    def install(self, device: Any) -> None:
        self._first_collectives(device)
        guards.install()  # hvd.init() pasted into a cell, or a cell that wraps an optimizer run twice, is harmless
        collectives.install()  # which collective a rank waits in, for the kernel's mismatch check
        pace.install()  # compute and wait per training step, for the kernel's straggler check (after collectives)
        rest.wake_on_first_use()  # a resting Horovod starts again when a cell uses it (outermost: before the rest)
        rest.prepare()

    def _first_collectives(self, device: Any) -> None:
        """Horovod's first allreduces (its first negotiation, the fusion buffer, MPI's or NCCL's first connection),
        now, on every rank at once, instead of in the first training cell."""
        import torch

        for n in (1, 1 << 18):  # one element, and 1 MB through the fusion buffer
            self._hvd.allreduce(torch.zeros(n, device=device), name=f"jupyter_hvd.warm-up.{n}")

    def ops(self, cuda: bool) -> str:
        if cuda:
            return "NCCL" if self._hvd.nccl_built() else "MPI"
        return "Gloo" if os.environ.get("HOROVOD_CPU_OPERATIONS", "").lower() == "gloo" else "MPI"

    def row(self) -> dict[str, Any]:
        return {
            "controller": "MPI" if self._hvd.mpi_enabled() else "Gloo",
            "cross_rank": self._hvd.cross_rank(),
            "horovod": True,
            "warning": compat.check_horovod(),
        }

    def ready(self, cuda: bool) -> None:
        # Last: Horovod rests where no rank uses it (also during a cell), and a slow start must not rest it before
        # the rank's row is read from it.
        rest.watch(rest.rest_after(cuda))

    def begin_cell(self) -> float:
        return rest.begin_cell()  # Horovod starts again at the cell's first use of it, unless asked now

    def rest(self) -> dict[str, Any]:
        return rest.rest()

    def leave_collectives(self) -> dict[str, Any]:
        """Join Horovod's collectives so peers still waiting in one are released, then wait for every rank.

        A joined rank contributes nothing to pending allreduces, so ranks blocked in one return to Python, where
        their pending KeyboardInterrupt ends their cell. `hvd.join()` returns when all ranks have joined.

        Horovod names unnamed ops by a per-process handle counter ("allreduce.noname.<n>"); ranks that ran different
        numbers of ops before the failure would never agree on a name again, so every rank resets the counter once
        all have joined. An op still in flight then (e.g. a gradient allreduce of a backward() without step()) would
        clash with the next cell's op of the same name: `in_flight` tells the kernel, which restarts the pool instead.
        """
        t0 = time.perf_counter()
        # Ops this rank submitted just before its cell ended (gradient hooks of a backward()) complete within a few
        # of Horovod's cycles when the peers submitted them too. Joining first raced with them when their names were
        # not in Horovod's response cache yet: they stayed in flight for good (2 of 8 tries) and forced a restart.
        # What raises here reaches the kernel as this rank's error (engine/channel.py describes it).
        self._settle(0.3)
        last = self._hvd.join()
        in_flight = self._settle(1.0)
        compat.reset_handles()
        collectives.forget()
        if not in_flight:
            _forget_pending_gradients()
        return {"ok": True, "last_joined": int(last), "in_flight": in_flight, "seconds": time.perf_counter() - t0}

    def decline(self, agreeing_at: int | None, owed: tuple[tuple[int, int, str], ...]) -> dict[str, Any]:
        return {"ok": True, "in_flight": 0}  # Horovod checks its ops in its coordinator, and its join releases them

    def _settle(self, seconds: float) -> int:
        """Wait up to `seconds` for this rank's Horovod ops in flight to complete; how many are still in flight."""
        deadline = time.monotonic() + seconds
        while True:
            in_flight = sum(1 for handle in list(compat.handles_in_flight()) if not compat.op_completed(handle))
            if not in_flight or time.monotonic() > deadline:
                return in_flight
            time.sleep(0.002)

    def average(self, local: Any, name: str) -> Any:
        return self._hvd.allreduce(local, op=self._hvd.Average, name=name)


def _forget_pending_gradients() -> None:
    """Reset DistributedOptimizers left between backward() and step() by the failed cell (their allreduces were
    completed by the join, without the failed ranks): the next backward() would otherwise meet "gradients computed
    more than backward_passes_per_step"."""
    from IPython import get_ipython

    for obj in list(get_ipython().user_ns.values()):
        if compat.is_distributed(obj) and compat.gradients_in_flight(obj):
            compat.forget_gradients_in_flight(obj)
