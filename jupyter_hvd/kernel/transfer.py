"""`%hvd_push` and `%hvd_pull`: notebook values to every rank and back, by value, with every wait bounded.

Runs in the user's kernel. Values are serialised by the contract's `dumps` (jupyter_hvd/wire.py: cloudpickle,
protocol 5 buffers) and cross ipyparallel as raw bytes and frames only: ipyparallel's IO thread never has to rebuild
a user's class (a class it could not rebuild there left the pull waiting forever and wedged the kernel). Values are
rebuilt here, on the kernel's main thread, where a failure becomes one clear line. Waits poll in short slices, so a
Ctrl-C lands within a fraction of a second, and a rank that dies or is stopped is named at once; the pool's --timeout
bounds the rest.
"""

from __future__ import annotations

import os
import pickle
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ipyparallel as ipp
import psutil

from .. import wire
from . import failures
from .launch.pool import Pool
from .ranks import format_ranks
from .words import size_text

ANNOUNCE_BYTES = 50 * 1024 * 1024  # transfers above this say their size before they start
SLICE_S = 0.1  # a wait checks the ranks' health (and lets a Ctrl-C land) this often


class TransferError(Exception):
    """A push or pull that could not complete; the message is one line for the user (nothing was changed)."""


def wait(pool: Pool, ar: ipp.AsyncResult, ranks: list[int], what: str, timeout: float) -> list[Any]:
    """The results of `ar` (one per rank of `ranks`, in order), waiting at most `timeout` seconds.

    Raises TransferError naming the ranks that died, are stopped (SIGSTOP) or did not answer in time, and
    KeyboardInterrupt (from the user's Ctrl-C) within SLICE_S; the request is then left to finish on its own.
    """
    assert pool.client is not None  # (ipyparallel drops a finished result from its cache: owner=True)
    deadline = time.monotonic() + timeout
    while True:
        try:
            # Every request goes through a view of a list of engines (pull's too: a list of one), whose results
            # come as a list, one per engine, even for a single engine (a 1-rank pool's push).
            return list(ar.get(timeout=SLICE_S))
        except TimeoutError:
            pass
        except ipp.error.CompositeError as exc:
            ename, evalue = exc.elist[0][0], exc.elist[0][1]
            raise TransferError(f"{what} failed on the ranks: {ename}: {evalue}") from None
        except ipp.error.RemoteError as exc:
            raise TransferError(f"{what} failed on the ranks: {exc.ename}: {exc.evalue}") from None
        except ipp.error.EngineError as exc:
            raise TransferError(
                f"{what} failed: an engine stopped ({exc}). Restart the pool with %hvd_restart."
            ) from None
        waiting = [r for r, mid in zip(ranks, ar.msg_ids, strict=True) if mid in pool.client.outstanding]
        gone = failures.lost(pool, waiting)
        if gone is not None:
            raise TransferError(f"{what} {'failed' if isinstance(gone, failures.Dead) else 'did not finish'}: {gone}")
        if time.monotonic() > deadline:
            raise TransferError(
                f"{what} did not finish within {timeout:g} s: {format_ranks(waiting or ranks)} did not answer "
                "(busy, or stuck). Try again with a longer --timeout, or %hvd_restart."
            )


def _serialise(name: str, value: Any) -> tuple[bytes, list[memoryview]]:
    try:
        return wire.dumps(value)
    except Exception as exc:
        raise TransferError(
            f"{name} cannot be sent to the ranks: {wire.why_unpicklable(exc)} ({type(exc).__name__}: {exc}). "
            "Create it inside a %%hvd cell instead, or send the data it is built from."
        ) from None


@dataclass
class Payload:
    """Notebook values serialised for the ranks: what a push sends, and what the setup journal replays."""

    names: list[str]
    headers: list[bytes]
    counts: list[int]  # out-of-band buffers of each value, in order
    buffers: list[Any]

    @property
    def nbytes(self) -> int:
        return sum(len(h) for h in self.headers) + sum(memoryview(b).nbytes for b in self.buffers)


def serialise(values: dict[str, Any]) -> Payload:
    """`values` (name -> value) as bytes; raises TransferError naming the first one that cannot go."""
    payload = Payload([], [], [], [])
    for name, value in values.items():
        header, bufs = _serialise(name, value)
        payload.names.append(name)
        payload.headers.append(header)
        payload.counts.append(len(bufs))
        payload.buffers += bufs
    return payload


def push(pool: Pool, values: dict[str, Any], timeout: float | None = None) -> Payload:
    """Send `values` (name -> value) to every rank, bound to the same names there; what was sent.

    Every value is serialised before anything is sent, so a value that cannot go stops the push with nothing sent.
    Raises TransferError (one line) and KeyboardInterrupt; waits at most `timeout` (default: the pool's --timeout).
    """
    payload = serialise(values)
    send(pool, payload, timeout)
    return payload


