"""Horovod's toolbox in `%%hvd` cells on 2 real ranks: each habit from scripts works cell after cell, with its effect
checked (values that crossed the wire, steps taken, state on every rank), not just that it runs."""

from __future__ import annotations

import pytest
import torch


def pull(pool, name: str, rank: int):
    return pool.client[pool.ranks[rank].engine_id].pull(name, block=True)


def both(pool, name: str) -> tuple:
    return pull(pool, name, 0), pull(pool, name, 1)


def hvd(ip, cell: str, line: str = "") -> None:
    ip.run_cell_magic("hvd", line, cell)


# Each rank's gradient is g_r = scale * [1, 0.1 * (rank + 1), 3]: 0.1 and 0.2 are not exact in fp16.
GRAD_CELL = """
def averaged_grad(scale, **wrap):
    w = torch.nn.Parameter(torch.zeros(3))
    opt = hvd.DistributedOptimizer(torch.optim.SGD([w], lr=1.0), named_parameters=[("w", w)], **wrap)
    (w * torch.tensor([scale, 0.1 * (rank + 1), 3.0])).sum().backward()
    opt.synchronize()
    return w.grad.clone()
"""


def test_fp16_compression_sends_fp16_and_training_converges(ip, pool):
    hvd(ip, GRAD_CELL)
    hvd(
        ip,
        """
plain = averaged_grad(1.0)
fp16 = averaged_grad(1.0, compression=hvd.Compression.fp16)

torch.manual_seed(0)
true_w = torch.randn(8, 1)
g = torch.Generator().manual_seed(rank)
model = torch.nn.Linear(8, 1)
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                               named_parameters=model.named_parameters(), compression=hvd.Compression.fp16)
losses = []
for step in range(60):
    x = torch.randn(32, 8, generator=g)
    loss = torch.nn.functional.mse_loss(model(x), x @ true_w)
    opt.zero_grad(); loss.backward(); opt.step()
    losses.append(hvd.allreduce(loss.detach(), name="loss").item())
""",
    )
    exact = (torch.tensor([1.0, 0.1, 3.0]) + torch.tensor([1.0, 0.2, 3.0])) / 2
    # What fp16 on the wire gives: each rank's gradient rounded to fp16, summed, averaged, back to fp32.
    fp16_trip = ((torch.tensor([1.0, 0.1, 3.0]).half() + torch.tensor([1.0, 0.2, 3.0]).half()) / 2).float()
    for rank in (0, 1):
        plain, fp16 = pull(pool, "plain", rank), pull(pool, "fp16", rank)
        assert torch.allclose(plain, exact)
        assert torch.equal(fp16, fp16_trip)
        assert not torch.equal(fp16, plain)  # 0.15 is not an fp16 number: the compressed sum differs
        assert plain.dtype == fp16.dtype == torch.float32  # decompressed back for the optimizer
    losses = pull(pool, "losses", 0)
    assert losses[-1] < 0.02 * losses[0], losses


def test_gradient_predivide_factor_avoids_fp16_overflow(ip, pool):
    hvd(ip, GRAD_CELL)
    # 40000 + 40000 overflows fp16 (max 65504); dividing by 2 before the sum keeps it finite.
    hvd(
        ip,
        """
overflow = averaged_grad(40000.0, compression=hvd.Compression.fp16)
predivided = averaged_grad(40000.0, compression=hvd.Compression.fp16, gradient_predivide_factor=float(size))
""",
    )
    overflow, predivided = pull(pool, "overflow", 1), pull(pool, "predivided", 1)
    assert torch.isinf(overflow[0])
    assert predivided[0] == 40000.0 and torch.isfinite(predivided).all()
    assert torch.allclose(predivided[1:], torch.tensor([0.15, 3.0]), rtol=1e-3)


