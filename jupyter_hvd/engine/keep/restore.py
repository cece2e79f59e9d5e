"""A snapshot comes back on every rank in two steps, so that a restore never half-happens.

`prepare` reads this rank's part of a generation and rebuilds everything it holds beside the namespace, touching
nothing: a state_dict for each object kept by its state (checked against the object the setup cells rebuilt), a
value for each other name, linked to the live objects it refers to. The kernel gathers every rank's answer and asks
each to `apply` the names that every rank could prepare: loaded into the live objects, bound in the namespace, the
random generators set; an interrupt cannot stop that half way. No collective is used: ranks that differ or die
cannot block each other, and the kernel names what did not come back.

Data files are mapped copy-on-write (engine/keep/files.py): the ranks of one host read the same pages. DTensor
shards (FSDP2) are loaded from the rank's own torch.distributed.checkpoint into DTensors laid out like the live
object's (engine/keep/shards.py).

Imported on the engines only.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ...wire import GenId, Resize
from .. import outbox
from . import encoding, files, shards, snapshot

_prepared: dict[str, Any] | None = None  # what `prepare` rebuilt, until `apply` (or the next prepare)


def prepare(plan: dict[int, GenId], directory: str, resize: Resize | None = None) -> dict[str, Any]:
    """Rebuild this rank's part of the generation `plan` names for it (with `resize`, rank `resize.source`'s part,
    laid out for this pool's size); which names could come back, which could not and why. Never raises."""
    global _prepared
    from IPython import get_ipython

    _prepared = None
    rank = outbox.rank() if resize is None else resize.source
    where = Path(directory)
    gen = tuple(plan[rank])
    try:
        manifest = files.read_manifest(where, rank, gen)  # type: ignore[arg-type]
    except Exception as exc:
        whose = "this rank's" if resize is None else f"rank {rank}'s"
        return {"ok": [], "failed": {"*": f"{whose} snapshot could not be read ({_first_words(exc)})"}}
    # Every old rank's shards of a name, for laying them out anew on this pool's ranks.
    old_parts = {r: tuple(g) for r, g in plan.items()} if resize is not None else {}
    rescaled: dict[str, str] = {}
    sharded: list[str] = []
    ns = get_ipython().user_ns
    entries = manifest["entries"]
    device = ns.get("device")
    loaded: dict[str, Any] = {}
    failed: dict[str, str] = {}
    for name, entry in entries.items():
        if entry["kind"] != "state":
            continue
        try:
            obj = ns.get(name)
            if not snapshot.has_state(obj) or type(obj).__qualname__ != entry["cls"]:
                what = f"a {type(obj).__qualname__}" if name in ns else "nothing"
                raise LookupError(
                    f"it was a {entry['cls']} when kept, and the setup cells now make it {what}: run the cell that "
                    f"builds the {entry['cls']} with %%hvd --setup"
                )
            state = _decode(where, rank, gen, entry, device, lambda n: _live(ns, n))  # type: ignore[arg-type]
            folders = [files.shards_dir(where, r, g, name) for r, g in sorted(old_parts.items())]  # type: ignore[arg-type]
            if list(_shards(state)):
                sharded.append(name)
            state = _resharded(obj, state, files.shards_dir(where, rank, gen, name), folders)  # type: ignore[arg-type]
            _check(obj, state)
            if resize is not None:
                said = _scale_learning_rate(obj, state, resize)
                if said:
                    rescaled[name] = said
            loaded[name] = state
        except Exception as exc:
            failed[name] = _first_words(exc)
    values = {n: e for n, e in entries.items() if e["kind"] == "value"}
    order, cyclic = _in_order(values)
    for name in cyclic:
        failed[name] = "it refers, through other kept values, back to itself: keep those values in one container"
    for name in order:

        def resolve(link: tuple[str, str]) -> Any:
            if link[0] in values:  # another kept value: the one this restore brings back
                if link[0] not in loaded:
                    raise encoding.MissingLink(f"it refers to {link[0]}, which did not come back")
                return loaded[link[0]]
            return _live(ns, link)

        try:
            loaded[name] = _decode(where, rank, gen, values[name], device, resolve)  # type: ignore[arg-type]
        except Exception as exc:
            failed[name] = _first_words(exc)
    _prepared = {"gen": gen if resize is None else None, "manifest": manifest, "loaded": loaded, "order": order}
    meta = manifest["meta"]
    return {
        "ok": sorted(loaded),
        "failed": failed,
        "rescaled": rescaled,
        "sharded": sharded,
        "count": meta.get("count"),
        "at": meta.get("at"),
        "mid_cell": bool(meta.get("mid_cell")),
        "tag": meta.get("tag", ""),
    }


