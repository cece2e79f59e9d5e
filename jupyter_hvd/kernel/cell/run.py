"""Runs a `%%hvd` cell on every rank: live output, one report per distinct error, and a wind-down that never hangs.

The cell goes to the ranks on the pool's cell channel (kernel/channel.py), and the kernel's main thread waits on
that channel's events (output, metrics, ends): no polling loop with sleeps, and a Ctrl-C lands here as
KeyboardInterrupt. A rank's output always arrives before its end, so a finished cell has all of its output.

When a cell fails on some rank (or the user interrupts), the other ranks may be blocked in a collective that
will never complete. The wind-down releases them the Horovod way: every rank is asked to `hvd.join()` once its
cell has ended (a joined rank lets pending allreduces complete without it), and ranks still running after a
short grace get SIGINT. torch.distributed has no join: ranks waiting in the check before one of its collectives, or
for DDP's bucket allreduces, are released by a Decline from the ranks whose cell ended, which take part in that check
calling nothing or complete those allreduces with zeros (the group stays in step). When every rank has joined, the
pool is healthy again. If that does not happen within
`--fail-timeout`, or an engine died, the pool is restarted with the same options.
"""

from __future__ import annotations

import itertools
import pickle
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from IPython.display import publish_display_data

from ... import wire
from ...digest import Digest
from ...widgets import CellView, plain_view
from .. import failures, tell
from ..asks import Ask, Asks
from ..channel import Channel, ChannelError
from ..diagnose import debugger, where
from ..errors import CellFailed, group_errors, name_cell
from ..failures import (
    Dead,
    Done,
    Failure,
    Frozen,
    OutOfStep,
    Overdue,
    OverTime,
    PoolLost,
    UncleanJoin,
    Uneven,
    Unreleasable,
    Unsent,
    Wait,
)
from ..launch.backends import Backends
from ..launch.options import HvdPool
from ..ranks import format_ranks
from . import figures
from .figures import CellFigures

GRACE_S = 1.0  # after a first error, how long other ranks may take to end (or raise the same error) by themselves
TICK_S = 0.25  # liveness checks while waiting: engine processes, mpiexec
TAKE_INTERRUPT_S = 0.5  # a rank's reading thread takes an Interrupt within milliseconds, or cannot run at all
# A cell still running after this is shown as running in the sidebar at once. Shorter cells are left to the watcher's
# next round: waking its thread at each start and end took the GIL from the dispatch (an empty cell: +1.3 ms).
SHOW_RUNNING_AFTER_S = 0.1
QUIET_S = 5.0  # a cell whose ranks sent nothing for this long says what they do, and again as often while quiet
_cell_numbers = itertools.count(1)
# Where a rank is that is done with the running cell, in words (CellRun's _RankRun.state).
_ENDED = {"ok": "finished the cell", "error": "the cell raised an error there", "stopped": "stopped", "dead": "dead"}


@dataclass
class CellOptions:
    """How `%%hvd` shows a cell (whose output, how much of it, where) and what it is in the notebook."""

    show_ranks: list[int] = field(default_factory=lambda: [0])
    log_lines: int = 10_000
    view: CellView | None = None  # None: plain text
    count: int | None = None  # the notebook's execution count, as in [7]
    cell_id: str = ""  # the front end's id of the notebook cell
    setup: bool = False  # %%hvd --setup: replayed after every restart
    record: bool = True  # a user's cell: kept for %hvd_export, and kept names are snapshotted when it succeeds
    display_value: bool = True  # show rank 0's last expression, as a cell does; else run() returns it
    every_value: bool = False  # run() returns every rank's last expression, {rank: value} (display_value False)
    where_full: bool = False  # where the ranks are (stop button, stall) with library frames too
    time_limit: float | None = None  # seconds the cell may run before it is ended as if interrupted (replays)
    interactive: bool = True  # the user watches: pdb at a breakpoint() asks them (a replay's goes on)
    task: wire.CellTask | None = None  # jupyter-hvd's own work, run as a cell instead of source (a restore)


@dataclass
class _RankRun:
    rank: int
    state: str = "running"  # running | ok | error | stopped | dead
    record: wire.CellRecord | None = None
    signaled_at: float | None = None  # when it was sent the Interrupt
    interrupt_taken: bool = False  # its reading thread took the Interrupt (wire.Interrupted)
    signal_sent: bool = False  # it did not: a SIGINT from outside went to it
    join_sent: bool = False
    joined: bool = False  # it answered every Join and Decline sent to it
    answers_due: int = 0  # Joined events still to come from it, one per Join or Decline
    entered: int = -1  # torch.distributed collectives it had entered when it joined (-1: none counted)
    ended_after_failure: bool = False  # finished normally, but after another rank had failed
    finished_at: float | None = None
    waiting: Wait | None = None  # the collective this rank has waited in for a while


