"""Every use of a Horovod, ipykernel or IPython internal (and one of the standard inspect module), in one place, each
checked against the versions it was written for.

jupyter-hvd keeps a pool alive across cells and failures, which Horovod's and ipykernel's public APIs do not cover:
it resets Horovod's table of operations in flight after a failed cell, names and times the collectives a rank waits
in, removes the gradient hooks of an optimizer wrapped twice, shortens ipykernel's output flush timer while a cell
streams, and has IPython's tracebacks name a cell by its prompt (and find its module without scanning every one).
Those names are private and may change in any release: each accessor below checks that what it uses
is there and raises `CompatError` saying which internal of which version is missing, and `check_horovod()` /
`check_ipykernel()` tell at start when a version outside the supported ones is in use.

Horovod's accessors run on the engines only (they import horovod.torch); ipykernel's and IPython's run in kernels and
engines.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from typing import Any

HOROVOD_SUPPORTED = ("0.28.",)  # versions whose internals below were read and tested
IPYKERNEL_SUPPORTED = ("6.", "7.")

# Horovod's private op starters (horovod/torch/mpi_ops.py), each taking the tensor name as `name`, by the kind of
# collective they start.
OP_STARTERS = {
    "_allreduce_async": "allreduce",
    "_grouped_allreduce_async": "grouped_allreduce",
    "_allgather_async": "allgather",
    "_grouped_allgather_async": "grouped_allgather",
    "_broadcast_async": "broadcast",
    "_alltoall_async": "alltoall",
    "_reducescatter_async": "reducescatter",
    "_grouped_reducescatter_async": "grouped_reducescatter",
}


class CompatError(RuntimeError):
    """A Horovod or ipykernel internal that jupyter-hvd relies on is missing in the installed version."""


def _version(package: str) -> str:
    try:
        return version(package)
    except PackageNotFoundError:
        return "not installed"


def check_horovod() -> str:
    """'' when the installed Horovod is one jupyter-hvd supports, else a one-line warning for the user."""
    return _check(
        "horovod",
        HOROVOD_SUPPORTED,
        "recovery after failed cells uses Horovod internals that may differ (install horovod==0.28.1 with "
        "scripts/setup.sh)",
    )


def check_ipykernel() -> str:
    """'' when the installed ipykernel is one jupyter-hvd supports, else a one-line warning for the user."""
    return _check("ipykernel", IPYKERNEL_SUPPORTED, "live output may arrive in bursts")


def _check(package: str, supported: tuple[str, ...], risk: str) -> str:
    found = _version(package)
    if found.startswith(supported):
        return ""
    return f"jupyter-hvd was written for {package} {' or '.join(v + 'x' for v in supported)} and finds {found}: {risk}."


def _missing(what: str, why: str) -> CompatError:
    return CompatError(
        f"Horovod {_version('horovod')} has no {what}, which jupyter-hvd uses to {why}. jupyter-hvd supports Horovod "
        f"{' or '.join(v + 'x' for v in HOROVOD_SUPPORTED)}: install horovod==0.28.1 (scripts/setup.sh)."
    )


# ---- Horovod: operations in flight -----------------------------------------------------------------------------


def _mpi_ops() -> Any:
    from horovod.torch import mpi_ops

    return mpi_ops


def handles_in_flight() -> dict[int, Any]:
    """Horovod's table of this rank's operations in flight (handle -> tensors); rebound by each hvd.init()."""
    table = getattr(_mpi_ops(), "_handle_map", None)
    if not isinstance(table, dict):
        raise _missing("mpi_ops._handle_map", "know which operations are still in flight")
    return table


def op_completed(handle: int) -> bool:
    """Whether this rank's Horovod op `handle` completed; True for one not in flight (synchronize returns at once)."""
    if handle not in handles_in_flight():
        return True
    poll = getattr(getattr(_mpi_ops(), "mpi_lib", None), "horovod_torch_poll", None)
    if poll is None:
        raise _missing("mpi_lib.horovod_torch_poll()", "wait for a collective without keeping a core busy")
    try:
        return bool(poll(handle))
    except ValueError:  # already released in C++ (an interrupted synchronize() left it in the Python table)
        return True


def reset_handles() -> None:
    """Start Horovod's handle numbering (and the names of unnamed ops) from 0 again, after every rank joined."""
    lib = getattr(_mpi_ops(), "mpi_lib", None)
    if lib is None or not hasattr(lib, "horovod_torch_reset"):
        raise _missing("mpi_lib.horovod_torch_reset()", "realign unnamed collectives after a failed cell")
    lib.horovod_torch_reset()
    handles_in_flight().clear()


