"""The collective libraries a rank runs, behind one interface: Horovod (engine/horovod/backend.py) and
torch.distributed (engine/distributed/backend.py). A pool has one or both, chosen once when its ranks start
(engine/bootstrap.py); the rest of the engine asks the chosen ones here instead of testing which library imports.

Imported on the engines only.
"""

from __future__ import annotations

import time
from typing import Any, Protocol


class Backend(Protocol):
    """What the pool needs of a collective library on one rank."""

    name: str  # as users know it: "Horovod", "torch.distributed"

    def install(self, device: Any) -> None:
        """Before the first cell: watch the library's collectives (what a rank waits in) and guard script habits."""

    def ops(self, cuda: bool) -> str:
        """What moves this library's tensors, for the pool table ("MPI", "NCCL", "torch/Gloo")."""

    def row(self) -> dict[str, Any]:
        """This library's fields of the rank's row (controller, cross_rank, horovod, warning)."""

    def ready(self, cuda: bool) -> None:
        """The last step of a start, once the rank's row is read."""

    def begin_cell(self) -> float:
        """A cell starts: the seconds spent starting the library again (Horovod after a rest)."""

    def rest(self) -> dict[str, Any]:
        """Between cells, asked by the kernel on every rank at once: release the library's threads if no rank uses
        it; {"resting": bool, "busy": why not, "seconds": float} (or {"error": ErrorInfo})."""

    def leave_collectives(self) -> dict[str, Any]:
        """After a failed or interrupted cell, on every rank: release peers still waiting in a collective;
        {"ok": bool, "in_flight": ops still pending, "seconds": float} (or "error"), and "entered": the collectives
        entered so far, where the library counts them (the kernel compares the ranks')."""

    def decline(self, agreeing_at: int | None, owed: tuple[tuple[int, int, str], ...]) -> dict[str, Any]:
        """After this rank's cell ended, while peers wait for it (wire.Decline): at the library's check before a
        collective, or for allreduces it owes them; as leave_collectives answers."""

    def average(self, local: Any, name: str) -> Any:
        """`local` (a float64 tensor) averaged over the ranks, as a collective named `name` where names exist."""


_chosen: list[Backend] = []


def choose(backends: list[Backend]) -> None:
    """The pool's backends, first the one its users' collectives and averages go through (Horovod where present)."""
    _chosen[:] = backends


def chosen() -> list[Backend]:
    return list(_chosen)


def first() -> Backend:
    if not _chosen:
        raise RuntimeError("this rank has no collective library yet: jupyter-hvd's start did not reach it")
    return _chosen[0]


def ops(cuda: bool) -> str:
    return " + ".join(b.ops(cuda) for b in _chosen)


def row() -> dict[str, Any]:
    """The backends' fields of the rank's row; the first backend's word wins where two give one."""
    fields: dict[str, Any] = {"controller": "", "cross_rank": 0, "horovod": False, "warning": ""}
    for backend in reversed(_chosen):
        fields.update(backend.row())
    return fields


def ready(cuda: bool) -> None:
    for backend in _chosen:
        backend.ready(cuda)


def begin_cell() -> float:
    return sum(backend.begin_cell() for backend in _chosen)


def rest() -> dict[str, Any]:
    """Every backend that rests, rested; a pool rests only as a whole (the first busy or failed one says why not)."""
    t0 = time.perf_counter()
    resting = False
    for backend in _chosen:
        result = backend.rest()
        if result.get("error") or result.get("busy"):
            return result
        resting = resting or bool(result.get("resting"))
    return {"resting": resting, "busy": "", "seconds": time.perf_counter() - t0}


def leave_collectives() -> dict[str, Any]:
    t0 = time.perf_counter()
    in_flight, entered = 0, -1
    for backend in _chosen:
        result = backend.leave_collectives()
        if not result.get("ok"):
            return result
        in_flight += int(result.get("in_flight", 0))
        entered = max(entered, int(result.get("entered", -1)))
    return {"ok": True, "in_flight": in_flight, "entered": entered, "seconds": time.perf_counter() - t0}


def decline(agreeing_at: int | None, owed: tuple[tuple[int, int, str], ...]) -> dict[str, Any]:
    t0 = time.perf_counter()
    entered = -1
    for backend in _chosen:
        result = backend.decline(agreeing_at, owed)
        if not result.get("ok"):
            return result
        entered = max(entered, int(result.get("entered", -1)))
    return {"ok": True, "in_flight": 0, "entered": entered, "seconds": time.perf_counter() - t0}


def average(local: Any, name: str) -> Any:
    return first().average(local, name)
