"""A pool that never hangs: seeded random faults on a 2-rank pool in a real kernel, each followed by a healthy cell.

HVD_FAULT_CYCLES (default 30) and HVD_FAULT_SEED (default 20261122) set the length and the draw; a longer soak:
`HVD_FAULT_CYCLES=300 bash scripts/test.sh -k faults`.
"""

from __future__ import annotations

import json
import os
import random
import signal
import threading
import time
from pathlib import Path

import pytest
from conftest import Kernel, pool_processes, wait_until_gone

LOOP = "for i in range(100000):\n    hvd.allreduce(torch.ones(256), name=f'loop.{i}')\n"

# fault name -> (cell, what the error must say, seconds the cell may take at most)
FAULTS = {
    "raise_one_in_allreduce": (
        "%%hvd\nfor i in range(100000):\n    if rank == 1 and i == 20:\n        raise ValueError('injected')\n"
        "    hvd.allreduce(torch.ones(256), name=f'loop.{i}')\n",
        "rank 1: ValueError: injected",
        10,
    ),
    "raise_all": ("%%hvd\nraise RuntimeError('everyone')\n", "ranks 0-1: RuntimeError: everyone", 10),
    "exit_one": (
        "%%hvd\nimport os\nfor i in range(100000):\n    if rank == 1 and i == 20:\n        os._exit(3)\n"
        "    hvd.allreduce(torch.ones(256), name=f'loop.{i}')\n",
        "exited with code 3",
        40,
    ),
    "kill9_one": ("%%hvd\n" + LOOP, "died on signal 9", 40),
    "interrupt": ("%%hvd\n" + LOOP, "Interrupted", 10),
}
HEALTHY = "%%hvd\nprint('sum', hvd.allreduce(torch.tensor([rank + 1.0]), name='healthy', op=hvd.Sum).item())"


def rank_pid(state_dir: Path, kernel_pid: int, rank: int) -> int:
    for f in state_dir.glob(f"pool-hvd-{kernel_pid}-*.json"):
        if f.name.endswith(".action.json"):
            continue
        data = json.loads(f.read_text())
        for r in data["ranks"]:
            if r["rank"] == rank:
                return int(r["pid"])
    raise AssertionError("no state file for the pool")


def test_faults_never_hang_the_notebook(_state_dir):
    cycles = int(os.environ.get("HVD_FAULT_CYCLES", "30"))
    seed = int(os.environ.get("HVD_FAULT_SEED", "20261122"))
    rng = random.Random(seed)
    print(f"fault injection: {cycles} cycles, seed {seed}")
    k = Kernel()
    prefix = f"hvd-{k.pid}-"
    survived, hung, timings = 0, 0, {}
    try:
        r = k.run("%load_ext jupyter_hvd\n%hvd_start -np 2", timeout=120)
        assert r.status == "ok", r.error_text + r.stderr
        for cycle in range(cycles):
            name = rng.choice(sorted(FAULTS))
            cell, expected, bound = FAULTS[name]

            def inject(res, name=name):
                def later():
                    time.sleep(1.0)
                    if name == "kill9_one":
                        os.kill(rank_pid(_state_dir, k.pid, 1), signal.SIGKILL)
                    elif name == "interrupt":
                        k.km.interrupt_kernel()

                if name in ("kill9_one", "interrupt"):
                    threading.Thread(target=later, daemon=True).start()

            t0 = time.monotonic()
            try:
                res = k.run(cell, timeout=bound + 60, on_start=inject)
            except TimeoutError:
                hung += 1
                pytest.fail(f"cycle {cycle} ({name}) hung")
            took = time.monotonic() - t0
            timings.setdefault(name, []).append(took)
            assert res.status == "error", (name, res.stdout)
            assert expected in res.error_text, (name, res.error_text, res.stderr)
            assert took < bound, f"cycle {cycle} ({name}) took {took:.1f} s > {bound} s"
            ok = k.run(HEALTHY, timeout=60)
            assert ok.status == "ok", (cycle, name, ok.error_text)
            assert "sum 3.0" in ok.stdout
            survived += 1
            # A restart must not leave the old engines behind: exactly 2 engine processes, one mpiexec.
            engines = [
                p for p in pool_processes(prefix) if p.name() == "python" and "jupyter_hvd.engine.main" in p.cmdline()
            ]
            assert len(engines) == 2, [p.cmdline() for p in engines]
        r = k.run("%hvd_stop")
        assert r.status == "ok"
    finally:
        k.shutdown()
    leaked = len(wait_until_gone(prefix))
    for name, ts in sorted(timings.items()):
        print(f"  {name:<24} n={len(ts):<3} median {sorted(ts)[len(ts) // 2]:.2f} s  max {max(ts):.2f} s")
    print(f"faults: {survived} survived, {hung} hung, {leaked} leaked")
    assert leaked == 0