def test_adasum_combines_orthogonal_gradients_by_adding_them(ip, pool):
    # Adasum keeps orthogonal directions whole (sum) where Average halves them.
    hvd(
        ip,
        """
e = torch.zeros(4); e[rank] = 1.0
adasum = hvd.allreduce(e, op=hvd.Adasum, name="adasum")
average = hvd.allreduce(e, op=hvd.Average, name="average")
same = hvd.allreduce(torch.tensor([2.0, 2.0]), op=hvd.Adasum, name="same")
w = torch.nn.Parameter(torch.zeros(4))
opt = hvd.DistributedOptimizer(torch.optim.SGD([w], lr=1.0), named_parameters=[("w", w)], op=hvd.Adasum)
(w * e).sum().backward()
opt.step()
stepped = w.detach().clone()
""",
    )
    for rank in (0, 1):
        assert torch.equal(pull(pool, "adasum", rank), torch.tensor([1.0, 1.0, 0.0, 0.0]))
        assert torch.equal(pull(pool, "average", rank), torch.tensor([0.5, 0.5, 0.0, 0.0]))
        assert torch.equal(pull(pool, "same", rank), torch.tensor([2.0, 2.0]))  # parallel: neither summed nor halved
        assert torch.equal(pull(pool, "stepped", rank), torch.tensor([-1.0, -1.0, 0.0, 0.0]))


def test_backward_passes_per_step_equals_one_step_on_the_bigger_batch(ip, pool):
    hvd(
        ip,
        """
import horovod.torch.optimizer as hvd_optimizer
k = 3
torch.manual_seed(0)
model = torch.nn.Linear(5, 2)
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
sent = []
real_allreduce = hvd_optimizer.allreduce_async_
def counting_allreduce(tensor, name=None, **kw):
    sent.append(name)
    return real_allreduce(tensor, name=name, **kw)
hvd_optimizer.allreduce_async_ = counting_allreduce
try:
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(), backward_passes_per_step=k)
    g = torch.Generator().manual_seed(10 + rank)
    xs, ys = torch.randn(4 * k, 5, generator=g), torch.randn(4 * k, 2, generator=g)
    opt.zero_grad()
    sent_per_pass = []
    for i in range(k):
        x, y = xs[4 * i : 4 * i + 4], ys[4 * i : 4 * i + 4]
        (torch.nn.functional.mse_loss(model(x), y) / k).backward()  # each micro-batch is 1/k of the batch
        sent_per_pass.append(len(sent))
    opt.step()
finally:
    hvd_optimizer.allreduce_async_ = real_allreduce
after = [p.detach().clone() for p in model.parameters()]
""",
    )
    # One allreduce per parameter, after the k-th backward pass only.
    assert pull(pool, "sent_per_pass", 0) == [0, 0, 2]
    # The same step in one process on both ranks' k micro-batches at once.
    torch.manual_seed(0)
    model = torch.nn.Linear(5, 2)
    xs, ys = [], []
    for rank in (0, 1):
        g = torch.Generator().manual_seed(10 + rank)
        xs.append(torch.randn(12, 5, generator=g))
        ys.append(torch.randn(12, 2, generator=g))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    torch.nn.functional.mse_loss(model(torch.cat(xs)), torch.cat(ys)).backward()
    opt.step()
    for rank in (0, 1):
        for got, want in zip(pull(pool, "after", rank), model.parameters(), strict=True):
            assert torch.allclose(got, want.detach(), atol=1e-6)


def test_learning_rate_warmup_scaled_by_size(ip, pool):
    # The schedule of Goyal et al.: start at base_lr, reach base_lr * hvd.size() after `warmup` steps, then hold.
    hvd(
        ip,
        """
base_lr, warmup = 0.01, 4
w = torch.nn.Parameter(torch.zeros(2))
opt = hvd.DistributedOptimizer(torch.optim.SGD([w], lr=base_lr * hvd.size()), named_parameters=[("w", w)])
scale = lambda step: (1 + step * (hvd.size() - 1) / warmup) / hvd.size() if step < warmup else 1.0
sched = torch.optim.lr_scheduler.LambdaLR(opt, scale)
lrs, ws = [], []
for step in range(6):
    lrs.append(opt.param_groups[0]["lr"])
    opt.zero_grad()
    (w.sum() * (rank + 1)).backward()  # gradients 1 and 2: averaged, 1.5
    opt.step(); sched.step()
    ws.append(w[0].item())
""",
    )
    lrs = pull(pool, "lrs", 0)
    assert lrs == pytest.approx([0.01, 0.0125, 0.015, 0.0175, 0.02, 0.02])
    assert pull(pool, "lrs", 1) == lrs
    # Each step moved w by lr * the averaged gradient.
    expected, w = [], 0.0
    for lr in lrs:
        w -= lr * 1.5
        expected.append(w)
    assert pull(pool, "ws", 1) == pytest.approx(expected)


