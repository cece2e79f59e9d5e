"""Runs once on every engine of a new pool, before any user code: MPI, Horovod, device pinning.

Imported on the engines only (no IPython.display, no widgets).
"""

from __future__ import annotations

import os
import socket
import threading
import time
from typing import Any

from .. import wire


def start_task(task: wire.Start) -> dict[str, Any]:
    """What the kernel's wire.start does on this engine."""
    return start(task.env, task.device, task.channel, task.torch_distributed, task.torch_store)


def start(
    env: dict[str, str],
    device: str,
    channel_info: dict[str, Any],
    torch_distributed: bool = False,
    torch_store: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Initialise MPI and Horovod (and torch.distributed where asked, or where Horovod is not installed) on this
    engine, pin it to its device, fill the user namespace, and open the cell channel to the kernel.

    `env` is applied before torch and Horovod read it (Horovod tuning knobs, the user's `--env`).
    `device` is "auto" (GPU `local_rank` when CUDA is present, else CPU) or "cpu".
    `channel_info` says where the kernel's cell channel listens, and its key (kernel/channel.py).
    `torch_distributed`: a torch.distributed process group too (always where Horovod is missing), with rendezvous
    `torch_store` (jupyter_hvd/prelude.py).
    Returns this rank's row of the pool table.
    """
    began = time.time()
    os.environ.update(env)
    from ..prelude import prelude
    from . import backend
    from .cell import progress
    from .diagnose import debugger
    from .horovod import guards

    try:
        import horovod.torch  # noqa: F401

        has_horovod = True
    except ImportError:
        has_horovod = False
    # What an exported script runs too (%hvd_export).
    store: Any = torch_store
    if torch_store and torch_store.get("endpoint"):  # between hosts: the store the kernel serves this start's ranks

        def store(timeout: Any) -> Any:
            from .distributed.rendezvous import PoolStore

            return PoolStore(torch_store, timeout)

    names = prelude(device, torch_distributed or not has_horovod, store)
    torch, dev = names["torch"], names["device"]
    backend.choose(_backends(names["hvd"], names["dist"]))
    for chosen in backend.chosen():
        chosen.install(dev)
    guards.script_argv()  # argparse in a pasted script sees a script's argv, not the engine's
    debugger.install()  # breakpoint() in a cell opens pdb for the notebook
    progress.install()  # tqdm's bars feed the live view (and tqdm.auto draws text bars)
    cuda = dev.type == "cuda"
    if cuda:
        dev_name = f"cuda:{dev.index} {torch.cuda.get_device_name(dev)}"
    else:
        threads = torch.get_num_threads()
        dev_name = f"cpu ({threads} thread{'s' if threads > 1 else ''})"

    from IPython import get_ipython

    shell = get_ipython()
    shell.user_ns.update({k: v for k, v in names.items() if v is not None})
    # IPython's exit()/quit() would end the engine after the cell, while the cell reports success: raise instead.
    shell.user_ns.update(exit=_Exit("exit"), quit=_Exit("quit"))
    from . import channel

    channel.connect(channel_info, names["rank"])
    threading.Thread(target=warm_up, args=(torch, dev), name="jupyter-hvd warm-up", daemon=True).start()
    row: dict[str, Any] = {
        "rank": names["rank"],
        "size": names["size"],
        "local_rank": names["local_rank"],
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "device": dev_name,
        "tensor_ops": backend.ops(cuda),
        # A plain str: torch's own version type would make the kernel import torch to unpickle this row (2 s).
        "torch": str(torch.__version__),
        "cuda": cuda,
        **backend.row(),
    }
    backend.ready(cuda)
    # Where a start's seconds go on this rank (bench/start_phases.py): from mpiexec's launch of this rank to this call,
    # and this call itself (MPI, Horovod, torch.distributed, the namespace, the channel).
    row["timings"] = {
        "launch_to_bootstrap_s": _since_launch() - (time.time() - began),
        "bootstrap_s": time.time() - began,
    }
    return row


def _since_launch() -> float:
    """Seconds since mpiexec launched this rank: this process's start, or its stub's where the warm template forked
    it (processes/template.py puts the stub's pid in JUPYTER_HVD_WARM_ENGINE). Read against the boot clock, as the
    kernel counts a process's start ticks: psutil's create_time() adds the boot time in whole seconds."""
    pid = os.environ.get("JUPYTER_HVD_WARM_ENGINE") or "self"
    try:
        with open(f"/proc/{pid}/stat") as f:
            ticks = int(f.read().rpartition(")")[2].split()[19])
    except (OSError, ValueError, IndexError):
        return float("nan")
    return time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")


def _backends(hvd: Any, dist: Any) -> list[Any]:
    """The pool's backends from what prelude() started: Horovod first, where present."""
    chosen: list[Any] = []
    if hvd is not None:
        from .horovod.backend import Horovod

        chosen.append(Horovod(hvd))
    if dist is not None:
        from .distributed.backend import TorchDistributed

        chosen.append(TorchDistributed(dist))
    return chosen


def warm_up(torch: Any, device: Any) -> None:
    """A first forward, backward and optimizer step on this rank's device, in a thread while the notebook goes on:
    oneDNN, cuBLAS and cuDNN start at their first use (0.1-1 s), which would otherwise be the first training cell's;
    and a first traceback formatted (runner.warm_up).

    It draws no random number: it may still run when the first cell seeds torch, and a draw here would change that
    cell's numbers (a notebook and its exported script would no longer agree)."""
    try:
        nn, skip = torch.nn, torch.nn.utils.skip_init
        model = nn.Sequential(
            skip(nn.Conv2d, 1, 2, 3, device=device), nn.ReLU(), nn.Flatten(), skip(nn.Linear, 8, 2, device=device)
        )
        for p in model.parameters():
            p.detach().fill_(0.1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        model(torch.ones(2, 1, 4, 4, device=device)).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
    except Exception:
        pass  # the cell that trains says what is wrong
    from .cell import runner

    runner.warm_up()


class _Exit:
    """exit() and quit() on a rank: end the cell there, like sys.exit(), and keep the engine."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __repr__(self) -> str:
        return f"Use {self._name}() or sys.exit() to end this cell on this rank."

    def __call__(self, code: Any = None) -> None:
        raise SystemExit(code)
