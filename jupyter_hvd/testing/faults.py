"""A randomized fault campaign on a real 2-rank pool in a real kernel: what tests/test_faults.py asserts and
bench/fault_campaign.py reports.

Each cycle draws a fault (an exception on a random rank at a random step, uneven collectives, ranks waiting on
different tensors, exit(), sys.exit(), os._exit(), SIGSTOP then SIGCONT, SIGKILL, the stop button), runs it, and
checks that the cell ended within the fault's bound with the expected message, that the next cell works, and that
exactly the pool's two engines are alive. Nothing here asserts: every outcome is counted, so a hang or a leak shows
up in the figures (and the test fails on them).
"""

from __future__ import annotations

import os
import random
import re
import signal
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import psutil

from .. import state
from .kernel import Kernel

HEALTHY = "%%hvd\nprint('sum', hvd.allreduce(torch.tensor([rank + 1.0]), name='healthy', op=hvd.Sum).item())"


@dataclass
class Fault:
    """One kind of fault: the cell that causes it, what the cell's error must say, and how long it may take."""

    cell: str
    expected: str
    bound_s: float
    signal_rank1: list[tuple[float, int]] = field(default_factory=list)  # (seconds after the start, signal)
    interrupt_after_s: float | None = None
    ok: bool = False  # the cell is expected to succeed (SIGSTOP then SIGCONT)


HEALTHY_TORCH = "%%hvd\nx = torch.tensor([rank + 1.0])\ndist.all_reduce(x)\nprint('sum', x.item())"


def torch_faults(rng: random.Random) -> dict[str, Fault]:
    """The same faults in torch.distributed's collectives (a pool started with --torch-distributed): ranks that wait
    to agree on a collective are released by their peers whose cell ended; one stuck in a collective itself only by
    a restart of the pool."""
    drawn = faults(rng)
    torch_cells = {}
    for name, fault in drawn.items():
        if name == "mismatched_names":  # torch's collectives have no names to mismatch
            continue
        cell = re.sub(r"hvd\.allreduce\((torch\.ones\(\d+\))[^)]*\)", r"dist.all_reduce(\1)", fault.cell)
        torch_cells[name] = Fault(
            cell, fault.expected, fault.bound_s + 10, fault.signal_rank1, fault.interrupt_after_s, fault.ok
        )
    return torch_cells


def faults(rng: random.Random) -> dict[str, Fault]:
    """Every fault kind, with its random draw (rank and step) made from `rng`."""
    rank, step = rng.randrange(2), rng.randrange(1, 40)
    loop = "for i in range(100000):\n    hvd.allreduce(torch.ones(64), name=f'loop.{i}')\n"
    return {
        "raise_in_allreduce": Fault(
            f"%%hvd\nfor i in range(100000):\n    if rank == {rank} and i == {step}:\n"
            "        raise ValueError('injected')\n    hvd.allreduce(torch.ones(64), name=f'loop.{i}')\n",
            f"rank {rank}: ValueError: injected",
            10,
        ),
        "uneven_collectives": Fault(
            f"%%hvd\nfor i in range({step} + (rank == {rank})):\n    hvd.allreduce(torch.ones(4), name=f'u.{{i}}')\n",
            "Collectives did not match",
            10,
        ),
        "mismatched_names": Fault(
            "%%hvd\nhvd.allreduce(torch.ones(4), name=f'name.{rank}')\n", f"rank {rank} waits in 'name.{rank}'", 30
        ),
        "exit": Fault(
            f"%%hvd\nif rank == {rank}:\n    exit(3)\nhvd.allreduce(torch.ones(1), name='after')\n",
            f"rank {rank} called exit(3)",
            10,
        ),
        "sys_exit": Fault(
            f"%%hvd\nimport sys\nfor i in range(100000):\n    if rank == {rank} and i == {step}:\n        sys.exit(5)\n"
            "    hvd.allreduce(torch.ones(64), name=f'loop.{i}')\n",
            f"rank {rank} called exit(5)",
            10,
        ),
        "os_exit": Fault(
            f"%%hvd\nimport os\nfor i in range(100000):\n    if rank == 1 and i == {step}:\n        os._exit(3)\n"
            "    hvd.allreduce(torch.ones(64), name=f'loop.{i}')\n",
            "exited with code 3",
            40,
        ),
        "sigstop_sigcont": Fault(
            # A fixed count: a loop timed by each rank's clock would be uneven collectives of its own.
            "%%hvd\nimport time\nfor i in range(25):\n    hvd.allreduce(torch.ones(64), name='pace')\n"
            "    time.sleep(0.1)\n",
            "",
            30,
            signal_rank1=[(0.8, signal.SIGSTOP), (1.8, signal.SIGCONT)],
            ok=True,
        ),
        "sigkill": Fault("%%hvd\n" + loop, "died on signal 9", 40, signal_rank1=[(1.0, signal.SIGKILL)]),
        "stop_button": Fault("%%hvd\n" + loop, "Interrupted", 10, interrupt_after_s=1.0),
    }


