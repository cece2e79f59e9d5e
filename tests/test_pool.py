"""The engine pool and %%hvd on 2 real MPI ranks: SPMD cells, output, errors, variables, arguments."""

from __future__ import annotations

import re
import threading
import time

import pytest
import torch
from IPython.core.error import UsageError

from jupyter_hvd import state
from jupyter_hvd.kernel.errors import CellFailed


def pull(pool, name: str, rank: int):
    return pool.client[pool.ranks[rank].engine_id].pull(name, block=True)


def test_pool_has_ranks_with_horovod(pool, capsys):
    assert [r.rank for r in pool.ranks] == [0, 1]
    assert {r.controller for r in pool.ranks} == {"MPI"}
    assert all(r.device.startswith("cpu") for r in pool.ranks)
    assert pull(pool, "size", 1) == 2
    assert pull(pool, "rank", 1) == 1


def test_cell_runs_on_every_rank_and_state_persists(ip, pool):
    ip.run_cell_magic("hvd", "", "counter = torch.tensor([rank + 1.0])")
    ip.run_cell_magic("hvd", "", "total = hvd.allreduce(counter, op=hvd.Sum).item()")
    assert pull(pool, "total", 0) == pull(pool, "total", 1) == 3.0


def test_gradients_are_averaged_like_one_big_batch(ip, pool):
    ip.run_cell_magic(
        "hvd",
        "",
        """
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), named_parameters=model.named_parameters())
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
g = torch.Generator().manual_seed(100 + rank)
x = torch.randn(8, 4, generator=g); y = torch.randn(8, 1, generator=g)
opt.zero_grad()
torch.nn.functional.mse_loss(model(x), y).backward()
opt.step()
params = [p.detach().clone() for p in model.parameters()]
""",
    )
    p0, p1 = pull(pool, "params", 0), pull(pool, "params", 1)
    for a, b in zip(p0, p1, strict=True):
        assert torch.equal(a, b)
    # The same step in one process on the concatenated batch.
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    xs, ys = [], []
    for r in (0, 1):
        g = torch.Generator().manual_seed(100 + r)
        xs.append(torch.randn(8, 4, generator=g))
        ys.append(torch.randn(8, 1, generator=g))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    torch.nn.functional.mse_loss(model(torch.cat(xs)), torch.cat(ys)).backward()
    opt.step()
    for a, b in zip(p0, model.parameters(), strict=True):
        torch.testing.assert_close(a, b.detach(), rtol=1e-5, atol=1e-6)


def test_rank0_output_only_by_default(ip, pool, capfd):
    ip.run_cell_magic("hvd", "", "print(f'hello from {rank}')")
    out = capfd.readouterr().out
    assert "hello from 0" in out
    assert "hello from 1" not in out


def test_ranks_all_prefixes_each_line(ip, pool, capfd):
    ip.run_cell_magic("hvd", "--ranks all", "print(f'line a {rank}')\nprint(f'line b {rank}')")
    out = capfd.readouterr().out
    for r in (0, 1):
        assert f"[rank {r}] line a {r}" in out
        assert f"[rank {r}] line b {r}" in out


def test_ranks_subset(ip, pool, capfd):
    ip.run_cell_magic("hvd", "--ranks 1", "print(f'only {rank}')")
    out = capfd.readouterr().out
    assert "[rank 1] only 1" in out and "only 0" not in out


def test_same_error_on_all_ranks_is_shown_once(ip, pool):
    with pytest.raises(CellFailed) as info:
        ip.run_cell_magic("hvd", "", "raise ValueError('boom')")
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(info.value))
    assert "ranks 0-1: ValueError: boom" in text
    assert text.count("Traceback (most recent call last)") == 1
    assert "Cell In[" in text and "<hvd-cell-" not in text and "raise ValueError('boom')" in text


def test_different_errors_are_grouped_by_rank(ip, pool):
    with pytest.raises(CellFailed) as info:
        ip.run_cell_magic("hvd", "", "raise RuntimeError(f'rank {rank} failed')")
    text = str(info.value)
    assert "rank 0: RuntimeError: rank 0 failed" in text
    assert "rank 1: RuntimeError: rank 1 failed" in text


