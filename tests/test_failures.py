"""The failures module's detectors, and a cell's wait and wind-down (kernel/cell/run.py) driven through a fake channel.

Pure logic: the engines are replaced by a script of the events real engines send (wire.py). The same paths on real
pools are in test_never_hangs.py, test_faults.py and test_failure_paths.py.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from jupyter_hvd import wire
from jupyter_hvd.kernel import failures
from jupyter_hvd.kernel.cell.run import CellOptions, CellRun
from jupyter_hvd.kernel.errors import CellFailed
from jupyter_hvd.kernel.failures import Done, Wait
from jupyter_hvd.kernel.launch.backends import Backends
from jupyter_hvd.kernel.launch.options import HvdPool
from jupyter_hvd.kernel.launch.pool_file import PoolFile
from jupyter_hvd.kernel.ranks import Rank
from jupyter_hvd.widgets import QuietView

# ---- the detectors -----------------------------------------------------------------------------------------------


def test_uneven_collectives_are_named_once_the_finished_rank_has_waited_long_enough():
    waits = [Wait(1, "u.8", 9, since=100.0)]
    finished = [Done(0, at=100.0, collectives=8)]
    assert failures.unmatched([1], waits, finished, now=100.0 + failures.UNEVEN_S - 0.1) is None
    found = failures.unmatched([1], waits, finished, now=100.0 + failures.UNEVEN_S + 0.1)
    assert isinstance(found, failures.Uneven) and not found.restarts
    assert "the cell finished on rank 0 after 8 collectives, while rank 1 waits in 'u.8' (its collective #9)" in (
        found.message
    )
    assert "hvd.join()" in found.message


def test_ranks_waiting_on_different_tensors_need_a_restart_and_torch_names_get_torchs_remedy():
    waits = [Wait(0, "dist.all_reduce", 3, since=10.0), Wait(1, "dist.broadcast", 3, since=10.0)]
    assert failures.unmatched([0, 1], waits, [], now=10.0 + failures.MISMATCH_S - 0.1) is None
    found = failures.unmatched([0, 1], waits, [], now=10.0 + failures.MISMATCH_S + 0.1)
    assert isinstance(found, failures.Mismatch) and found.restarts
    assert "Join([model])" in found.message and "hvd.join()" not in found.message


def test_a_rank_that_is_not_waiting_leaves_the_collectives_alone():
    assert failures.unmatched([0, 1], [Wait(0, "a", 1, since=0.0)], [], now=100.0) is None


def test_a_frozen_rank_gets_the_pools_timeout_unless_the_cell_is_ending():
    assert failures.Frozen.for_long({1: 50.0}, {1: 4242}, timeout=30, ending=False, now=60.0) is None
    found = failures.Frozen.for_long({1: 50.0}, {1: 4242}, timeout=30, ending=True, now=60.0)
    assert found is not None and found.restarts and found.ranks == (1,)
    assert found.message == "rank 1 (pid 4242) is frozen (stopped by SIGSTOP or Ctrl-Z) during the wind-down"


def test_torch_collectives_are_unreleasable_only_after_the_grace():
    signaled = {0: (10.0, Wait(0, "DDP.allreduce", 4, since=9.0))}
    assert failures.Unreleasable.detect(signaled, now=10.0 + failures.TORCH_RELEASE_S - 0.1) is None
    found = failures.Unreleasable.detect(signaled, now=10.0 + failures.TORCH_RELEASE_S + 0.1)
    assert found is not None and found.restarts and "rank 0 waits in 'DDP.allreduce'" in found.message


def test_a_join_with_operations_in_flight_is_unclean():
    assert failures.UncleanJoin.detect(0, ok=True, in_flight=0, error_name=None) is None
    found = failures.UncleanJoin.detect(1, ok=True, in_flight=3, error_name=None)
    assert found is not None and found.restarts and "3 Horovod operations in flight" in found.message


class Processes:
    """A pool's processes as the detectors read them (failures.Processes): rank 1 dead or frozen."""

    def __init__(self, dead: list[int], frozen: list[int]) -> None:
        self.ranks = [Rank(r, r, "vm", 100 + r, "cpu", "MPI", "MPI") for r in (0, 1, 2)]
        self._dead, self._frozen = dead, frozen

    def dead_ranks(self) -> list[int]:
        return self._dead

    def frozen_ranks(self) -> list[int]:
        return self._frozen

    def death_report(self) -> str:
        return "rank 1 (pid 101) died on signal 9 (Killed)"


