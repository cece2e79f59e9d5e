"""Horovod rests whenever no rank uses it, so an idle pool, or a cell that only waits, leaves the cores alone.

Horovod's background thread negotiates with every other rank once per cycle (1 ms by default) whether or not there
is work, and Open MPI busy-waits inside that negotiation: two idle ranks kept both cores of a 2-core machine busy,
and a cell that only slept showed 91-100% per rank. Where no rank has used Horovod for --rest-after seconds (2 on
CPU ranks, 30 on GPUs), between cells or during one, the ranks agree to `rest` (`hvd.shutdown()`: the thread ends,
MPI and everything in the user's namespace stay); a thread of each rank decides it with the others on a communicator
of its own, and the kernel asks for it too between cells. Horovod starts again (`wake()`, `hvd.init()`) when a cell
first uses it, on every rank alike since cells run on every rank: a cell that only trains with torch.distributed, or
only sleeps, leaves it resting. Meanwhile hvd.rank(), hvd.size() and the like are answered from what they were.

A cell's `hvd.init(...)` with process sets, a communicator or new HOROVOD_* variables (engine/horovod/guards.py) starts
Horovod again with them, and every later start does the same, with the process sets cells added registered again.
Ranks use process sets apart (a rank outside a set does not take part in its collectives), so such a pool starts
Horovod at each cell's start instead of at a first use, and does not rest during a cell. Pools with a fixed tuning
(wire.NO_REST) never rest: Horovod 0.28.1 crashes when it starts again after those.

Imported on the engines only.
"""

from __future__ import annotations

import functools
import inspect
import os
import threading
import time
from collections.abc import Mapping
from typing import Any

from ... import compat, wire
from . import init_settings

_resting = False
# This rank voted to rest: from its vote until its own stop, another rank's stop may already have ended this rank's
# Horovod, which then answers no query; the remembered answers are given from the vote on.
_stopping = False
_answers: dict[Any, Any] = {}  # Horovod's queries answered while it rests (compat.QUERIES, with arguments) -> value
# One start or stop at a time, and no op may start while Horovod is being stopped.
_lock = threading.RLock()
_last_use = time.monotonic()  # when a thread of this rank last started or finished using Horovod
_uses = 0  # Horovod calls started on this rank so far
_using = 0  # Horovod calls under way (a join or a barrier for as long as it waits)
_recording = False  # a cell's hvd.start_timeline() records until hvd.stop_timeline(): no rest in between

# How Horovod was last started: its HOROVOD_* variables (bootstrap.start sets the pool's environment before idle is
# imported), and what a cell's hvd.init(...) gave it (process sets, a communicator), to give again at every start.
_horovod_env = {k: v for k, v in os.environ.items() if k.startswith("HOROVOD_")}
_wanted_env = dict(_horovod_env)  # what the next start must use (set_horovod_env: %%hvd --timeline)
_init_arguments: tuple[tuple[Any, ...], dict[str, Any]] | None = None
_process_sets: list[Any] = []  # hvd.ProcessSet objects cells added, in the order Horovod registered them


def horovod_variables() -> dict[str, str]:
    """The HOROVOD_* variables of this rank's environment now."""
    return {k: v for k, v in os.environ.items() if k.startswith("HOROVOD_")}


def can_rest() -> bool:
    """Whether this rank's Horovod may rest (the kernel decides alike, from the same environment: wire.can_rest)."""
    return wire.can_rest(_horovod_env)


def _apart() -> bool:
    """Whether ranks may use Horovod apart (process sets, or a communicator of a cell's): then Horovod starts at a
    cell's start, when every rank starts it, and rests only between cells."""
    return bool(_process_sets) or _init_arguments is not None


# ---- the rest, asked for by the kernel between cells ----------------------------------------------------------


def rest() -> dict[str, Any]:
    """Stop Horovod's background thread until the next use (called on every rank at once by the kernel)."""
    global _stopping
    from .. import collectives

    t0 = time.perf_counter()
    # A user's thread may still train, ops may be in flight: then no rank rests. Every rank must decide alike (the
    # first shutdown stops all ranks' Horovod), so every rank takes part in the decision, whatever its own answer,
    # on a communicator of its own (not Horovod's), and waits a bounded, interruptible time for the others. The lock
    # is held from the check to the stop: a collective a user's thread starts meanwhile waits for the decision (at
    # most AGREE_S), so none can begin between what this rank said and the stop. A lock held elsewhere (a start or
    # a stop under way, the watch deciding) means this rank stays awake.
    locked = _lock.acquire(blocking=False)
    try:
        busy = "" if locked else "Horovod is being started or stopped"
        busy = busy or ("" if can_rest() else "its Horovod was started with a tuning that cannot start again")
        busy = busy or collectives.busy() or ("it rests already" if _resting else "") or _timeline_busy()
        _stopping = not busy
        stay = _agree(bool(busy))
        if stay is None:
            return {"resting": _resting, "busy": "the ranks did not agree in time: the pool stays awake", "seconds": 0}
        if stay:
            return {"resting": _resting, "busy": busy or "another rank is busy", "seconds": time.perf_counter() - t0}
        _stop()
    finally:
        _stopping = False
        if locked:
            _lock.release()
    return {"resting": True, "seconds": time.perf_counter() - t0}


