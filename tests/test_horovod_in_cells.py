"""Horovod in a cell exactly as under mpirun: a script's hvd.init(...) with process sets, HOROVOD_* variables set
in a cell before hvd.init(), a pasted script's argparse and its final hvd.shutdown().

A real 2-rank pool in a real kernel per test (process sets stay registered for a pool's life, as for a script's).
"""

from __future__ import annotations

import json
import time

import pytest
from conftest import Kernel, wait_until_gone

ALLREDUCE = "%%hvd\nprint('sum', hvd.allreduce(torch.tensor([rank + 1.0]), op=hvd.Sum, name='check').item())"


@pytest.fixture
def k():
    kernel = Kernel()
    r = kernel.run("%load_ext jupyter_hvd\n%config HvdPool.live_view = 'text'\n%hvd_start -np 2", timeout=120)
    assert r.status == "ok", r.error_text
    yield kernel
    kernel.shutdown()
    assert wait_until_gone(f"hvd-{kernel.pid}-") == []


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
