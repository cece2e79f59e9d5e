"""Kept names survive a restart of the pool: snapshots on rank 0, and the restore on every rank.

`%hvd_keep model opt epoch` names what to keep. At the end of every successful `%%hvd` cell, and at each
`jupyter_hvd.commit()` inside a cell, every rank calls `commit()`: rank 0 copies what the names hold (torch modules
and optimizers by state_dict, tensors moved to the CPU; anything else by value) and a background thread writes it to
the pool's private directory; every rank saves its own random number generators beside it. The training thread
only pays for the copy. After a restart, `restore()` on every rank loads the latest snapshot into the objects the
replayed setup cells rebuilt.

Snapshots are files in the pool's directory, not kernel memory: a 25 M-parameter model with Adam is about 300 MB,
which would double the notebook's memory and cross the network at every commit; a file survives the death of any
engine. Imported on the engines only.
"""

from __future__ import annotations

import os
import pickle
import queue
import random
import secrets
import threading
import time
from pathlib import Path
from typing import Any

from .. import wire
from . import outbox

SNAPSHOT = "snapshot.bin"
RANDOM_KEPT = 16  # random generator files kept per rank (one per snapshot taken)

_names: list[str] = []  # what the kernel asked to keep
_directory: Path | None = None  # the pool's private directory
_seq = 0  # commits so far; every rank counts alike (cells run on every rank)
_last: Any = None  # the kept names' signature at the last snapshot (a snapshot that would change nothing is skipped)
_pending: queue.Queue[tuple[int, dict[str, Any], dict[str, Any]] | None] = queue.Queue(maxsize=1)
_writer: threading.Thread | None = None
_unwritten = 0  # snapshots taken and not written yet (a newer one replaces one still waiting)
_state = threading.Condition()


def configure(names: list[str], directory: str, seq: int | None = None) -> None:
    """What to keep, and where (sent by the kernel with %hvd_keep and after a restart)."""
    global _names, _directory, _seq, _last
    _last = None
    _names = list(names)
    _directory = Path(directory)
    if seq is not None:
        _seq = seq


def commit() -> None:
    """Snapshot the kept names (%hvd_keep) now: after a crash or a restart the pool comes back to this point.

    Call it on every rank, as a cell's code runs (e.g. once an epoch). It returns at once on ranks other than 0, and on
    rank 0 after copying what the names hold; the file is written in the background. Outside a jupyter-hvd pool (an
    exported script) it does nothing.
    """
    snapshot(outbox.running_count(), only_if_changed=False, mid_cell=True)


def snapshot(count: int | None, only_if_changed: bool, mid_cell: bool = False) -> None:
    """Snapshot the kept names, taken in cell [count]; `only_if_changed` (the end of a cell): none where no kept
    name changed since the last snapshot."""
    global _seq, _last, _unwritten
    if _directory is None or not _names:
        return
    from mpi4py import MPI

    now = _signature(_names)
    if only_if_changed and not MPI.COMM_WORLD.allreduce(now != _last, op=MPI.LOR):  # every rank decides alike
        return
    _last = now
    _seq += 1
    rank = outbox.rank()
    try:
        _save_random_state(rank, _seq)
        if rank != 0:
            return
        t0 = time.perf_counter()
        entries, skipped = _copy(_names)
        copied = time.perf_counter() - t0
    except MemoryError as exc:
        outbox.problem(
            f"the snapshot of {', '.join(_names)} does not fit in memory ({exc}): training goes on; "
            "the last snapshot stays the one to restore"
        )
        return
    except OSError as exc:  # the random generators' file: a full disk must not end the cell that commits
        outbox.problem(
            f"snapshot {_seq} could not be written ({exc.strerror or exc}): training goes on; the last snapshot "
            "stays the one to restore"
        )
        return
    meta = {"seq": _seq, "cell": count, "at": time.time(), "skipped": skipped, "mid_cell": mid_cell, "copied": copied}
    _start_writer()
    with _state:
        try:
            _pending.get_nowait()  # a snapshot not written yet is replaced by this newer one
            _unwritten -= 1
        except queue.Empty:
            pass
        _unwritten += 1
        _pending.put((_seq, entries, meta))


def wait_written(timeout: float) -> bool:
    """Wait until the last snapshot taken is written (a planned restart must not lose it); whether it is."""
    with _state:
        return _state.wait_for(lambda: _unwritten == 0, timeout)