def test_push_pull_where_and_the_debugger_name_a_dead_or_frozen_rank_alike():
    dead = failures.lost(Processes(dead=[1], frozen=[]), [0, 1])
    assert isinstance(dead, failures.Dead) and dead.ranks == (1,) and dead.restarts
    assert str(dead) == "rank 1 died (rank 1 (pid 101) died on signal 9 (Killed)). " + failures.RESTART
    frozen = failures.lost(Processes(dead=[], frozen=[1, 2]), None)
    assert isinstance(frozen, failures.Frozen) and frozen.ranks == (1, 2)
    assert str(frozen) == (
        "ranks 1-2 are stopped (SIGSTOP or Ctrl-Z) and run nothing. Resume them with `kill -CONT 101 102`, "
        "or %hvd_restart."
    )
    assert failures.lost(Processes(dead=[2], frozen=[]), [0, 1]) is None  # not among the ranks asked about


def test_horovods_stall_report_names_who_waits_on_what():
    report = (
        "[2026-11-27 10:00:00.000] One or more tensors were submitted to be reduced ...\n"
        "Missing ranks:\n0: [grad.1, grad.2]\n"
    )
    assert failures.stalled(report, [0, 1]) == {1: "grad.1, grad.2"}


def test_what_follows_from_the_wind_down_is_not_a_second_error():
    assert failures.is_consequence("KeyboardInterrupt", "")
    assert failures.is_consequence("HorovodInternalError", "Join op was called")
    assert not failures.is_consequence("ValueError", "boom")


# ---- a cell's wait and wind-down, through a fake channel ---------------------------------------------------------


class FakeChannel:
    """The kernel's end of the cell channel (run.RunChannel), engines played by `engine(channel, rank, request)`."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.events: deque[wire.Event] = deque()
        self.sent: list[tuple[int, wire.Request]] = []
        self.problems: list[tuple[int, str]] = []
        self.between: list[tuple[int, str, str]] = []
        self.lock = threading.Lock()

    def drain(self) -> None:
        pass

    def send(self, rank: int, request: wire.Request) -> None:
        self.sent.append((rank, request))
        self.engine(self, rank, request)

    def emit(self, event: wire.Event) -> None:
        with self.lock:
            self.events.append(event)

    def receive(self, timeout: float) -> wire.Event | None:
        with self.lock:
            if self.events:
                return self.events.popleft()
        time.sleep(min(timeout, 0.01))
        return None


Engine = Callable[[FakeChannel, int, wire.Request], None]


class FakeView(QuietView):
    """The quiet view (the CellView protocol), remembering how the cell ended."""

    def __init__(self) -> None:
        super().__init__()
        self.closed_ok: bool | None = None

    def close(self, ok: bool) -> None:
        self.closed_ok = ok


@dataclass
class FakeClient:
    """ipyparallel's client as a cell reads it (run.Client): both engines connected."""

    ids: list[int]


class FakePool:
    """What CellRun reads and calls of a pool (run.CellPool), with two ranks whose engines `engine` plays."""

    def __init__(self, engine: Engine, on_interrupt: Callable[[FakeChannel, list[int]], None] | None = None) -> None:
        self.channel = FakeChannel(engine)
        self.ranks = [Rank(r, r, "vm", 100 + r, "cpu", "MPI", "MPI") for r in (0, 1)]
        self.client = FakeClient([0, 1])
        self.options = HvdPool(timeout=30.0, fail_timeout=10.0)
        self.file = PoolFile("hvd-1-9")  # never written: nothing publishes here
        self.lock = threading.RLock()
        self.busy_cell: str | None = None
        self.stopped = False
        self.backends = Backends()
        self.newest_problem_shown: Any = None
        self.cells_run = 0
        self.last_failed: list[int] = []
        self.state = "idle"
        self.interrupted: list[int] = []
        self.signalled: list[int] = []
        self.dead: list[int] = []
        self._on_interrupt = on_interrupt

    def set_state(self, pool_state: str, cell: str | None = None, publish: bool = True, own: bool = False) -> None:
        self.state = pool_state

    def update_rank_stats(self, stats: dict[int, dict[str, Any]], publish: bool = True) -> None:
        self.file.update_ranks(stats)  # refuses a name the pool file has no field for, as the pool's does

    def publish(self) -> None:
        pass

    def engine_ids(self) -> list[int]:
        return [0, 1]

    def frozen_ranks(self) -> list[int]:
        return []

    def dead_ranks(self) -> list[int]:
        return self.dead

    def mpiexec_alive(self) -> bool:
        return not self.dead

    def death_report(self) -> str:
        return "rank 1 (pid 101) died on signal 9 (Killed)"

    def signal_interrupt(self, ranks: list[int]) -> None:
        self.signalled += ranks

    def interrupt(self, ranks: list[int], cell: int) -> None:
        self.interrupted += ranks
        if self._on_interrupt is not None:
            self._on_interrupt(self.channel, ranks)


