"""Horovod in a cell exactly as under mpirun: a script's hvd.init(...) with process sets, HOROVOD_* variables set
in a cell before hvd.init(), a pasted script's argparse and its final hvd.shutdown().

A real 2-rank pool per test (process sets stay registered for a pool's life, as for a script's) in a real kernel.
"""

from __future__ import annotations

import json
import time

import pytest
from conftest import Kernel, new_kernel, wait_until_gone

ALLREDUCE = "%%hvd\nprint('sum', hvd.allreduce(torch.tensor([rank + 1.0]), op=hvd.Sum, name='check').item())"


POOL_SETUP = "%load_ext jupyter_hvd\n%config HvdPool.live_view = 'text'\n%hvd_start -np 2"
# tests/conftest.py PoolKernel: the kernel is shared, the pool is new for each test (Horovod's settings, process sets
# and the ranks' environment are what a test changes).
POOL_CHECK, POOL_CHECK_SAYS = "%hvd_stop\n%hvd_start -np 2", "Pool ready in"


@pytest.fixture
def k(pool_kernel: Kernel) -> Kernel:
    return pool_kernel


def healthy(k: Kernel) -> None:
    r = k.run(ALLREDUCE)
    assert r.status == "ok" and "sum 3.0" in r.stdout, r.stdout + r.error_text


def test_dynamic_process_sets_work_as_in_a_script(k):
    r = k.run(
        "%%hvd\nhvd.init(process_sets='dynamic')\nfirst = hvd.add_process_set([0])\nsecond = hvd.add_process_set([1])\n"
        "mine = first if rank == 0 else second\n"
        "x = hvd.allreduce(torch.tensor([10.0 * (rank + 1)]), op=hvd.Sum, process_set=mine, name='mine')\n"
        "print('alone', rank, x.item(), mine.size(), hvd.size())\n"
        "print('removed', hvd.remove_process_set(second))",
        timeout=120,
    )
    assert r.status == "ok", r.error_text
    assert "alone 0 10.0 1 2" in r.stdout and "removed True" in r.stdout, r.stdout
    assert r.stderr.count("Horovod started again on every rank") == 1, r.stderr
    assert "process_sets='dynamic'" in r.stderr, r.stderr
    healthy(k)
    # Idle: the pool does not rest (a start without the process sets would drop them), and they still work after.
    time.sleep(3.5)
    r = k.run(
        "%%hvd\nx = hvd.allreduce(torch.ones(1), op=hvd.Sum, process_set=first, name='again') if rank == 0 else None"
    )
    assert r.status == "ok", r.error_text


def test_static_process_sets_and_the_environment_variable_way(k):
    r = k.run(
        "%%hvd\nfrom horovod.torch import ProcessSet\nevens, odds = ProcessSet([0]), ProcessSet([1])\n"
        "hvd.init(process_sets=[evens, odds])\nprint('mine', evens.included() if rank == 0 else odds.included())",
        timeout=120,
    )
    assert r.status == "ok" and "mine True" in r.stdout, r.stdout + r.error_text
    healthy(k)


def test_dynamic_process_sets_by_the_environment_variable(k):
    # Without them, Horovod's own refusal, with what to type in a pool (a script sets the variable before hvd.init()).
    r = k.run("%%hvd\nhvd.add_process_set([0])", timeout=120)
    assert r.status == "error" and "call hvd.init(process_sets='dynamic') first" in r.error_text, r.error_text
    r = k.run(
        "%%hvd\nimport os\nos.environ['HOROVOD_DYNAMIC_PROCESS_SETS'] = '1'\nhvd.init()\n"
        "solo = hvd.add_process_set([0])\n"
        "print('solo', hvd.allreduce(torch.ones(1), process_set=solo).item() if rank == 0 else solo.included())",
        timeout=120,
    )
    assert r.status == "ok" and "solo 1.0" in r.stdout, r.stdout + r.error_text
    assert "HOROVOD_DYNAMIC_PROCESS_SETS=1" in r.stderr, r.stderr
    healthy(k)


