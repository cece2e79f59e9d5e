"""Engines forked from the kernel's warm template (processes/template.py) behave as engines started cold: Horovod,
threads and random streams per rank, a rank's death seen and healed by a restart, mpiexec's kill reaching them, and
a pool that starts cold where there is no template.

A real kernel, real mpiexec, real forked engines.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import ipyparallel
import psutil
import pytest
from conftest import Kernel

from jupyter_hvd.kernel.launch.template import STUB, TEMPLATE_DIR_ENV
from jupyter_hvd.testing.faults import engines_of

PROBE = (
    "%%hvd --ranks all\n"
    "import json, os, numpy\n"
    "print('probe', json.dumps({'rank': rank, 'warm': os.environ.get('JUPYTER_HVD_WARM_ENGINE'), 'pid': os.getpid(),\n"
    "      'ppid': os.getppid(), 'threads': torch.get_num_threads(), 'draw': float(numpy.random.rand()),\n"
    "      'sum': hvd.allreduce(torch.tensor([rank + 1.0]), op=hvd.Sum, name='probe').item()}))"
)


def probe(k: Kernel) -> dict[int, dict]:
    r = k.run(PROBE, timeout=60)
    assert r.status == "ok", r.error_text + r.stderr
    rows = [json.loads(line.split("probe ", 1)[1]) for line in r.stdout.splitlines() if "probe {" in line]
    return {row["rank"]: row for row in rows}


def template_pid(k: Kernel) -> int:
    r = k.run("from jupyter_hvd.kernel.launch.template import template\nprint('tpl', template.pid)")
    return int(r.stdout.split("tpl ")[1].split()[0])


def wait_ready(k: Kernel, timeout: float = 60) -> None:
    code = (
        "import time\nfrom jupyter_hvd.kernel.launch.template import template\n"
        f"t0 = time.monotonic()\nwhile not template.ready() and time.monotonic() - t0 < {timeout}:\n"
        "    time.sleep(0.05)\nprint('ready', template.ready())"
    )
    assert "ready True" in k.run(code, timeout=timeout + 10).stdout


# A template of the kernel's own (these tests kill it), not the one the test run's kernels share.
OWN = {TEMPLATE_DIR_ENV: ""}


@pytest.fixture(scope="module")
def k():
    kernel = Kernel(extra_env=OWN)
    r = kernel.run("%load_ext jupyter_hvd", timeout=60)
    assert r.status == "ok", r.error_text
    wait_ready(kernel)
    r = kernel.run("%hvd_start -np 2 --timeout 60", timeout=120)
    assert r.status == "ok", r.error_text + r.stderr
    try:
        yield kernel
    finally:
        kernel.run("%hvd_stop", timeout=60)
        kernel.shutdown()


def test_ranks_forked_from_the_template_are_engines_like_any_other(k: Kernel) -> None:
    rows = probe(k)
    tpl = template_pid(k)
    cores = len(os.sched_getaffinity(0))
    assert sorted(rows) == [0, 1]
    for row in rows.values():
        assert (row["warm"] or "").isdigit() and row["ppid"] == tpl, row  # forked, not started by mpiexec
        assert row["sum"] == 3.0
        assert row["threads"] == max(1, cores // 2)  # the pool's own setting, not the template's single thread
    assert rows[0]["draw"] != rows[1]["draw"]  # numpy's stream is each rank's own, as in processes started apart
    # The kernel, its reaper and the fault campaign find a pool's engines by the pool's id in /proc/PID/environ.
    assert {p.pid for p in engines_of(k.pool()["id"])} == {rows[0]["pid"], rows[1]["pid"]}


def test_a_killed_rank_is_seen_and_the_pool_restarts_warm(k: Kernel) -> None:
    before = probe(k)

    def kill(_res: object) -> None:
        time.sleep(1.0)
        os.kill(before[1]["pid"], signal.SIGKILL)

    t0 = time.monotonic()
    r = k.run("%%hvd\nimport time\nfor i in range(200):\n    time.sleep(0.05)\n", timeout=120, on_start=kill)
    assert r.status == "error"
    # The engine's own pid (where it wrote its stack if it crashed), not the stub's that mpiexec saw die.
    assert f"Rank 1 (pid {before[1]['pid']}, " in r.error_text and "died on signal 9" in r.error_text, r.error_text
    assert "restarted" in r.error_text
    assert time.monotonic() - t0 < 30
    after = probe(k)
    assert {row["pid"] for row in after.values()}.isdisjoint(row["pid"] for row in before.values())
    assert all((row["warm"] or "").isdigit() for row in after.values())


@pytest.mark.parametrize("start", ["warm", "cold"])
def test_a_killed_rank_is_named_though_mpiexec_says_nothing_of_it(k: Kernel, start: str) -> None:
    # Under load mpiexec was seen to reap a dead rank without a word of how it ended: the cell then said "Ranks 0-1 on
    # vm died". The stub mpiexec launched for each rank here, warm (forked by the template) or cold (its own child),
    # writes how its engine ended before it ends itself, and the kernel reads that.
    if start == "cold":
        r = k.run("%hvd_stop\n%config HvdPool.warm_start = False\n%hvd_start -np 2 --timeout 60", timeout=120)
        assert r.status == "ok", r.error_text + r.stderr
    before = probe(k)
    assert all((row["warm"] is None) == (start == "cold") for row in before.values()), before
    mpiexec = next(p for p in psutil.Process(k.pid).children(recursive=True) if p.name() in ("mpiexec", "prterun"))

    def kill(_res: object) -> None:
        time.sleep(1.0)
        mpiexec.suspend()  # busy elsewhere when the rank dies, as on a loaded machine: it prints no word of it
        os.kill(before[1]["pid"], signal.SIGKILL)
        time.sleep(1.5)
        mpiexec.resume()

    r = k.run("%%hvd\nimport time\nfor i in range(200):\n    time.sleep(0.05)\n", timeout=120, on_start=kill)
    assert r.status == "error"
    assert f"Rank 1 (pid {before[1]['pid']}, " in r.error_text, r.error_text
    assert "died on signal 9 (Killed)" in r.error_text and "restarted" in r.error_text, r.error_text
    assert sorted(probe(k)) == [0, 1]
    if start == "cold":
        r = k.run("%hvd_stop\n%config HvdPool.warm_start = True\n%hvd_start -np 2 --timeout 60", timeout=120)
        assert r.status == "ok", r.error_text + r.stderr


def test_mpiexec_ending_a_rank_ends_its_forked_engine(k: Kernel) -> None:
    rows = probe(k)
    engine = psutil.Process(rows[0]["pid"])
    stubs = [
        p
        for p in psutil.process_iter(["cmdline"])
        if (p.info["cmdline"] or [])[1:3] == ["-S", str(STUB)] and p.environ().get("JUPYTER_HVD_POOL") == k.pool()["id"]
    ]
    assert len(stubs) == 2, stubs
    stub = next(s for s in stubs if s.environ().get("OMPI_COMM_WORLD_RANK") == "0")
    stub.kill()  # what mpiexec does to a rank that will not end: SIGKILL, which the stub cannot pass on
    engine.wait(timeout=5)
    r = k.run("%%hvd\nprint('after', rank)", timeout=120)
    assert "restart" in (r.error_text + r.stdout + r.stderr), r.error_text + r.stdout
    assert sorted(probe(k)) == [0, 1]


def test_without_a_template_the_pool_starts_cold(k: Kernel) -> None:
    r = k.run("%hvd_stop\n%config HvdPool.warm_start = False\n%hvd_start -np 2 --timeout 60", timeout=120)
    assert r.status == "ok", r.error_text + r.stderr
    rows = probe(k)
    assert all(row["warm"] is None for row in rows.values()), rows
    r = k.run("%hvd_stop\n%config HvdPool.warm_start = True\n%hvd_start -np 2 --timeout 60", timeout=120)
    assert r.status == "ok", r.error_text + r.stderr
    assert all((row["warm"] or "").isdigit() for row in probe(k).values())
    dead = psutil.Process(template_pid(k))
    dead.kill()  # a template that died: the next start forks from a new one
    deadline = time.monotonic() + 5
    while dead.is_running() and dead.status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
        time.sleep(0.02)  # (a zombie until the kernel reaps it)
    r = k.run("%hvd_restart", timeout=120)
    assert r.status == "ok", r.error_text + r.stderr
    rows = probe(k)
    assert all((row["warm"] or "").isdigit() for row in rows.values()), rows
    assert rows[0]["ppid"] == template_pid(k)


def test_the_kernels_death_ends_the_template_and_its_engines() -> None:
    kernel = Kernel(extra_env=OWN)
    r = kernel.run("%load_ext jupyter_hvd\n%hvd_start -np 2 --timeout 60", timeout=120)
    assert r.status == "ok", r.error_text + r.stderr
    rows = probe(kernel)
    tpl = template_pid(kernel)
    procs = [psutil.Process(pid) for pid in (tpl, rows[0]["pid"], rows[1]["pid"])]
    os.kill(kernel.pid, signal.SIGKILL)
    _, alive = psutil.wait_procs(procs, timeout=15)
    assert not alive, [p.pid for p in alive]
    assert not (kernel.state_dir / f"template-{kernel.pid}").exists()  # nothing left in the runtime directory
    kernel.kc.stop_channels()


def test_a_start_right_after_load_ext_runs_cold_and_the_template_waits_for_it() -> None:
    kernel = Kernel(extension=False, extra_env=OWN)
    try:
        # As a notebook run top to bottom: the template has not begun its imports, which would slow the ranks'.
        r = kernel.run("%load_ext jupyter_hvd\n%hvd_start -np 2 --timeout 60", timeout=120)
        assert r.status == "ok", r.error_text + r.stderr
        assert all(row["warm"] is None for row in probe(kernel).values())
        wait_ready(kernel)  # it imports once the start is done
        r = kernel.run("%hvd_restart", timeout=120)
        assert r.status == "ok", r.error_text + r.stderr
        assert all((row["warm"] or "").isdigit() for row in probe(kernel).values())
    finally:
        kernel.run("%hvd_stop", timeout=60)
        kernel.shutdown()


def test_a_stub_without_its_template_starts_the_engine_cold(tmp_path) -> None:
    dead = tmp_path / "engines"  # a template that died: its socket file is there, nobody listens
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(dead))
    listener.close()
    for where in (str(tmp_path / "missing"), str(dead)):
        env = {**os.environ, "JUPYTER_HVD_TEMPLATE": where}
        out = subprocess.run(
            [sys.executable, "-S", str(STUB), "--version"], env=env, capture_output=True, text=True, timeout=60
        )
        assert out.returncode == 0 and out.stdout.strip() == ipyparallel.__version__, out  # ipyparallel's engine


def test_a_kernel_borrows_a_ready_template_and_outlives_its_lender(tmp_path) -> None:
    # The state directory of one Jupyter server's kernels, as far as templates go; short, for the socket's name.
    where = Path(tempfile.mkdtemp(prefix="hvd-t-"))
    shared = {TEMPLATE_DIR_ENV: str(where)}
    lender = Kernel(extra_env=shared)
    borrower = Kernel(extra_env=shared)  # (the lender's template was ready: Kernel() waited for it)
    notebooks = tmp_path / "notebooks"
    notebooks.mkdir()
    (notebooks / "helpers_of_mine.py").write_text("ANSWER = 42\n")
    try:
        tpl = template_pid(lender)
        assert template_pid(borrower) == tpl
        assert sorted(p.is_symlink() for p in where.glob("template-*")) == [False, True]  # the lender's, a link to it
        r = borrower.run(f"%cd {notebooks}\n%hvd_start -np 2 --timeout 60", timeout=120)
        assert r.status == "ok", r.error_text + r.stderr
        before = probe(borrower)
        assert all(row["ppid"] == tpl and (row["warm"] or "").isdigit() for row in before.values()), before
        # The borrower's ranks import from its own directory, as ranks started there would.
        r = borrower.run(
            "%%hvd --ranks all\nimport helpers_of_mine\nprint('answer', helpers_of_mine.ANSWER, os.getcwd())"
        )
        assert r.stdout.count(f"answer 42 {notebooks}\n") == 2, r.error_text + r.stdout

        lender.shutdown()  # its template serves no one new, and stays for the borrower's ranks
        assert sorted(probe(borrower)) == [0, 1]
        assert psutil.pid_exists(tpl)

        def kill(_res: object) -> None:
            time.sleep(1.0)
            os.kill(before[1]["pid"], signal.SIGKILL)

        r = borrower.run("%%hvd\nimport time\nfor i in range(200):\n    time.sleep(0.05)\n", timeout=120, on_start=kill)
        # How the rank ended still reaches the borrower (the lender's template told the rank's stub), and the pool
        # restarts from a template of the borrower's own.
        assert f"Rank 1 (pid {before[1]['pid']}, " in r.error_text and "died on signal 9" in r.error_text, r.error_text
        assert "restarted" in r.error_text, r.error_text
        after = probe(borrower)
        assert sorted(after) == [0, 1] and template_pid(borrower) != tpl
        deadline = time.monotonic() + 15
        while psutil.pid_exists(tpl) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not psutil.pid_exists(tpl)  # its last engine ended with the restart: so did it
    finally:
        for kernel in (lender, borrower):
            if kernel.km.is_alive():
                kernel.run("%hvd_stop", timeout=60)
                kernel.shutdown()
        shutil.rmtree(where, ignore_errors=True)
