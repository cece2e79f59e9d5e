"""When a cell is stuck or broken: where every rank is (the stop button, a stall Horovod reports, %hvd_where, the
sidebar's Where, a frozen rank, a rank holding the GIL in native code), and pdb on any rank from the notebook
(%hvd_debug after a failure, breakpoint() in a cell), driven by a real kernel client that answers the input requests.
The next cell works after each.

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
from conftest import Kernel

HEALTHY = "%%hvd\nprint('healthy', hvd.allreduce(torch.ones(1), op=hvd.Sum, name='healthy').item())"
STUCK = """%%hvd
import time
def load_batch():
    time.sleep(60)
if rank == 1:
    load_batch()
hvd.allreduce(torch.ones(4), name='grad_sync')
"""


POOL_SETUP = (
    "%load_ext jupyter_hvd\n%config HvdPool.live_view = 'text'\n%config HvdPool.stall_check_s = 3\n%hvd_start -np 2"
)
POOL_CHECK, POOL_CHECK_SAYS = HEALTHY, "healthy 2.0"  # tests/conftest.py PoolKernel: every test ends healthy(k)


@pytest.fixture
def kernel(pool_kernel: Kernel) -> Kernel:
    return pool_kernel


def prompt(k: Kernel) -> int:
    """The execution count the next cell gets (its prompt, In[n])."""
    return int(k.run("get_ipython().execution_count").outputs[-1]["execution_count"]) + 1


def healthy(k: Kernel) -> None:
    r = k.run(HEALTHY)
    assert r.status == "ok" and "healthy 2.0" in r.stdout, r.stdout + r.error_text


def press_stop(k: Kernel, after: float):
    return lambda _result: threading.Timer(after, k.km.interrupt_kernel).start()


def pool_file(k: Kernel) -> dict:
    """This kernel's pool file, as the sidebar's server reads it."""
    return k.pool()


def where_in_pool_file(k: Kernel, newer_than: float) -> dict:
    """The pool file's picture of where the ranks are, once one asked after `newer_than` (epoch s) is there (the
    kernel's watcher writes the file within about a second; the kernel may have had a picture from a test before)."""
    deadline = time.monotonic() + 10
    while (pool_file(k)["where"] or {}).get("asked", 0.0) <= newer_than:
        assert time.monotonic() < deadline, f"no picture newer than {newer_than} in the pool file"
        time.sleep(0.1)
    return pool_file(k)["where"]


def test_a_rank_names_the_collective_of_the_frames_it_read(monkeypatch):
    # A rank's main thread runs on while its own reading thread takes the picture: here it leaves 'before_bp' (line 1)
    # for 'after_bp' (line 4) meanwhile: the picture names one collective with its own line, never 'after_bp' at line 1.
    from jupyter_hvd.engine import collectives
    from jupyter_hvd.engine.diagnose import where as on_the_rank

    def wait(name: str, number: int, waited: float) -> dict:
        return {"name": name, "number": number, "waited": waited, "kind": "allreduce"}

    waits = iter([wait("before_bp", 0, 1.0), *(wait("after_bp", 1, t) for t in (0.0, 0.1, 0.2))])
    frames = iter([[{"file": "<hvd-cell-5>", "line": line, "function": "<module>", "code": "", "library": False}]
                   for line in (1, 4)])  # fmt: skip
    monkeypatch.setattr(collectives, "main_thread_wait", lambda at_least=0.0: next(waits))
    monkeypatch.setattr(on_the_rank, "_main_frames", lambda: next(frames))
    place = on_the_rank.place(0, 1, 5, False)
    assert (place.waiting, place.frames[-1]["line"]) == ("allreduce 'after_bp'", 4)


def test_a_collective_is_named_by_its_tensor_or_said_to_have_none():
    from jupyter_hvd.engine.diagnose.where import waiting

    assert waiting({"name": "grad_sync", "kind": "allreduce"}) == "allreduce 'grad_sync'"
    # While Horovod starts again for an unnamed op, before it names the tensor 'allreduce.noname.N'.
    assert waiting({"name": "allreduce", "kind": "allreduce"}) == "allreduce (an unnamed tensor)"
    assert waiting({"name": "dist.all_reduce", "kind": ""}) == "dist.all_reduce"
    assert waiting(None) == ""