class RunChannel(Channel, Protocol):
    """What a cell uses of the cell channel (kernel/channel.py CellChannel)."""

    problems: list[tuple[int, str]]
    between: list[tuple[int, str, str]]

    def drain(self) -> None: ...


class Client(Protocol):
    """What a cell reads of the pool's ipyparallel client: the engines still connected."""

    @property
    def ids(self) -> list[int]: ...


class CellPool(where.Pool, debugger.Pool, figures.Pool, Protocol):
    """What a cell uses of a pool (kernel/launch/pool.py), itself and through Where, the debugger and the figures it
    hands the pool to: tests play the ranks behind a fake one that mypy checks against this."""

    options: HvdPool
    backends: Backends
    stopped: bool
    cells_run: int
    last_failed: list[int]
    newest_problem_shown: Any

    # Read-only, so what a pool holds fits: its CellChannel and ipyparallel's Client, or a test's fakes.
    @property
    def channel(self) -> RunChannel | None: ...

    @property
    def client(self) -> Client | None: ...

    def set_state(self, pool_state: str, cell: str | None = None, publish: bool = True, own: bool = False) -> None: ...

    def engine_ids(self) -> list[int]: ...

    def signal_interrupt(self, ranks: list[int]) -> None: ...

    def mpiexec_alive(self) -> bool: ...