def test_metric_averaging_allgather_and_broadcast_object(ip, pool):
    hvd(
        ip,
        """
local_loss = torch.tensor(1.0 + rank)            # 1 on rank 0, 2 on rank 1
by_name = hvd.allreduce(local_loss, name="val_loss").item()
by_op = hvd.allreduce(local_loss, op=hvd.Average, name="val_loss2").item()
total = hvd.allreduce(local_loss, op=hvd.Sum, name="val_loss_sum").item()
preds = torch.full((rank + 1, 2), float(rank))  # uneven first dimension: 1 row, then 2
gathered = hvd.allgather(preds, name="preds")
config = {"lr": 0.1, "seed": 1234, "layers": [64, 10]} if rank == 0 else None
config = hvd.broadcast_object(config, root_rank=0)  # plain Horovod names this op "dict" on 0, "NoneType" on 1
""",
    )
    for rank in (0, 1):
        assert pull(pool, "by_name", rank) == pull(pool, "by_op", rank) == 1.5
        assert pull(pool, "total", rank) == 3.0
        assert torch.equal(pull(pool, "gathered", rank), torch.tensor([[0.0, 0.0], [1.0, 1.0], [1.0, 1.0]]))
        assert pull(pool, "config", rank) == {"lr": 0.1, "seed": 1234, "layers": [64, 10]}


def test_join_lets_a_rank_with_an_extra_batch_finish(ip, pool):
    # Rank 0 has 3 batches, rank 1 has 2: without join, rank 0's last allreduce would wait forever.
    hvd(
        ip,
        """
torch.manual_seed(0)
model = torch.nn.Linear(3, 1)
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), named_parameters=model.named_parameters())
batches = 3 if rank == 0 else 2
for b in range(batches):
    opt.zero_grad()
    model(torch.ones(4, 3)).sum().backward()
    opt.step()
last_joined = hvd.join()
steps_done = batches
""",
    )
    assert both(pool, "steps_done") == (3, 2)
    assert both(pool, "last_joined") == (0, 0)  # rank 0, with the extra batch, joined last
    # The pool is in step again: the next collective works on both ranks.
    hvd(ip, "after_join = hvd.allreduce(torch.tensor([1.0 + rank]), name='after_join').item()")
    assert both(pool, "after_join") == (1.5, 1.5)


def test_bf16_autocast_with_synchronize_then_skip_synchronize(ip, pool, capsys):
    hvd(
        ip,
        """
import copy, warnings
torch.manual_seed(0)
model = torch.nn.Linear(16, 4)
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.5), named_parameters=model.named_parameters())
g = torch.Generator().manual_seed(rank)
x, y = torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g)

# This rank's own gradient, for comparison.
local = copy.deepcopy(model)
with torch.autocast("cpu", dtype=torch.bfloat16):
    torch.nn.functional.mse_loss(local(x).float(), y).backward()
local_grad = local.weight.grad.clone()

opt.zero_grad()
with torch.autocast("cpu", dtype=torch.bfloat16):
    out = model(x)
    loss = torch.nn.functional.mse_loss(out.float(), y)
loss.backward()
opt.synchronize()                       # gradients are averaged now
averaged = model.weight.grad.clone()
torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1e-3)  # what synchronize() first is for
clipped = model.weight.grad.clone()
before = model.weight.detach().clone()
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    with opt.skip_synchronize():
        opt.step()
warned = [str(w.message) for w in caught]
out_dtype, grad_dtype = str(out.dtype), str(model.weight.grad.dtype)
step_taken = model.weight.detach() - before
""",
    )
    assert both(pool, "out_dtype") == ("torch.bfloat16", "torch.bfloat16")
    assert both(pool, "grad_dtype") == ("torch.float32", "torch.float32")
    expected = (pull(pool, "local_grad", 0) + pull(pool, "local_grad", 1)) / 2
    for rank in (0, 1):
        assert torch.allclose(pull(pool, "averaged", rank), expected, atol=1e-6)
        clipped = pull(pool, "clipped", rank)
        # step() used the clipped gradient and did not synchronize again (which would have overwritten it).
        assert torch.allclose(pull(pool, "step_taken", rank), -0.5 * clipped, atol=1e-7)
        assert pull(pool, "warned", rank) == []
    assert not torch.allclose(pull(pool, "local_grad", 0), pull(pool, "local_grad", 1))