AGREE_S = 5.0
_rest_comm: Any = None
_agreement_lost = False  # a decision did not complete: its communicator cannot be used again, so no more rests


def prepare() -> None:
    """The communicator the ranks decide a kernel's rest on (collective: called by the bootstrap, on every rank)."""
    global _rest_comm
    from mpi4py import MPI

    if _rest_comm is None:
        _rest_comm = MPI.COMM_WORLD.Dup()


def _agree(stay: bool) -> bool | None:
    """Whether any rank must stay awake (True), none must (False), or the ranks did not all take part within AGREE_S
    (None, and from then on always None)."""
    global _agreement_lost
    if _agreement_lost or _rest_comm is None:
        return None
    answer = _any(_rest_comm, stay, AGREE_S)
    if answer is None:
        _agreement_lost = True
    return answer


def _any(comm: Any, mine: bool, timeout: float | None, poll_s: float = 0.001) -> bool | None:
    """Whether any rank of `comm` said True; None where not every rank took part within `timeout` seconds."""
    from mpi4py import MPI

    said, answer = bytearray([int(mine)]), bytearray(1)  # both alive until the operation completes
    request = comm.Iallreduce(said, answer, op=MPI.BOR)
    deadline = None if timeout is None else time.monotonic() + timeout
    while not request.Test():
        if deadline is not None and time.monotonic() > deadline:
            return None
        time.sleep(poll_s)
    return bool(answer[0])


def _timeline_busy() -> str:
    if _recording:
        return "a cell records Horovod's timeline"
    path = _horovod_env.get("HOROVOD_TIMELINE", "")
    return "Horovod writes a timeline since its start" if path and path != "DYNAMIC" else ""


# ---- the rest during a cell: each rank's own watch ------------------------------------------------------------

ROUND_S = 0.5  # how often the ranks decide together whether Horovod may rest
REST_AFTER_CPU_S, REST_AFTER_GPU_S = 2.0, 30.0  # the kernel's defaults for --rest-after (kernel/launch/pool.py)


def rest_after(gpu: bool) -> float:
    """Seconds without Horovod use after which it rests: %hvd_start --rest-after (0: never), else by device."""
    given = os.environ.get("JUPYTER_HVD_REST_AFTER")
    if given:
        return float(given)
    return REST_AFTER_GPU_S if gpu else REST_AFTER_CPU_S


def watch(after: float) -> None:
    """Rest Horovod wherever no rank used it for `after` seconds, also during a cell (collective: called by the
    bootstrap on every rank; `after` 0: never)."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD.Dup()
    if after > 0:
        threading.Thread(target=_watch, args=(comm, after), name="jupyter-hvd rest", daemon=True).start()


def _unused_for(after: float) -> bool:
    """Whether this rank's Horovod may rest now: awake, unused for `after` seconds, nothing in flight."""
    from .. import collectives

    return (
        not _resting
        and not _using
        and not _apart()
        and can_rest()
        and time.monotonic() - _last_use >= after
        and not _timeline_busy()
        and not collectives.busy()
    )


def _watch(comm: Any, after: float) -> None:
    global _stopping
    from .. import outbox

    try:
        while True:
            time.sleep(ROUND_S)
            # Every rank takes part in every round, in the same order; each says whether it must stay awake.
            uses = _uses
            if _any(comm, not _unused_for(after), None, poll_s=0.005):
                continue
            # Every rank may rest. Take the lock (an op starting now waits for it, a few ms) and check that no use
            # began since; the ranks decide once more, and stop together or not at all (one rank's shutdown stops
            # every rank's Horovod). A lock held elsewhere (a start under way) means this rank stays awake.
            locked = _lock.acquire(blocking=False)
            try:
                still = locked and _uses == uses and _unused_for(after)
                _stopping = still
                if not _any(comm, not still, None):
                    _stop()
            finally:
                _stopping = False
                if locked:
                    _lock.release()
    except Exception as exc:  # the pool works on without it, awake while idle in cells
        outbox.problem(f"the watch that rests Horovod during cells failed: {type(exc).__name__}: {exc}")


# ---- stop and start ------------------------------------------------------------------------------------------