def _copy(names: list[str]) -> tuple[dict[str, Any], dict[str, str]]:
    """(name -> (kind, class name, payload)) of what the names hold now, detached from training; names left out, why."""
    import torch
    from IPython import get_ipython

    ns = get_ipython().user_ns
    entries: dict[str, Any] = {}
    skipped: dict[str, str] = {}
    for name in names:
        if name not in ns:
            skipped[name] = "not defined"
            continue
        obj = ns[name]
        if isinstance(obj, torch.nn.Module):
            entries[name] = ("module", type(obj).__qualname__, _detached(obj.state_dict()))
        elif isinstance(obj, torch.optim.Optimizer):
            entries[name] = ("optimizer", type(obj).__qualname__, _detached(obj.state_dict()))
        else:
            header, buffers = wire.dumps(obj)  # by value; copied, since training may change it in place
            entries[name] = ("value", type(obj).__qualname__, (header, [bytes(b) for b in buffers]))
    return entries, skipped


def _signature(names: list[str]) -> Any:
    """What changes when what the names hold changes: each tensor's identity and in-place version counter (torch
    counts every in-place change), a digest of anything else."""
    import hashlib

    import torch
    from IPython import get_ipython

    ns = get_ipython().user_ns
    signature = []
    for name in names:
        obj = ns.get(name)
        if isinstance(obj, torch.nn.Module):
            signature.append((name, [(id(t), t._version) for t in obj.state_dict(keep_vars=True).values()]))
        elif isinstance(obj, torch.optim.Optimizer):
            tensors = [t for s in obj.state.values() for t in s.values() if isinstance(t, torch.Tensor)]
            groups = [{k: v for k, v in g.items() if k != "params"} for g in obj.param_groups]
            signature.append((name, [(id(t), t._version) for t in tensors], repr(groups)))
        else:
            try:
                header, buffers = wire.dumps(obj)
            except Exception:
                signature.append((name, object()))  # cannot tell: taken as changed
                continue
            digest = hashlib.sha1(header)
            for b in buffers:
                digest.update(b)
            signature.append((name, digest.hexdigest()))
    return signature


def _detached(value: Any) -> Any:
    """`value` (a state_dict) with every tensor copied to the CPU, so training cannot change the snapshot."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True)
    if isinstance(value, dict):
        return {k: _detached(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_detached(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_detached(v) for v in value)
    return value


def _start_writer() -> None:
    global _writer
    if _writer is None or not _writer.is_alive():
        _writer = threading.Thread(target=_write_loop, name="jupyter-hvd snapshot writer", daemon=True)
        _writer.start()


def _write_loop() -> None:
    while True:
        item = _pending.get()
        if item is None:
            return
        seq, entries, meta = item
        t0 = time.perf_counter()
        try:
            nbytes = _write_and_mark(entries, meta)
        except OSError as exc:  # a full disk: say so, keep the last snapshot that was written
            outbox.problem(
                f"snapshot {seq} could not be written ({exc.strerror or exc}): training goes on; the "
                "last snapshot stays the one to restore"
            )
            continue
        except Exception as exc:
            outbox.problem(f"snapshot {seq} could not be written ({type(exc).__name__}: {exc})")
            continue
        kinds = {name: kind for name, (kind, _, _) in entries.items()}
        seconds = time.perf_counter() - t0
        outbox.send(
            wire.Committed(
                0,
                meta["cell"],
                seq,
                kinds,
                meta["skipped"],
                nbytes,
                seconds,
                meta["at"],
                meta["mid_cell"],
                meta["copied"],
            )
        )


def _write_and_mark(entries: dict[str, Any], meta: dict[str, Any]) -> int:
    global _unwritten
    try:
        return _write(entries, meta)
    finally:
        with _state:
            _unwritten -= 1
            _state.notify_all()


def _write(entries: dict[str, Any], meta: dict[str, Any]) -> int:
    """Write a snapshot file atomically (a reader finds the old one or the new one, whole); its size."""
    assert _directory is not None
    _directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    header, buffers = wire.dumps({"meta": meta, "entries": entries})
    tmp = _directory / f".{SNAPSHOT}.{secrets.token_hex(8)}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(len(header).to_bytes(8, "little"))
            f.write(len(buffers).to_bytes(8, "little"))
            for b in buffers:
                f.write(b.nbytes.to_bytes(8, "little"))
            f.write(header)
            for b in buffers:
                f.write(b)
        os.replace(tmp, _directory / SNAPSHOT)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return 16 + 8 * len(buffers) + wire.nbytes(header, buffers)


def read_snapshot(directory: Path) -> dict[str, Any] | None:
    """The snapshot in `directory` ({"meta", "entries"}), or None where there is none."""
    path = directory / SNAPSHOT
    try:
        with open(path, "rb") as f:
            data = bytearray(os.fstat(f.fileno()).st_size)  # writable: tensors are rebuilt on it without a copy
            f.readinto(data)
    except FileNotFoundError:
        return None
    view = memoryview(data)
    header_len = int.from_bytes(view[:8], "little")
    count = int.from_bytes(view[8:16], "little")
    sizes = [int.from_bytes(view[16 + 8 * i : 24 + 8 * i], "little") for i in range(count)]
    at = 16 + 8 * count
    header = bytes(view[at : at + header_len])
    at += header_len
    buffers = []
    for size in sizes:
        buffers.append(view[at : at + size])
        at += size
    return wire.loads(header, buffers)


def _save_random_state(rank: int, seq: int) -> None:
    """This rank's random number generators (dropout, shuffles), so training after a restore draws what it would
    have drawn."""
    import torch

    assert _directory is not None
    state: dict[str, Any] = {"seq": seq, "python": random.getstate(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    try:
        import numpy

        state["numpy"] = numpy.random.get_state()
    except ImportError:
        pass
    _directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = _directory / f".random-{rank}.{secrets.token_hex(8)}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as f:
        pickle.dump(state, f)
    # One file per snapshot: rank 0 writes its snapshot in the background, so the newest one on disk may be an
    # earlier one than this; its generators must still be found. A few are kept.
    os.replace(tmp, _directory / f"random-{rank}-{seq}.pkl")
    (_directory / f"random-{rank}-{seq - RANDOM_KEPT}.pkl").unlink(missing_ok=True)


def _load_random_state(rank: int, seq: int) -> bool:
    import torch

    assert _directory is not None
    try:
        with open(_directory / f"random-{rank}-{seq}.pkl", "rb") as f:
            state = pickle.load(f)
    except (OSError, pickle.UnpicklingError):
        return False
    if state.get("seq") != seq:
        return False
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    if "numpy" in state:
        import numpy

        numpy.random.set_state(state["numpy"])
    return True


def _first_words(exc: BaseException) -> str:
    """What went wrong, in one line: torch's load_state_dict says "Error(s) in loading...:" first, the reason next."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    if len(lines) > 1 and lines[0].endswith(":"):
        return f"{lines[1][:300]}"
    return lines[0][:300] if lines else type(exc).__name__