def test_the_stop_button_on_a_stuck_cell_names_where_each_rank_is(kernel):
    k = kernel
    n, t0 = prompt(k), time.time()
    r = k.run(STUCK, timeout=60, on_start=press_stop(k, 2.0))
    assert r.status == "error"
    said = r.stdout  # what is said, not a warning: stdout
    assert "where the ranks were when you interrupted:" in said, said
    assert "jupyter-hvd" not in r.stderr, r.stderr  # the red background is for what went wrong
    assert f"rank 0: waiting in allreduce 'grad_sync' (Cell In[{n}], line 6)" in said, said
    assert f"rank 1: in load_batch() (Cell In[{n}], line 3) -> time.sleep(60)" in said, said
    assert f"(Cell In[{n}], line 6)" in where_in_pool_file(k, t0)["places"][0]  # the sidebar has the same picture
    healthy(k)


def test_where_full_shows_the_library_frames_too(kernel):
    k = kernel
    cell = STUCK.replace("%%hvd\n", "%%hvd --where-full\n")
    r = k.run(cell, timeout=60, on_start=press_stop(k, 2.0))
    assert r.status == "error"
    said = r.stdout
    assert re.search(r"rank 0: waiting in allreduce 'grad_sync' \(Cell In\[\d+\], line 6\)", said), said
    # Horovod's own frames, folded without --where-full, under rank 0's line.
    rank0 = said.split("rank 0: waiting in allreduce", 1)[1].split("rank 1:", 1)[0]
    assert re.search(r"allreduce \(\S*horovod/torch/mpi_ops.py:\d+\)", rank0), rank0
    healthy(k)


def test_a_stall_horovod_reports_shows_where_the_ranks_are(kernel):
    k = kernel
    cell = "%%hvd\nimport time\nif rank == 1:\n    time.sleep(7)\nhvd.allreduce(torch.ones(4), name='late')\n"
    r = k.run(cell, timeout=60)
    assert r.status == "ok", r.error_text
    said = r.stdout
    assert "where the ranks were when rank 0 stalled:" in said, said
    assert re.search(r"rank 0: waiting in allreduce 'late' \(Cell In\[\d+\], line 4\)", said), said
    assert re.search(r"rank 1: at Cell In\[\d+\], line 3 -> time\.sleep\(7\)", said), said
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
    said = r.stdout
    frozen = re.search(r"rank 1: frozen \(stopped by SIGSTOP or Ctrl-Z\), read from outside: (.*)", said)
    assert frozen, said
    # py-spy's Python frames of the stopped process: the cell's line, and what it was in.
    assert re.match(r"at Cell In\[\d+\], line [34] -> ", frozen.group(1)), f"py-spy's stack: {frozen.group(1)}"
    assert "rank 0: waiting in allreduce 'spin'" in said, said
    healthy(k)


def test_a_rank_holding_the_gil_in_native_code_is_named_with_its_native_stack(kernel):
    k = kernel
    # A regular expression that backtracks for minutes: the regex engine holds the GIL, so the rank's own thread
    # cannot answer, nor take the Interrupt; it checks for signals, so the stop button still ends it (a SIGINT from
    # outside), without a restart: the namespaces stay.
    cell = "%%hvd\nimport re\nif rank == 1:\n    re.match(r'(a+)+$', 'a' * 40 + 'b')\nhvd.allreduce(torch.ones(1))\n"
    r = k.run(cell, timeout=60, on_start=press_stop(k, 2.5))
    assert r.status == "error"
    assert "Interrupted: ranks 0-1 stopped." in r.error_text and "restart" not in r.error_text, r.error_text
    said = r.stdout
    busy = re.search(r"rank 1: not answering \(busy in native code\), read from outside: (.*)", said)
    assert busy, said
    # The innermost frame py-spy read is native (a C function: no module before its name), below re.match.
    assert re.fullmatch(r"at Cell In\[\d+\], line 3 -> re\.match -> (\.\.\. -> )?\w+", busy.group(1)), busy.group(1)
    assert "rank 0: waiting in allreduce" in said, said
    healthy(k)


