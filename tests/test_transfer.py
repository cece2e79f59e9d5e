"""%hvd_push / %hvd_pull: values move by value (classes, closures, models, tensors), and no wait wedges the kernel.

Real 2-rank pools: one in-process shell for the module (`ip`, `pool`), and a real kernel for Ctrl-C.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
from IPython.core.error import UsageError

NET_CELL = """
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(4, 8)
        self.fc2 = torch.nn.Linear(8, 2)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x))) * (1 + self.extra)

    extra = 0.5

torch.manual_seed(1234 + rank)
net = Net()
probe = torch.arange(12, dtype=torch.float32).reshape(3, 4)
with torch.no_grad():
    expected = net(probe)
"""


def test_pull_model_whose_class_was_defined_in_an_hvd_cell(ip, pool):
    import torch

    ip.run_cell_magic("hvd", "", NET_CELL)
    for rank in (0, 1):
        ip.run_line_magic("hvd_pull", f"net --rank {rank}")
        ip.run_line_magic("hvd_pull", f"expected --rank {rank}")
        net, expected = ip.user_ns["net"], ip.user_ns["expected"]
        assert type(net).__name__ == "Net" and isinstance(net, torch.nn.Module)
        assert isinstance(net.fc1.weight, torch.nn.Parameter) and net.fc1.weight.requires_grad
        with torch.no_grad():
            got = net(torch.arange(12, dtype=torch.float32).reshape(3, 4))
        assert torch.equal(got, expected)  # the kernel computes what the rank computed, with the rank's weights
    assert not torch.equal(ip.user_ns["net"].fc1.weight, torch.zeros(8, 4))
    # the pulled model trains in the kernel: its parameters are writable tensors
    net = ip.user_ns["net"]
    net(torch.ones(1, 4)).sum().backward()
    torch.optim.SGD(net.parameters(), lr=0.1).step()


def test_push_lambda_closure_and_class_defined_in_the_notebook(ip, pool):
    ip.run_cell(
        "scale = 3\n"
        "triple = lambda v: v * scale\n"
        "def adder(k):\n"
        "    def add(v):\n"
        "        return v + k\n"
        "    return add\n"
        "add10 = adder(10)\n"
        "class Box:\n"
        "    def __init__(self, v):\n"
        "        self.v = v\n"
        "    def twice(self):\n"
        "        return 2 * self.v\n"
        "box = Box(21)\n"
    )
    ip.run_line_magic("hvd_push", "triple add10 Box box")
    ip.run_cell_magic("hvd", "", "used = (triple(2), add10(rank), Box(rank).twice(), box.twice())")
    ip.run_line_magic("hvd_pull", "used --rank 1")
    assert ip.user_ns["used"] == (6, 11, 2, 42)


def test_tensors_move_both_ways_unchanged(ip, pool):
    import numpy as np
    import torch

    ip.user_ns["t"] = torch.arange(1_000_000, dtype=torch.float64)
    ip.user_ns["a"] = np.arange(10_000, dtype=np.int16)
    ip.run_line_magic("hvd_push", "t a")
    ip.run_cell_magic("hvd", "", "t2 = t * (rank + 1); a2 = a + rank")
    ip.run_line_magic("hvd_pull", "t2 --rank 1")
    ip.run_line_magic("hvd_pull", "a2 --rank 1")
    assert torch.equal(ip.user_ns["t2"], torch.arange(1_000_000, dtype=torch.float64) * 2)
    assert ip.user_ns["a2"].tolist() == list(range(1, 10_001))
    assert ip.user_ns["a2"].flags.writeable  # received frames are used in place, and they are writable
    # ipyparallel's result cache lets go of them: a pulled model is not kept alive twice
    deadline = time.monotonic() + 2
    while any(mid in pool.client.results for mid in pool.client.history[-4:]) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not any(mid in pool.client.results for mid in pool.client.history[-4:])
    ip.user_ns["t2"] += 1


def test_big_transfer_says_its_size_first(ip, pool, capsys):
    ip.run_cell_magic("hvd", "", "big = torch.zeros(15_000_000)")  # 57 MB
    capsys.readouterr()
    ip.run_line_magic("hvd_pull", "big")
    assert capsys.readouterr().out == "pulling big from rank 0: 57 MB...\n"
    ip.run_line_magic("hvd_push", "big")
    assert capsys.readouterr().out == "pushing big to 2 ranks: 57 MB each...\n"
    ip.run_line_magic("hvd_pull", "size --rank 1")  # small: nothing said
    assert capsys.readouterr().out == ""


def test_unpicklable_value_is_one_line_and_nothing_moves(ip, pool):
    ip.user_ns["kept"] = "old"
    ip.run_cell_magic("hvd", "", "kept = 'old'")
    ip.user_ns["kept"] = "new"
    ip.user_ns["lock_holder"] = {"lock": threading.Lock()}
    with pytest.raises(UsageError) as err:
        ip.run_line_magic("hvd_push", "kept lock_holder")
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("lock_holder cannot be sent to the ranks: it holds a thread lock (TypeError: ")
    ip.run_cell_magic("hvd", "", "import threading\nlock_holder = threading.Lock()")
    with pytest.raises(UsageError, match="lock_holder cannot be fetched from rank 0: it holds a thread lock"):
        ip.run_line_magic("hvd_pull", "lock_holder")
    assert ip.user_ns["lock_holder"]["lock"] is not None  # the notebook's value is untouched
    ip.run_line_magic("hvd_pull", "kept")
    assert ip.user_ns["kept"] == "old"  # nothing of the failed push reached the ranks
    ip.run_cell_magic("hvd", "", "ok = hvd.allreduce(torch.ones(1), op=hvd.Sum).item()")
    ip.run_line_magic("hvd_pull", "ok")
    assert ip.user_ns["ok"] == 2.0


def test_pull_from_a_stopped_rank_names_it_within_the_timeout(ip, pool):
    ip.run_cell_magic("hvd", "", "here = rank")
    pid = pool.ranks[1].pid
    os.kill(pid, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        with pytest.raises(UsageError, match=r"rank 1 is stopped .*kill -CONT"):
            ip.run_line_magic("hvd_pull", "here --rank 1 --timeout 5")
        assert time.monotonic() - t0 < 5
        ip.user_ns["pushed"] = 1
        with pytest.raises(UsageError, match=r"rank 1 is stopped"):
            ip.run_line_magic("hvd_push", "pushed --timeout 5")
        assert time.monotonic() - t0 < 10
        ip.run_line_magic("hvd_pull", "here --rank 0")  # the other rank still answers
        assert ip.user_ns["here"] == 0
    finally:
        os.kill(pid, signal.SIGCONT)
    ip.run_line_magic("hvd_pull", "here --rank 1")
    assert ip.user_ns["here"] == 1


SLOW_CELL = """
import time
class Slow:
    def __reduce__(self):  # the rank takes 8 s to serialise this value
        time.sleep(8)
        return (int, (1,))
