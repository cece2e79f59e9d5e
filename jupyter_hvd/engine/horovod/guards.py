"""Script habits made safe on a persistent pool: `hvd.init()` pasted into a cell, a cell that wraps an optimizer
run twice, `zero_grad(set_to_none=True)`, `hvd.broadcast_object(x if rank == 0 else None)`.

Under `mpirun` a script runs once in a fresh process; here the engines live on, cell after cell, so a line that
is harmless in a script can act twice. Imported on the engines only; `install()` runs once, from the bootstrap.
"""

from __future__ import annotations

import functools
import sys
import weakref
from typing import Any

from ... import compat

# Every hvd.DistributedOptimizer made on this engine that may still hold gradient hooks.
_live: weakref.WeakSet[Any] = weakref.WeakSet()

RERUN_ADVICE = (
    "To make the cell safe to run again, create the plain optimizer and wrap it in the same line, e.g. "
    "optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01), "
    "named_parameters=model.named_parameters())"
)


def _say(text: str) -> None:
    """Print a note under the cell that caused it, from rank 0 only (every rank runs the same line)."""
    from .. import outbox

    if outbox.rank() == 0:
        print(f"jupyter-hvd: {text}", file=sys.stderr, flush=True)


def retire(optimizer: Any) -> int:
    """Remove the gradient hooks `optimizer` registered, so it no longer allreduces; how many were removed."""
    _live.discard(optimizer)
    return compat.retire(optimizer)


def _guard_init(hvd: Any) -> None:
    """A script's hvd.init(...) in a cell: harmless where it asks for nothing new (Horovod is initialised already: a
    second plain init would clear its table of ops in flight); where it brings process sets, a communicator, or
    HOROVOD_* variables the cell set, Horovod starts again with them on every rank, as under mpirun, said in one line.
    What Horovod 0.28.1 cannot start again with is named, with what to type instead
    (engine/horovod/init_settings.py)."""
    from . import init_settings, rest

    real_init = hvd.init

    @functools.wraps(real_init)
    def init(*args: Any, **kwargs: Any) -> None:
        if not hvd.is_initialized():
            return real_init(*args, **kwargs)
        plan = init_settings.plan(rest.started_variables(), rest.horovod_variables())
        if plan.named:
            _say("; ".join(plan.named) + ".")
        if not args and not kwargs and not plan.applied:
            return None
        if not plan.applied and rest.started_plain() and _as_now(hvd, args, kwargs):
            _say(f"hvd.init({_shown(args, kwargs)}) asks for what Horovod already has on this pool: nothing changes.")
            return None
        pending = sorted(compat.handles_in_flight())
        if pending:
            # Starting again clears Horovod's table of handles: hvd.synchronize(h) would then return None silently.
            raise RuntimeError(
                f"hvd.init(...) would start Horovod again while {len(pending)} operation(s) started "
                f"with an *_async call are not collected (handles {', '.join(map(str, pending[:8]))}): their results "
                "would be lost. Call hvd.synchronize(handle) on each first, then hvd.init(...) again."
            )
        seconds = rest.start_again(real_init, args, kwargs, plan.start_with)
        asked = _shown(args, kwargs)
        env = ", ".join(f"{k}={now}" if now is not None else f"without {k}" for k, (_, now) in plan.applied.items())
        said = f"Horovod started again on every rank ({seconds * 1000:.0f} ms) for hvd.init({asked})"
        said += f" with {env}" if env else ""
        said += ", as a script's start would be"
        if asked:
            said += "; it is given the same at every start after an idle rest, at the start of a cell"
        _say(said + ".")
        return None

    real_shutdown = hvd.shutdown

    @functools.wraps(real_shutdown)
    def shutdown() -> None:
        # A pasted script's last line: Horovod rests until the next cell uses it, as between cells.
        rest.shutdown_by_cell()

    hvd.init = init
    hvd.shutdown = shutdown