def restore() -> dict[str, Any]:
    """Load the latest snapshot into what the setup cells rebuilt (run on every rank, after a restart).

    Every rank reads the same file where it can (one host); otherwise rank 0 reads it and broadcasts it. Returns what
    came back and what did not, with why, alike on every rank.
    """
    global _seq
    import horovod.torch as hvd
    import torch
    from IPython import get_ipython
    from mpi4py import MPI

    assert _directory is not None
    comm = MPI.COMM_WORLD
    snapshot = read_snapshot(_directory) if _directory.exists() else None
    if not comm.allreduce(snapshot is not None, op=MPI.LAND):  # a rank on another host: rank 0's copy
        snapshot = hvd.broadcast_object(snapshot if hvd.rank() == 0 else None, 0, name="jupyter_hvd.keep.snapshot")
    if snapshot is None:
        return {"restored": [], "failed": {}, "missing": True}
    ns = get_ipython().user_ns
    failed: dict[str, str] = {}
    restored: list[str] = []
    for name, (kind, cls, payload) in snapshot["entries"].items():
        try:
            if kind == "value":
                header, buffers = payload
                ns[name] = wire.loads(header, buffers)
            else:
                obj = ns.get(name)
                want = torch.nn.Module if kind == "module" else torch.optim.Optimizer
                if not isinstance(obj, want) or (kind == "module" and type(obj).__qualname__ != cls):
                    what = f"a {type(obj).__qualname__}" if name in ns else "nothing"
                    raise LookupError(
                        f"it was a {cls} when kept, and the setup cells now make it {what}: run the cell that "
                        f"builds the {cls} with %%hvd --setup"
                    )
                obj.load_state_dict(payload)
            restored.append(name)
        except Exception as exc:
            failed[name] = _first_words(exc)
    # Every rank loaded the same file, but a rank whose objects differ must not silently diverge: agree on failures.
    for other in comm.allgather(failed):
        failed.update(other)
    restored = [n for n in restored if n not in failed]
    meta = snapshot["meta"]
    _seq = int(meta["seq"])
    rng = _load_random_state(hvd.rank(), _seq)
    return {
        "restored": restored,
        "failed": failed,
        "cell": meta.get("cell"),
        "at": meta.get("at"),
        "mid_cell": bool(meta.get("mid_cell")),
        "seq": _seq,
        "random": comm.allreduce(rng, op=MPI.LAND),
    }
