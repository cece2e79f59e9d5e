"""Kept names survive a restart of the pool: every rank snapshots its own state, and gets its own state back.

`%hvd_keep sampler model opt sched epoch` names what to keep. At the end of every successful `%%hvd` cell, and at
each `jupyter_hvd.commit()` inside a cell, each rank looks at what the names hold now:
- an object with `state_dict()`/`load_state_dict()` (a module, an optimizer, a scheduler, a GradScaler, a stateful
  data loader) is kept by its state_dict, and after a restart loaded into the object the setup cells rebuilt, so
  links between live objects survive (a restored scheduler drives the live optimizer); the DTensors of a state_dict
  (FSDP2) are kept as this rank's shards with torch.distributed.checkpoint (engine/keep/shards.py);
- anything else by value, referring by name to the live objects it holds (engine/keep/encoding.py);
- its own random generators.
Every kept tensor's bytes are read for a digest at each snapshot (engine/keep/content.py: whatever wrote them, in place
or not, the snapshot sees it); only what changed since the rank's last snapshot is copied, into buffers used again
and again (engine/keep/encoding.py); the training thread pays for the digest and the copy, a thread writes it
(engine/keep/files.py), and the rank tells the kernel. A write that fails (a full disk) is said, the last snapshot
written stays the one to restore, and the next snapshot writes everything again. A rank decides alone, with no
collective: ranks that differ (one rank commits, another does not) can never block each other; the kernel puts a
generation together from every rank's part and names what is missing.

A name that cannot be kept (a generator, an open file) is left out, with why; the others are still kept.
`commit()` never raises into training. Imported on the engines only.
"""

from __future__ import annotations

import random
import shutil
import threading
import time
from pathlib import Path
from typing import Any

from ... import state, wire
from ...wire import GenId
from .. import outbox
from . import encoding, files

_names: list[str] = []  # what the kernel asked to keep
_directory: Path | None = None  # where this pool's snapshots live
_entries: dict[str, dict[str, Any]] = {}  # name -> its entry in this rank's newest snapshot (reused while unchanged)
_signatures: dict[str, bytes] = {}  # name -> what it held at that snapshot (encoding.Encoded.signature)
_skipped: dict[str, str] = {}  # names left out of that snapshot, and why
_random: dict[str, Any] = {}  # the random generators' state at that snapshot
_newest: GenId | None = None  # this rank's newest generation, written or waiting to be
_written_newest: GenId | None = None  # this rank's newest generation on disk
_commits = (0, 0)  # (cell, jupyter_hvd.commit() calls in it)
# The writer's jobs, in order: generations to write and generations to delete. One generation waits at most: a
# commit while one waits waits for it (memory holds two copies at most, and every rank writes every generation, so
# the ranks' parts always make whole generations).
_jobs: list[dict[str, Any]] = []
_lock = threading.Condition()
_writer: threading.Thread | None = None
_staging = encoding.Staging()  # the buffers the copies go into, used again once written
_dirty = False  # a write failed: the next snapshot writes everything again (set by the writer, under _lock)


def configure(names: list[str], directory: str) -> None:
    """What to keep, and where (sent by the kernel with %hvd_keep, and on new engines after the restore)."""
    global _names, _directory
    path = Path(directory)
    if path != _directory:
        _forget()
        try:
            files.prepare(path)
        except state.UnsafeStateDir as exc:  # nothing is written where another user could read or replace it
            _directory = None
            outbox.problem(f"snapshots of the kept names cannot be written on this rank's host: {exc}")
            return
        files.remove_abandoned(path)  # left by engines before a restart, which are gone now
    _names = list(names)
    _directory = path
    for name in list(_entries):
        if name not in _names:
            del _entries[name]
            _signatures.pop(name, None)


def _forget() -> None:
    """Forget what the last snapshot held: the next one copies everything."""
    global _random, _newest
    _entries.clear()
    _signatures.clear()
    _skipped.clear()
    _random = {}
    _newest = None