@dataclass
class Outcome:
    """How one cycle ended."""

    cycle: int
    fault: str
    seconds: float
    ended: bool  # the cell returned (a hang: not within its bound plus 30 s)
    as_expected: bool  # its status and message were the expected ones
    next_cell_ok: bool
    engines: int
    detail: str = ""
    injected: bool = True  # the fault happened as drawn (a signal that found no rank 1 to hit did not)
    within_bound: bool = True  # it returned within the fault's bound (a figure for bench/fault_campaign.py)


def rank_pid(k: Kernel, rank: int) -> int:
    """A rank's engine pid, from its kernel's pool file."""
    for pool in k.pools():
        for r in pool.get("ranks", []):
            if r["rank"] == rank:
                return int(r["pid"])
    raise LookupError(f"no pool file names rank {rank}")


ENGINE = ["-m", "jupyter_hvd.engine.main"]
FORKED_ENGINE = ["-m", "jupyter_hvd.processes.template"]  # forked from the warm template: its command line


def engines_of(prefix: str) -> list[psutil.Process]:
    """Live engine processes of pools whose id starts with `prefix`."""
    found = []
    for p in psutil.process_iter():
        try:
            cmd = p.cmdline()  # mpiexec's command line names the module too: engines run it with -m
            if p.status() == psutil.STATUS_ZOMBIE or cmd[1:3] not in (ENGINE, FORKED_ENGINE):
                continue
            if p.environ().get(state.POOL_ENV, "").startswith(prefix):
                found.append(p)
        except psutil.Error:
            continue
    return found


