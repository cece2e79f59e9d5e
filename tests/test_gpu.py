"""GPU pools: each rank pinned to GPU local_rank, NCCL allreduce on CUDA tensors (skipped without a GPU)."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (none on this machine)")


def test_ranks_are_pinned_to_their_gpu_and_use_nccl(ip):
    from jupyter_hvd.kernel import owner as pools

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


SETUP = """torch.manual_seed(0)
model = torch.nn.Linear(32, 4).to(device)
opt = hvd.DistributedOptimizer(torch.optim.Adam(model.parameters()), named_parameters=model.named_parameters())"""
TRAIN = """for _ in range(3):
    opt.zero_grad(); model(torch.ones(8, 32, device=device)).sum().backward(); opt.step()
before = model.weight.detach().cpu().clone()"""
CHECK = """after = model.weight.detach().cpu().clone()
on = str(model.weight.device)
steps = [float(s["step"]) for s in opt.state.values()]"""


def test_a_kept_cuda_model_and_its_optimizer_come_back_after_a_restart(ip):
    """Snapshots copy GPU tensors to the CPU; the restore loads them back into the rebuilt model on its GPU."""
    from jupyter_hvd.kernel import owner as pools

    ip.run_line_magic("hvd_start", "-np 1")
    try:
        ip.run_cell_magic("hvd", "--setup", SETUP)
        ip.run_line_magic("hvd_keep", "model opt")
        ip.run_cell_magic("hvd", "", TRAIN)
        p = pools.current()
        before = p.client[p.ranks[0].engine_id].pull("before", block=True)
        ip.run_line_magic("hvd_restart", "")
        p = pools.current()
        ip.run_cell_magic("hvd", "", CHECK)
        engine = p.client[p.ranks[0].engine_id]
        assert torch.equal(engine.pull("after", block=True), before)
        assert engine.pull("on", block=True).startswith("cuda")
        assert engine.pull("steps", block=True) == [3.0, 3.0]
    finally:
        ip.run_line_magic("hvd_stop", "")


def test_a_kept_cuda_value_comes_back_on_each_ranks_own_gpu(ip):
    """A value kept by value (a dict holding a CUDA tensor) is restored on the restoring rank's device, not cuda:0."""
    from jupyter_hvd.kernel import owner as pools

    n = min(2, torch.cuda.device_count())
    ip.run_line_magic("hvd_start", f"-np {n}")
    try:
        ip.run_cell_magic("hvd", "--setup", "ema = {'w': torch.full((1000, 100), float(rank), device=device), 'n': 0}")
        ip.run_line_magic("hvd_keep", "ema")
        ip.run_cell_magic("hvd", "", "ema['w'] += 1\nema['n'] += 1")
        ip.run_line_magic("hvd_restart", "")
        p = pools.current()
        ip.run_cell_magic("hvd", "", "where = (str(ema['w'].device), str(device), ema['w'].mean().item(), ema['n'])")
        for r in p.ranks:
            where = p.client[r.engine_id].pull("where", block=True)
            assert where[0] == where[1], f"rank {r.rank}'s value came back on {where[0]}, its device is {where[1]}"
            assert where[2:] == (r.rank + 1.0, 1)
    finally:
        ip.run_line_magic("hvd_stop", "")


def test_ddp_and_fsdp2_train_on_the_gpus_with_nccl(ip):
    """A --torch-distributed pool on GPU ranks: NCCL, DDP then FSDP2 train and their losses fall."""
    from jupyter_hvd.kernel import owner as pools

    n = min(2, torch.cuda.device_count())
    ip.run_line_magic("hvd_start", f"-np {n} --torch-distributed")
    try:
        p = pools.current()
        assert all("torch/NCCL" in r.tensor_ops for r in p.ranks), [r.tensor_ops for r in p.ranks]
        ip.run_cell_magic(
            "hvd",
            "",
            "from torch.nn.parallel import DistributedDataParallel as DDP\n"
            "from torch.distributed.fsdp import fully_shard\n"
            "torch.manual_seed(0)\nX = torch.randn(256, 32, device=device)\nY = X.sum(1, keepdim=True)\n"
            "def train(model):\n    opt = torch.optim.Adam(model.parameters(), lr=0.01)\n    out = []\n"
            "    for _ in range(30):\n        opt.zero_grad()\n"
            "        loss = torch.nn.functional.mse_loss(model(X), Y)\n        loss.backward()\n        opt.step()\n"
            "        out.append(loss.item())\n    return out\n"
            "ddp = train(DDP(torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))"
            ".to(device)))\n"
            "net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)).to(device)\n"
            "fully_shard(net)\nfsdp = train(net)\nbackend = str(dist.get_backend())",
        )
        engine = p.client[p.ranks[0].engine_id]
        assert engine.pull("backend", block=True) == "nccl"
        for name in ("ddp", "fsdp"):
            losses = engine.pull(name, block=True)
            assert losses[-1] < losses[0] / 2, (name, losses)
    finally:
        ip.run_line_magic("hvd_stop", "")


FSDP_SETUP = """from torch.distributed.fsdp import fully_shard
torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4)).to(device)
fully_shard(net)
fopt = torch.optim.Adam(net.parameters(), lr=0.01)"""
FSDP_TRAIN = """for _ in range(3):
    fopt.zero_grad(); net(torch.ones(8, 32, device=device)).sum().backward(); fopt.step()
shard = net[0].weight.to_local().detach().cpu().clone()
moment = fopt.state[net[0].weight]["exp_avg"].to_local().detach().cpu().clone()
on = str(net[0].weight.to_local().device)"""


def test_kept_fsdp2_shards_on_the_gpu_come_back_after_a_restart(ip):
    """torch.distributed.checkpoint loads each rank's CUDA shards and Adam moments into the rebuilt FSDP2 model."""
    from jupyter_hvd.kernel import owner as pools

    n = min(2, torch.cuda.device_count())
    ip.run_line_magic("hvd_start", f"-np {n} --torch-distributed")
    try:
        ip.run_cell_magic("hvd", "--setup", FSDP_SETUP)
        ip.run_line_magic("hvd_keep", "net fopt")
        ip.run_cell_magic("hvd", "", FSDP_TRAIN)
        p = pools.current()
        before = [p.client[r.engine_id].pull(["shard", "moment"], block=True) for r in p.ranks]
        ip.run_line_magic("hvd_restart", "")
        p = pools.current()
        ip.run_cell_magic(
            "hvd",
            "",
            "shard = net[0].weight.to_local().detach().cpu().clone()\n"
            "moment = fopt.state[net[0].weight]['exp_avg'].to_local().detach().cpu().clone()\n"
            "on = str(net[0].weight.to_local().device)",
        )
        for r, (shard, moment) in zip(p.ranks, before, strict=True):
            engine = p.client[r.engine_id]
            assert torch.equal(engine.pull("shard", block=True), shard), f"rank {r.rank}'s shard differs"
            assert torch.equal(engine.pull("moment", block=True), moment), f"rank {r.rank}'s Adam moment differs"
            assert engine.pull("on", block=True).startswith("cuda")
    finally:
        ip.run_line_magic("hvd_stop", "")