def apply(names: list[str]) -> dict[str, Any]:
    """Put what `prepare` rebuilt for `names` in place, and this rank's random generators; an interrupt waits until
    it is done. What could not be applied, and why."""
    global _prepared
    from IPython import get_ipython

    prepared, _prepared = _prepared, None
    if prepared is None:
        return {"applied": [], "failed": {"*": "nothing was prepared (the engine was restarted in between)"}}
    ns = get_ipython().user_ns
    entries = prepared["manifest"]["entries"]
    loaded = prepared["loaded"]
    applied: list[str] = []
    failed: dict[str, str] = {}
    with _no_interrupts():
        for name in names:
            if entries[name]["kind"] == "state":
                try:
                    ns[name].load_state_dict(loaded[name])
                    applied.append(name)
                except Exception as exc:
                    failed[name] = _first_words(exc)
        for name in prepared["order"]:
            if name not in names:
                continue
            links = entries[name]["encoded"].links
            missing = [link[0] for link in links if link[0] in entries and link[0] not in applied]
            if missing:
                failed[name] = f"it refers to {', '.join(missing)}, which did not come back"
                continue
            ns[name] = loaded[name]
            applied.append(name)
        if prepared["gen"] is not None:  # another rank's part (a resize) leaves the setup's random generators
            snapshot.set_random_state(prepared["manifest"]["random"])
        snapshot.restored(prepared["gen"], {n: entries[n] for n in applied}, applied)
    return {"applied": applied, "failed": failed}


class _no_interrupts:
    """SIGINT is ignored while the snapshot is put in place (on the main thread; elsewhere none can land)."""

    def __enter__(self) -> None:
        self._saved = None
        if threading.current_thread() is threading.main_thread():
            self._saved = signal.signal(signal.SIGINT, signal.SIG_IGN)

    def __exit__(self, *exc: Any) -> None:
        if self._saved is not None:
            signal.signal(signal.SIGINT, self._saved)


def _decode(
    where: Path, rank: int, gen: GenId, entry: dict[str, Any], device: Any, resolve: Callable[[Any], Any]
) -> Any:
    encoded: encoding.Encoded = entry["encoded"]
    tensors: dict[int, Any] = {}

    def tensor(i: int) -> Any:
        if i not in tensors:
            ref = encoded.tensors[i]
            if ref.inline is not None:
                buffer: Any = bytearray(ref.inline)
            else:
                buffer = files.open_data(where, rank, gen, ref.digest)
            tensors[i] = encoding.rebuild(ref, buffer, device)
        return tensors[i]

    return encoding.decode(encoded.pickle, tensor, resolve)


def _live(ns: dict[str, Any], link: tuple[str, str]) -> Any:
    name, cls = link
    if name not in ns:
        raise encoding.MissingLink(
            f"it refers to {name}, which the setup cells do not define: build {name} in a %%hvd --setup cell"
        )
    if type(ns[name]).__qualname__ != cls:
        raise encoding.MissingLink(f"it refers to {name}, a {cls} when kept, and now a {type(ns[name]).__qualname__}")
    return ns[name]


def _in_order(values: dict[str, dict[str, Any]]) -> tuple[list[str], list[str]]:
    """Kept values, each after the kept values it refers to; those in a cycle of references, apart."""
    order: list[str] = []
    left = dict(values)
    while left:
        ready = [n for n, e in left.items() if all(link[0] not in left or link[0] == n for link in e["encoded"].links)]
        if not ready:
            return order, sorted(left)
        for name in ready:
            order.append(name)
            del left[name]
    return order, []


def _resharded(obj: Any, state: Any, folder: Path, old_folders: list[Path] | None = None) -> Any:
    """`state` with each kept shard loaded from `folder` into a DTensor laid out like the live object's (FSDP2): a
    module's like the same key of its state_dict, an optimizer's like the parameter each state belongs to. A shard
    whose place differs raises, naming it. With `old_folders` (every old rank's, at a resize) each live shard is read
    from whichever old shards hold its part of the whole tensor."""
    import torch

    kept_shards = list(_shards(state))
    if not kept_shards:
        return state
    optimizer = isinstance(obj, torch.optim.Optimizer)
    params = [p for group in obj.param_groups for p in group["params"]] if optimizer else []
    live = {} if params else obj.state_dict()
    wanted: dict[str, tuple[Any, str, str]] = {}
    for path, shard in kept_shards:
        if params and len(path) == 3 and path[0] == "state" and isinstance(path[1], int) and path[1] < len(params):
            wanted[shard.key] = (params[path[1]], f"state {path[2]!r} of parameter {path[1]}", shard.placements)
        else:
            wanted[shard.key] = (_at(live, path), ".".join(map(str, path)), shard.placements)
    loaded = shards.load_anew(wanted, old_folders) if old_folders else shards.load(wanted, folder)
    return _put(state, loaded)