def test_error_renders_without_jupyter_hvd_frames(ip, pool):
    with pytest.raises(CellFailed) as info:
        ip.run_cell_magic("hvd", "", "1/0")
    rendered = "\n".join(info.value._render_traceback_())
    assert "ZeroDivisionError" in rendered
    assert "jupyter_hvd" not in rendered.replace("jupyter-hvd:", "")


def test_syntax_error_is_not_shipped(ip, pool):
    ip.run_cell_magic("hvd", "", "shipped = 0")
    before = pool.cells_run
    from jupyter_hvd.kernel.magics import CellSyntaxError

    with pytest.raises(CellSyntaxError):
        ip.run_cell_magic("hvd", "", "shipped = 1\nx = = 1")
    assert pool.cells_run == before
    assert pull(pool, "shipped", 0) == 0


def test_last_expression_of_rank0_is_the_result(ip, pool):
    from IPython.utils.capture import capture_output

    with capture_output() as shown:
        assert ip.run_cell_magic("hvd", "", "rank * 10 + 7") is None  # displayed, like a normal cell's value
    assert [o.data["text/plain"] for o in shown.outputs] == ["7"]  # rank 0's value, shown once
    ip.run_cell_magic("hvd", "", "value = rank * 10 + 7")
    assert pull(pool, "value", 1) == 17


def test_ipython_syntax_in_cells(ip, pool):
    ip.run_cell_magic("hvd", "", "%time z = rank + 1")
    assert pull(pool, "z", 1) == 2


def test_push_and_pull(ip, pool):
    ip.user_ns["lr"] = 0.25
    ip.user_ns["cfg"] = {"layers": [4, 8]}
    ip.run_line_magic("hvd_push", "lr cfg")
    ip.run_cell_magic("hvd", "", "scaled = lr * size; depth = len(cfg['layers']) + rank")
    ip.run_line_magic("hvd_pull", "scaled")
    assert ip.user_ns["scaled"] == 0.5
    ip.run_line_magic("hvd_pull", "depth --rank 1")
    assert ip.user_ns["depth"] == 3


def test_push_and_pull_bad_input(ip, pool):
    import threading

    ip.user_ns["lock"] = threading.Lock()
    with pytest.raises(UsageError, match="cannot be sent to the ranks"):
        ip.run_line_magic("hvd_push", "lock")
    with pytest.raises(UsageError, match="Not defined in this notebook: nope"):
        ip.run_line_magic("hvd_push", "nope")
    with pytest.raises(UsageError, match="not defined on rank 0"):
        ip.run_line_magic("hvd_pull", "never_defined")
    with pytest.raises(UsageError, match="the pool has ranks 0-1"):
        ip.run_line_magic("hvd_pull", "rank --rank 5")
    ip.run_cell_magic("hvd", "", "ok = hvd.allreduce(torch.ones(1), op=hvd.Sum).item()")
    assert pull(pool, "ok", 0) == 2.0  # the pool is unharmed


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("-np 0", "-np must be at least 1"),
        ("-np abc", "invalid int value: 'abc'"),
        ("--ops foo", "--ops must be one of"),
        ("--env NOVALUE", "--env expects KEY=VALUE"),
    ],
)
def test_bad_start_arguments(ip, pool, line, message):
    from jupyter_hvd.kernel import owner as pools

    saved = pools.current()
    pools.owner.pool = None  # as if no pool were running, so the arguments themselves are checked
    try:
        with pytest.raises(UsageError, match=message):
            ip.run_line_magic("hvd_start", line)
    finally:
        pools.owner.pool = saved


def test_second_start_is_refused(ip, pool):
    with pytest.raises(UsageError, match="already running"):
        ip.run_line_magic("hvd_start", "-np 2")


def test_bad_cell_arguments(ip, pool):
    with pytest.raises(UsageError, match="the pool has ranks 0-1"):
        ip.run_cell_magic("hvd", "--ranks 7", "pass")
    with pytest.raises(UsageError, match="write 'all'"):
        ip.run_cell_magic("hvd", "--ranks x", "pass")


def test_status_table(ip, pool, capsys):
    ip.run_line_magic("hvd_status", "")
    out = capsys.readouterr().out
    assert "2 ranks" in out
    for r in pool.ranks:
        assert str(r.pid) in out


def test_env_reaches_the_engines(ip, pool):
    ip.run_cell_magic("hvd", "", "import os\nseen = os.environ.get('JUPYTER_HVD_TEST')")
    assert pull(pool, "seen", 1) == "yes"