def test_hvd_where_and_the_sidebars_where_between_cells(kernel):
    k, t0 = kernel, time.time()
    r = k.run("%hvd_where")
    assert r.status == "ok", r.error_text
    assert "ranks 0-1: idle (no cell running)" in r.stdout, r.stdout
    before = where_in_pool_file(k, t0)
    assert before["why"] == "%hvd_where asked"
    k.request_action("where-full")  # what the sidebar's server does
    where = where_in_pool_file(k, newer_than=before["asked"])
    assert where["why"] == "the sidebar asked" and where["full"], where
    assert where["places"] == ["idle (no cell running)"] * 2, where
    healthy(k)


def test_the_sidebars_where_during_a_cell_is_said_under_it(kernel):
    k = kernel

    def ask_where(_result) -> None:
        def later() -> None:
            time.sleep(2.0)
            k.request_action("where")

        threading.Thread(target=later, daemon=True).start()

    cell = "%%hvd\nimport time\ndef step():\n    time.sleep(5)\nif rank == 0:\n    step()\nprint('done')\n"
    t0 = time.time()
    r = k.run(cell, timeout=60, on_start=ask_where)
    assert r.status == "ok", r.error_text
    said = r.stdout
    assert "where the ranks were when the sidebar asked:" in said, said
    assert re.search(r"rank 0: in step\(\) \(Cell In\[\d+\], line 3\) -> time\.sleep\(5\)", said), said
    assert "rank 1: finished the cell" in said, said
    assert re.match(r"in step\(\) \(Cell In\[\d+\], line 3\)", where_in_pool_file(k, t0)["places"][0])
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
    assert r.prompts == ["(Pdb rank 1) "] * 3, r.prompts
    assert "pdb on rank 1" in r.stdout and "raise ValueError('boom')" in r.stdout, r.stdout
    assert "\n42\n7\n" in r.stdout, r.stdout
    healthy(k)
    r = k.run("%hvd_debug --rank 0")
    assert r.status == "error" and "Nothing to debug on rank 0" in r.stderr + r.error_text, r.stderr


def test_the_stop_button_leaves_hvd_debug(kernel):
    k = kernel
    assert k.run("%%hvd\nx = 3\nraise ValueError('boom')").status == "error"

    def stop_instead(_prompt: str) -> None:
        k.km.interrupt_kernel()

    r = k.run("%hvd_debug --rank 1", inputs=stop_instead, timeout=60)
    assert r.prompts == ["(Pdb rank 1) "], r.prompts
    assert r.status == "error" and "KeyboardInterrupt" in r.error_text, r.error_text
    healthy(k)

    # The stop button while the rank runs a long pdb command: the rank is interrupted, and pdb quits.
    def sleep_then_stop(_prompt: str) -> str:
        threading.Timer(2.0, k.km.interrupt_kernel).start()
        return "__import__('time').sleep(60)"

    started = time.monotonic()
    r = k.run("%hvd_debug --rank 1", inputs=sleep_then_stop, timeout=60)
    assert r.status == "error" and "KeyboardInterrupt" in r.error_text, r.error_text
    assert time.monotonic() - started < 20, "the rank's command was not interrupted"
    healthy(k)


def test_breakpoint_in_a_cell_stops_that_rank_in_pdb_and_the_others_wait_for_it(kernel):
    k = kernel
    cell = (
        "%%hvd\ny = 5\nif rank == 1:\n    breakpoint()\n    y = 99\n"
        "print('rank', rank, 'y', y, hvd.allreduce(torch.ones(1), op=hvd.Sum, name='after_bp').item())"
    )
    r = k.run(cell, inputs=["p y", "n", "p y", "c"], timeout=60)
    assert r.status == "ok", r.error_text
    assert r.prompts == ["(Pdb rank 1) "] * 4, r.prompts
    assert "rank 1 is in the debugger (pdb)" in r.stdout, r.stdout
    assert "\n5\n" in r.stdout and "\n99\n" in r.stdout, r.stdout
    assert "rank 0 y 5 2.0" in r.stdout, r.stdout
    healthy(k)