def test_a_horovod_variable_set_in_a_cell_takes_effect_at_hvd_init(k, tmp_path):
    trace = tmp_path / "timeline.json"
    r = k.run(
        f"%%hvd\nimport os\nos.environ['HOROVOD_TIMELINE'] = {str(trace)!r} if rank == 0 else ''\nhvd.init()\n"
        "for i in range(3):\n    hvd.allreduce(torch.ones(8), name=f'traced.{i}')\n"
        "os.environ.pop('HOROVOD_TIMELINE')\nhvd.init()",
        timeout=120,
    )
    assert r.status == "ok", r.error_text
    assert "HOROVOD_TIMELINE=" in r.stderr, r.stderr
    deadline = time.monotonic() + 10
    # Horovod's timeline thread may lose the last operations when Horovod stops right after them (as under mpirun).
    while time.monotonic() < deadline and "traced.0" not in (trace.read_text() if trace.exists() else ""):
        time.sleep(0.2)
    assert "traced.0" in trace.read_text(), "Horovod did not write the timeline the cell asked for"
    healthy(k)


def test_a_tuning_variable_that_horovod_cannot_start_again_with_is_named_and_the_pool_lives(k):
    r = k.run("%%hvd\nimport os\nos.environ['HOROVOD_CYCLE_TIME'] = '5'\nhvd.init()", timeout=120)
    assert r.status == "ok", r.error_text
    said = r.stderr
    assert "HOROVOD_CYCLE_TIME set in a cell cannot take effect" in said and "--cycle-time" in said, said
    healthy(k)
    k.run("%%hvd\nos.environ.pop('HOROVOD_CYCLE_TIME')")
    healthy(k)


def test_a_pasted_script_with_argparse_and_a_final_shutdown_runs(k):
    script = (
        "%%hvd\nimport argparse\nparser = argparse.ArgumentParser()\n"
        "parser.add_argument('--epochs', type=int, default=2)\nargs = parser.parse_args()\n"
        "hvd.init()\nfor epoch in range(args.epochs):\n"
        "    print('epoch', epoch, hvd.allreduce(torch.ones(1), op=hvd.Sum, name=f'e{epoch}').item())\n"
        "hvd.shutdown()\n"
    )
    r = k.run(script, timeout=120)
    assert r.status == "ok", r.error_text
    assert "epoch 1 2.0" in r.stdout, r.stdout
    assert r.stderr.count("argparse reads sys.argv == ['cell']") == 1, r.stderr
    r = k.run(script, timeout=120)
    assert r.status == "ok" and "epoch 1 2.0" in r.stdout, r.stdout + r.error_text
    assert "argparse reads" not in r.stderr, "said twice"
    healthy(k)
    r = k.run("%%hvd\nimport sys, json\nprint(json.dumps(sys.argv))")
    assert json.loads(r.stdout.strip()) == ["cell"], r.stdout


def rank_lines(stdout: str, word: str) -> dict[int, list[str]]:
    """`word rank value...` lines printed by every rank (--ranks all), by rank."""
    found = {}
    for line in stdout.splitlines():
        parts = line.split("] ", 1)[-1].split()
        if parts and parts[0] == word:
            found[int(parts[1])] = parts[2:]
    return found


def test_a_cell_that_only_waits_leaves_the_cores_alone(k):
    # Horovod's background thread spins in MPI while it runs: where no rank used it for --rest-after seconds (2 on
    # CPU ranks), it rests, also in the middle of a cell, and the cell's next collective starts it again.
    # Each rank measures its own CPU second by second until it has been quiet for 3 seconds (a busy machine may take
    # a few seconds more to rest it), 40 s at most.
    r = k.run(
        "%%hvd --ranks all\nimport time\nhvd.allreduce(torch.ones(4), name='before')\nload = []\n"
        "deadline = time.monotonic() + 40\n"
        "while (len(load) < 3 or max(load[-3:]) >= 10) and time.monotonic() < deadline:\n"
        "    c0, w0 = time.process_time(), time.monotonic()\n    time.sleep(1)\n"
        "    load.append(round(100 * (time.process_time() - c0) / (time.monotonic() - w0)))\n"
        "print('load', rank, *load)\n"
        "print('sum', rank, hvd.allreduce(torch.ones(1), op=hvd.Sum, name='after').item())",
        timeout=120,
    )
    assert r.status == "ok", r.error_text
    load = rank_lines(r.stdout, "load")
    assert sorted(load) == [0, 1], r.stdout
    assert all(int(x) < 10 for seconds in load.values() for x in seconds[-3:]), r.stdout
    assert rank_lines(r.stdout, "sum") == {0: ["2.0"], 1: ["2.0"]}, r.stdout


