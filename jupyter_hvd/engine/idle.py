"""Horovod rests while the pool is idle, so an idle pool leaves the machine's cores alone.

Horovod's background thread negotiates with every other rank once per cycle (1 ms by default) whether or not there
is work, and Open MPI busy-waits inside that negotiation: two idle ranks kept both cores of a 2-core machine busy.
After a few idle seconds the kernel asks every rank, together, to `rest()` (`hvd.shutdown()`: the thread ends, MPI
and everything in the user's namespace stay). Horovod starts again (`wake()`, `hvd.init()`) when a cell first uses
it, on every rank alike since cells run on every rank: a cell that only trains with torch.distributed, or only
sleeps, leaves it resting (its spinning cost DDP 6% of its throughput on 2 CPU ranks). Meanwhile hvd.rank(),
hvd.size() and the like are answered from what they were. Rest and wake are collective, so the kernel sends rests to
all ranks or none; `can_rest()` says which pools stay awake.

Imported on the engines only.
"""

from __future__ import annotations

import functools
import os
import threading
import time
from collections.abc import Mapping
from typing import Any

from .. import compat, wire

_resting = False
_answers: dict[str, Any] = {}  # Horovod's queries answered while it rests (compat.QUERIES -> value)
_wake_lock = threading.Lock()


def can_rest() -> bool:
    """Whether this rank's Horovod may rest (the kernel decides alike, from the same environment: wire.can_rest);
    not once a cell started it with process sets or a communicator of its own (a start without them would drop
    them)."""
    return wire.can_rest(os.environ) and not _init_arguments


def rest() -> dict[str, Any]:
    """Stop Horovod's background thread until the next cell (called on every rank at once by the kernel)."""
    global _resting
    import horovod.torch as hvd

    from . import collectives

    t0 = time.perf_counter()
    # A user's thread may still train, ops may be in flight, a cell may have started Horovod with what a rest would
    # drop: then no rank rests. Every rank must decide alike (the first shutdown stops all ranks' Horovod), so every
    # rank takes part in the decision, whatever its own answer, on a communicator of its own (not Horovod's), and
    # waits a bounded, interruptible time for the others.
    busy = "" if can_rest() else "its Horovod was started with settings a rest would drop"
    busy = busy or collectives.busy() or ("it rests already" if _resting else "")
    stay = _agree(bool(busy))
    if stay is None:
        return {"resting": _resting, "busy": "the ranks did not agree in time: the pool stays awake", "seconds": 0.0}
    if stay:
        return {"resting": _resting, "busy": busy or "another rank is busy", "seconds": time.perf_counter() - t0}
    _stop(hvd)
    return {"resting": True, "seconds": time.perf_counter() - t0}


AGREE_S = 5.0
_rest_comm: Any = None
_agreement_lost = False  # a decision did not complete: its communicator cannot be used again, so no more rests


def prepare() -> None:
    """The communicator the ranks decide a rest on (collective: called by the bootstrap, on every rank)."""
    global _rest_comm
    from mpi4py import MPI

    if _rest_comm is None:
        _rest_comm = MPI.COMM_WORLD.Dup()


def _agree(stay: bool) -> bool | None:
    """Whether any rank must stay awake (True), none must (False), or the ranks did not all take part within AGREE_S
    (None, and from then on always None)."""
    global _agreement_lost
    from mpi4py import MPI

    if _agreement_lost or _rest_comm is None:
        return None
    mine, anyone = bytearray([int(stay)]), bytearray(1)
    request = _rest_comm.Iallreduce(mine, anyone, op=MPI.BOR)
    deadline = time.monotonic() + AGREE_S
    while not request.Test():
        if time.monotonic() > deadline:
            _agreement_lost = True
            return None
        time.sleep(0.001)
    return bool(anyone[0])


def _stop(hvd: Any) -> None:
    """Shut Horovod down on this rank (every rank does it together), answering its queries from here on."""
    global _resting
    from . import collectives

    _answers.update(
        horovod_rank=hvd.rank(),
        horovod_size=hvd.size(),
        horovod_local_rank=hvd.local_rank(),
        horovod_local_size=hvd.local_size(),
        horovod_cross_rank=hvd.cross_rank(),
        horovod_cross_size=hvd.cross_size(),
        horovod_is_initialized=1,
    )
    from horovod.torch import mpi_ops

    mpi_ops.shutdown()  # Horovod's own (a cell's hvd.shutdown() comes here); right also where it already ended
    compat.handles_in_flight().clear()  # ops left in flight by a stalled cell ended with the shutdown
    collectives.forget()
    _resting = True


def shutdown_by_cell() -> None:
    """A cell's hvd.shutdown() (a pasted script's last line): Horovod rests, and starts again at the next use."""
    import horovod.torch as hvd

    with _wake_lock:
        if not _resting:
            _stop(hvd)


