"""What this rank does in collectives (Horovod's, and torch.distributed's: engine/distributed/hooks.py): how many a cell
started, which one a thread waits in, and which threads use them at all.

The kernel needs this to end a cell whose collectives do not match (kernel/cell/run.py): a rank that finished its
cell after 8 allreduces while another waits in its 9th, or two ranks that wait on different tensor names. Horovod's
stall inspector notices only after HOROVOD_STALL_CHECK_TIME_SECONDS, and only warns. The idle rest
(engine/horovod/rest.py) asks `busy()` before it stops Horovod under a user's thread.

A light wrap of horovod.torch.mpi_ops (through jupyter_hvd/compat.py): each op start is counted and its handle
named; each blocking wait is recorded while it lasts (Horovod releases the GIL while it waits, so a watch thread can
report it).
Imported on the engines only.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from .. import compat

WAIT_REPORT_S = 0.5  # a wait this long is reported to the kernel (shorter ones are a normal collective)
# Horovod's synchronize() waits in a loop of std::this_thread::yield(), so a rank waiting for a slow peer kept a core
# at 100% (2 ranks, one waiting 5 s for the other: 9.0 CPU-s; 5.2 with naps). It is polled here instead, napping a
# tenth of the time waited so far (at most NAP_MAX_S): a short wait is as fast as before, a long one costs little.
SPIN_S = 0.0001
NAP_MAX_S = 0.002

_lock = threading.Lock()
_started = 0  # ops started since the running cell began (any thread)
_names: dict[int, tuple[str, str]] = {}  # handle -> (kind, tensor name), until the handle is waited for
_kinds: dict[int, str] = {}  # thread id -> the kind of collective it waits in (allreduce, broadcast...)
_waiting: dict[int, tuple[str, float, int]] = {}  # thread id -> (tensor name, monotonic since, ops started before)
_seqs: dict[int, int] = {}  # thread id -> the torch group's sequence number of its wait in the ranks' check
_users: dict[int, threading.Thread] = {}  # threads other than the main one that started a Horovod op
_installed = False
_waited = 0.0  # seconds the main thread has spent waiting in collectives, in all (for %%hvd --profile)


def install() -> None:
    """Wrap Horovod's op starters and `synchronize` (every blocking collective goes through it). Idempotent."""
    global _installed
    if _installed:
        return
    compat.wrap_op_starters(_counted)
    compat.wrap_synchronize(_timed)
    _installed = True


def _counted(real: Callable[..., Any], kind: str) -> Callable[..., Any]:
    signature = inspect.signature(real)

    @functools.wraps(real)
    def start(*args: Any, **kwargs: Any) -> Any:
        global _started
        handle = real(*args, **kwargs)
        try:
            name = signature.bind(*args, **kwargs).arguments.get("name")
        except TypeError:
            name = None
        thread = threading.current_thread()
        with _lock:
            _started += 1
            # Horovod's own name for an unnamed op (what its stall report shows).
            _names[handle] = (kind, name if name is not None else f"{kind}.noname.{handle}")
            if thread is not threading.main_thread():
                _users[thread.ident or 0] = thread
        return handle

    return start