def test_an_awake_horovod_that_has_little_to_do_leaves_the_cores_alone(k):
    # Horovod negotiates every 1 ms in an MPI allreduce where Open MPI busy-waits: the rank that arrived first spun
    # until the other came, a whole core while Horovod was awake with little to do (bench/awake_cpu.py: 100%).
    # Every rank now waits there with naps (engine/horovod/negotiation.py). Horovod stays awake here: an allreduce
    # every 0.2 s, for 4 s; each rank says its CPU and how many negotiations it waited for with naps.
    r = k.run(
        "%%hvd --ranks all\nimport time\nfrom jupyter_hvd.engine.horovod import negotiation\n"
        "hvd.allreduce(torch.ones(1), name='awake.first')\n"
        "waits, c0, w0, step = negotiation.waits(), time.process_time(), time.monotonic(), 0\n"
        "while time.monotonic() - w0 < 4:\n"
        "    hvd.allreduce(torch.ones(1), name=f'awake.{step % 4}')\n    step += 1\n    time.sleep(0.2)\n"
        "print('awake', rank, round(100 * (time.process_time() - c0) / (time.monotonic() - w0)),"
        " negotiation.waits() - waits)",
        timeout=120,
    )
    assert r.status == "ok", r.error_text
    awake = rank_lines(r.stdout, "awake")
    assert sorted(awake) == [0, 1], r.stdout
    for cpu, waits in awake.values():
        assert int(waits) > 100, f"a rank waited in Horovod's negotiation without naps:\n{r.stdout}"
        assert int(cpu) < 50, r.stdout


def test_horovods_queries_answer_while_it_rests_and_while_it_stops():
    """hvd.rank(), hvd.cross_rank() and the like answer the same on every call while Horovod rests, starts again and
    stops (the ranks vote to rest, and another rank's stop may end this rank's Horovod before its own): a script's
    rank checks never fail because the pool is idle. Rests every 0.5 s or so with --rest-after 0.2."""
    kernel = new_kernel()
    try:
        r = kernel.run("%load_ext jupyter_hvd\n%hvd_start -np 2 --rest-after 0.2", timeout=120)
        assert r.status == "ok", r.error_text
        r = kernel.run(
            "%%hvd --ranks all\nimport time\nfrom jupyter_hvd.engine.horovod import rest\n"
            "failed, asked, resting = [], 0, 0\n"
            "first = (hvd.rank(), hvd.size(), hvd.local_rank(), hvd.cross_rank(), hvd.cross_size())\n"
            "for wake in range(12):\n"
            "    hvd.allreduce(torch.ones(1), name=f'wake.{wake}')\n"
            "    until = time.monotonic() + 1.2\n"
            "    while time.monotonic() < until:\n"
            "        try:\n"
            "            now = (hvd.rank(), hvd.size(), hvd.local_rank(), hvd.cross_rank(), hvd.cross_size())\n"
            "            asked, resting = asked + 1, resting + rest._resting\n"
            "            if now != first:\n                failed.append(repr(now))\n"
            "        except Exception as exc:\n            failed.append(f'{type(exc).__name__}: {exc}')\n"
            "print('asked', rank, asked, resting, 'failed', len(failed), *sorted(set(failed))[:2])",
            timeout=180,
        )
        assert r.status == "ok", r.error_text
        said = rank_lines(r.stdout, "asked")
        assert sorted(said) == [0, 1], r.stdout
        for words in said.values():
            asked, resting = int(words[0]), int(words[1])
            assert 0 < resting < asked and words[2:4] == ["failed", "0"], r.stdout  # it rested, and woke
    finally:
        kernel.shutdown()
    assert wait_until_gone(f"hvd-{kernel.pid}-") == []