def test_hvd_init_again_in_a_cell_is_harmless(ip, pool, capsys):
    hvd(
        ip,
        """
import horovod.torch as hvd   # a pasted script starts like this
hvd.init()
pending = hvd.allreduce_async(torch.tensor([1.0 + rank]), name="pending")
hvd.init()                    # in the middle of an op in flight
in_flight = hvd.synchronize(pending)

torch.manual_seed(0)
model = torch.nn.Linear(2, 1, bias=False)
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=1.0), named_parameters=model.named_parameters())
opt.zero_grad()
model(torch.ones(1, 2) * (rank + 1)).sum().backward()   # gradients [1, 1] and [2, 2]
hvd.init()                    # between backward and step: gradients are being averaged
opt.step()
grad = model.weight.grad.clone()
""",
    )
    for rank in (0, 1):
        assert torch.equal(pull(pool, "in_flight", rank), torch.tensor([1.5]))
        assert torch.equal(pull(pool, "grad", rank), torch.tensor([[1.5, 1.5]]))
    hvd(ip, "hvd.init(comm=[0, 1])")  # what the pool has already: nothing to start again
    err = capsys.readouterr().err
    assert "asks for what Horovod already has on this pool" in err and "started again" not in err, err


def test_zero_grad_set_to_none(ip, pool):
    hvd(
        ip,
        """
torch.manual_seed(0)
model = torch.nn.Linear(3, 1)
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), named_parameters=model.named_parameters())
model(torch.ones(2, 3)).sum().backward(); opt.step()
opt.zero_grad(set_to_none=True)
none_after = [p.grad is None for p in model.parameters()]
model(torch.ones(2, 3) * (rank + 1)).sum().backward(); opt.step()
grad_after = model.weight.grad.clone()
opt.zero_grad(set_to_none=False)
zeros_after = [bool((p.grad == 0).all()) for p in model.parameters()]
""",
    )
    assert both(pool, "none_after") == ([True, True], [True, True])
    assert torch.equal(pull(pool, "grad_after", 1), torch.tensor([[3.0, 3.0, 3.0]]))  # (2*1 + 2*2) / 2
    assert both(pool, "zeros_after") == ([True, True], [True, True])
    # Between backward and step the gradients are still being averaged: refused, saying why and what to write.
    hvd(
        ip,
        """
model(torch.ones(2, 3)).sum().backward()
try:
    opt.zero_grad(set_to_none=True)
    refusal = None
except AssertionError as exc:
    refusal = str(exc)
opt.step()  # the averaged gradients are applied; nothing is left in flight
""",
    )
    refusal = pull(pool, "refusal", 1)
    assert "before optimizer.step()" in refusal and "Call optimizer.step() first" in refusal


HOOKS_OF = """
def python_hooks(params):
    # Hooks on each parameter's gradient accumulator (where Horovod registers its allreduce hook).
    counts = []
    for p in params:
        acc = p.expand_as(p).grad_fn.next_functions[0][0]
        probe = acc.register_hook(lambda *_: None)
        counts.append(len(probe.hooks_dict_ref()) - 1)
        probe.remove()
    return counts
"""


def test_rerunning_a_cell_that_wraps_the_optimizer_reduces_gradients_once(ip, pool, capsys):
    hvd(
        ip,
        HOOKS_OF
        + "torch.manual_seed(0)\nmodel = torch.nn.Linear(4, 1)\nhvd.broadcast_parameters(model.state_dict(), 0)",
    )
    wrap = (
        "optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=1.0), "
        "named_parameters=model.named_parameters())"
    )
    for _ in range(3):
        hvd(ip, wrap)
    warning = capsys.readouterr().err
    assert warning.count("earlier hvd.DistributedOptimizer still hooked these parameters") == 2  # once per re-run
    assert "create the plain optimizer and wrap it in the same line" in warning
    hvd(
        ip,
        """
before = model.weight.detach().clone()
for step in range(2):
    optimizer.zero_grad()
    model(torch.ones(1, 4) * (rank + 1)).sum().backward()   # gradients 1 and 2 per weight: averaged 1.5
    optimizer.step()
moved = model.weight.detach() - before
hooks = python_hooks(model.parameters())
""",
    )
    for rank in (0, 1):
        assert torch.equal(pull(pool, "moved", rank), torch.full((1, 4), -3.0))  # 2 steps of 1.5: reduced once
        assert pull(pool, "hooks", rank) == [1, 1]  # the earlier optimizers' hooks are gone