def _stop() -> None:
    """Shut Horovod down on this rank (every rank does it together), answering its queries from here on. Called with
    the lock held."""
    global _resting
    from horovod.torch import mpi_ops

    from .. import collectives

    if _resting:
        return
    mpi_ops.shutdown()  # Horovod's own (a cell's hvd.shutdown() comes here too); right where it already ended
    compat.handles_in_flight().clear()  # ops left in flight by a stalled cell ended with the shutdown
    collectives.forget()
    _resting = True


def shutdown_by_cell() -> None:
    """A cell's hvd.shutdown() (a pasted script's last line): Horovod rests and starts again at the next use, as a
    script's next hvd.init() would start it: without the process sets and communicator given before."""
    global _init_arguments
    with _lock:
        _stop()
        _process_sets.clear()
        _init_arguments = None


def _start(init: Any) -> float:
    """Start Horovod on this rank with `_wanted_env`, the last init arguments and the process sets cells added; the
    seconds it took. Called with the lock held."""
    global _resting, _horovod_env, _wanted_env
    from horovod.common import process_sets

    t0 = time.perf_counter()
    user = horovod_variables()
    start = init_settings.start_env(_wanted_env)
    set_by_init: dict[str, str] = {}
    _set_env({k: None for k in user}, start)
    _resting = False  # from here Horovod answers its queries itself (hvd.init() asks whether it is initialised)
    try:
        args, kwargs = _init_arguments or ((), {})
        init(*args, **kwargs)
        # hvd.init(process_sets="dynamic") sets HOROVOD_DYNAMIC_PROCESS_SETS=1 itself, as a script then sees it.
        set_by_init = {k: v for k, v in horovod_variables().items() if start.get(k) != v}
        for process_set in _process_sets:  # in their first order: Horovod numbers them as it did then
            process_sets.add_process_set(process_set)
    finally:
        _set_env({k: None for k in horovod_variables()}, user, set_by_init)
    _horovod_env = {**_wanted_env, **set_by_init}
    _wanted_env = dict(_horovod_env)
    _remember_answers()
    return time.perf_counter() - t0


def _remember_answers() -> None:
    """Keep what Horovod answers now to the queries a resting Horovod must answer (taken while it runs: once one rank
    stops, the others' Horovod stops too and answers nothing more)."""
    answers = compat.query_answers()
    if not any(isinstance(key, tuple) for key in answers):  # another rank stopped it first (a cell's hvd.shutdown())
        answers.update({key: value for key, value in _answers.items() if isinstance(key, tuple)})
    _answers.clear()
    _answers.update(answers)


def start_again(init: Any, args: tuple[Any, ...], kwargs: dict[str, Any], variables: Mapping[str, str]) -> float:
    """Start Horovod again on this rank as a script's hvd.init(*args, **kwargs) after setting the HOROVOD_* variables
    `variables` would (every rank runs the same cell, so it is collective); the seconds it took. What it was given
    (process sets, a communicator) is given again at every later start."""
    global _init_arguments, _wanted_env
    with _lock:
        _stop()
        _wanted_env = dict(variables)
        _process_sets.clear()  # a new start has only the process sets it is given, as in a script
        _init_arguments = (args, dict(kwargs)) if args or kwargs else None
        return _start(init)


def started_plain() -> bool:
    """Whether Horovod last started as the pool starts it: no process sets or communicator of a cell's."""
    return not _apart()


def started_variables() -> dict[str, str]:
    """The HOROVOD_* variables Horovod last started with (a cell's hvd.init() compares the cell's with them)."""
    return dict(_horovod_env)


def added(process_set: Any) -> None:
    """A cell added `process_set` (hvd.add_process_set): every later start registers it again."""
    with _lock:
        _process_sets.append(process_set)


def removed(process_set: Any) -> None:
    """A cell removed `process_set` (hvd.remove_process_set): later starts leave it out."""
    global _init_arguments
    with _lock:
        _process_sets[:] = [p for p in _process_sets if p is not process_set]
        if _init_arguments is not None:
            args, kwargs = _init_arguments
            given = kwargs.get("process_sets")
            if isinstance(given, (list, tuple)) and any(p is process_set for p in given):
                kwargs = {**kwargs, "process_sets": [p for p in given if p is not process_set]}
                _init_arguments = (args, kwargs)


def set_horovod_env(changes: Mapping[str, str | None]) -> None:
    """Set (None: remove) variables Horovod reads at hvd.init(); the next `wake()` starts Horovod again with them.

    Every rank must make the same change, since that restart is collective (all ranks run the same cell).
    """
    global _wanted_env
    _set_env(changes)
    wanted = dict(_wanted_env)
    _set_env(changes, into=wanted)
    _wanted_env = wanted


def horovod_env(key: str) -> str | None:
    """The value `key` had when this rank's Horovod last started."""
    return _horovod_env.get(key)


