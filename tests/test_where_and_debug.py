"""When a cell is stuck or broken: where every rank is (the stop button, a stall Horovod reports, %hvd_where, a
frozen rank), and pdb on any rank from the notebook (%hvd_debug after a failure, breakpoint() in a cell), driven by
a real kernel client that answers the input requests. The next cell works after each.

Real kernels with real 2-rank CPU pools.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import threading
import time

import pytest
from conftest import Kernel, wait_until_gone

HEALTHY = "%%hvd\nprint('healthy', hvd.allreduce(torch.ones(1), op=hvd.Sum, name='healthy').item())"
STUCK = """%%hvd
import time
def load_batch():
    time.sleep(60)
if rank == 1:
    load_batch()
hvd.allreduce(torch.ones(4), name='grad_sync')
"""


@pytest.fixture
def kernel():
    k = Kernel()
    r = k.run(
        "%load_ext jupyter_hvd\n%config HvdPool.live_view = 'text'\n%config HvdPool.stall_check_s = 3\n"
        "%hvd_start -np 2",
        timeout=120,
    )
    assert r.status == "ok", r.error_text
    yield k
    k.shutdown()
    assert wait_until_gone(f"hvd-{k.pid}-") == []


def healthy(k: Kernel) -> None:
    r = k.run(HEALTHY)
    assert r.status == "ok" and "healthy 2.0" in r.stdout, r.stdout + r.error_text


def press_stop(k: Kernel, after: float):
    return lambda _result: threading.Timer(after, k.km.interrupt_kernel).start()


def test_the_stop_button_on_a_stuck_cell_names_where_each_rank_is(kernel):
    k = kernel
    r = k.run(STUCK, timeout=60, on_start=press_stop(k, 2.0))
    assert r.status == "error"
    said = r.stderr
    assert "rank 0: waiting in allreduce 'grad_sync' (cell line 7)" in said, said
    assert "rank 1: in load_batch() (cell line 4) -> time.sleep(60)" in said, said
    healthy(k)


def test_a_stall_horovod_reports_shows_where_the_ranks_are(kernel):
    k = kernel
    cell = "%%hvd\nimport time\nif rank == 1:\n    time.sleep(7)\nhvd.allreduce(torch.ones(4), name='late')\n"
    r = k.run(cell, timeout=60)
    assert r.status == "ok", r.error_text
    said = r.stderr
    assert "Horovod reports a stall. Where the ranks were:" in said, said
    assert "rank 0: waiting in allreduce 'late' (cell line 5)" in said, said
    assert "rank 1: in (cell line 4) -> time.sleep(7)" in said, said
    healthy(k)


def test_a_frozen_rank_is_named_with_the_stack_read_from_outside(kernel):
    k = kernel
    pids = k.run("%%hvd --ranks all\nimport os\nprint('pid', rank, os.getpid())").stdout
    rank1 = int(next(ln.split()[-1] for ln in pids.splitlines() if "pid 1 " in ln))

    def freeze_then_stop(_result) -> None:
        def later() -> None:
            time.sleep(1.5)
            os.kill(rank1, signal.SIGSTOP)
            time.sleep(1.0)
            k.km.interrupt_kernel()

        threading.Thread(target=later, daemon=True).start()

    cell = "%%hvd\nimport time\nwhile True:\n    hvd.allreduce(torch.ones(4), name='spin')\n    time.sleep(0.01)\n"
    try:
        r = k.run(cell, timeout=120, on_start=freeze_then_stop)
    finally:
        with contextlib.suppress(ProcessLookupError):  # the pool's restart ended it
            os.kill(rank1, signal.SIGCONT)
    said = r.stderr
    assert "rank 1: frozen (stopped by SIGSTOP or Ctrl-Z): " in said, said
    frozen = said.split("rank 1: frozen", 1)[1].splitlines()[0]
    assert re.search(r"<module> \(cell line [45]\)$", frozen), f"the stack read by py-spy: {frozen}"
    assert "rank 0: waiting in allreduce 'spin'" in said, said
    healthy(k)


def test_hvd_debug_opens_pdb_in_the_failing_frame_of_the_rank_that_raised(kernel):
    k = kernel
    failing = (
        "%%hvd\ndef f(x):\n    local_value = x * 7\n    if rank == 1:\n        raise ValueError('boom')\n"
        "    return local_value\nf(6)"
    )
    assert k.run(failing).status == "error"
    r = k.run("%hvd_debug", inputs=["p local_value", "p x + 1", "q"], timeout=60)
    assert r.status == "ok", r.error_text
    assert r.prompts == ["(Pdb) "] * 3, r.prompts
    assert "pdb on rank 1" in r.stdout and "raise ValueError('boom')" in r.stdout, r.stdout
    assert "\n42\n7\n" in r.stdout, r.stdout
    healthy(k)
    r = k.run("%hvd_debug --rank 0")
    assert r.status == "error" and "Nothing to debug on rank 0" in r.stderr + r.error_text, r.stderr


def test_breakpoint_in_a_cell_stops_that_rank_in_pdb_and_the_others_wait_for_it(kernel):
    k = kernel
    cell = (
        "%%hvd\ny = 5\nif rank == 1:\n    breakpoint()\n    y = 99\n"
        "print('rank', rank, 'y', y, hvd.allreduce(torch.ones(1), op=hvd.Sum, name='after_bp').item())"
    )
    r = k.run(cell, inputs=["p y", "n", "p y", "c"], timeout=60)
    assert r.status == "ok", r.error_text
    assert "rank 1 is in the debugger (pdb)" in r.stderr, r.stderr
    assert "\n5\n" in r.stdout and "\n99\n" in r.stdout, r.stdout
    assert "rank 0 y 5 2.0" in r.stdout, r.stdout
    healthy(k)


def test_the_sidebars_where_answers_during_a_cell_and_between_cells(kernel):
    import json

    from jupyter_hvd import state

    k = kernel
    pool_id = k.run("from jupyter_hvd.kernel import pool\nprint(pool.current().id)").stdout.strip()

    def ask(_result) -> None:
        threading.Timer(1.5, state.request_action, (pool_id, "where")).start()

    r = k.run(STUCK.replace("time.sleep(60)", "time.sleep(5)"), timeout=60, on_start=ask)
    assert r.status == "ok", r.error_text
    assert "Asked from the sidebar. Where the ranks were:" in r.stderr, r.stderr
    assert "rank 1: in load_batch() (cell line 4) -> time.sleep(5)" in r.stderr, r.stderr
    state.request_action(pool_id, "where")
    path = next(state.state_dir().glob(f"pool-{pool_id}.json"))
    deadline = time.monotonic() + 15
    where = ""
    while time.monotonic() < deadline and "idle (no cell running)" not in where:
        time.sleep(0.5)
        where = json.loads(path.read_text()).get("where", "")
    assert "ranks 0-1: idle (no cell running)" in where, where
    healthy(k)
