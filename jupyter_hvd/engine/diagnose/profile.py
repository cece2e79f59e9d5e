"""`%%hvd --profile`, on the engines: torch.profiler records the cell on every rank; each rank writes its trace and
sums up where its time went.

Compute is the cell's time outside collectives; waiting is the time the cell's thread was blocked in a collective
(engine/collectives.py times Horovod's, torch.distributed's and DDP's, which the kernel also uses to name
mismatches); communication is the time the profiler saw collective operations run, on any thread (DDP's and
Horovod's run beside the computation). Imported on the engines only.
"""

from __future__ import annotations

import os
import socket
import time
from typing import Any

from .. import collectives

_COMMUNICATION = (
    "gloo:",
    "nccl:",
    "c10d::",
    "allreduce",
    "all_reduce",
    "broadcast",
    "all_gather",
    "allgather",
    "reduce_scatter",
    "reducescatter",
    "barrier",
    "alltoall",
    "all_to_all",
    "horovod",
)
TOP_OPS = 5

_profiler: Any = None
_started = 0.0
_waited = 0.0


def start() -> None:
    """Start recording this rank (CPU, and CUDA where the rank has a GPU)."""
    global _profiler, _started, _waited
    import torch
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        activities.append(ProfilerActivity.CUDA)
    _profiler = profile(activities=activities)
    _profiler.__enter__()
    _waited = collectives.waited_total()
    _started = time.perf_counter()


def stop(folder: str) -> dict[str, Any]:
    """Stop recording; write this rank's Chrome trace into `folder`; where this rank's time went."""
    global _profiler
    prof, _profiler = _profiler, None
    if prof is None:
        return {"error": "the profiler was not running on this rank"}
    wall = time.perf_counter() - _started
    waited = collectives.waited_total() - _waited
    prof.__exit__(None, None, None)
    from .. import outbox

    rank = outbox.rank()
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"rank{rank}.json")
    prof.export_chrome_trace(path)
    communication = 0.0
    for event in prof.events():  # outermost collective operations only: their children are the same time
        parent = event.cpu_parent
        if _collective(event.name) and not (parent is not None and _collective(parent.name)):
            communication += event.cpu_time_total / 1e6
    ops = sorted(((e.self_cpu_time_total / 1e6, e.key) for e in prof.key_averages()), reverse=True)
    return {
        "rank": rank,
        "host": socket.gethostname(),
        "path": path,
        "wall": wall,
        "waiting": min(waited, wall),
        "compute": max(0.0, wall - waited),
        "communication": communication,
        "top": [(name, seconds) for seconds, name in ops[:TOP_OPS]],
    }


def _collective(name: str) -> bool:
    name = name.lower()
    return any(word in name for word in _COMMUNICATION)