slow = Slow()
"""


def test_pull_from_a_rank_killed_meanwhile_names_it(ip, pool):
    # Last of the module's in-process tests: the kill ends the MPI job (the fixture stops what is left).
    ip.run_cell_magic("hvd", "", SLOW_CELL)
    pid = pool.ranks[1].pid
    threading.Timer(1.0, os.kill, (pid, signal.SIGKILL)).start()
    t0 = time.monotonic()
    with pytest.raises(UsageError, match=r"Pulling slow from rank 1 failed: rank 1 died"):
        ip.run_line_magic("hvd_pull", "slow --rank 1 --timeout 30")
    assert time.monotonic() - t0 < 4
    assert "slow" not in ip.user_ns
    ip.run_cell("plain = 1 + 1")
    assert ip.user_ns["plain"] == 2


def test_ctrl_c_during_a_slow_pull_returns_at_once(kernel):
    r = kernel.run("%load_ext jupyter_hvd\n%hvd_start -np 2", timeout=120)
    assert r.status == "ok", r.error_text
    assert kernel.run("%%hvd --no-plot\n" + SLOW_CELL).status == "ok"
    sent: dict[str, float] = {}

    def interrupt_soon(_):
        def fire():
            time.sleep(1.0)
            sent["at"] = time.time()
            kernel.km.interrupt_kernel()

        threading.Thread(target=fire, daemon=True).start()

    r = kernel.run("%hvd_pull slow", timeout=30, on_start=interrupt_soon)
    assert r.finished - sent["at"] < 2.0, r.finished - sent["at"]
    assert "Interrupted: slow was not pulled from rank 0" in r.stderr + r.error_text
    r = kernel.run("print(1)", timeout=10)
    assert r.status == "ok" and r.stdout == "1\n", r.error_text
    assert kernel.run("'slow' in globals()", timeout=10).outputs[0]["data"]["text/plain"] == "False"
    kernel.run("%hvd_stop", timeout=60)


def test_a_one_rank_pool_pushes_and_pulls(kernel):
    """One GPU, one rank: a view of one engine answers with a list of one, and push and pull both read it so."""
    r = kernel.run("%load_ext jupyter_hvd\n%hvd_start -np 1", timeout=120)
    assert r.status == "ok", r.error_text
    r = kernel.run("lr = 0.25\n%hvd_push lr")
    assert r.status == "ok", r.error_text
    r = kernel.run("%%hvd\ndoubled = lr * 2 + rank")
    assert r.status == "ok", r.error_text
    r = kernel.run("%hvd_pull doubled\nprint('pulled', doubled)")
    assert r.status == "ok" and "pulled 0.5" in r.stdout, r.error_text + r.stdout
    kernel.run("%hvd_stop")