def test_rerunning_a_cell_that_wraps_an_already_wrapped_optimizer(ip, pool, capsys):
    hvd(
        ip,
        HOOKS_OF
        + """
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
hvd.broadcast_parameters(model.state_dict(), 0)
optimizer = torch.optim.SGD(model.parameters(), lr=1.0, momentum=0.9)
""",
    )
    wrap = "optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())"
    hvd(ip, wrap + "\noptimizer.zero_grad(); model(torch.ones(1, 4)).sum().backward(); optimizer.step()")
    hvd(ip, wrap)  # the same cell again: `optimizer` is the wrapped one now
    assert "already a hvd.DistributedOptimizer" in capsys.readouterr().err
    hvd(
        ip,
        """
kept_momentum = optimizer.state[model.weight]["momentum_buffer"].clone()
before = model.weight.detach().clone()
optimizer.zero_grad()
model(torch.ones(1, 4) * (rank + 1)).sum().backward()
optimizer.step()
moved = model.weight.detach() - before
hooks = python_hooks(model.parameters())
wrappers = sum("_make_hook" in vars(c) for c in type(optimizer).__mro__)
""",
    )
    for rank in (0, 1):
        assert torch.equal(pull(pool, "kept_momentum", rank), torch.ones(1, 4))  # state survived the re-wrap
        # momentum 0.9 * 1 + averaged gradient 1.5 = 2.4, applied once.
        assert torch.allclose(pull(pool, "moved", rank), torch.full((1, 4), -2.4))
        assert pull(pool, "hooks", rank) == [1, 1]
        assert pull(pool, "wrappers", rank) == 1  # wrapped once, not a wrapper of a wrapper


def test_checkpoint_restart_and_resume_with_broadcast(ip, pool, tmp_path):
    ckpt = str(tmp_path / "checkpoint.pt")
    ip.user_ns["ckpt"] = ckpt
    ip.run_line_magic("hvd_push", "ckpt")
    model_cell = """
torch.manual_seed(rank)        # different initial weights per rank: only the broadcast makes them equal
model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
optimizer = hvd.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=0.01),
                                     named_parameters=model.named_parameters())
"""
    hvd(
        ip,
        model_cell
        + """
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
g = torch.Generator().manual_seed(rank)
for step in range(5):
    optimizer.zero_grad()
    torch.nn.functional.mse_loss(model(torch.randn(16, 6, generator=g)), torch.ones(16, 1)).backward()
    optimizer.step()
if rank == 0:
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step + 1}, ckpt)
""",
    )
    saved = torch.load(ckpt)
    old_pids = [r.pid for r in pool.ranks]
    ip.run_line_magic("hvd_restart", "")
    assert [r.pid for r in pool.ranks] != old_pids  # fresh engines: nothing survived in memory
    hvd(
        ip,
        "ckpt = "
        + repr(ckpt)
        + "\n"
        + model_cell
        + """
import copy
start_step = 0
if rank == 0:
    state = torch.load(ckpt)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    start_step = state["step"]
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(optimizer, root_rank=0)
start_step = hvd.broadcast_object(start_step, root_rank=0)
resumed_params = {k: v.clone() for k, v in model.state_dict().items()}
resumed_opt = copy.deepcopy(optimizer.state_dict())  # step() below updates the state in place
optimizer.zero_grad()
torch.nn.functional.mse_loss(model(torch.randn(16, 6, generator=torch.Generator().manual_seed(rank))),
                             torch.ones(16, 1)).backward()
optimizer.step()
after_step = [p.detach().clone() for p in model.parameters()]
""",
    )
    assert both(pool, "start_step") == (5, 5)
    for rank in (0, 1):
        params = pull(pool, "resumed_params", rank)
        for k, v in saved["model"].items():
            assert torch.equal(params[k], v), (rank, k)
        opt_state = pull(pool, "resumed_opt", rank)["state"]
        for i, s in saved["optimizer"]["state"].items():
            assert float(opt_state[i]["step"]) == float(s["step"]) == 5.0
            assert torch.equal(opt_state[i]["exp_avg"], s["exp_avg"]), (rank, i)
            assert torch.equal(opt_state[i]["exp_avg_sq"], s["exp_avg_sq"]), (rank, i)
    for a, b in zip(*both(pool, "after_step"), strict=True):
        assert torch.equal(a, b)  # the next step keeps the ranks identical