def ended(rank: int, cell: int, ok: bool = True, ename: str = "", collectives: int = 0) -> wire.CellEnded:
    error = None if ok else wire.ErrorInfo(ename=ename, evalue="boom" if ename == "ValueError" else "", traceback="")
    return wire.CellEnded(rank, cell, wire.CellRecord(rank=rank, ok=ok, error=error, collectives=collectives))


def waiting(rank: int, cell: int, name: str, number: int) -> wire.Waiting:
    return wire.Waiting(rank, cell, {"name": name, "number": number, "waited": 0.0})


def run(pool: FakePool) -> CellFailed:
    cell = CellRun(pool, "pass", CellOptions(view=FakeView(), record=False))
    with pytest.raises(CellFailed) as failed:
        cell.run()
    return failed.value


def test_a_raise_on_one_rank_releases_the_rank_left_waiting_and_keeps_the_pool():
    done: set[int] = set()

    def engine(channel: FakeChannel, rank: int, request: Any) -> None:
        if isinstance(request, wire.RunCell) and rank == 1:
            done.add(1)
            channel.emit(ended(1, request.cell, ok=False, ename="ValueError"))
        elif isinstance(request, wire.RunCell):
            channel.emit(waiting(0, request.cell, "grad", 3))
        elif isinstance(request, wire.Join) and rank in done:
            channel.emit(wire.Joined(rank, request.cell, True))

    def on_interrupt(channel: FakeChannel, ranks: list[int]) -> None:  # the SIGINT ends rank 0's wait
        for rank in ranks:
            done.add(rank)
            cell = next(r.cell for _, r in channel.sent if isinstance(r, wire.RunCell))
            channel.emit(ended(rank, cell, ok=False, ename="KeyboardInterrupt"))
            channel.emit(wire.Joined(rank, cell, True))

    pool = FakePool(engine, on_interrupt)
    failed = run(pool)
    assert failed.lost is None and "ready for the next %%hvd cell" in failed.hint
    assert "rank 1: ValueError: boom" in failed.message
    assert "rank 0 was still running after the error" in failed.message
    assert pool.interrupted == [0]  # after the grace, only the rank that did not end by itself
    assert {rank for rank, r in pool.channel.sent if isinstance(r, wire.Join)} == {0, 1}


def test_uneven_collectives_end_the_cell_with_the_remedy(monkeypatch):
    monkeypatch.setattr(failures, "UNEVEN_S", 0.2)

    def engine(channel: FakeChannel, rank: int, request: Any) -> None:
        if isinstance(request, wire.RunCell):
            if rank == 0:
                channel.emit(ended(0, request.cell, collectives=8))
            else:
                channel.emit(waiting(1, request.cell, "u.8", 9))
        elif isinstance(request, wire.Join) and rank == 0:
            channel.emit(wire.Joined(0, request.cell, True))

    def on_interrupt(channel: FakeChannel, ranks: list[int]) -> None:
        cell = next(r.cell for _, r in channel.sent if isinstance(r, wire.RunCell))
        for rank in ranks:
            channel.emit(ended(rank, cell, ok=False, ename="KeyboardInterrupt"))
            channel.emit(wire.Joined(rank, cell, True))

    failed = run(FakePool(engine, on_interrupt))
    assert failed.lost is None
    assert failed.message.startswith(
        "Collectives did not match: the cell finished on rank 0 after 8 collectives, while rank 1 waits in 'u.8'"
    )
    assert failures.HOROVOD_ADVICE in failed.message