def wake() -> float:
    """Start Horovod again if it rests, or if `set_horovod_env` changed what it must start with; the seconds it took.

    Every rank runs it at the same point of the same cell (its first use of Horovod, or `%%hvd --timeline` before its
    cell), so the start is collective.
    """
    import horovod.torch as hvd

    with _lock:
        if not _resting and _wanted_env != _horovod_env:
            rest()  # no-op where the pool cannot rest, or where a rank is busy: then Horovod keeps its old settings
        if not _resting:
            return 0.0
        return _start(hvd.init)


def _set_env(*changes: Mapping[str, str | None], into: Any = None) -> None:
    target = os.environ if into is None else into
    for values in changes:
        for key, value in values.items():
            if value is None:
                target.pop(key, None)
            else:
                target[key] = value


def begin_cell() -> float:
    """A cell starts: Horovod starts again now where the cell's settings changed (`set_horovod_env`), or where ranks
    may use it apart (process sets); otherwise at the cell's first use of it. The seconds a start took."""
    if _wanted_env != _horovod_env or (_resting and _apart()):
        return wake()
    return 0.0


# ---- every use of Horovod goes through here -------------------------------------------------------------------


def wake_on_first_use() -> None:
    """Have Horovod's collectives start it again where it rests, and its queries answered meanwhile (Horovod must
    be running). Idempotent."""
    _remember_answers()
    compat.answer_queries(
        lambda name, args: _answers.get((name, *args) if args else name) if _resting or _stopping else None
    )
    compat.wrap_op_starters(lambda real, kind: _using_horovod(real, kind))
    compat.wrap_public(("join", "barrier"), _using_horovod)
    compat.wrap_public(("add_process_set", "remove_process_set"), _process_set_change)
    compat.wrap_public(("start_timeline", "stop_timeline"), _timeline)
    compat.wrap_synchronize(_used)


def _using_horovod(real: Any, kind: str = "") -> Any:
    if getattr(real, "_jupyter_hvd_wakes", False):
        return real

    try:
        signature: inspect.Signature | None = inspect.signature(real)
    except (TypeError, ValueError):
        signature = None

    @functools.wraps(real)
    def use(*args: Any, **kwargs: Any) -> Any:
        global _uses, _using, _last_use
        with _lock:
            _uses += 1
            _last_use = time.monotonic()
            if _resting:
                _wake_for(kind or real.__name__, _tensor_name(signature, args, kwargs))
            _using += 1
        try:
            return real(*args, **kwargs)
        finally:
            with _lock:
                _using -= 1
                _last_use = time.monotonic()

    use._jupyter_hvd_wakes = True  # type: ignore[attr-defined]
    return use


def _tensor_name(signature: inspect.Signature | None, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """The `name=` a Horovod call was given ('' where none)."""
    if signature is None:
        return ""
    try:
        name = signature.bind(*args, **kwargs).arguments.get("name")
    except TypeError:
        return ""
    return name if isinstance(name, str) else ""


def _wake_for(kind: str, name: str) -> None:
    """Start Horovod for a use of it (`kind`, of tensor `name`); the rank counts as waiting in that collective
    meanwhile (the others must start Horovod too), so the kernel sees a rank that waits for peers that finished their
    cell, and Where names the collective and its tensor as it will once Horovod runs."""
    from .. import collectives

    with collectives.waiting(name or kind, collectives.started(), kind=kind):
        wake()


def _process_set_change(real: Any) -> Any:
    wrapped = _using_horovod(real)

    @functools.wraps(real)
    def change(process_set: Any) -> Any:
        try:
            result = wrapped(process_set)
        except ValueError as exc:
            if "HOROVOD_DYNAMIC_PROCESS_SETS=1" not in str(exc):
                raise
            raise ValueError(
                f"{exc} In a pool, as in a script, Horovod reads it when it starts: call "
                "hvd.init(process_sets='dynamic') first (Horovod then starts again with it on every rank)."
            ) from None
        if real.__name__ == "add_process_set":
            added(result)  # registered again at every later start
        elif result:
            removed(process_set)
        with _lock:
            _remember_answers()
        return result

    change._jupyter_hvd_wakes = True  # type: ignore[attr-defined]
    return change


def _timeline(real: Any) -> Any:
    wrapped = _using_horovod(real)

    @functools.wraps(real)
    def timeline(*args: Any, **kwargs: Any) -> Any:
        global _recording
        result = wrapped(*args, **kwargs)
        _recording = real.__name__ == "start_timeline"
        return result

    timeline._jupyter_hvd_wakes = True  # type: ignore[attr-defined]
    return timeline


def _used(real: Any) -> Any:
    @functools.wraps(real)
    def synchronize(handle: Any) -> Any:
        global _last_use
        try:
            return real(handle)
        finally:
            _last_use = time.monotonic()

    return synchronize