def test_a_rank_in_pdb_is_not_taken_for_uneven_collectives(kernel):
    k = kernel
    # Rank 0 finishes its part while rank 1, in pdb, steps over an allreduce of its own: without the debugger that
    # is a mismatch (ended within seconds); here it waits for the user, who then quits.
    cell = "%%hvd\nif rank == 1:\n    breakpoint()\n    hvd.allreduce(torch.ones(1), name='only_rank_1')\n"
    started = time.monotonic()
    answers = iter(["n"])

    def step_then_wait(_prompt: str) -> str:
        answer = next(answers, None)
        if answer is None:  # the second prompt (after the allreduce, or never): wait past the mismatch check first
            time.sleep(max(0.0, started + 9 - time.monotonic()))
            return "q"
        return answer

    def stop_later(_result) -> None:
        threading.Timer(14, k.km.interrupt_kernel).start()

    r = k.run(cell, inputs=step_then_wait, timeout=60, on_start=stop_later)
    assert time.monotonic() - started > 8, "the cell ended while rank 1 was in the debugger"
    assert "Collectives did not match" not in r.error_text + r.stderr, r.error_text + r.stderr
    healthy(k)


def test_q_or_the_stop_button_at_a_breakpoints_prompt_ends_the_cell_on_every_rank(kernel):
    k = kernel
    # 'before_bp' first: rank 0 is in the cell, and waits in 'after_bp', by the time rank 1 is at its prompt.
    cell = (
        "%%hvd\nhvd.allreduce(torch.ones(1), name='before_bp')\nif rank == 1:\n    breakpoint()\n"
        "hvd.allreduce(torch.ones(1), name='after_bp')\nprint('went on')"
    )
    r = k.run(cell, inputs=["q"], timeout=60)
    assert r.status == "error" and "went on" not in r.stdout, r.stdout
    assert "Interrupted: ranks 0-1 stopped." in r.error_text, r.error_text  # pdb's quit, not an error of the user's
    healthy(k)

    def stop_instead(_prompt: str) -> None:
        # Rank 1 at its prompt has passed 'before_bp'; rank 0, on a loaded machine, may still be on its way out of it.
        time.sleep(1.5)
        k.km.interrupt_kernel()

    n = prompt(k)
    r = k.run(cell, inputs=stop_instead, timeout=60)
    assert r.status == "error", r.stdout
    assert "went on" not in r.stdout, r.stdout
    assert f"rank 1: in the debugger (pdb) at Cell In[{n}], line 4" in r.stdout, r.stdout
    assert f"rank 0: waiting in allreduce 'after_bp' (Cell In[{n}], line 4)" in r.stdout, r.stdout
    healthy(k)


def test_q_at_a_breakpoints_prompt_stops_every_rank_every_time(kernel):
    """The race once seen in a full run ('went on' printed by a rank after q): q at the prompt, many times over, while
    the other rank waits in a collective; never a rank that goes on, and the pool healthy after each."""
    k = kernel
    cycles = int(os.environ.get("HVD_PDB_CYCLES", "50"))
    cell = (
        "%%hvd\nhvd.allreduce(torch.ones(1), name='before_bp')\nif rank == 1:\n    breakpoint()\n"
        "hvd.allreduce(torch.ones(1), name='after_bp')\nprint('went on', rank)"
    )
    wrong = []  # (cycle, what the cell said) where a rank went on, or the cell did not end as pdb's quit
    for i in range(cycles):
        r = k.run(cell, inputs=["q"], timeout=60)
        if "went on" in r.stdout or "Interrupted: ranks 0-1 stopped." not in r.error_text:
            wrong.append((i, r.status, r.stdout[-300:], r.error_text[-300:]))
    assert not wrong, f"{len(wrong)} of {cycles}: {wrong[:3]}"
    healthy(k)
