"""Runs once on every engine of a new pool, before any user code: MPI, Horovod, device pinning.

Imported on the engines only (no IPython.display, no widgets).
"""

from __future__ import annotations

import os
import socket
import threading
from typing import Any


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
    os.environ.update(env)
    from .. import compat
    from ..prelude import prelude
    from . import collectives
    from .cell import pace, progress
    from .diagnose import debugger
    from .distributed import hooks
    from .horovod import guards, rest

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
    hvd, torch, dev, dist = names["hvd"], names["torch"], names["device"], names["dist"]
    if hvd is not None:
        _first_collectives(hvd, torch, dev)
        guards.install()  # hvd.init() pasted into a cell, or a cell that wraps an optimizer run twice, is harmless
        collectives.install()  # which collective a rank waits in, for the kernel's mismatch check
        pace.install()  # compute and wait per training step, for the kernel's straggler check (after collectives)
        rest.wake_on_first_use()  # a resting Horovod starts again when a cell uses it (outermost: before the rest)
        rest.prepare()
    if dist is not None:
        hooks.install()  # the same for torch.distributed's collectives and DDP
    guards.script_argv()  # argparse in a pasted script sees a script's argv, not the engine's
    debugger.install()  # breakpoint() in a cell opens pdb for the notebook
    progress.install()  # tqdm's bars feed the live view (and tqdm.auto draws text bars)
    if dev.type == "cuda":
        dev_name = f"cuda:{dev.index} {torch.cuda.get_device_name(dev)}"
        tensor_ops = "NCCL" if hvd is not None and hvd.nccl_built() else "MPI"
    else:
        threads = torch.get_num_threads()
        dev_name = f"cpu ({threads} thread{'s' if threads > 1 else ''})"
        tensor_ops = "Gloo" if os.environ.get("HOROVOD_CPU_OPERATIONS", "").lower() == "gloo" else "MPI"
    ops = [tensor_ops] if hvd is not None else []
    if dist is not None:
        ops.append(f"torch/{hooks.backend()}")

    from IPython import get_ipython

    shell = get_ipython()
    shell.user_ns.update({k: v for k, v in names.items() if v is not None})
    # IPython's exit()/quit() would end the engine after the cell, while the cell reports success: raise instead.
    shell.user_ns.update(exit=_Exit("exit"), quit=_Exit("quit"))
    from . import channel

    channel.connect(channel_info, names["rank"])
    threading.Thread(target=_warm_up, args=(torch, dev), name="jupyter-hvd warm-up", daemon=True).start()
    row: dict[str, Any] = {
        "rank": names["rank"],
        "size": names["size"],
        "local_rank": names["local_rank"],
        "cross_rank": hvd.cross_rank() if hvd is not None else 0,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "device": dev_name,
        "controller": ("MPI" if hvd.mpi_enabled() else "Gloo") if hvd is not None else "torch",
        "tensor_ops": " + ".join(ops),
        # A plain str: torch's own version type would make the kernel import torch to unpickle this row (2 s).
        "torch": str(torch.__version__),
        "cuda": bool(dev.type == "cuda"),
        "horovod": hvd is not None,
        "warning": compat.check_horovod() if hvd is not None else "",
    }
    if hvd is not None:
        # Last: Horovod rests where no rank uses it (also during a cell), and a slow start must not rest it before
        # the row above is read from it.
        rest.watch(rest.rest_after(dev.type == "cuda"))
    return row


def _first_collectives(hvd: Any, torch: Any, device: Any) -> None:
    """Horovod's first allreduces (its first negotiation, the fusion buffer, MPI's or NCCL's first connection), now,
    on every rank at once, instead of in the first training cell."""
    for n in (1, 1 << 18):  # one element, and 1 MB through the fusion buffer
        hvd.allreduce(torch.zeros(n, device=device), name=f"jupyter_hvd.warm-up.{n}")


def _warm_up(torch: Any, device: Any) -> None:
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