def send(pool: Pool, payload: Payload, timeout: float | None = None) -> None:
    """Send serialised values to every rank (a push, or its replay after a restart)."""
    assert pool.view is not None
    names = payload.names
    ranks = [r.rank for r in pool.ranks]
    what = f"Pushing {', '.join(names)}"
    if payload.nbytes > ANNOUNCE_BYTES:
        print(f"pushing {', '.join(names)} to {len(ranks)} ranks: {size_text(payload.nbytes)} each...", flush=True)
    receive = wire.Receive(names, payload.headers, payload.counts)
    ar = pool.view.apply_async(wire.perform, receive, *payload.buffers)
    try:
        outcomes = wait(pool, ar, ranks, what, pool.options.timeout if timeout is None else timeout)
    except KeyboardInterrupt:
        raise TransferError(
            f"Interrupted: some ranks may not have {', '.join(names)} yet (the push was still running). "
            "Push again to be sure."
        ) from None
    failed = [(r, o) for r, o in zip(ranks, outcomes, strict=True) if not o.get("ok")]
    if failed:
        o = failed[0][1]
        raise TransferError(
            f"{o['name']} could not be rebuilt on {format_ranks([r for r, _ in failed])} ({o['ename']}: "
            f"{o['evalue']}); no name was changed there. Import what it needs in a %%hvd cell first."
        )


def save(payload: Payload, path: Path) -> None:
    """Write a payload to a new file of the user's own (the pool's private directory), for replays and exports."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    sizes = [memoryview(b).nbytes for b in payload.buffers]
    head = pickle.dumps((payload.names, payload.headers, payload.counts, sizes), protocol=pickle.HIGHEST_PROTOCOL)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(len(head).to_bytes(8, "little"))
        f.write(head)
        for b in payload.buffers:
            f.write(b)


def load(path: Path) -> Payload:
    """What `save` wrote."""
    with open(path, "rb") as f:
        head = f.read(int.from_bytes(f.read(8), "little"))
        names, headers, counts, sizes = pickle.loads(head)
        buffers = []
        for size in sizes:
            buffer = bytearray(size)  # writable: tensors are rebuilt on it in place
            f.readinto(buffer)
            buffers.append(buffer)
    return Payload(names, headers, counts, buffers)


def pull(pool: Pool, name: str, rank: int = 0, timeout: float | None = None) -> Any:
    """The value of `name` on `rank`, rebuilt in this kernel.

    Asks the rank for the size first and prints it when the transfer is big. Raises TransferError (one line, the
    notebook unchanged) and KeyboardInterrupt; each step waits at most `timeout` (default: the pool's --timeout).
    """
    assert pool.client is not None
    limit = pool.options.timeout if timeout is None else timeout
    engine = pool.client[[pool.ranks[rank].engine_id]]  # a list of one: results come as a list, as wait() expects
    where = f"rank {rank}"
    what = f"Pulling {name} from {where}"
    try:
        info = wait(pool, engine.apply_async(wire.perform, wire.Stage(name)), [rank], what, limit)[0]
        if not info["ok"]:
            if info["ename"] == "NameError":
                raise TransferError(f"{name} is not defined on {where}")
            raise TransferError(
                f"{name} cannot be fetched from {where}: {wire.why_unpicklable(Exception(info['evalue']))} "
                f"({info['ename']}: {info['evalue']})"
            )
        free = psutil.virtual_memory().available
        if info["nbytes"] > free // 2:  # the frames, then the rebuilt value: room for both, and for the rest
            raise TransferError(
                f"{name} on {where} is {size_text(info['nbytes'])}, and this machine has {size_text(free)} free: "
                "pulling it could exhaust the notebook kernel's memory. Pull a part of it, or save it to a file "
                "on the rank (torch.save) instead."
            )
        if info["nbytes"] > ANNOUNCE_BYTES:
            print(f"pulling {name} from {where}: {size_text(info['nbytes'])}...", flush=True)
        frames = wait(pool, engine.apply_async(wire.perform, wire.Take()), [rank], what, limit)[0]
    except KeyboardInterrupt:
        raise TransferError(f"Interrupted: {name} was not pulled from {where}; the notebook is unchanged.") from None
    header, *buffers = frames
    try:
        return wire.loads(header, buffers)
    except Exception as exc:
        raise TransferError(
            f"{name} arrived from {where} but cannot be rebuilt in the notebook ({type(exc).__name__}: {exc}). "
            "Import what it needs here first, or pull plain data (e.g. model.state_dict())."
        ) from None
