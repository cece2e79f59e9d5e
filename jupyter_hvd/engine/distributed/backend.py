"""torch.distributed as a pool's backend (engine/backend.py): its collectives and DDP's timed (hooks.py). It has no
rest and no join: ranks waiting in the check before a collective, or for DDP's bucket allreduces, are released by
their peers' decline (hooks.py); ranks stuck in a collective itself are restarted by the kernel.

Imported on the engines only.
"""

from __future__ import annotations

from typing import Any

from . import hooks


class TorchDistributed:
    name = "torch.distributed"

    def __init__(self, dist: Any) -> None:
        self._dist = dist

    def install(self, device: Any) -> None:
        hooks.install()  # which collective a rank waits in, and DDP's gradient allreduce timed

    def ops(self, cuda: bool) -> str:
        return f"torch/{hooks.backend()}"

    def row(self) -> dict[str, Any]:
        return {"controller": "torch", "cross_rank": 0, "horovod": False, "warning": ""}

    def ready(self, cuda: bool) -> None:
        pass

    def begin_cell(self) -> float:
        return 0.0

    def rest(self) -> dict[str, Any]:
        return {"resting": False, "busy": "", "seconds": 0.0}  # its threads cost nothing while idle

    def leave_collectives(self) -> dict[str, Any]:
        # Nothing to release; how many collectives this rank entered tells the kernel whether one was left behind.
        return {"ok": True, "last_joined": -1, "in_flight": 0, "entered": hooks.entered(), "seconds": 0.0}

    def decline(self, agreeing_at: int | None, owed: tuple[tuple[int, int, str], ...]) -> dict[str, Any]:
        hooks.decline(agreeing_at, owed)
        return {"ok": True, "in_flight": 0, "entered": hooks.entered(), "seconds": 0.0}

    def average(self, local: Any, name: str) -> Any:
        self._dist.all_reduce(local)
        return local / self._dist.get_world_size()