def _shown(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    return ", ".join([*map(repr, args), *(f"{k}={v!r}" for k, v in kwargs.items())])


def _as_now(hvd: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether hvd.init(*args, **kwargs) asks for the pool's Horovod as it is: every rank, in order, no process sets."""
    call = {**dict(zip(("comm", "process_sets"), args, strict=False)), **kwargs}
    if set(call) - {"comm", "process_sets"} or call.get("process_sets"):
        return False
    comm = call.get("comm")
    if comm is None:
        return True
    if isinstance(comm, (list, tuple)):
        return list(comm) == list(range(hvd.size()))
    return getattr(comm, "Get_size", lambda: -1)() == hvd.size()


def _zero_grad_with_set_to_none() -> None:
    """Horovod's zero_grad() takes no arguments; accept torch's `set_to_none` (None grads are fine for Horovod)."""

    def zero_grad(self: Any, set_to_none: bool = True) -> None:
        """Horovod's zero_grad, also accepting torch's `set_to_none` (torch's default is True)."""
        if compat.gradients_in_flight(self):
            raise AssertionError(
                "optimizer.zero_grad() was called after loss.backward() but before optimizer.step() or "
                "optimizer.synchronize(): the gradients are still being averaged. Call optimizer.step() first."
            )
        return super(type(self), self).zero_grad(set_to_none=set_to_none)

    for cls in compat.optimizer_classes():
        cls.zero_grad = zero_grad


def _guard_distributed_optimizer(hvd: Any) -> None:
    real = hvd.DistributedOptimizer

    @functools.wraps(real)
    def DistributedOptimizer(optimizer: Any, *args: Any, **kwargs: Any) -> Any:
        state = None
        if compat.is_distributed(optimizer):
            # `optimizer = hvd.DistributedOptimizer(optimizer)` run a second time: wrap the original class again.
            state = optimizer.state
            plain = compat.plain_class(optimizer).__new__(compat.plain_class(optimizer))
            plain.param_groups = optimizer.param_groups
            retire(optimizer)
            _say(
                f"this optimizer was already a hvd.DistributedOptimizer (the cell ran before?). It was wrapped "
                f"once, from its {type(plain).__name__}, keeping its state. {RERUN_ADVICE}"
            )
            optimizer = plain
        wrapped = real(optimizer, *args, **kwargs)
        if state is not None:
            wrapped.state.update(state)
        params = {id(p) for p in compat.updated_parameters(wrapped)}
        stale = [old for old in list(_live) if params & {id(p) for p in compat.updated_parameters(old)}]
        for old in stale:
            retire(old)
        if stale:
            _say(
                f"{len(stale)} earlier hvd.DistributedOptimizer{'s' if len(stale) > 1 else ''} still hooked these "
                "parameters (the cell ran before?). Their gradient hooks were removed, so each gradient is "
                f"averaged once and only the new optimizer steps. {RERUN_ADVICE}"
            )
        _live.add(wrapped)
        return wrapped

    hvd.DistributedOptimizer = DistributedOptimizer


def _guard_broadcast_object(hvd: Any) -> None:
    real = hvd.broadcast_object

    @functools.wraps(real)
    def broadcast_object(obj: Any, root_rank: int = 0, name: str | None = None, **kwargs: Any) -> Any:
        # Horovod names the op after type(obj): `cfg if rank == 0 else None` gives each rank another name, and hangs.
        return real(obj, root_rank, name or "broadcast_object", **kwargs)

    hvd.broadcast_object = broadcast_object


ARGV = ["cell"]  # sys.argv in a cell: a script's, run without arguments (the engine's own would confuse argparse)
_argv_said = False


def script_argv() -> None:
    """Give cells a script's sys.argv, and say so once, the first time argparse reads it."""
    import argparse

    sys.argv = list(ARGV)
    if getattr(argparse.ArgumentParser.parse_known_args, "_jupyter_hvd", False):
        return
    real = argparse.ArgumentParser.parse_known_args

    @functools.wraps(real)
    def parse_known_args(self: Any, args: Any = None, namespace: Any = None) -> Any:
        global _argv_said
        if args is None and not _argv_said and sys.argv == ARGV:
            _argv_said = True
            _say(
                "argparse reads sys.argv == ['cell'] in a cell, as a script run without arguments does; give a "
                "cell its arguments as parser.parse_args(['--lr', '0.1'])."
            )
        return real(self, args, namespace)

    parse_known_args._jupyter_hvd = True  # type: ignore[attr-defined]
    argparse.ArgumentParser.parse_known_args = parse_known_args  # type: ignore[method-assign]


def install() -> None:
    """Make `hvd.init()`, `hvd.DistributedOptimizer`, `hvd.broadcast_object` and `zero_grad(set_to_none=...)` safe
    to use cell after cell, as scripts use them."""
    import horovod.torch as hvd

    if getattr(hvd, "_jupyter_hvd_guarded", False):
        return
    _guard_init(hvd)
    _zero_grad_with_set_to_none()
    _guard_distributed_optimizer(hvd)
    _guard_broadcast_object(hvd)
    hvd._jupyter_hvd_guarded = True