def commit(tag: str = "") -> None:
    """Snapshot the kept names (%hvd_keep) now: after a crash or a restart the pool comes back to this point, and
    %hvd_rewind can go back to it.

    Call it on every rank, as the cell's code runs (e.g. once an epoch): a snapshot holds every rank's state. It
    returns once this rank's state is copied; the files are written in the background. `tag` names the snapshot
    (`%hvd_rewind TAG`: the newest snapshot of that tag) and keeps it among the last `c.HvdPool.tags_kept` tagged ones;
    a tag needs a letter (digits alone are snapshot numbers). Never raises; outside a jupyter-hvd pool (an exported
    script) it does nothing.
    """
    global _commits
    cell = outbox.running_cell()
    if cell is None:
        return
    tag = str(tag or "")
    if tag.isdigit():
        outbox.problem(
            f"commit(tag={tag!r}): a tag of digits alone would read as a snapshot's number in %hvd_rewind, so this "
            f"snapshot is taken without it; give it a letter too, e.g. tag='epoch{tag}'"
        )
        tag = ""
    _commits = (cell, _commits[1] + 1 if _commits[0] == cell else 1)
    snapshot((cell, _commits[1]), outbox.running_count(), mid_cell=True, tag=tag)


def commits_in(cell: int) -> int:
    """How many times the cell numbered `cell` called commit() on this rank."""
    return _commits[1] if _commits[0] == cell else 0


def snapshot(gen: GenId, count: int | None, mid_cell: bool = False, tag: str = "") -> None:
    """This rank's part of generation `gen`: what changed since its last snapshot is copied and handed to the writer;
    nothing is written where nothing changed (the kernel then takes the rank's newest part). Never raises."""
    global _random, _newest
    if _directory is None or not _names:
        return
    t0 = time.perf_counter()
    _after_failed_write()
    try:
        from IPython import get_ipython

        ns = get_ipython().user_ns
        changed, skipped, kinds = _look(ns)
        state = random_state()
        if not changed and _same_random(state, _random) and skipped == _skipped and _newest is not None:
            outbox.send(_unchanged(gen, count, mid_cell, tag, kinds, skipped))
            return
        for name, (kind, obj, encoded) in changed.items():
            previous = _entries.get(name)
            try:
                encoding.stage(encoded, previous["encoded"] if previous else None, _staging)
            except Exception as exc:
                if _out_of_memory(exc):
                    raise MemoryError(str(exc)) from None
                skipped[name] = _why(exc)
                continue
            _entries[name] = {
                "kind": kind,
                "label": _label(obj, kind),
                "cls": type(obj).__qualname__,
                "encoded": encoded,
                "digest": encoded.replica,
            }
            _signatures[name] = encoded.signature
    except MemoryError as exc:
        _forget()  # copies may be half taken: the next snapshot takes them all again
        outbox.problem(
            f"the snapshot of {', '.join(_names)} does not fit in memory ({exc}): training goes on; the last "
            "snapshot stays the one to restore"
        )
        return
    except Exception as exc:  # jupyter-hvd's own failure: said, and training goes on
        outbox.problem(f"the snapshot of the kept names failed ({type(exc).__name__}: {exc}); training goes on")
        return
    entries = {n: _entries[n] for n in _names if n in _entries and n not in skipped}
    _random, _newest = state, gen
    _skipped.clear()
    _skipped.update(skipped)
    job = {
        "gen": gen,
        "entries": entries,
        "random": state,
        "meta": {"count": count, "mid_cell": mid_cell, "tag": tag, "at": time.time(), "skipped": dict(skipped)},
        "copy_seconds": time.perf_counter() - t0,
    }
    if not _queue(job):
        _forget()
        outbox.problem(
            f"snapshot {files.gen_name(gen)} was dropped: the one before it was still waiting to be written "
            f"after {QUEUE_WAIT_S:.0f} s (a slow disk?); the last snapshot written stays the one to restore"
        )


def _out_of_memory(exc: BaseException) -> bool:
    """Whether `exc` is torch's or Python's way of saying that a copy did not fit in memory."""
    return isinstance(exc, MemoryError) or (isinstance(exc, RuntimeError) and "allocate" in str(exc))


def _after_failed_write() -> None:
    """Where a write failed since the last snapshot, forget what that snapshot held: the next one copies and writes
    everything, whether or not it changed since, and nothing refers to the part that was never written."""
    global _dirty, _newest
    with _lock:
        if not _dirty:
            return
        _dirty = False
        _forget()
        _newest = _written_newest


