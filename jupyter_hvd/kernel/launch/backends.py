"""Which collective libraries a pool's ranks run, decided once when the ranks report in, and what that means for the
kernel: the words of the start, whether the pool can rest and join after a failed cell, which launchers an exported
script offers. The engines' counterpart is jupyter_hvd/engine/backend.py.

Runs in the user's kernel.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Backends:
    horovod: bool = True  # the ranks have Horovod (else torch.distributed only: Horovod is not installed)
    torch_distributed: bool = False  # the ranks have a torch.distributed process group
    torch_backend: str = ""  # the process group's backend as the pool table shows it ("Gloo", "NCCL")

    @classmethod
    def of(cls, rows: Sequence[dict[str, Any]], asked_torch_distributed: bool) -> Backends:
        """From the ranks' rows (engine/bootstrap.py): Horovod only where every rank has it."""
        horovod = all(r.get("horovod", True) for r in rows)
        ops = str(rows[0].get("tensor_ops", "")) if rows else ""
        torch_backend = ops.rpartition("torch/")[2] if "torch/" in ops else ""
        return cls(horovod, asked_torch_distributed or not horovod, torch_backend)

    def initialised(self) -> str:
        """'Horovod initialised', 'Horovod and torch.distributed (Gloo) initialised', or torch.distributed alone."""
        if not self.horovod:
            return (
                f"torch.distributed ({self.torch_backend}) initialised. Horovod is not installed here, so `hvd` is "
                "not defined: cells use `dist` (torch.distributed)"
            )
        if self.torch_distributed:
            return f"Horovod and torch.distributed ({self.torch_backend}) initialised"
        return "Horovod initialised"

    def can_rest(self) -> bool:
        """Only Horovod's threads cost while idle (its background loop polls); torch.distributed's wait quietly."""
        return self.horovod

    def may_strand(self) -> bool:
        """Whether a rank can be stuck in a collective no join releases: torch.distributed has none (Horovod's join
        releases its own); its ranks waiting in the check before one are released by a Decline, those stuck inside
        one are restarted."""
        return self.torch_distributed

    def timeline_missing(self) -> str:
        """Why `--timeline` cannot record here ('' where it can)."""
        return (
            ""
            if self.horovod
            else "--timeline records Horovod's timeline, and this pool has no Horovod: use --profile."
        )