def _timed(real: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(real)
    def synchronize(handle: Any) -> Any:
        ident = threading.get_ident()
        with _lock:
            kind, name = _names.pop(handle, ("", "join or barrier"))
            _waiting[ident] = (name, time.monotonic(), _started)
            _kinds[ident] = kind
        try:
            deferred = _until_completed(handle)
            result = real(handle)
            if deferred is not None:
                raise deferred
            return result
        finally:
            _waited_since(ident)

    return synchronize


def _until_completed(handle: int) -> BaseException | None:
    """Wait until Horovod op `handle` completed, napping between polls. What is raised in this thread meanwhile (a
    KeyboardInterrupt) is returned, to raise once the op completed: as Horovod's own wait does, whose C++ loop lets
    no Python exception in, so that no op is left in flight behind a cell's back."""
    start = time.perf_counter()
    deferred: BaseException | None = None
    while not compat.op_completed(handle):
        waited = time.perf_counter() - start
        if waited > SPIN_S:
            try:
                time.sleep(min(NAP_MAX_S, waited / 10))
            except BaseException as exc:  # what a signal handler raised: again once the op completed
                deferred = deferred or exc
    return deferred


def started_one(kind: str) -> None:
    """A collective of another backend (torch.distributed) started on this thread."""
    global _started
    thread = threading.current_thread()
    with _lock:
        _started += 1
        if thread is not threading.main_thread():
            _users[thread.ident or 0] = thread


@contextlib.contextmanager
def waiting(name: str, before: int | None = None, kind: str = "") -> Iterator[None]:
    """This thread waits in collective `name` (of `kind`: allreduce, broadcast...) while the block runs
    (torch.distributed releases the GIL there too); `before`: the collectives it started before this one (default:
    all but the last started)."""
    ident = threading.get_ident()
    with _lock:
        _waiting[ident] = (name, time.monotonic(), _started - 1 if before is None else before)
        _kinds[ident] = kind
    try:
        yield
    finally:
        _waited_since(ident)


@contextlib.contextmanager
def agreeing(name: str, seq: int) -> Iterator[None]:
    """This thread waits in the ranks' check before torch.distributed collective `name`, at the group's sequence
    number `seq` (wire.Waiting's "agreeing_at": peers whose cell ended can release it)."""
    ident = threading.get_ident()
    with _lock:
        _seqs[ident] = seq
    try:
        with waiting(name):
            yield
    finally:
        with _lock:
            _seqs.pop(ident, None)


def _waited_since(ident: int) -> None:
    """A wait of thread `ident` ended."""
    global _waited
    with _lock:
        entry = _waiting.pop(ident, None)
        if entry is not None and ident == threading.main_thread().ident:
            _waited += time.monotonic() - entry[1]


def waited_total() -> float:
    """Seconds the main thread has waited in collectives since the engine started."""
    return _waited


_pending: dict[int, tuple[str, float, int]] = {}  # collectives started in C++ (DDP's buckets) -> since when
_owed: dict[int, tuple[int, int, str]] = {}  # of those, allreduces a peer could complete: (seq, elements, dtype)


def pending(key: int, name: str, owed: tuple[int, int, str] | None = None) -> None:
    """A collective that no Python thread waits in started (a DDP bucket's allreduce, during backward); `owed`: an
    allreduce at that sequence number of the torch group, of that many elements of that dtype."""
    with _lock:
        _pending[key] = (name, time.monotonic(), _started)
        if owed is not None:
            _owed[key] = owed


def done(key: int) -> None:
    """That collective completed."""
    with _lock:
        _pending.pop(key, None)
        _owed.pop(key, None)


def begin_cell() -> None:
    """A cell starts: count its collectives from zero."""
    global _started
    with _lock:
        _started = 0


def forget() -> None:
    """Horovod's handles start again from 0 (a reset after a failed cell, or a rest): drop the names of old ones."""
    with _lock:
        _names.clear()


def started() -> int:
    """Collectives started since the running cell began."""
    return _started


def main_thread_wait(at_least: float = WAIT_REPORT_S) -> dict[str, Any] | None:
    """The collective the main thread (the cell) has waited in for at least `at_least` seconds, if any."""
    main = threading.main_thread().ident or 0
    detail: dict[str, Any] = {}
    with _lock:
        entry = _waiting.get(main)
        kind = _kinds.get(main, "") if entry is not None else ""
        if entry is not None and main in _seqs:
            detail["agreeing_at"] = _seqs[main]
        if entry is None and _pending:  # backward waits for DDP's buckets in C++: the oldest pending one
            entry = min(_pending.values(), key=lambda e: e[1])
            if set(_owed) == set(_pending):  # every one is an allreduce a peer could complete
                detail["owed"] = sorted(_owed.values())
    if entry is None:
        return None
    name, since, before = entry
    waited = time.monotonic() - since
    if waited < at_least:
        return None
    return {"name": name, "waited": waited, "number": before, "kind": kind, **detail}


def busy() -> str:
    """Why Horovod must not be stopped now ('' when it may): ops still in flight, or a user's thread that uses it."""
    with _lock:
        threads = [t for t in _users.values() if t.is_alive()]
        for ident in [i for i, t in _users.items() if not t.is_alive()]:
            del _users[ident]
        waiting = len(_waiting)
    if threads:
        return f"thread {threads[0].name!r} uses Horovod"
    if waiting:
        return "a thread waits in a collective"
    in_flight = compat.handles_in_flight()
    if in_flight:
        return f"{len(in_flight)} Horovod operation(s) in flight"
    return ""