class CellRun:
    """One execution of a cell on the pool. Use `run()`; it returns rank 0's value or raises CellFailed."""

    def __init__(self, pool: CellPool, source: str, options: CellOptions, asks: Asks | None = None) -> None:
        self.pool = pool
        self.asks = asks  # the sidebar's Interrupt, Restart, Stop and Where (None: a cell the sidebar cannot reach)
        self.source = source
        self.options = options
        self.number = next(_cell_numbers)  # events of this cell carry it; earlier cells' late events are dropped
        self.filename = wire.cell_file(self.number)
        name_cell(self.number, options.count)  # tracebacks name it as the notebook does: Cell In[count]
        self.view: CellView = options.view or plain_view(options.show_ranks)
        self.runs: dict[int, _RankRun] = {}
        self.failed_at: float | None = None
        self.reason: str | None = None  # error | interrupt
        self.hard_deadline: float | None = None
        self._declined_at = 0.0  # when ranks whose cell ended were asked to release their peers (0: not asked)
        self.digest = Digest()  # each line of output read once, for the view and the figures
        self.figures = CellFigures(pool, self.view)  # step, loss, last line, NaN, straggler (kernel/cell/figures.py)
        self._next_liveness_check = time.monotonic() + TICK_S
        self._stderr_tail = ""  # recent stderr of the shown ranks, where Horovod's stall report lands
        self.unclean_join: Failure | None = None  # a rank's join left Horovod unfit for the next cell
        self.lost: Failure | None = None  # what lost the pool: the caller restarts it (kernel/owner.py)
        self.ended_by: Failure | None = None  # why the cell was ended on every rank: uneven collectives, a time limit
        self._frozen_since: dict[int, float] = {}
        self._started = time.monotonic()
        self._shown_running = False
        self._stall_said = False
        self._stalled: dict[int, str] = {}  # ranks shown stalled in this cell -> the tensors they wait on
        self._where_interrupted = False  # the user's interrupt landed in a stall's Where report
        self._in_debugger: set[int] = set()  # ranks a breakpoint() holds in pdb (wire.Debugging)
        self._heard = self._started  # when a rank last sent output, metrics or a display
        self._glimpse: where.Glimpse | None = None  # where the ranks are, asked because the cell is quiet
        self._glimpsed = 0.0  # when the last glimpse was asked
        self._doing_said = False  # the view says what the ranks do (until they send something)
        self.interrupted_by = ""  # "from the sidebar": who pressed stop, when it was not the notebook's button
        self.ended_for: Ask | None = None  # the sidebar's Restart or Stop, which ended the cell to be carried out

    # ---- dispatch ------------------------------------------------------------------------------------------

    def _submit(self) -> None:
        channel = self.pool.channel
        assert channel is not None
        channel.drain()
        # What failed on the ranks between cells (a snapshot that could not be written, a user's thread) is said here.
        new = list(itertools.takewhile(lambda p: p is not self.pool.newest_problem_shown, channel.problems))
        for rank, text in reversed(new):
            tell.warning(f"rank {rank}: {text}")
        self._say_between()
        for r in self.pool.ranks:
            self.runs[r.rank] = _RankRun(r.rank)
        try:
            for r in self.pool.ranks:
                show = r.rank in self.options.show_ranks
                request = wire.RunCell(
                    self.number,
                    self.source,
                    self.filename,
                    show,
                    self.options.log_lines,
                    self.options.count,
                    self.options.every_value,
                    self.options.task,
                    formatted=self.options.display_value and not self.options.every_value,
                )
                channel.send(r.rank, request)
        except ChannelError as exc:
            self._check_liveness()
            raise PoolLost(Unsent.of(None, "sent the cell", exc)) from None

    # ---- the wait loop -------------------------------------------------------------------------------------

    @property
    def succeeded(self) -> bool:
        """Whether every rank ran the cell to its end (no error, interrupt or lost pool)."""
        return self.reason is None and self.lost is None

    def commits(self) -> dict[int, int]:
        """How many times each rank called jupyter_hvd.commit() in the cell."""
        return {r.rank: r.record.commits for r in self.runs.values() if r.record is not None}

    def run(self) -> Any:
        """Run the cell on every rank and wait for all of them, whatever happens."""
        if self.pool.stopped or self.pool.channel is None:
            raise CellFailed(
                "The pool was stopped (from the sidebar, or by a failed restart).", "%hvd_restart starts it again."
            )
        with self.pool.lock:
            if self.asks is not None:
                self.asks.take_interrupt()  # it came for the cell before this one
            task = self.options.task
            first_line = task.words() if task else next((ln for ln in self.source.splitlines() if ln.strip()), "")
            self.pool.set_state("running", first_line[:120], publish=False, own=task is not None)
            self.pool.file.nonfinite = None
            self.pool.file.straggler = None
            stale_figures = self.pool.file.start_of_cell()  # the sidebar shows this cell's figures only
            try:
                self._loop()
            finally:
                self.view.close(self.reason is None and self.lost is None)
                self.pool.cells_run += 1
                self.pool.file.end_of_cell()
                if self.pool.channel is not None and self.pool.channel.problems:
                    self.pool.newest_problem_shown = self.pool.channel.problems[0]  # said under this cell
                if self.pool.client is not None and self.pool.ranks:
                    self.pool.update_rank_stats(
                        {r: {"last_line": ln} for r, ln in self.figures.last_lines.items()}, publish=False
                    )
                    # A cell too short to show as running is written at its end only where the file still shows
                    # the cell before's figures: a run of empty cells writes nothing.
                    self.pool.set_state("idle", publish=self._shown_running or stale_figures)
            if self.asks is not None and self.asks.take_interrupt():  # the sidebar's Interrupt ended it
                self.interrupted_by = "from the sidebar"
        return self._finish()

    def _loop(self) -> None:
        try:
            self._submit()
        except PoolLost as lost:
            self.lost = lost.failure
            return
        interrupts = 0
        while True:
            try:
                self._step()
                if self._complete():
                    return
            except KeyboardInterrupt:
                interrupts += 1
                if interrupts > 1 or (self.reason == "interrupt" and self._overdue()):
                    self.lost = Overdue((), "you interrupted twice")
                    return
                if interrupts == 1 and self.reason is None and not self._where_interrupted:
                    self._say_where("you interrupted", self.options.where_full)
                try:
                    self._begin_wind_down("interrupt")
                except PoolLost as lost:
                    self.lost = lost.failure
                    return
            except PoolLost as lost:
                self.lost = lost.failure
                return

    def _step(self) -> None:
        channel = self.pool.channel
        assert channel is not None
        ev = channel.receive(TICK_S)
        while ev is not None:
            self._say_between()  # a rank sends what it had left of that before the cell's own output
            self._handle(ev)
            ev = channel.receive(0)
        if not self._shown_running and time.monotonic() - self._started >= SHOW_RUNNING_AFTER_S:
            self._shown_running = True
            self.pool.publish()
        if time.monotonic() >= self._next_liveness_check:  # psutil per rank: not on every event
            self._next_liveness_check = time.monotonic() + TICK_S
            self._check_liveness()
        asks = self.asks
        ending = asks.ending() if asks is not None else None
        if ending is not None and self.reason is None:  # Interrupt, Restart or Stop
            self.interrupted_by = "from the sidebar"
            self.ended_for = ending.ask if ending.ask in (Ask.RESTART, Ask.STOP) else None
            self._begin_wind_down("interrupt")
        if asks is not None and asks.where() is not None and self.reason is None:  # Where: said under the cell
            full = asks.take_where()
            if full is not None:
                self._say_where("the sidebar asked", full)
        if self.reason is None and not self._in_debugger:  # a rank in pdb keeps the others waiting, on purpose
            self._check_mismatch()
            self._check_stall()
            self._glance()
        limit = self.options.time_limit
        if self.reason is None and limit is not None and time.monotonic() - self._started > limit:
            self.ended_by = OverTime.of(limit)
            self._begin_wind_down("interrupt")
        if self.reason is not None:
            self._advance_wind_down()
        self.view.tick()

    def _say_between(self) -> None:
        """What the ranks printed between cells (a user's thread, Horovod's warnings), said under this cell."""
        channel = self.pool.channel
        if channel is None or not channel.between:
            return
        by_rank: dict[int, str] = {}
        for rank, _, text in channel.between:
            by_rank[rank] = by_rank.get(rank, "") + text
        channel.between.clear()
        for rank, text in sorted(by_rank.items()):
            tell.warning(f"rank {rank} printed between cells:\n{text.rstrip()}")

    def _handle(self, ev: wire.Event) -> None:
        if isinstance(ev, wire.Problem):  # whichever cell it came from (or none): said now, under this one
            tell.warning(f"rank {ev.rank}: {ev.text}")
            return
        if isinstance(ev, wire.Place):  # a rank's answer to a glimpse (a rank done with the cell answers too)
            if self._glimpse is not None:
                self._glimpse.take(ev)
            return
        run = self.runs.get(ev.rank)
        if getattr(ev, "cell", None) != self.number or run is None:
            return  # a late event of an earlier cell, or of an engine that is no longer in the pool
        if isinstance(ev, wire.Output) and ev.stream == "pdb":
            if self.options.interactive:
                debugger.show(ev)
        elif isinstance(ev, wire.Debugging):  # a breakpoint() holds that rank in pdb, or let it go
            self._note_debugging(ev)
        elif isinstance(ev, wire.InputRequest):  # pdb at a breakpoint() on that rank waits for a command
            if self.reason is not None:
                debugger.send(self.pool, ev, "q")  # the cell is ending: pdb quits, nobody is asked
            elif not self.options.interactive:
                debugger.send(self.pool, ev, "c")  # a replay nobody watches: a breakpoint() in it goes on
            else:
                debugger.answer(self.pool, ev)  # the stop button there: KeyboardInterrupt, as anywhere in the wait
        elif isinstance(ev, wire.Output):
            self._heard_from()
            chunk = self.digest.feed(ev.rank, ev.stream, ev.text)
            self.figures.lines(chunk)
            if ev.stream == "stderr":
                # The stall report may arrive split over several chunks: look at the recent stderr as a whole.
                self._stderr_tail = (self._stderr_tail + ev.text)[-8000:]
                if "Missing ranks:" in self._stderr_tail:
                    self._note_stall(self._stderr_tail)
            self.view.output(chunk)
        elif isinstance(ev, wire.Metrics):
            records = ev.records if isinstance(ev.records, list) else [ev.records]
            if any(isinstance(r, dict) and "pace" not in r for r in records):  # pace timing alone is no news
                self._heard_from()
            self.figures.records(ev.rank, ev.records)
            self.view.metrics(ev.rank, ev.records)
        elif isinstance(ev, wire.Display):
            self._heard_from()
            self.view.display(ev.rank, ev.data, ev.metadata)
        elif isinstance(ev, wire.CellEnded):
            if run.state == "running":
                self._finished(run, ev.record)
        elif isinstance(ev, wire.Waiting):
            wait = ev.wait
            run.waiting = Wait.reported(ev.rank, wait, time.monotonic()) if wait else None
        elif isinstance(ev, wire.Interrupted):
            run.interrupt_taken = True
        elif isinstance(ev, wire.Joined):
            run.answers_due -= 1
            run.joined = run.answers_due <= 0
            run.entered = ev.entered  # the rank answers in the order asked: the last one counts
            self.unclean_join = self.unclean_join or UncleanJoin.detect(
                ev.rank, ev.ok, ev.in_flight, (ev.error or {}).get("ename")
            )

    def _heard_from(self) -> None:
        self._heard = time.monotonic()
        if self._doing_said:
            self._doing_said = False
            self.view.activity(None)

    def _glance(self) -> None:
        """After QUIET_S without a word from any rank, the view says what they do (where each is: in a collective and
        which, in the user's code, done), asked again every QUIET_S while they stay quiet (kernel/diagnose/where.py);
        the answers come among the cell's events."""
        now = time.monotonic()
        glimpse = self._glimpse
        if glimpse is not None:
            if glimpse.done():
                self._glimpse = None
                quiet = now - self._heard
                if quiet >= QUIET_S:
                    ended = {r.rank: _ENDED.get(r.state, r.state) for r in self.runs.values() if r.state != "running"}
                    heard = self._heard - self._started
                    since = f"since {heard:.0f} s into the cell" if heard > 0 else "yet"
                    self.view.activity(f"no output {since}; where the ranks are:\n{glimpse.text(ended)}")
                    self._doing_said = True
        elif now - self._heard >= QUIET_S and now - self._glimpsed >= QUIET_S:
            self._glimpse = where.Glimpse(self.pool)
            self._glimpsed = now

    def _note_debugging(self, ev: wire.Debugging) -> None:
        """Who is in the debugger: said under the cell, and the rank's state in the sidebar."""
        if ev.active and ev.rank not in self._in_debugger:
            self._in_debugger.add(ev.rank)
            if self.options.interactive:  # a replay's breakpoint() goes on by itself
                tell.news(
                    f"rank {ev.rank} is in the debugger (pdb) at a breakpoint(): type its commands in the input box "
                    "(c continues, q stops the cell); the other ranks go on until they wait for it."
                )
        elif not ev.active:
            self._in_debugger.discard(ev.rank)
            self.pool.file.end_of_debugging(ev.rank)
        self.pool.update_rank_stats({ev.rank: {"state": "debugger"}} if ev.active else {})

    def _say_where(self, why: str, full: bool, unasked: bool = False) -> None:
        """Where every rank is now, under the cell and in the pool file (kernel/diagnose/where.py); events that arrive
        meanwhile are handled. Skipped on a second press of the stop button: the wind-down must not wait for it.
        `unasked` (a stall's report, which the user did not ask for): the press is then the user's interrupt of the
        cell, raised on to the wait loop, which does not ask again."""
        ended = {r.rank: _ENDED.get(r.state, r.state) for r in self.runs.values() if r.state != "running"}
        try:
            text = where.report(self.pool, why, full, self._handle, (self.number, self.source), ended)
        except KeyboardInterrupt:
            tell.news("where the ranks were: not asked (interrupted).")
            if unasked:
                self._where_interrupted = True
                raise
            return
        tell.news(f"where the ranks were when {why}:\n{where.indented(text)}")

    def _note_stall(self, text: str) -> None:
        """Horovod's stall inspector (rank 0's stderr, while rank 0's cell runs): the ranks it leaves waiting are
        stalled, on those tensors (kernel/failures.py)."""
        running = [rank for rank, run in self.runs.items() if run.state == "running"]
        self._mark_stalled(failures.stalled(text, running))

    def _check_stall(self) -> None:
        """A rank that has waited in a collective for Horovod's stall-check time while a peer still runs its cell is
        stalled too where Horovod's inspector cannot say so: its collective started a resting Horovod (a start waits
        for every rank, and the inspector runs only once all have started), or it is torch.distributed's."""
        running = [r for r in self.runs.values() if r.state == "running"]
        if not any(r.waiting is None for r in running):
            return  # every running rank waits: a mismatch (_check_mismatch), or a collective under way
        try:
            after = float(self.pool.options.horovod_env()["HOROVOD_STALL_CHECK_TIME_SECONDS"])
        except ValueError:  # Horovod then reads it as it does: not this check's to say
            after = float(self.pool.options.stall_check_s)
        if after <= 0:
            return
        now = time.monotonic()
        waits = [r.waiting for r in running if r.waiting is not None and now - r.waiting.since >= after]
        self._mark_stalled({w.rank: w.name for w in waits if self._stalled.get(w.rank) != w.name})

    def _mark_stalled(self, tensors: dict[int, str]) -> None:
        """Show `tensors`' ranks as stalled, waiting on those tensors; the first time in a cell, say where all are
        (whoever saw it first: Horovod's inspector or _check_stall)."""
        if not tensors:
            return
        stalled = {rank: {"state": "stalled", "stalled_on": names} for rank, names in tensors.items()}
        self._stalled.update(tensors)
        self.pool.update_rank_stats(stalled)
        # A stall reported once the cell winds down is that wind-down's own (ranks that left, others signalled): asking
        # where the ranks are then would take up to ANSWER_S + PYSPY_S of the wind-down's --fail-timeout.
        if not self._stall_said and self.reason is None:
            self._stall_said = True
            self._say_where(f"{format_ranks(sorted(tensors))} stalled", self.options.where_full, unasked=True)

    def _check_mismatch(self) -> None:
        """End the cell when its collectives cannot match (kernel/failures.py): uneven ones wind it down, state kept;
        ranks waiting on different tensors need a restart."""
        running = [r for r in self.runs.values() if r.state == "running"]
        finished = [
            Done(r.rank, r.finished_at, r.record.collectives if r.record else None)
            for r in self.runs.values()
            if r.state == "ok" and r.finished_at is not None
        ]
        waits = [r.waiting for r in running if r.waiting is not None]
        found = failures.unmatched([r.rank for r in running], waits, finished, time.monotonic())
        if found is not None and found.restarts:
            raise PoolLost(found)
        if found is not None:
            self.ended_by = found
            self._begin_wind_down("mismatch")

    def _finished(self, run: _RankRun, record: wire.CellRecord) -> None:
        run.record = record
        run.finished_at = time.monotonic()
        self.figures.ended(run.rank, record.tail)
        if record.ok:
            run.state = "ok"
            run.ended_after_failure = self.reason is not None
            return
        err = record.error or wire.ErrorInfo(ename="Error", evalue="")
        # After the wind-down began, an interrupt or a collective broken by a peer's join is a consequence,
        # not a second error.
        consequence = failures.is_consequence(err["ename"], err["evalue"])
        if self.reason is not None and (consequence or run.signaled_at is not None):
            run.state = "stopped"
        elif self.reason is None and err["ename"] in ("KeyboardInterrupt", "BdbQuit"):
            # A SIGINT from outside (the sidebar's Interrupt), or pdb's quit at a breakpoint(): an interrupt.
            run.state = "stopped"
            self._begin_wind_down("interrupt")
        else:
            run.state = "error"
            self._begin_wind_down("error")

    def _check_liveness(self) -> None:
        now = time.monotonic()
        self._frozen_since = {r: self._frozen_since.get(r, now) for r in self.pool.frozen_ranks()}
        pids = {r.rank: r.pid for r in self.pool.ranks}
        found = Frozen.for_long(self._frozen_since, pids, self.pool.options.timeout, self.reason is not None, now)
        if found is not None:
            raise PoolLost(found)
        dead = self.pool.dead_ranks()
        if not self.pool.mpiexec_alive() or dead:
            # MPI aborts the whole job when one rank dies; mpiexec then says which one and how, as it exits.
            deadline = time.monotonic() + 10
            while self.pool.mpiexec_alive() and time.monotonic() < deadline:
                time.sleep(0.05)
            raise PoolLost(Dead.of(self.pool.death_report(), dead))

    # ---- wind-down -----------------------------------------------------------------------------------------

    def _begin_wind_down(self, reason: str) -> None:
        if self.reason is None:
            self.reason = reason
            self.failed_at = time.monotonic()
            self.hard_deadline = self.failed_at + self.pool.options.fail_timeout
        elif reason == "interrupt":
            self.reason = "interrupt"
        client = self.pool.client
        assert client is not None
        if not set(self.pool.engine_ids()) <= set(client.ids):
            self._check_liveness()
            raise PoolLost(Dead.of("an engine left the pool", []))
        self._advance_wind_down()

    def _send_joins(self) -> None:
        """Ask every rank to leave Horovod's collectives once its cell has ended (the Join waits behind the cell on
        the channel). After an interrupt, not before every rank still running has its SIGINT: a join lets the
        collective a running rank waits in complete, and that rank would go on with its cell (a print, a step)
        before a signal still on its way lands. Sending the Interrupt first is not enough: it goes to another rank
        than the join, whose release can come first under load. Once taken, the signal is pending on the rank's main
        thread and raises there the moment the collective returns. Where torch.distributed may hold a running rank,
        after an error too: the ranks whose cell ended may first have to release it (_decline), before Horovod's join
        holds them."""
        hold = self.reason in ("interrupt", "mismatch") or self.pool.backends.may_strand()
        if hold and any(r.state == "running" and not (r.interrupt_taken or r.signal_sent) for r in self.runs.values()):
            return
        if self.pool.backends.may_strand():
            self._decline()  # before the joins: Horovod's join on a free rank waits for the ranks the Decline frees
        channel = self.pool.channel
        assert channel is not None
        for run in self.runs.values():
            if not run.join_sent:
                try:
                    channel.send(run.rank, wire.Join(self.number))
                except ChannelError as exc:
                    self._check_liveness()
                    raise PoolLost(Unsent.of(run.rank, "asked to leave Horovod's collectives", exc)) from None
                run.join_sent = True
                run.answers_due += 1

    def _advance_wind_down(self) -> None:
        now = time.monotonic()
        assert self.failed_at is not None
        grace = 0.0 if self.reason in ("interrupt", "mismatch") else GRACE_S
        running = [r for r in self.runs.values() if r.state == "running" and r.signaled_at is None]
        if running and now >= self.failed_at + grace:
            self.pool.interrupt([r.rank for r in running], self.number)
            for r in running:
                r.signaled_at = now
        # A rank whose reading thread did not take its Interrupt cannot run that thread: native code holds the GIL,
        # and only a signal from outside reaches it (the code checks for signals).
        deaf = [
            r
            for r in self.runs.values()
            if r.state == "running" and r.signaled_at and not r.interrupt_taken and not r.signal_sent
            and now - r.signaled_at > TAKE_INTERRUPT_S
        ]  # fmt: skip
        if deaf:
            self.pool.signal_interrupt([r.rank for r in deaf])
            for r in deaf:
                r.signal_sent = True
        self._send_joins()
        if self.pool.backends.may_strand():
            declined_at = self._decline()
            signaled = {
                r.rank: (max(r.signaled_at, declined_at), r.waiting)
                for r in self.runs.values()
                if r.state == "running" and r.signaled_at is not None
            }
            found = Unreleasable.detect(signaled, now)
            if found is not None:
                raise PoolLost(found)
        if self._overdue():
            stuck = [r.rank for r in self.runs.values() if r.state == "running" or not r.joined]
            raise PoolLost(Overdue.of(stuck, self.pool.options.fail_timeout))

    def _decline(self) -> float:
        """Ranks still running that all wait for the same thing in torch.distributed after their interrupt (the
        check before a collective, or allreduces of DDP's buckets), while the others' cells ended: those others
        decline it (wire.Decline), which releases the waiting ranks with the group in step and every process kept
        (an interrupt cannot: Gloo holds them). When that was sent (0: not sent)."""
        runs = self.runs.values()
        running = [r for r in runs if r.state == "running"]
        free = [r for r in runs if r.state in ("ok", "error", "stopped")]  # a dead rank answers nothing
        if self._declined_at or not running or not free:
            return self._declined_at
        # Only once each has its SIGINT: it raises the moment its wait returns, before its cell goes on (a step).
        waits = [r.waiting for r in running if r.interrupt_taken or r.signal_sent]
        if len(waits) < len(running) or any(w is None or not w.releasable() for w in waits):
            return 0.0
        first = waits[0]
        assert first is not None
        if any(w is None or (w.agreeing_at, w.owed) != (first.agreeing_at, first.owed) for w in waits):
            return 0.0  # they wait for different things: no one decline releases them all
        channel = self.pool.channel
        assert channel is not None
        for r in free:
            try:
                channel.send(r.rank, wire.Decline(self.number, first.agreeing_at, first.owed))
            except ChannelError as exc:
                self._check_liveness()
                raise PoolLost(Unsent.of(r.rank, "asked to release its peers' collective", exc)) from None
            r.joined = False  # it says Joined again, with the collectives it entered since
            r.answers_due += 1
        self._declined_at = time.monotonic()
        return self._declined_at

    def _overdue(self) -> bool:
        return self.hard_deadline is not None and time.monotonic() > self.hard_deadline

    def _complete(self) -> bool:
        runs = self.runs.values()
        if any(r.state == "running" for r in runs):
            return False
        if self.reason is not None:
            done = all(r.joined for r in runs)
            if done and self.unclean_join:
                raise PoolLost(self.unclean_join)
            out_of_step = OutOfStep.detect({r.rank: r.entered for r in runs}) if done else None
            if out_of_step is not None:
                raise PoolLost(out_of_step)
            return done
        return True  # each rank's output came before its end

    # ---- result --------------------------------------------------------------------------------------------

    def _stopped_where(self, ranks: list[int]) -> str:
        """': rank 0 at Cell In[7], line 4: hvd.allreduce(...)' for stopped ranks whose interrupt named a line of a
        cell (named by the engine as its tracebacks name it)."""
        places: dict[str, list[int]] = {}
        for rank in ranks:
            record = self.runs[rank].record
            where = (record.error if record else None) or {}
            if where.get("where"):
                places.setdefault(where["where"], []).append(rank)
        if not places:
            return "."
        return ":\n" + "\n".join(f"  {format_ranks(rs)} at {w}" for w, rs in places.items())

    def _finish(self) -> Any:
        lost = self.lost
        errors: list[dict[str, Any]] = [
            {"rank": r.rank, **(r.record.error or {})}
            for r in self.runs.values()
            if r.state == "error" and r.record is not None
        ]
        if lost is None and self.reason is None:
            if self.options.every_value:
                return {
                    r.rank: _unpickled(r.record.value) if r.record and r.record.value else None
                    for r in self.runs.values()
                }
            record = self.runs[0].record if self.runs else None
            if record is not None and record.shown is not None:
                publish_display_data(record.shown["data"], record.shown["metadata"])
            elif record is not None and record.value is not None:
                return _unpickled(record.value)
            return None
        raised = [e["rank"] for e in errors if e["ename"] not in ("SystemExit", "KeyboardInterrupt", "BdbQuit")]
        self.pool.last_failed = sorted(raised, key=lambda r: self.runs[r].finished_at or 0.0)  # %hvd_debug: the first
        parts = []
        exits = [e for e in errors if e["ename"] == "SystemExit"]
        errors = [e for e in errors if e["ename"] != "SystemExit"]
        for e in exits:
            parts.append(
                f"rank {e['rank']} called exit({e.get('exit', '')}) (sys.exit, exit() or quit()): the cell ended "
                "there. The engine keeps running, as does the pool."
            )
        if isinstance(self.ended_by, Uneven):
            parts.append(self.ended_by.message)
        if errors:
            parts.append(group_errors(errors))
        stopped = sorted(r.rank for r in self.runs.values() if r.state == "stopped" or r.signaled_at)
        if isinstance(self.ended_by, OverTime):
            parts.append(self.ended_by.message)
        elif self.ended_for is not None and not errors and not exits:  # not an interrupt: what the user asked for
            what = "Restart" if self.ended_for is Ask.RESTART else "Stop"
            parts.append(f"The sidebar's {what} stopped this cell: {format_ranks(stopped or list(self.runs))} stopped.")
        elif self.reason == "interrupt" and not errors and not exits:
            by = f" {self.interrupted_by}" if self.interrupted_by else ""
            parts.append(f"Interrupted{by}: {format_ranks(stopped or list(self.runs))} stopped.")
        elif self.reason == "mismatch":
            pass  # the mismatch message said which ranks waited where
        elif stopped and lost is None:
            parts.append(
                f"{format_ranks(stopped)} {'was' if len(stopped) == 1 else 'were'} still running after the "
                "error (most likely waiting for the failed ranks in a collective) and "
                f"{'was' if len(stopped) == 1 else 'were'} stopped" + self._stopped_where(stopped)
            )
        finished_late = sorted(r.rank for r in self.runs.values() if r.state == "ok" and r.ended_after_failure)
        if finished_late and (errors or exits):
            parts.append(
                f"{format_ranks(finished_late)} ran to the end, but collectives after the error completed without "
                "the failed ranks (they had left them): treat what this cell computed there as invalid."
            )
        # After the sidebar's Restart or Stop the owner says what became of the pool.
        hint = "" if lost is not None or self.ended_for is not None else "The pool is ready for the next %%hvd cell."
        interrupted = self.reason == "interrupt" and not errors and self.ended_by is None
        raise CellFailed("\n\n".join(parts), hint, interrupted=interrupted, lost=lost)


def _unpickled(value: bytes) -> Any:
    """Rank 0's cell value; where the kernel cannot import what it is made of, a note that says so."""
    try:
        return pickle.loads(value)
    except Exception as exc:
        return _Note(f"<rank 0's value could not be read in the notebook's kernel: {type(exc).__name__}: {exc}>")


class _Note(str):
    def __repr__(self) -> str:
        return str(self)


def next_number() -> int:
    """A number after every cell's so far (snapshot generations asked for between cells take one)."""
    return next(_cell_numbers)
