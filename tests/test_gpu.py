"""GPU pools: each rank pinned to GPU local_rank, NCCL allreduce on CUDA tensors (skipped without a GPU)."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (none on this machine)")


def test_ranks_are_pinned_to_their_gpu_and_use_nccl(ip):
    from jupyter_hvd.kernel import pool as pools

    n = min(2, torch.cuda.device_count())
    ip.run_line_magic("hvd_start", f"-np {n}")
    try:
        p = pools.current()
        assert all(r.device.startswith(f"cuda:{r.local_rank}") for r in p.ranks)
        assert {r.tensor_ops for r in p.ranks} == {"NCCL"}
        ip.run_cell_magic(
            "hvd", "", "x = hvd.allreduce(torch.ones(4, device=device) * (rank + 1), op=hvd.Sum)\nres = x.cpu()"
        )
        res = p.client[p.ranks[0].engine_id].pull("res", block=True)
        assert torch.equal(res, torch.full((4,), float(sum(range(1, n + 1)))))
    finally:
        ip.run_line_magic("hvd_stop", "")