def _look(ns: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str], dict[str, str]]:
    """(name -> (kind, object, encoded) of the kept names whose content changed; names left out, why; name -> kind).
    Every kept tensor is read once here (engine/keep/content.py); nothing is copied."""
    changed: dict[str, Any] = {}
    skipped: dict[str, str] = {}
    kinds: dict[str, str] = {}
    links = encoding.linkable(ns)
    for name in _names:
        if name not in ns:
            skipped[name] = "not defined"
            continue
        obj = ns[name]
        kind = "state" if has_state(obj) else "value"
        kinds[name] = f"{_label(obj, kind)}:{type(obj).__qualname__}"
        try:
            by_state = kind == "state"
            encoded = encoding.encode(obj.state_dict() if by_state else obj, links, obj, by_state)
        except Exception as exc:
            skipped[name] = _why(exc)
            continue
        if encoded.signature != _signatures.get(name) or name not in _entries:
            changed[name] = (kind, obj, encoded)
    return changed, skipped, kinds


def _label(obj: Any, kind: str) -> str:
    """How the kernel names what a kept object is: module and optimizer state is compared between ranks."""
    import torch

    if isinstance(obj, torch.nn.Module):
        return "module"
    return "optimizer" if isinstance(obj, torch.optim.Optimizer) else kind


def has_state(obj: Any) -> bool:
    """Whether `obj` is kept by its state_dict (and restored into the rebuilt object) rather than by value."""
    return (
        not isinstance(obj, type)
        and callable(getattr(obj, "state_dict", None))
        and callable(getattr(obj, "load_state_dict", None))
    )


def _why(exc: BaseException) -> str:
    if isinstance(exc, encoding.ShardOutsideState):
        return str(exc)
    return (
        f"{wire.why_unpicklable(exc)} ({type(exc).__name__}: {str(exc)[:200]}); keep what it is made from, or build "
        "it in a %%hvd --setup cell"
    )


def _unchanged(gen: GenId, count: int | None, mid_cell: bool, tag: str, kinds: dict[str, str], skipped: dict) -> Any:
    digests = {n: e.get("digest", "") for n, e in _entries.items() if n in kinds and n not in skipped}
    return wire.Committed(
        outbox.rank(), gen, False, _newest, count, mid_cell, tag, time.time(), kinds, digests, dict(skipped)
    )


def random_state() -> dict[str, Any]:
    """This rank's random number generators (dropout, shuffles): training after a restore draws what it would have."""
    import torch

    state: dict[str, Any] = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    try:
        import numpy

        state["numpy"] = numpy.random.get_state()
    except ImportError:
        pass
    return state