# What a script's hvd.init(...) in a cell may change, and how the pool's Horovod was started: the HOROVOD_* variables
# it read, and init's arguments (process sets, a communicator) where a cell gave some.
_horovod_env = {k: v for k, v in os.environ.items() if k.startswith("HOROVOD_")}
_init_arguments: tuple[tuple[Any, ...], dict[str, Any]] | None = None
# Horovod 0.28.1 cannot start again once one of these is set (the second start writes to a tuning parameter the first
# dropped: a segfault, seen with each): in the words of %hvd_start.
FIXED = {
    "HOROVOD_CYCLE_TIME": "--cycle-time MS",
    "HOROVOD_FUSION_THRESHOLD": "--fusion-mb MB",
    "HOROVOD_AUTOTUNE": "--env HOROVOD_AUTOTUNE=1",
}


def settings_changed() -> dict[str, tuple[str | None, str | None]]:
    """HOROVOD_* variables a cell set, changed or removed since Horovod started: name -> (then, now)."""
    now = {k: v for k, v in os.environ.items() if k.startswith("HOROVOD_")}
    return {
        k: (_horovod_env.get(k), now.get(k))
        for k in sorted(set(now) | set(_horovod_env))
        if now.get(k) != _horovod_env.get(k)
    }


def start_again(init: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> float:
    """Start Horovod again on this rank with a script's hvd.init(*args, **kwargs) and the environment as the cell set
    it (every rank runs the same cell, so it is collective); the seconds it took."""
    global _resting, _started_with, _horovod_env, _init_arguments
    import horovod.torch as hvd

    with _wake_lock:
        t0 = time.perf_counter()
        if not _resting:
            _stop(hvd)
        _resting = False
        init(*args, **kwargs)
        _started_with = {k: os.environ.get(k) for k in _RESTART_ON}
        _horovod_env = {k: v for k, v in os.environ.items() if k.startswith("HOROVOD_")}
        _init_arguments = (args, kwargs) if args or kwargs else None
        return time.perf_counter() - t0


# Variables Horovod reads only in hvd.init() that a cell may change on a running pool (`%%hvd --timeline`), and
# their values when this rank's Horovod last started (bootstrap.start sets the pool's environment before idle is
# imported).
_RESTART_ON = ("HOROVOD_TIMELINE",)
_started_with = {k: os.environ.get(k) for k in _RESTART_ON}


def set_horovod_env(changes: Mapping[str, str | None]) -> None:
    """Set (None: remove) variables Horovod reads at hvd.init(); the next `wake()` starts Horovod again with them.

    Every rank must make the same change, since that restart is collective (all ranks run the same cell).
    """
    _set_env(changes)


def horovod_env(key: str) -> str | None:
    """The value `key` had when this rank's Horovod last started."""
    return _started_with.get(key, os.environ.get(key))


def wake() -> float:
    """Start Horovod again if it rests, or if `set_horovod_env` changed what it must start with; the seconds it took.

    Every rank runs it at the same point of the same cell (its first use of Horovod, or `%%hvd --timeline` before its
    cell), so the start is collective.
    """
    global _resting, _started_with
    with _wake_lock:
        if not _resting and any(os.environ.get(k) != v for k, v in _started_with.items()):
            rest()  # no-op where the pool cannot rest, or where a rank is busy: then Horovod keeps its old settings
        if not _resting:
            return 0.0
        import horovod.torch as hvd

        t0 = time.perf_counter()
        _started_with = {k: os.environ.get(k) for k in _RESTART_ON}
        _resting = False  # from here Horovod answers its queries itself (hvd.init() asks whether it is initialised)
        # A fixed tuning variable a cell set since is left out of this start: Horovod would crash (FIXED).
        user = {k: os.environ.get(k) for k in FIXED}
        _set_env({k: _horovod_env.get(k) for k in FIXED})
        try:
            hvd.init()
        finally:
            _set_env(user)
        return time.perf_counter() - t0


def _set_env(values: Mapping[str, str | None]) -> None:
    for key, value in values.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def begin_cell() -> float:
    """A cell starts: Horovod starts again now only where the cell's settings changed (`set_horovod_env`); otherwise
    at the cell's first use of it. The seconds a start took."""
    if any(os.environ.get(k) != v for k, v in _started_with.items()):
        return wake()
    return 0.0


def wake_on_first_use() -> None:
    """Have Horovod's collectives start it again where it rests, and its queries answered meanwhile. Idempotent."""
    compat.answer_queries(lambda name: _answers.get(name) if _resting else None)
    compat.wrap_op_starters(lambda real, kind: _waking(real))
    compat.wrap_public(("join", "barrier"), _waking)


def _waking(real: Any) -> Any:
    if getattr(real, "_jupyter_hvd_wakes", False):
        return real

    @functools.wraps(real)
    def use(*args: Any, **kwargs: Any) -> Any:
        if _resting:
            wake()
        return real(*args, **kwargs)

    use._jupyter_hvd_wakes = True  # type: ignore[attr-defined]
    return use