def _shards(state: Any, path: tuple[Any, ...] = ()) -> Any:
    """(path, KeptShard) of every shard in a kept state, in dicts and lists."""
    if isinstance(state, encoding.KeptShard):
        yield path, state
    elif isinstance(state, dict):
        for key, value in state.items():
            yield from _shards(value, (*path, key))
    elif isinstance(state, (list, tuple)):
        for i, value in enumerate(state):
            yield from _shards(value, (*path, i))


def _at(state: Any, path: tuple[Any, ...]) -> Any:
    """What the live state holds at `path`, or None."""
    for key in path:
        try:
            state = state[key]
        except (KeyError, IndexError, TypeError):
            return None
    return state


def _put(state: Any, loaded: dict[str, Any]) -> Any:
    """`state` with each KeptShard replaced by the DTensor loaded for its key."""
    if isinstance(state, encoding.KeptShard):
        return loaded[state.key]
    if isinstance(state, dict):
        for key, value in state.items():
            state[key] = _put(value, loaded)
    elif isinstance(state, list):
        state[:] = [_put(value, loaded) for value in state]
    elif isinstance(state, tuple):
        return tuple(_put(value, loaded) for value in state)
    return state


def _check(obj: Any, state: Any) -> None:
    """Raise, naming the difference, where `state` cannot be loaded whole into `obj` (a module's load_state_dict
    would change the matching parameters before it finds the others)."""
    import torch

    if isinstance(obj, torch.nn.Module):
        live = obj.state_dict()
        missing = [k for k in live if k not in state]
        unexpected = [k for k in state if k not in live]
        shapes = [
            f"{k}: {tuple(state[k].shape)} kept, {tuple(live[k].shape)} now"
            for k in live
            if k in state and hasattr(state[k], "shape") and tuple(state[k].shape) != tuple(live[k].shape)
        ]
        problems = []
        if missing:
            problems.append(f"missing {', '.join(missing[:5])}")
        if unexpected:
            problems.append(f"not in the model now: {', '.join(unexpected[:5])}")
        if shapes:
            problems.append(f"other shapes ({'; '.join(shapes[:3])})")
        if problems:
            raise ValueError(f"the model the setup cells build differs from the kept one: {'; '.join(problems)}")
    elif isinstance(obj, torch.optim.Optimizer):
        kept = [len(g["params"]) for g in state["param_groups"]]
        now = [len(g["params"]) for g in obj.param_groups]
        if kept != now:
            raise ValueError(f"the optimizer's parameter groups differ: {kept} parameters kept, {now} now")


def _first_words(exc: BaseException) -> str:
    """What went wrong, in one line: torch's load_state_dict says "Error(s) in loading...:" first, the reason next."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    if len(lines) > 1 and lines[0].endswith(":"):
        return lines[1][:300]
    return lines[0][:300] if lines else type(exc).__name__


def _scale_learning_rate(obj: Any, state: Any, resize: Resize) -> str:
    """Where the setup cells scale the learning rate by the pool's size (Horovod's `lr * hvd.size()`), the kept
    optimizer or scheduler state holds the old size's rate: it is scaled by new/old too, so training goes on at the
    rate the setup means for this size. What was scaled, in words ('' where the setup's rate does not follow the
    size, or nothing is scaled)."""
    import math

    import torch

    factor = resize.new / resize.old

    def follows(live: float, kept: float) -> bool:
        return bool(kept) and math.isclose(live, kept * factor, rel_tol=1e-6)

    if isinstance(obj, torch.optim.Optimizer):
        said = []
        for live, kept in zip(obj.param_groups, state["param_groups"], strict=False):
            key = "initial_lr" if "initial_lr" in live and "initial_lr" in kept else "lr"
            if key in kept and follows(live[key], kept[key]):
                before = kept["lr"]
                for name in ("lr", "initial_lr"):
                    if name in kept:
                        kept[name] *= factor
                said.append(f"{before:g} -> {kept['lr']:g}")
        return f"learning rate {', '.join(said)}" if said else ""
    if isinstance(obj, torch.optim.lr_scheduler.LRScheduler):
        live_base, kept_base = list(getattr(obj, "base_lrs", [])), list(state.get("base_lrs") or [])
        if live_base and len(live_base) == len(kept_base) and all(map(follows, live_base, kept_base)):
            state["base_lrs"] = [lr * factor for lr in kept_base]
            if state.get("_last_lr"):
                state["_last_lr"] = [lr * factor for lr in state["_last_lr"]]
            pairs = zip(kept_base, state["base_lrs"], strict=True)
            return f"base learning rate {', '.join(f'{a:g} -> {b:g}' for a, b in pairs)}"
    return ""