def test_a_dead_engine_loses_the_pool_and_the_caller_is_told_why(monkeypatch):
    pool: FakePool

    def engine(channel: FakeChannel, rank: int, request: Any) -> None:
        if isinstance(request, wire.RunCell) and rank == 1:
            pool.dead = [1]  # its process is gone: no end will come from it
        elif isinstance(request, wire.RunCell):
            channel.emit(waiting(0, request.cell, "grad", 3))

    pool = FakePool(engine)
    failed = run(pool)
    assert isinstance(failed.lost, failures.Dead) and failed.lost.restarts
    assert failed.lost.message == "rank 1 (pid 101) died on signal 9 (Killed)"
    assert failed.hint == ""  # the restart (kernel/owner.py) says what to do next


def test_ranks_waiting_on_different_tensors_lose_the_pool(monkeypatch):
    monkeypatch.setattr(failures, "MISMATCH_S", 0.2)

    def engine(channel: FakeChannel, rank: int, request: Any) -> None:
        if isinstance(request, wire.RunCell):
            channel.emit(waiting(rank, request.cell, f"name.{rank}", 1))

    failed = run(FakePool(engine))
    assert isinstance(failed.lost, failures.Mismatch)
    assert "rank 0 waits in 'name.0' (its collective #1); rank 1 waits in 'name.1'" in failed.lost.message


def test_ranks_that_raise_within_the_grace_are_not_interrupted_and_their_errors_are_shown_once():
    def engine(channel: FakeChannel, rank: int, request: Any) -> None:
        if isinstance(request, wire.RunCell):
            # Rank 0 raises the same error a moment after rank 1: within the grace, by itself.
            delay = 0.3 if rank == 0 else 0.0
            threading.Timer(delay, channel.emit, (ended(rank, request.cell, ok=False, ename="ValueError"),)).start()
        elif isinstance(request, wire.Join):
            channel.emit(wire.Joined(rank, request.cell, True))

    pool = FakePool(engine)
    failed = run(pool)
    assert pool.interrupted == []
    assert failed.message.count("ValueError: boom") == 1 and "ranks 0-1: ValueError: boom" in failed.message


def test_no_rank_joins_before_the_ranks_still_running_took_their_interrupt():
    # pdb's quit at a breakpoint() ends rank 1's cell while rank 0 waits for it in a collective, which rank 1's join
    # completes. Rank 0's reading thread takes its Interrupt late (a loaded machine): had rank 1 joined before, rank 0
    # would have gone on with its cell, printing what comes after the collective.
    taken: list[int] = []

    def engine(channel: FakeChannel, rank: int, request: Any) -> None:
        if isinstance(request, wire.RunCell) and rank == 1:
            channel.emit(ended(1, request.cell, ok=False, ename="BdbQuit"))
        elif isinstance(request, wire.RunCell):
            channel.emit(waiting(0, request.cell, "after_bp", 2))
        elif isinstance(request, wire.Join) and rank == 1:
            if taken:  # the collective returns into the pending signal
                channel.emit(ended(0, request.cell, ok=False, ename="KeyboardInterrupt"))
            else:
                channel.emit(wire.Output(0, request.cell, "stdout", "went on\n"))
                channel.emit(ended(0, request.cell))
            channel.emit(wire.Joined(1, request.cell, True))
        elif isinstance(request, wire.Join):
            channel.emit(wire.Joined(0, request.cell, True))

    def on_interrupt(channel: FakeChannel, ranks: list[int]) -> None:
        cell = next(r.cell for _, r in channel.sent if isinstance(r, wire.RunCell))

        def take() -> None:
            taken.extend(ranks)
            for rank in ranks:
                channel.emit(wire.Interrupted(rank, cell))

        threading.Timer(0.2, take).start()

    pool = FakePool(engine, on_interrupt)
    view = FakeView()
    cell = CellRun(pool, "pass", CellOptions(view=view, record=False))
    with pytest.raises(CellFailed) as failed:
        cell.run()
    assert failed.value.message == "Interrupted: ranks 0-1 stopped.", failed.value.message
    assert cell.runs[0].state == "stopped"
