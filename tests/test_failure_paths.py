"""Failure paths found by reading the code (issue 23), each shown on a real pool: ranks that decide differently
whether Horovod may rest never block each other.
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from pathlib import Path

import pytest
from conftest import new_kernel, wait_until_gone


def test_ranks_that_disagree_about_resting_never_block_each_other():
    k = new_kernel()
    try:
        r = k.run("%load_ext jupyter_hvd\n%config HvdPool.live_view = 'text'\n%hvd_start -np 2", timeout=120)
        assert r.status == "ok", r.error_text
        # Rank 0's environment now forbids a rest (a tuning variable Horovod cannot start again with); rank 1's not.
        r = k.run("%%hvd\nimport os\nif rank == 0:\n    os.environ['HOROVOD_FUSION_THRESHOLD'] = '1048576'")
        assert r.status == "ok", r.error_text
        time.sleep(4)  # idle past --rest-after: the kernel asks every rank to rest
        t0 = time.monotonic()
        r = k.run("%%hvd\nprint('sum', hvd.allreduce(torch.ones(1), op=hvd.Sum, name='after').item())", timeout=60)
        assert r.status == "ok" and "sum 2.0" in r.stdout, r.stdout + r.error_text
        assert time.monotonic() - t0 < 10
    finally:
        k.shutdown()
    assert wait_until_gone(f"hvd-{k.pid}-") == []


def test_sidebar_actions_leave_a_line_in_the_notebook_and_a_stop_during_the_replay_says_so(tmp_path):
    slow = tmp_path / "slow"
    k = new_kernel()
    try:
        r = k.run("%load_ext jupyter_hvd\n%config HvdPool.live_view = 'text'\n%hvd_start -np 2", timeout=120)
        assert r.status == "ok", r.error_text
        mark = tmp_path / "replaying"  # the setup cell says it began (rank 0), then waits while `slow` exists
        setup = (
            f"%%hvd --setup\nimport os, time\nx = 1\nif rank == 0:\n    open({str(mark)!r}, 'w').close()\n"
            f"while os.path.exists({str(slow)!r}):\n    time.sleep(0.1)"
        )
        assert k.run(setup).status == "ok"
        pool_id = k.run("from jupyter_hvd.kernel.owner import current\nprint(current().id)").stdout.strip()
        # Restart from the sidebar: the action file the Jupyter server writes, between cells. No cell runs until the
        # kernel took it (one running then would be ended by the restart, which says so in its error instead).
        k.request_action("restart", pool_id)
        deadline = time.monotonic() + 10
        while k.action_pending(pool_id):
            assert time.monotonic() < deadline, "the kernel did not take the sidebar's restart within 10 s"
            time.sleep(0.1)
        deadline = time.monotonic() + 30
        said = ""
        while time.monotonic() < deadline and "restarted from the sidebar" not in said:
            time.sleep(1)
            said = k.run("%%hvd\nprint('x', x)").stdout
        assert "the pool was restarted from the sidebar at" in said and "replayed 1 setup cell" in said, said
        # Stop from the sidebar while the replay of a restart runs: said, no AssertionError.
        slow.touch()
        mark.unlink()
        k.request_action("restart", pool_id)
        deadline = time.monotonic() + 120
        while not mark.exists():  # the restart's replay of the setup cell began, and now waits on `slow`
            assert time.monotonic() < deadline, "the restart's replay did not begin within 120 s"
            time.sleep(0.1)
        k.request_action("stop", pool_id)
        time.sleep(3)
        slow.unlink()
        deadline = time.monotonic() + 30
        r = k.run("%hvd_status")
        while time.monotonic() < deadline and "No jupyter-hvd pool is running" not in r.stdout:
            time.sleep(1)
            r = k.run("%hvd_status")
        assert "stopped from the sidebar" in r.stdout, r.stdout
        r = k.run("%%hvd\nx")
        assert "AssertionError" not in r.error_text + r.stderr, r.error_text
        assert "stopped from the sidebar" in r.stderr + r.error_text, r.stderr + r.error_text
    finally:
        k.shutdown()
    assert wait_until_gone(f"hvd-{k.pid}-") == []


def test_the_sidebars_restart_during_a_cell_ends_it_as_a_restart_not_an_interrupt():
    k = new_kernel()
    try:
        r = k.run("%load_ext jupyter_hvd\n%config HvdPool.live_view = 'text'\n%hvd_start -np 2", timeout=120)
        assert r.status == "ok", r.error_text
        assert k.run("%%hvd --setup\nx = 1").status == "ok"
        pool_id = k.run("from jupyter_hvd.kernel.owner import current\nprint(current().id)").stdout.strip()

        def restart_soon(_result) -> None:
            threading.Timer(3.0, k.request_action, ("restart", pool_id)).start()

        r = k.run("%%hvd\nimport time\ntime.sleep(60)", on_start=restart_soon, timeout=120)
        assert r.status == "error"  # the cell did not run to its end: a Run All stops here
        text = re.sub(r"\x1b\[[0-9;]*m", "", r.error_text)
        assert "Interrupted" not in text, text
        assert "The sidebar's Restart stopped this cell: ranks 0-1 stopped." in text, text
        # What the restart did is the last word, once, and nothing of it is a warning on the red background.
        last = text.strip().splitlines()[-1]
        assert last.startswith("The pool was restarted from the sidebar") and "replayed 1 setup cell" in last, text
        assert "restarted" not in r.stdout + r.stderr, r.stdout + r.stderr
        assert k.run("%%hvd\nprint('x', x)").stdout == "x 1\n"
    finally:
        k.shutdown()
    assert wait_until_gone(f"hvd-{k.pid}-") == []


def test_what_a_users_thread_prints_between_cells_is_shown_under_the_next_cell(tmp_path: Path) -> None:
    k = new_kernel()
    try:
        r = k.run("%load_ext jupyter_hvd\n%config HvdPool.live_view = 'text'\n%hvd_start -np 2", timeout=120)
        assert r.status == "ok", r.error_text
        done = tmp_path / "ticked"
        cell = (
            "%%hvd\nimport threading, time, pathlib\ndef ticks():\n    for i in range(5):\n        time.sleep(0.2)\n"
            "        print('tick', rank, i, flush=True)\n"
            f"    pathlib.Path('{done}-' + str(rank)).touch()\nthreading.Thread(target=ticks).start()"
        )
        assert k.run(cell).status == "ok"
        deadline = time.monotonic() + 60  # the threads print after the cell has ended; a loaded machine is slow
        while not all(Path(f"{done}-{rank}").exists() for rank in (0, 1)):
            assert time.monotonic() < deadline, "the ranks' threads did not finish printing within 60 s"
            time.sleep(0.05)
        r = k.run("%%hvd\nprint('next')")
        assert r.status == "ok", r.error_text
        for rank in (0, 1):
            assert f"rank {rank} printed between cells:" in r.stderr and f"tick {rank} 4" in r.stderr, r.stderr
        # What ipyparallel itself runs on the engines (%%px on the pool's client) keeps its output in its cell.
        k.run(
            "from jupyter_hvd.kernel.owner import current\nv = current().client[:]\nv.block = True\nv.activate()"
        ).check()
        r = k.run("%%px\nprint('from px')").check()
        shown = sorted(o["data"]["text/plain"] for o in r.outputs)
        assert shown == ["[stdout:0] from px\n", "[stdout:1] from px\n"], r.messages
        assert "from px" not in k.run("%%hvd\nprint('after')").check().stderr
    finally:
        k.shutdown()
    assert wait_until_gone(f"hvd-{k.pid}-") == []


def test_a_stop_while_a_restart_launches_engines_leaves_no_process():
    k = new_kernel()
    try:
        r = k.run("%load_ext jupyter_hvd\n%config HvdPool.live_view = 'text'\n%hvd_start -np 2", timeout=120)
        assert r.status == "ok", r.error_text
        # The stop comes from another thread of the kernel (what a shutdown or an extension may do) the moment the
        # restart after the crash below begins.
        k.run(
            "import threading, time\nfrom jupyter_hvd.kernel.owner import owner\n_p = owner.pool\n"
            "def _stop_when_restarting():\n    while _p.state != 'restarting':\n        time.sleep(0.01)\n"
            "    time.sleep(0.5)\n    owner.stop(_p)\n"
            "threading.Thread(target=_stop_when_restarting, daemon=True).start()"
        ).check()
        r = k.run("%%hvd\nimport os, time\nif rank == 1:\n    os._exit(3)\ntime.sleep(30)", timeout=120)
        assert r.status == "error"
        said = r.error_text + r.stderr
        assert "The pool was stopped while its engines started." in said, said
        assert "AssertionError" not in said, said
        assert wait_until_gone(f"hvd-{k.pid}-", timeout=20) == []
        r = k.run("%%hvd\n1")
        assert "No jupyter-hvd pool is running" in r.stderr, r.stderr
    finally:
        k.shutdown()
    assert wait_until_gone(f"hvd-{k.pid}-") == []


def test_a_controller_that_does_not_answer_is_described_and_nothing_is_left(ip, monkeypatch):
    """The controller hangs (SIGSTOP) once it is ready: %hvd_start ends soon after its --timeout, and its error says
    what the kernel saw (the controller stopped, its socket there, no answer to a client of its own), not a bare
    timeout; no process of the pool is left."""
    from jupyter_hvd.kernel import owner as pools
    from jupyter_hvd.kernel.errors import PoolError
    from jupyter_hvd.kernel.launch.launcher import Launcher

    start_controller = Launcher.start_controller

    def hanging(self: Launcher) -> str:
        address = start_controller(self)
        deadline = time.monotonic() + 60
        while not all(Path(f).exists() for f in self.cluster.controller.connection_files.values()):
            assert time.monotonic() < deadline, "the controller wrote no connection file within 60 s"
            time.sleep(0.05)
        os.kill(self.cluster.controller.pid, signal.SIGSTOP)
        return address

    monkeypatch.setattr(Launcher, "start_controller", hanging)
    t0 = time.monotonic()
    with pytest.raises(PoolError) as info:
        ip.run_line_magic("hvd_start", "-np 2 --timeout 10")
    said = f"{info.value}\n{info.value.hint}"
    assert "did not answer the kernel within 10 s" in said, said
    assert "controller: stopped" in said and "(exists: True)" in said, said
    assert "a client on a zmq context of its own got an answer within 5 s: False" in said, said
    assert time.monotonic() - t0 < 45  # 10 s, the 5 s question, and the stop
    assert pools.current() is None
    assert wait_until_gone(f"hvd-{os.getpid()}-", timeout=15) == []