def test_cpu_ranks_share_the_cores(ip, pool):
    import os

    ip.run_cell_magic("hvd", "", "threads = torch.get_num_threads()")
    assert pull(pool, "threads", 0) == max(1, len(os.sched_getaffinity(0)) // 2)


def test_failure_between_backward_and_step_leaves_a_usable_optimizer(ip, pool):
    ip.run_cell_magic(
        "hvd",
        "",
        "m = torch.nn.Linear(16, 4)\n"
        "opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1),\n"
        "                               named_parameters=m.named_parameters())",
    )
    for _ in range(2):
        with pytest.raises(CellFailed, match="rank 1: ValueError: after backward"):
            ip.run_cell_magic(
                "hvd",
                "",
                "opt.zero_grad()\nm(torch.randn(4, 16)).sum().backward()\n"
                "if rank == 1:\n    raise ValueError('after backward')\nopt.step()",
            )
        # The same model and optimizer train on: no stale gradient handles, no name clash, no restart.
        ip.run_cell_magic(
            "hvd",
            "",
            # After a failed cell the ranks' weights may differ (rank 0 stepped): re-sync as after a resume.
            "hvd.broadcast_parameters(m.state_dict(), root_rank=0)\n"
            "opt.zero_grad()\nm(torch.randn(4, 16)).sum().backward()\nopt.step()\n"
            "w = hvd.allreduce(m.weight.detach(), op=hvd.Max) - m.weight.detach()",
        )
        assert float(pull(pool, "w", 1).abs().max()) == 0.0  # weights identical on both ranks


def test_idle_pool_rests_and_the_next_cell_trains_on(ip, pool, capsys):
    import time

    import psutil

    ip.run_cell_magic(
        "hvd",
        "",
        "torch.manual_seed(1)\nnet = torch.nn.Linear(8, 2)\n"
        "sgd = hvd.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.1), "
        "named_parameters=net.named_parameters())\nhvd.broadcast_parameters(net.state_dict(), root_rank=0)\n"
        "def train_step():\n    sgd.zero_grad()\n    net(torch.randn(4, 8)).sum().backward()\n    sgd.step()\n"
        "train_step()",
    )
    # Idle for longer than --rest-after (2 s on CPU ranks): Horovod stops on every rank.
    deadline = time.monotonic() + 10
    while not pool.resting and time.monotonic() < deadline:
        time.sleep(0.1)
    assert pool.resting
    procs = [psutil.Process(r.pid) for r in pool.ranks]
    time.sleep(0.5)  # the rest request reaches the engines
    for p in procs:
        p.cpu_percent(None)
    time.sleep(2)
    busy = [p.cpu_percent(None) for p in procs]
    # Awake, an idle rank busy-waits in Horovod's negotiation (one rank at 50-100% here); resting, nothing runs.
    assert max(busy) < 15, busy
    ip.run_line_magic("hvd_status", "")
    assert "Horovod is resting" in capsys.readouterr().out
    # The next cell wakes Horovod: the model and optimizer of before train on, in step on both ranks.
    ip.run_cell_magic(
        "hvd",
        "",
        "train_step()\nw = net.weight.detach()\nsame = (hvd.allreduce(w, op=hvd.Max) - w).abs().max().item()",
    )
    assert not pool.resting
    assert pull(pool, "same", 0) == pull(pool, "same", 1) == 0.0


def test_the_sidebar_sees_a_long_cell_running_and_then_idle(ip, pool):
    """The state file (what the sidebar shows) names a cell that runs for a while within a fraction of a second,
    and says idle again once it ended; short cells are left to the watcher's next round (they would be over
    before the sidebar's next refresh anyway)."""
    seen: list[tuple[float, str, str | None]] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            data = state.read_pool(pool.file.path)
            if data:
                seen.append((time.monotonic(), data["state"], data["cell"]))
            time.sleep(0.02)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        started = time.monotonic()
        ip.run_cell_magic("hvd", "", "import time as _t\n_t.sleep(1.5)")
        time.sleep(1.5)  # the watcher's next round at the latest
    finally:
        stop.set()
        watcher.join()
    running = [t for t, s, cell in seen if s == "running" and cell == "import time as _t"]
    assert running, seen[-5:]
    assert running[0] - started < 0.6, running[0] - started
    assert seen[-1][1] == "idle", seen[-5:]