def wrap_op_starters(wrap: Callable[[Callable[..., Any], str], Callable[..., Any]]) -> None:
    """Replace each of Horovod's op starters by `wrap(starter, kind)`."""
    mpi_ops = _mpi_ops()
    found = [attr for attr in OP_STARTERS if hasattr(mpi_ops, attr)]
    if "_allreduce_async" not in found:
        raise _missing("mpi_ops._allreduce_async", "see which collective a rank waits in")
    for attr in found:
        setattr(mpi_ops, attr, wrap(getattr(mpi_ops, attr), OP_STARTERS[attr]))


# Horovod's queries (horovod/common/basics.py calls these through its ctypes library) that an idle pool answers
# itself while Horovod rests: the answers do not change between a rest and the next start.
QUERIES = (
    "horovod_rank",
    "horovod_size",
    "horovod_local_rank",
    "horovod_local_size",
    "horovod_cross_rank",
    "horovod_cross_size",
    "horovod_is_initialized",
    "horovod_is_homogeneous",
    "horovod_mpi_threads_supported",
)
# The same for each process set, by its id (hvd.global_process_set.size(), a ProcessSet's rank()).
PROCESS_SET_QUERIES = ("horovod_process_set_rank", "horovod_process_set_size")


def _plain(value: Any) -> Any:
    """A ctypes argument as a dict key (c_int(3) -> 3)."""
    return getattr(value, "value", value)


class _Answering:
    """Horovod's ctypes library, with QUERIES answered by `answer(name, args)` where it returns a value."""

    def __init__(self, library: Any, answer: Callable[[str, tuple[Any, ...]], Any]) -> None:
        self._library = library
        self._answer = answer

    def __getattr__(self, name: str) -> Any:
        real = getattr(self._library, name)
        if name not in QUERIES and name not in PROCESS_SET_QUERIES:
            return real

        def query(*args: Any) -> Any:
            key = tuple(_plain(a) for a in args)
            value = self._answer(name, key)
            if value is not None:
                return value
            result = real(*args)
            # Asked again after Horovod answered: another rank may have stopped this rank's Horovod between the first
            # ask and the call (seen once in 327k hvd.rank() calls on a loaded machine), which it then answers as
            # "not initialised"; the rest's remembered answer holds from this rank's vote to rest on.
            value = self._answer(name, key)
            return result if value is None else value

        return query


def answer_queries(answer: Callable[[str, tuple[Any, ...]], Any]) -> None:
    """Have hvd.rank(), hvd.size(), the process sets' rank() and size() and the other queries answered by
    `answer(name, args)` where it returns a value (None: Horovod answers). Idempotent."""
    basics = getattr(_mpi_ops(), "_basics", None)
    if basics is None or not hasattr(basics, "MPI_LIB_CTYPES"):
        raise _missing("mpi_ops._basics.MPI_LIB_CTYPES", "answer rank and size while Horovod rests")
    if not isinstance(basics.MPI_LIB_CTYPES, _Answering):
        basics.MPI_LIB_CTYPES = _Answering(basics.MPI_LIB_CTYPES, answer)


def query_answers() -> dict[Any, Any]:
    """What Horovod answers now to the queries `answer_queries` can take over: name -> value, and (name, process set
    id) -> value for each registered process set (Horovod must be running; where another rank has stopped it already,
    the process sets are left out)."""
    import ctypes

    basics = getattr(_mpi_ops(), "_basics", None)
    library = getattr(basics, "MPI_LIB_CTYPES", None)
    ids = getattr(basics, "_get_process_set_ids_and_ranks", None)
    if library is None or ids is None:
        raise _missing("mpi_ops._basics._get_process_set_ids_and_ranks", "answer queries while Horovod rests")
    answers: dict[Any, Any] = {name: getattr(library, name)() for name in QUERIES}
    try:
        registered = ids()
    except ValueError:  # its table of process sets is gone with the stop
        return answers
    for process_set in registered:
        for name in PROCESS_SET_QUERIES:
            answers[(name, process_set)] = getattr(library, name)(ctypes.c_int(process_set))
    return answers


PARAMETER_SYNCS = ("broadcast_parameters", "broadcast_optimizer_state", "broadcast_object", "allgather_object")