def test_process_sets_come_back_after_an_idle_rest(k):
    import psutil

    r = k.run(
        "%%hvd --ranks all\nimport os\nhvd.init(process_sets='dynamic')\nfirst = hvd.add_process_set([0])\n"
        "second = hvd.add_process_set([1])\nhvd.remove_process_set(first)\nprint('pid', rank, os.getpid())",
        timeout=120,
    )
    assert r.status == "ok", r.error_text
    assert "it is given the same at every start after an idle rest" in r.stderr, r.stderr
    ranks = [psutil.Process(int(pid)) for (pid,) in rank_lines(r.stdout, "pid").values()]
    # Idle: Horovod rests between cells, also with process sets (an awake one spins: 50-100% a rank); a busy machine
    # may take a few seconds more to rest it, so wait for two quiet seconds, 40 s at most.
    deadline = time.monotonic() + 40
    busiest = 100.0
    while busiest >= 10 and time.monotonic() < deadline:
        for p in ranks:
            p.cpu_percent(None)
        time.sleep(2)
        busiest = max(p.cpu_percent(None) for p in ranks)
    assert busiest < 10, busiest
    # Registered again as they were: `second` works (Horovod numbered it anew), `first` stays removed.
    r = k.run(
        "%%hvd --ranks all\n"
        "x = hvd.allreduce(torch.tensor([5.0]), op=hvd.Sum, process_set=second, name='s') if rank == 1 else None\n"
        "print('sets', rank, x.item() if x is not None else '-', second.size(), second.included(), first.size())\n"
        "first = hvd.add_process_set([0])\n"
        "y = hvd.allreduce(torch.tensor([7.0]), op=hvd.Sum, process_set=first, name='f') if rank == 0 else None\n"
        "print('again', rank, first.size(), y.item() if y is not None else '-')",
        timeout=120,
    )
    assert r.status == "ok", r.error_text
    assert rank_lines(r.stdout, "sets") == {0: ["-", "1", "False", "None"], 1: ["5.0", "1", "True", "None"]}
    assert rank_lines(r.stdout, "again") == {0: ["1", "7.0"], 1: ["1", "-"]}, r.stdout
    healthy(k)


def test_settings_a_pool_cannot_take_are_named_and_the_pool_lives(k):
    r = k.run(
        "%%hvd\nimport os\nos.environ['HOROVOD_CPU_OPERATIONS'] = 'gloo'\nos.environ['HOROVOD_LOG_LEVEL'] = 'debug'\n"
        "os.environ['HOROVOD_DISABLE_GROUP_FUSION'] = '1'\nhvd.init()\n"
        "print('sum', hvd.allreduce(torch.ones(3), op=hvd.Sum, name='s').tolist())",
        timeout=120,
    )
    assert r.status == "ok", r.error_text
    said = r.stderr
    assert "HOROVOD_CPU_OPERATIONS=gloo is not used: Gloo collectives crash" in said, said
    assert "HOROVOD_LOG_LEVEL is read once per process" in said and "--env HOROVOD_LOG_LEVEL=" in said, said
    assert "with HOROVOD_DISABLE_GROUP_FUSION=1" in said, said
    assert "sum [2.0, 2.0, 2.0]" in r.stdout, r.stdout
    r = k.run("%%hvd\nos.environ.pop('HOROVOD_DISABLE_GROUP_FUSION')\nhvd.init()", timeout=120)
    assert r.status == "ok", r.error_text
    assert "HOROVOD_DISABLE_GROUP_FUSION stays 1 until %hvd_restart" in r.stderr, r.stderr
    healthy(k)