def _same_random(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two random_state()s are the same (compared in place: pickling them cost a millisecond a cell)."""
    import torch

    if a.keys() != b.keys() or a["python"] != b["python"] or not torch.equal(a["torch"], b["torch"]):
        return False
    if "cuda" in a and not all(torch.equal(x, y) for x, y in zip(a["cuda"], b["cuda"], strict=True)):
        return False
    if "numpy" in a:
        import numpy

        return a["numpy"][2:] == b["numpy"][2:] and numpy.array_equal(a["numpy"][1], b["numpy"][1])
    return True


def set_random_state(state: dict[str, Any]) -> None:
    """Put back what `random_state` took."""
    import torch

    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    if "numpy" in state:
        import numpy

        numpy.random.set_state(state["numpy"])


def restored(gen: GenId | None, entries: dict[str, dict[str, Any]], names: list[str]) -> None:
    """After a restore of this rank's part of generation `gen`: what the names hold now is that snapshot, so the next
    cell's end writes nothing new unless they change. `gen` None: what came back was another rank's part (a pool of
    another size), so the next snapshot writes this rank's whole part."""
    global _newest, _random
    from IPython import get_ipython

    ns = get_ipython().user_ns
    links = encoding.linkable(ns)
    with _lock:
        _forget()
        if gen is None:
            return
        _newest = gen
        _written(gen)
    _random = random_state()
    for name in names:
        entry = entries[name]
        obj = ns[name]
        try:
            by_state = entry["kind"] == "state"
            _signatures[name] = encoding.encode(obj.state_dict() if by_state else obj, links, obj, by_state).signature
        except Exception:
            continue
        entry["digest"] = entry["encoded"].replica
        _entries[name] = entry


def wait_written(timeout: float) -> bool:
    """Wait until every generation taken is written (a planned restart must not lose one); whether they are."""
    with _lock:
        return _lock.wait_for(lambda: not _jobs and not _busy, timeout)


def prune(gens: list[GenId], rank: int | None = None) -> None:
    """Delete this rank's parts of `gens` (or those of `rank`, gone since a resize; the kernel keeps the others),
    after what is being written."""
    _queue({"prune": gens, "rank": outbox.rank() if rank is None else rank})


_busy = False  # the writer is on a job
QUEUE_WAIT_S = 600.0


def _queue(job: dict[str, Any]) -> bool:
    """Hand a job to the writer; a generation waits until none waits before it. Whether it was taken."""
    global _writer
    with _lock:
        if "prune" not in job:
            waiting = lambda: not any("prune" not in j for j in _jobs)  # noqa: E731
            if not _lock.wait_for(waiting, QUEUE_WAIT_S if _writer is not None and _writer.is_alive() else 0):
                return False
        _jobs.append(job)
        _lock.notify_all()
    if _writer is None or not _writer.is_alive():
        _writer = threading.Thread(target=_write_loop, name="jupyter-hvd snapshot writer", daemon=True)
        _writer.start()
    return True


def _write_loop() -> None:
    global _busy
    while True:
        with _lock:
            _lock.wait_for(lambda: bool(_jobs))
            job = _jobs.pop(0)
            _busy = True
        try:
            if "prune" in job:
                _delete(job["prune"], job["rank"])
            else:
                _write(job)
        finally:
            with _lock:
                _busy = False
                _lock.notify_all()


def _delete(gens: list[GenId], rank: int) -> None:
    if _directory is None:
        return
    try:
        files.delete_generations(_directory, rank, gens)
    except OSError as exc:
        outbox.problem(f"old snapshots could not be deleted ({exc.strerror or exc})")


def _write(job: dict[str, Any]) -> None:
    global _dirty
    gen = job["gen"]
    t0 = time.perf_counter()
    tensors = [ref for entry in job["entries"].values() for ref in entry["encoded"].tensors]
    sharded = {name: entry["encoded"] for name, entry in job["entries"].items() if entry["encoded"].shards}
    copies = [ref.data for ref in tensors if ref.data is not None]
    needed = sum(c.numel() * c.element_size() for c in copies) + sum(
        s.to_local().numel() * s.to_local().element_size()
        for encoded in sharded.values()
        for s in encoded.shards.values()
        if s is not None
    )
    try:
        assert _directory is not None
        previous = _written_newest
        manifest = {
            "gen": gen,
            "meta": job["meta"],
            "random": job["random"],
            "entries": {name: _stored(entry) for name, entry in job["entries"].items()},
        }
        nbytes, manifest_bytes = files.write_generation(
            _directory, outbox.rank(), gen, manifest, tensors, previous, sharded
        )
        _written(gen)
        meta = job["meta"]
        outbox.send(
            wire.Committed(
                outbox.rank(),
                gen,
                True,
                None,
                meta["count"],
                meta["mid_cell"],
                meta["tag"],
                meta["at"],
                {n: f"{e.get('label', e['kind'])}:{e['cls']}" for n, e in job["entries"].items()},
                {n: e["digest"] for n, e in job["entries"].items()},
                meta["skipped"],
                {ref.digest: _size(ref) for ref in tensors if ref.inline is None}
                | {encoded.shards_file: encoded.shards_bytes for encoded in sharded.values()},
                nbytes,
                time.perf_counter() - t0,
                job["copy_seconds"],
                manifest_bytes,
            )
        )
    except Exception as exc:  # a full disk: said, the last snapshot stays the one to restore, the next one writes all
        with _lock:
            _dirty = True
        why = (exc.strerror or str(exc)) if isinstance(exc, OSError) else f"{type(exc).__name__}: {exc}"
        free = _free_bytes()
        outbox.send(wire.CommitFailed(outbox.rank(), gen, why, needed, free))
    finally:
        for ref in tensors:
            ref.data = None  # on disk (or never to be: the next snapshot copies again)
        _staging.give_back(copies)


def _free_bytes() -> int:
    try:
        return shutil.disk_usage(_directory).free if _directory is not None else 0
    except OSError:
        return 0


def _written(gen: GenId) -> None:
    global _written_newest
    _written_newest = gen


def _stored(entry: dict[str, Any]) -> dict[str, Any]:
    """A manifest's entry: the pickle and its tensors' descriptions, without their data (in the data files)."""
    encoded = entry["encoded"]
    return {"kind": entry["kind"], "label": entry.get("label", entry["kind"]), "cls": entry["cls"], "encoded": encoded}


def _size(ref: encoding.TensorRef) -> int:
    import math

    import torch

    return math.prod(ref.shape) * torch.empty((), dtype=getattr(torch, ref.dtype)).element_size()
