"""Everyday mistakes that used to hang a cell or lose an engine end quickly with a message that names the cause.

A real 2-rank pool in a real kernel: uneven collectives, ranks waiting on different tensors, exit()/sys.exit(),
fork() in a cell, a user's thread that raises, a NaN loss, a frozen (SIGSTOP) rank.
"""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time

import pytest
from conftest import Kernel, new_kernel

HEALTHY = "%%hvd\nprint('sum', hvd.allreduce(torch.tensor([rank + 1.0]), name='healthy', op=hvd.Sum).item())"


@pytest.fixture(scope="module")
def k():
    kernel = new_kernel()
    r = kernel.run("%load_ext jupyter_hvd\n%hvd_start -np 2 --timeout 20", timeout=120)
    assert r.status == "ok", r.error_text + r.stderr
    r = kernel.run("%%hvd\nkept = rank * 10")  # worker state that must survive what follows
    assert r.status == "ok", r.error_text
    try:
        yield kernel
    finally:
        kernel.run("%hvd_stop", timeout=60)
        kernel.shutdown()


def healthy(k: Kernel) -> None:
    r = k.run(HEALTHY, timeout=60)
    assert r.status == "ok", r.error_text
    assert "sum 3.0" in r.stdout


def test_uneven_collectives_end_the_cell_and_keep_the_pool(k):
    t0 = time.monotonic()
    r = k.run(
        "%%hvd\nfor i in range(10 if rank == 0 else 8):\n    hvd.allreduce(torch.ones(2), name=f'step.{i}')\n",
        timeout=60,
    )
    took = time.monotonic() - t0
    assert r.status == "error"
    text = r.error_text
    assert "Collectives did not match" in text, text
    assert "rank 1 after 8 collectives" in text, text
    assert "rank 0 waits in 'step.8'" in text, text
    assert "hvd.join()" in text
    assert took < 8, took
    assert "restarted" not in text  # the join released rank 0: no restart, state kept
    r = k.run("%%hvd\nprint('kept', kept)")
    assert "kept 0" in r.stdout, r.stdout + r.error_text
    healthy(k)


def test_ranks_waiting_on_different_tensors_end_the_cell(k):
    t0 = time.monotonic()
    r = k.run("%%hvd\nhvd.allreduce(torch.ones(2), name='a' if rank == 0 else 'b')\n", timeout=90)
    assert r.status == "error"
    assert "rank 0 waits in 'a'" in r.error_text and "rank 1 waits in 'b'" in r.error_text, r.error_text
    assert "restart" in r.error_text + r.stderr
    assert time.monotonic() - t0 < 30
    healthy(k)
    k.run("%%hvd\nkept = rank * 10")


@pytest.mark.parametrize(("call", "code"), [("exit(3)", "3"), ("sys.exit(4)", "4"), ("quit()", "0")])
def test_exit_on_one_rank_ends_the_cell_and_the_engine_stays(k, call, code):
    r = k.run(
        f"%%hvd\nimport sys\nif rank == 1:\n    {call}\nhvd.allreduce(torch.ones(1), name='after_exit')", timeout=60
    )
    assert r.status == "error"
    assert f"rank 1 called exit({code})" in r.error_text, r.error_text
    assert "restarted" not in r.error_text
    r = k.run("%%hvd\nimport os\nprint('kept', kept, os.getpid())")
    assert "kept 0" in r.stdout, r.stdout + r.error_text
    healthy(k)


def test_a_forked_child_never_runs_engine_code(k):
    r = k.run(
        "%%hvd\nimport os\npid = os.fork()\nif pid == 0:\n    x = 1  # the child ends with the cell\n"
        "else:\n    os.waitpid(pid, 0)\n    print('parent', rank)",
        timeout=60,
    )
    assert r.status == "ok", r.error_text
    assert r.stdout.count("parent 0") == 1, r.stdout
    healthy(k)


def test_a_users_thread_that_raises_is_shown(k):
    r = k.run(
        "%%hvd\nimport threading, time\ndef work():\n    raise ValueError('in my thread')\n"
        "t = threading.Thread(target=work, name='loader')\nt.start(); t.join(); time.sleep(0.3)",
        timeout=60,
    )
    assert r.status == "ok", r.error_text
    assert "rank 1: thread 'loader' raised ValueError: in my thread" in r.stderr, r.stderr
    assert "rank 0: thread 'loader' raised ValueError" in r.stderr


def test_nan_loss_is_said_once_and_the_pool_file_stays_json(k):
    r = k.run("%%hvd\nfor step in range(5):\n    print(f'step {step} loss={float(\"nan\") if step >= 2 else 1.0}')")
    assert r.status == "ok", r.error_text
    assert r.stderr.count("loss became nan at step 2 on rank 0") == 1, r.stderr
    path, deadline, data = k.state_dir / f"pool-{k.pool()['id']}.json", time.monotonic() + 10, {}
    while not data.get("nonfinite") and time.monotonic() < deadline:  # the watcher writes it within a second
        time.sleep(0.1)
        data = json.loads(path.read_text(), parse_constant=lambda c: pytest.fail(f"{c} in the pool file"))
    assert data["nonfinite"]["step"] == 2