def wrap_parameter_syncs(wrap: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
    """Replace Horovod's whole-model and object collectives (PARAMETER_SYNCS) by `wrap(function)` wherever a
    horovod.torch module holds one, whatever holds it now (jupyter-hvd's own guard of hvd.broadcast_object is one);
    once each."""
    from horovod.torch import functions

    missing = [attr for attr in PARAMETER_SYNCS if getattr(functions, attr, None) is None]
    if missing:
        raise _missing(f"functions.{missing[0]}", "tell a training step from a model's broadcast")
    for name, module in list(sys.modules.items()):
        if not name.startswith("horovod.torch"):
            continue
        for attr in PARAMETER_SYNCS:
            current = getattr(module, attr, None)
            if callable(current) and not getattr(current, "_jupyter_hvd_parameter_sync", False):
                wrapped = wrap(current)
                wrapped._jupyter_hvd_parameter_sync = True  # type: ignore[attr-defined]
                setattr(module, attr, wrapped)


def wrap_public(names: tuple[str, ...], wrap: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
    """Replace horovod.torch's functions `names` (join, barrier: collectives that start no op through the op
    starters) by `wrap(function)`, also where they were imported by name."""
    mpi_ops = _mpi_ops()
    for attr in names:
        current = getattr(mpi_ops, attr, None)
        if current is None:
            raise _missing(f"mpi_ops.{attr}", "start Horovod again when a cell uses it")
        wrapped = wrap(current)
        for name, module in list(sys.modules.items()):
            if name.startswith("horovod.torch") and getattr(module, attr, None) is current:
                setattr(module, attr, wrapped)


def wrap_synchronize(wrap: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
    """Replace horovod.torch's synchronize(handle) (every blocking collective waits in it) by `wrap(synchronize)`,
    also in the modules that imported it by name."""
    mpi_ops = _mpi_ops()
    current = mpi_ops.synchronize
    wrapped = wrap(current)
    for name, module in list(sys.modules.items()):
        if name.startswith("horovod.torch") and getattr(module, "synchronize", None) is current:
            setattr(module, "synchronize", wrapped)  # noqa: B010  (a module of Horovod's, found by name)


# ---- Horovod: DistributedOptimizer's inside --------------------------------------------------------------------


def optimizer_classes() -> tuple[Any, ...]:
    """The classes hvd.DistributedOptimizer builds its wrappers from (plain and Adasum)."""
    from horovod.torch import optimizer

    classes = tuple(getattr(optimizer, n, None) for n in ("_DistributedOptimizer", "_DistributedAdasumOptimizer"))
    if any(c is None for c in classes):
        raise _missing("optimizer._DistributedOptimizer", "time gradient synchronisation and accept zero_grad(...)")
    return classes


def is_distributed(optimizer: Any) -> bool:
    """True for an optimizer returned by hvd.DistributedOptimizer (plain or Adasum)."""
    return hasattr(optimizer, "_make_hook") and hasattr(optimizer, "_requires_update")


def plain_class(optimizer: Any) -> Any:
    """The user's optimizer class under Horovod's generated wrapper class(es)."""
    for cls in type(optimizer).__mro__:
        if "_make_hook" not in vars(cls):
            return cls
    return type(optimizer)


def gradients_in_flight(optimizer: Any) -> dict[Any, Any]:
    """The gradient allreduces a DistributedOptimizer started and has not synchronised yet (parameter -> handle)."""
    handles = getattr(optimizer, "_handles", None)
    if not isinstance(handles, dict):
        raise _missing("DistributedOptimizer._handles", "see gradients still being averaged")
    return handles


def updated_parameters(optimizer: Any) -> set[Any]:
    """The parameters whose gradients a DistributedOptimizer averages."""
    return set(getattr(optimizer, "_requires_update", ()))


def forget_gradients_in_flight(optimizer: Any) -> None:
    """Make a DistributedOptimizer left between backward() and step() by a failed cell ready for the next backward().

    Its allreduces were completed by the join (without the failed ranks): their handles are stale.
    """
    gradients_in_flight(optimizer).clear()
    optimizer._synchronized = False
    optimizer._should_synchronize = True
    optimizer.set_backward_passes_per_step(optimizer.backward_passes_per_step)


class _NeverDue(dict):
    """An `_allreduce_delay` table whose count never reaches zero: a hook left behind never starts an allreduce."""

    def __getitem__(self, key: Any) -> int:
        return 1 << 62

    def __setitem__(self, key: Any, value: Any) -> None:
        pass


def retire(optimizer: Any) -> int:
    """Remove the gradient hooks a DistributedOptimizer registered, so it no longer allreduces; how many it removed.

    Horovod drops the handles `register_hook` returns. All Python hooks of one autograd node share one dict, and a
    probe hook's handle reaches it: delete the entries whose closure holds this optimizer.
    """
    removed = 0
    for acc in getattr(optimizer, "_grad_accs", []):
        try:
            probe = acc.register_hook(lambda *_: None)
            hooks = probe.hooks_dict_ref()
            probe.remove()
        except (AttributeError, RuntimeError, TypeError):  # another torch: the hook stays, but can no longer fire
            continue
        if hooks is None:
            continue
        for key, fn in list(hooks.items()):
            if any(cell.cell_contents is optimizer for cell in getattr(fn, "__closure__", None) or ()):
                del hooks[key]
                removed += 1
    optimizer._grad_accs = []
    optimizer._allreduce_delay = _NeverDue()
    optimizer._requires_update = set()
    gradients_in_flight(optimizer).clear()
    return removed


# ---- ipykernel -------------------------------------------------------------------------------------------------


def flush_interval(stream: Any) -> float | None:
    """How long ipykernel's output stream waits before it sends what was written (None: not an ipykernel stream)."""
    value = getattr(stream, "flush_interval", None)
    return value if isinstance(value, float) else None


def set_flush_interval(stream: Any, seconds: float) -> None:
    """Set ipykernel's output stream's send delay (its OutStream.flush_interval)."""
    if flush_interval(stream) is not None:
        stream.flush_interval = seconds


def wrap_display_publisher(shell: Any, wrap: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
    """Replace the shell's display publisher's publish() by `wrap(publish)` (display() in a cell goes through it)."""
    publisher = getattr(shell, "display_pub", None)
    if publisher is None or not callable(getattr(publisher, "publish", None)):
        raise CompatError(
            f"this IPython ({_version('ipython')}) has no display publisher: display() in %%hvd cells cannot be routed"
        )
    publisher.publish = wrap(publisher.publish)


# ---- IPython: cells named as the notebook names them -----------------------------------------------------------


def name_cell(shell: Any, filename: str, count: int | None) -> None:
    """Have IPython's tracebacks name code compiled under `filename` `Cell In[count]`, as it names a notebook cell
    (`In[ ]`: a cell without a prompt).

    IPython keeps that name in its compiler's private `_filename_map` (CachingCompiler.cache fills it for its own
    cells, under a file name it chooses); `format_code_name`, its public reader, formats what is there.
    """
    names = getattr(getattr(shell, "compile", None), "_filename_map", None)
    if not isinstance(names, dict):
        raise CompatError(
            f"this IPython ({_version('ipython')}) has no CachingCompiler._filename_map: tracebacks of %%hvd cells "
            "name their file instead of the cell's prompt"
        )
    names[filename] = count if count is not None else " "


def cell_is_main(filename: str) -> None:
    """Have inspect.getmodule() find the module of code compiled under `filename` (a cell: `__main__`) at once.

    IPython's traceback asks it for every frame; for a file no module has, it scanned all of sys.modules each time
    (10-100 ms per traceback on ranks that imported torch). The answer goes where a first scan leaves a module's file:
    inspect's private `modulesbyfile`.
    """
    import inspect
    import os

    names = getattr(inspect, "modulesbyfile", None)
    if isinstance(names, dict):  # else tracebacks are only slower
        # As asked for with the file's name, and with an object's file (the name made absolute, as inspect does).
        names[filename] = names[os.path.normcase(os.path.abspath(filename))] = "__main__"


def context_traceback(exc: BaseException, tb: Any) -> str:
    """`exc` from `tb` down in IPython's Context form (a notebook's traceback: each frame's lines around the failing
    one), without colours: syntax colouring costs more than the rest of the traceback (12 of 21 ms)."""
    from IPython.core.ultratb import FormattedTB

    try:
        formatter = FormattedTB(mode="Context", theme_name="nocolor")
    except TypeError:  # IPython 8 names its colour schemes
        formatter = FormattedTB(mode="Context", color_scheme="NoColor")  # type: ignore[call-arg]
    return "\n".join(formatter.structured_traceback(type(exc), exc, tb))


def cell_prompt(shell: Any, filename: str) -> str | None:
    """'In[7]' for code of the notebook cell In[7] (`name_cell`), None for any other file."""
    named = shell.compile.format_code_name(filename) if shell is not None else None
    return named[1] if named else None