def campaign(cycles: int, seed: int, torch_distributed: bool = False) -> dict[str, Any]:
    """Run `cycles` random faults on one pool (in torch.distributed's collectives with `torch_distributed`); returns
    every outcome and the totals (hung, leaked, memory)."""
    rng = random.Random(seed)
    k = Kernel()
    prefix = f"hvd-{k.pid}-"
    outcomes: list[Outcome] = []
    kernel = psutil.Process(k.pid)
    healthy = HEALTHY_TORCH if torch_distributed else HEALTHY
    try:
        # The default --timeout, as a user's: a restart after a fault may take more than 10 s on a loaded machine.
        start = "%hvd_start -np 2" + (" --torch-distributed" if torch_distributed else "")
        r = k.run(f"%load_ext jupyter_hvd\n{start}", timeout=120)
        if r.status != "ok":
            raise RuntimeError(r.error_text + r.stderr)
        k.run(healthy, timeout=60)
        rss_start = kernel.memory_info().rss
        for cycle in range(cycles):
            drawn = torch_faults(rng) if torch_distributed else faults(rng)
            kinds = sorted(drawn)
            name = kinds[cycle] if cycle < len(kinds) else rng.choice(kinds)  # every kind once, then at random
            outcomes.append(_cycle(k, cycle, name, drawn[name], prefix, healthy))
        rss_end = kernel.memory_info().rss
        k.run("%hvd_stop", timeout=60)
    finally:
        k.shutdown()
    deadline = time.monotonic() + 20
    while engines_of(prefix) and time.monotonic() < deadline:
        time.sleep(0.2)
    leaked = len(engines_of(prefix))
    by_fault: dict[str, list[float]] = {}
    for o in outcomes:
        by_fault.setdefault(o.fault, []).append(o.seconds)
    return {
        "cycles": cycles,
        "seed": seed,
        "hung": sum(not o.ended for o in outcomes),
        "over_bound": sum(not o.within_bound for o in outcomes),
        "unexpected": [
            o.__dict__ for o in outcomes if not (o.injected and o.as_expected and o.next_cell_ok and o.engines == 2)
        ],
        "leaked_processes": leaked,
        "kernel_rss_growth_mb": (rss_end - rss_start) / 2**20,
        "longest_s": max((o.seconds for o in outcomes), default=0.0),
        "by_fault": {
            f: {"n": len(ts), "median_s": sorted(ts)[len(ts) // 2], "max_s": max(ts)} for f, ts in by_fault.items()
        },
        "outcomes": [o.__dict__ for o in outcomes],
    }


def _cycle(k: Kernel, cycle: int, name: str, fault: Fault, prefix: str, healthy: str) -> Outcome:
    missed: list[str] = []  # why a signal of the fault never reached rank 1: the cycle tested nothing

    def inject(_res: Any) -> None:
        def later() -> None:
            t0 = time.monotonic()
            if fault.interrupt_after_s is not None:
                time.sleep(fault.interrupt_after_s)
                k.km.interrupt_kernel()
            if not fault.signal_rank1:
                return
            try:
                pid = rank_pid(k, 1)
            except LookupError as exc:
                missed.append(str(exc))
                return
            for at, sig in fault.signal_rank1:
                time.sleep(max(0.0, at - (time.monotonic() - t0)))
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    missed.append(f"rank 1 (pid {pid}) was gone before signal {sig} of the fault")
                    return

        threading.Thread(target=later, daemon=True).start()

    t0 = time.monotonic()
    try:
        res = k.run(fault.cell, timeout=fault.bound_s + 30, on_start=inject)
    except TimeoutError:
        k.km.interrupt_kernel()  # a hang: try to get the kernel back for the next cycles
        took = time.monotonic() - t0
        return Outcome(cycle, name, took, False, False, False, len(engines_of(prefix)), "hung", within_bound=False)
    took = time.monotonic() - t0
    text = res.error_text + res.stderr
    if fault.ok:
        expected = res.status == "ok"
    else:
        expected = res.status == "error" and fault.expected in text
    try:
        after = k.run(healthy, timeout=60)
        said_after = (after.error_text + after.stderr)[-400:]
        next_ok = after.status == "ok" and "sum 3.0" in after.stdout
    except TimeoutError:  # counted, not raised: the cycles after it still tell what else goes wrong
        k.km.interrupt_kernel()
        said_after, next_ok = "it did not finish within 60 s", False
        _wait_idle(k)
    detail = "" if expected else text[-600:]
    if not next_ok:  # what the fault's cell said (a restart that failed says why there), then the next cell
        detail = f"{text[-600:]}\n-- the next cell:\n{said_after}"
    if missed:
        detail = f"the fault was not injected: {missed[0]}\n{detail}"
    # A cell that ended later than its bound did not hang: how long cells take is bench/fault_campaign.py's figure
    # (a restart after a fault takes longer on a loaded machine), what the test asserts is that every cell ends.
    outcome = Outcome(
        cycle, name, took, True, expected, next_ok, len(engines_of(prefix)), detail, took <= fault.bound_s
    )
    outcome.injected = not missed
    return outcome


def _wait_idle(k: Kernel) -> None:
    """After an interrupted cell: until the kernel answers again (a cell that runs at once), 60 s at most."""
    try:
        k.run("pass", timeout=60)
    except TimeoutError:
        pass