def test_a_communicator_of_the_cell_stays_after_an_idle_rest(k):
    r = k.run(
        "%%hvd --ranks all\nfrom mpi4py import MPI\nalone = MPI.COMM_WORLD.Split(rank)\nhvd.init(comm=alone)\n"
        "print('alone', rank, hvd.size(), hvd.allreduce(torch.tensor([rank + 1.0]), op=hvd.Sum, name='a').item())",
        timeout=120,
    )
    assert r.status == "ok", r.error_text
    assert rank_lines(r.stdout, "alone") == {0: ["1", "1.0"], 1: ["1", "2.0"]}, r.stdout
    time.sleep(4)  # the pool rests; the next cell starts Horovod again, on the same communicator
    r = k.run(
        "%%hvd --ranks all\n"
        "print('again', rank, hvd.size(), hvd.allreduce(torch.tensor([rank + 1.0]), op=hvd.Sum, name='a').item())",
        timeout=120,
    )
    assert rank_lines(r.stdout, "again") == {0: ["1", "1.0"], 1: ["1", "2.0"]}, r.stdout + r.error_text
    r = k.run("%%hvd\nhvd.init(comm=MPI.COMM_WORLD)", timeout=120)
    assert r.status == "ok", r.error_text
    healthy(k)


def test_a_rank_that_wakes_horovod_alone_is_named_not_left_hanging(k):
    # Rank 1 ends the cell; rank 0 waits long enough for Horovod to rest, then starts a collective that rank 1 will
    # never join: starting Horovod again waits for rank 1 like the collective would, and the kernel names it.
    r = k.run(
        "%%hvd\nimport time\nhvd.allreduce(torch.ones(1), name='both')\n"
        "if rank == 0:\n    time.sleep(5)\n    hvd.allreduce(torch.ones(1), name='alone')",
        timeout=90,
    )
    assert r.status == "error", r.stdout
    assert "Collectives did not match" in r.error_text, r.error_text
    healthy(k)


def test_the_stall_check_a_cell_sets_takes_effect(k):
    # The pool starts with a 10 s stall check; the cell asks for 2 s, as a script would before hvd.init(), and
    # Horovod's own warning names the tensor rank 1 keeps rank 0 waiting on.
    r = k.run(
        "%%hvd\nimport os, time\nos.environ['HOROVOD_STALL_CHECK_TIME_SECONDS'] = '2'\nhvd.init()\n"
        "if rank == 1:\n    time.sleep(6)\nhvd.allreduce(torch.ones(1), name='late.tensor')",
        timeout=120,
    )
    assert r.status == "ok", r.error_text
    assert "with HOROVOD_STALL_CHECK_TIME_SECONDS=2" in r.stderr, r.stderr
    assert "late.tensor" in r.stderr and "missing ranks" in r.stderr.lower(), r.stderr


def test_hvd_init_with_an_async_result_not_collected_is_refused_and_the_result_is_kept(k):
    # Starting Horovod again clears its table of handles: hvd.synchronize(h) would return None, silently.
    r = k.run(
        "%%hvd\nh = hvd.allreduce_async(torch.ones(3) * (rank + 1), op=hvd.Sum, name='pending')\n"
        "try:\n    hvd.init(process_sets=[hvd.ProcessSet([0]), hvd.ProcessSet([1])])\n"
        "except RuntimeError as exc:\n    print('refused:', exc)\nprint('@@', hvd.synchronize(h).tolist())"
    )
    assert r.status == "ok", r.error_text
    assert "refused: hvd.init(...) would start Horovod again while 1 operation(s) started with an *_async" in r.stdout
    assert "hvd.synchronize(handle) on each first" in r.stdout and "@@ [3.0, 3.0, 3.0]" in r.stdout, r.stdout
    r = k.run("%%hvd\nhvd.init(process_sets=[hvd.ProcessSet([0]), hvd.ProcessSet([1])])\nprint('@@', hvd.size())")
    assert r.status == "ok" and "@@ 2" in r.stdout, r.stdout + r.error_text
    healthy(k)