def test_a_frozen_rank_is_named_within_the_timeout(k):
    pid = next(r["pid"] for r in k.pool()["ranks"] if r["rank"] == 1)

    def freeze(_res):
        threading.Timer(1.0, os.kill, (pid, signal.SIGSTOP)).start()

    t0 = time.monotonic()
    try:
        r = k.run(
            "%%hvd\nfor i in range(100000):\n    hvd.allreduce(torch.ones(1), name=f'f.{i}')", 90, on_start=freeze
        )
    finally:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
    assert r.status == "error"
    said = r.stdout + r.error_text  # what happens (the restart) on stdout, what went wrong in the error
    assert f"Rank 1 (pid {pid}) is frozen (stopped by SIGSTOP or Ctrl-Z)" in said, said
    assert time.monotonic() - t0 < 20 + 30  # --timeout 20, then the restart
    healthy(k)


def test_ctrl_c_twice_during_start_returns_and_leaves_nothing():
    from conftest import wait_until_gone

    kernel = new_kernel()
    try:
        assert kernel.run("%load_ext jupyter_hvd").status == "ok"

        def interrupt_twice(_res):
            def later():
                time.sleep(1.0)
                for _ in range(6):  # one lands in the clean-up that the first started
                    kernel.km.interrupt_kernel()
                    time.sleep(0.05)

            threading.Thread(target=later, daemon=True).start()

        t0 = time.monotonic()
        r = kernel.run("%hvd_start -np 2", timeout=60, on_start=interrupt_twice)
        took = time.monotonic() - t0
        assert r.status == "error", r.stdout
        assert "KeyboardInterrupt" in r.error_text, r.error_text
        assert took < 15, took
        assert kernel.run("print(1)").status == "ok"
        assert wait_until_gone(f"hvd-{kernel.pid}-") == []
    finally:
        kernel.shutdown()


def test_a_restart_that_fails_stops_the_pool_and_says_so():
    from conftest import wait_until_gone

    kernel = new_kernel()
    try:
        assert kernel.run("%load_ext jupyter_hvd\n%hvd_start -np 2", timeout=120).status == "ok"
        r = kernel.run("%config HvdPool.mpiexec = '/nonexistent/mpiexec'\n%hvd_restart", timeout=60)
        assert r.status == "error"
        assert "The restart failed" in r.error_text and "The pool was stopped" in r.error_text, r.error_text
        assert "%hvd_restart starts it again" in r.error_text
        r = kernel.run("%hvd_status")
        assert "The pool is stopped" in r.stdout, r.stdout
        assert wait_until_gone(f"hvd-{kernel.pid}-") == []
        r = kernel.run("%config HvdPool.mpiexec = ''\n%hvd_restart", timeout=120)
        assert r.status == "ok", r.error_text
        r = kernel.run(HEALTHY, timeout=60)
        assert "sum 3.0" in r.stdout, r.stdout + r.error_text
    finally:
        kernel.shutdown()


def test_the_idle_rest_waits_for_a_users_thread_in_horovod(k):
    # The pool rests after 2 idle seconds; a thread that still runs collectives must not lose Horovod under it.
    r = k.run(
        "%%hvd\nimport threading, time\nerrors = []\ndef train():\n    try:\n        for i in range(50):\n"
        "            hvd.allreduce(torch.ones(1), name=f'bg.{i}')\n            time.sleep(0.1)\n"
        "    except Exception as exc:\n        errors.append(repr(exc))\n"
        "bg = threading.Thread(target=train, name='background training')\nbg.start()"
    )
    assert r.status == "ok", r.error_text
    time.sleep(6)  # longer than the rest's 2 s, while the thread runs (5 s)
    r = k.run("%%hvd\nbg.join()\nprint('errors', rank, errors)", timeout=60)
    assert r.status == "ok", r.error_text
    assert "errors 0 []" in r.stdout, r.stdout
    healthy(k)


def test_a_native_crash_says_where_in_the_cell_it_happened(k):
    """A segfault (in Horovod, MPI or torch's C++) on one rank: the error names the rank and signal, and quotes the
    Python stack it crashed in, down to the cell's line, which the rank's own stderr took with it."""
    r = k.run("%%hvd\nimport ctypes\nif rank == 1:\n    ctypes.string_at(0)\nprint('went on')", timeout=90)
    assert r.status == "error"
    said = r.error_text
    assert re.search(
        r"Rank 1 \(pid \d+, \S+\) died on signal 11 \(Segmentation fault\) "
        r"in string_at \(ctypes/__init__.py, line \d+\), called from Cell In\[\d+\], line 3\. The pool was restarted",
        said,
    ), said
    healthy(k)  # the pool came back
