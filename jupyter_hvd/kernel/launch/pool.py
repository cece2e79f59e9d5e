"""The record of what runs: a pool's ranks, its cell channel, its launcher and its pool file, and how its processes
are launched (Horovod initialised on every engine, the cell channel connected), replaced and ended. Its life (when
to start, restart, stop) is the owner's (kernel/owner.py).

Runs in the user's kernel. Processes are the launcher's (kernel/launch/launcher.py), the pool file the writer's
(kernel/launch/pool_file.py), cells the cell runner's (kernel/cell/run.py).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import ipyparallel as ipp

from ... import state, wire
from ..channel import CellChannel, ChannelError
from ..errors import PoolError, group_errors
from ..ranks import Rank, format_ranks, rank_table
from .backends import Backends
from .launcher import Launcher, visible_gpus
from .options import HvdPool
from .pool_file import PoolFile
from .rendezvous import Rendezvous
from .template import template

if TYPE_CHECKING:  # the owner (kernel/owner.py) gives the pool these; the record only holds them
    from ..keep.journal import Keeper
    from ..watcher import PoolWatcher

log = logging.getLogger("jupyter_hvd")

# An idle pool's Horovod is stopped after this many seconds (engine/horovod/rest.py); the next cell starts it again, in
# about 3 ms on CPU ranks. GPU ranks wait longer: NCCL builds its communicators again at the first allreduce.
REST_AFTER_CPU_S = 2.0
REST_AFTER_GPU_S = 30.0
LOST = "worker state (models, variables) was lost; run the cells that define it again"


@contextlib.contextmanager
def deferred_interrupts() -> Iterator[None]:
    """Ctrl-C waits until the block is done (a clean-up that must finish), then lands as KeyboardInterrupt."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    saved = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, saved)
    if caught:
        raise KeyboardInterrupt


class Pool:
    """A running engine pool. Started, restarted and stopped by its owner (kernel/owner.py)."""

    def __init__(self, options: HvdPool, keeper: Keeper) -> None:
        self.options = options
        self.started_at = time.time()
        self.id = f"hvd-{os.getpid()}-{int(self.started_at * 1000) % 10**8}"
        self.ranks: list[Rank] = []
        self.view: ipp.DirectView | None = None
        self.channel: CellChannel | None = None  # cells, joins and rests go to the ranks this way (kernel/channel.py)
        self.file = PoolFile(self.id)
        self.directory = state.pool_directory(self.id)  # private to the pool (0700); removed when it stops
        self.launcher = Launcher(self.id, options, self.file.path, self._record_processes)
        self.state = "starting"  # idle | running | restarting | stopping (state.PoolRecord.state)
        self.busy_cell: str | None = None
        self.busy_own = False  # the running cell is jupyter-hvd's own work (a restore): busy_cell says it in words
        self.cells_run = 0
        self.lock = threading.RLock()  # held while a cell runs or the pool restarts/stops
        self._idle_since = time.monotonic()
        self.resting = False  # Horovod is stopped on every rank until the next cell (engine/horovod/rest.py)
        self.watcher: PoolWatcher | None = None
        self.stopped = False  # stop() ran: %hvd_restart starts a new pool with these options
        self.keeper = keeper  # setup journal, kept names, snapshots, cells run (kernel/keep/journal.py)
        self.keeper.snapshots.kept = options.snapshots_kept
        self.keeper.snapshots.tags_kept = options.tags_kept
        self.engines_started = 0  # sets of engines started so far (a restart while bringing back makes one more)
        self.backends = Backends(torch_distributed=options.torch_distributed)  # what the ranks run, once they report
        self._rendezvous: Rendezvous | None = None  # the store this kernel serves to a process group across hosts
        self.coming_back = ""  # what the restart brings back at the moment ("replaying setup entry 2 of 3")
        # A restart brings back what was kept (Owner.restart): the pool is not idle until that is done.
        self.bringing_back = False
        self.last_failed: list[int] = []  # the ranks that raised in the last failed cell (%hvd_debug's default)
        self.newest_problem_shown: Any = None  # problems from the ranks newer than this are shown under the next cell
        # Seconds from the start's beginning to each of its phases, and each rank's own (bench/start_phases.py).
        self.timings: dict[str, Any] = {}

    # ---- what the pool file shows (kernel/launch/pool_file.py reads these) ----------------------------------------

    @property
    def options_dict(self) -> dict[str, Any]:
        return self.options.as_dict()

    @property
    def np(self) -> int:
        return int(self.options.np or 0)

    @property
    def kept_dir(self) -> Path:
        """Where the ranks write the snapshots of kept names (in the pool's private directory)."""
        return self.directory / "kept"

    @property
    def pushed_dir(self) -> Path:
        """Where pushed values are kept for replays and exports."""
        return self.directory / "pushed"

    def disk_used(self) -> int:
        """Bytes the pool's snapshots and pushed values take on this host (data shared by links counted once)."""
        seen: set[int] = set()
        total = 0
        for folder in (self.kept_dir, self.pushed_dir):
            for root, _, files in os.walk(folder):
                for name in files:
                    try:
                        st = os.lstat(os.path.join(root, name))
                    except OSError:
                        continue
                    if st.st_ino not in seen:
                        seen.add(st.st_ino)
                        total += st.st_size
        return total

    def kept_summary(self) -> dict[str, Any]:
        """What is kept, for the pool file: the names, how many snapshots, the disk they take."""
        names = list(self.keeper.names)
        return {
            "kept": names,
            "snapshots": len(self.keeper.snapshots.complete()) if names else 0,
            "kept_bytes": self.disk_used() if names or self.keeper.journal else 0,
        }

    def channel_problems(self) -> list[str]:
        return [f"rank {rank}: {text}" for rank, text in (self.channel.problems if self.channel else [])]

    @property
    def client(self) -> ipp.Client | None:
        return self.launcher.client

    # ---- launching and ending -------------------------------------------------------------------------------

    @staticmethod
    def check(options: HvdPool) -> None:
        """PoolError (or ValueError from the options) where a pool with `options` cannot start here: asked before
        anything starts, or stops (a restart at another size)."""
        options.validate()
        gpus = 0 if options.cpu else visible_gpus()
        if gpus and (options.np or 0) > gpus and not options.oversubscribe and not options.multi_host():
            raise PoolError(
                f"-np {options.np} asks for more ranks than the {gpus} GPUs on this host.",
                f"Use %hvd_start -np {gpus}, or add --oversubscribe to share GPUs between ranks, "
                "or --cpu for CPU ranks.",
            )
        if options.ops == "nccl" and not gpus:
            raise PoolError("--ops nccl needs GPUs, and this host has none.", "Use --ops mpi (or auto).")

    @classmethod
    def start(cls, options: HvdPool, keeper: Keeper, bringing_back: bool = False) -> Pool:
        """Start controller and engines, initialise Horovod on every engine, return the ready pool, which keeps what
        `keeper` holds (a new pool's is empty; a stopped pool started again passes its own). `bringing_back`: a
        restart brings that back next, so the pool is shown restarting, not idle, until brought_back()."""
        cls.check(options)
        try:
            pool = cls(options, keeper)
        except state.UnsafeStateDir as exc:
            raise PoolError(str(exc)) from None
        pool.bringing_back = bringing_back
        pool.file.write(pool)
        t0 = time.monotonic()
        pool.timings = {}
        pool.launcher.spawn_reaper()
        try:
            ip = pool.launcher.start_controller()
            pool.timings["controller_s"] = time.monotonic() - t0
            pool.channel = CellChannel(pool.directory, ip, curve=pool.launcher.encrypted())
            pool.channel.on_committed = lambda report: pool.keeper.snapshots.note(report)
            pool._start_engines(t0)
        except BaseException:
            with deferred_interrupts():  # a second Ctrl-C must not leave half of the processes behind
                pool.end()
            raise
        return pool

    def _record_processes(self) -> None:
        """The set of processes changed: the pool file must name them now (the reaper relies on it)."""
        self.file.processes = self.launcher.processes()
        self.file.slurm_job = self.launcher.slurm_job()
        self.file.write(self)

    def _start_engines(self, t0: float) -> None:
        env = {**self.launcher.launch_env(), **self.options.horovod_env()}
        with template.aside():  # a start right after %load_ext: cold, and the warm template waits for it
            ids = self.launcher.start_engines(env)
            self.timings["registered_s"] = time.monotonic() - t0
            self.engines_started += 1
            self._bootstrap(ids, env, "cpu" if self.options.cpu else "auto")
        self.timings["ready_s"] = time.monotonic() - t0
        self.set_state("idle", publish=False)
        self._record_processes()

    def _bootstrap(self, ids: list[int], env: dict[str, str], device: str) -> None:
        assert self.client is not None and self.channel is not None
        view = self.client[ids]
        self.channel.new_generation(len(ids))
        store = self._store()
        ar = view.apply_async(
            wire.start, wire.Start(env, device, self.channel.info(), self.options.torch_distributed, store)
        )
        try:
            rows = ar.get(timeout=self.options.timeout)
        except ipp.error.CompositeError as exc:
            errors = [
                {"rank": i, "ename": e[0], "evalue": e[1], "traceback": "".join(e[2] or "")}
                for i, e in enumerate(exc.elist)
            ]
            raise PoolError(
                "Horovod could not be initialised on the engines:\n" + group_errors(errors),
                "Check the Horovod build with `horovodrun --check-build` (it needs PyTorch and MPI), "
                "or rebuild it with scripts/setup.sh.",
            ) from None
        except ipp.error.RemoteError as exc:
            raise PoolError(f"Horovod could not be initialised: {exc.ename}: {exc.evalue}", "") from None
        except TimeoutError:
            raise PoolError(
                f"hvd.init() did not finish within {self.options.timeout:g} s on every engine.",
                "Raise --timeout; on several hosts, check that they can reach each other.",
            ) from None
        self.timings["ranks"] = {r["rank"]: r.get("timings", {}) for r in rows}
        self.backends = Backends.of(rows, self.options.torch_distributed)
        if self.backends.torch_distributed and self.engines_started == 1:
            self._say_loopback(env)
        self.ranks = sorted(
            (
                Rank(
                    rank=r["rank"],
                    engine_id=eid,
                    host=r["host"],
                    pid=r["pid"],
                    device=r["device"],
                    controller=r["controller"],
                    tensor_ops=r["tensor_ops"],
                    local_rank=r["local_rank"],
                    cross_rank=r["cross_rank"],
                )
                for eid, r in zip(ids, rows, strict=True)
            ),
            key=lambda r: r.rank,
        )
        sizes = {r["size"] for r in rows}
        if sizes != {self.options.np} or [r.rank for r in self.ranks] != list(range(self.np)):
            raise PoolError(
                f"Horovod reports sizes {sorted(sizes)} and ranks {[r.rank for r in self.ranks]} "
                f"for {self.options.np} engines: the engines are not one MPI job.",
                "Start the pool again with %hvd_restart.",
            )
        # Horovod 0.28.1 fixes its GPU collectives when it is built (HOROVOD_GPU_OPERATIONS): HOROVOD_GPU_OPERATIONS=MPI
        # at run time changes nothing, so `--ops mpi` on GPU ranks of a NCCL build would silently stay NCCL.
        gpu_ops = {r.tensor_ops for r in self.ranks if r.device.startswith("cuda")}
        if self.options.ops in ("nccl", "mpi") and gpu_ops and gpu_ops != {self.options.ops.upper()}:
            raise PoolError(
                f"--ops {self.options.ops} cannot be honoured on GPU ranks: this Horovod does its GPU collectives "
                f"with {'/'.join(sorted(gpu_ops))}, chosen when it was built (HOROVOD_GPU_OPERATIONS).",
                "Drop --ops (auto), add --cpu for MPI collectives on CPU ranks, or rebuild Horovod with "
                f"HOROVOD_GPU_OPERATIONS={self.options.ops.upper()}.",
            )
        missing = self.channel.wait_for_ranks(self.np, self.options.timeout)
        if missing:
            raise PoolError(
                f"{format_ranks(missing)} did not connect to the kernel's cell channel "
                f"({self.channel.info()['requests']}) within {self.options.timeout:g} s.",
                "On several hosts, check that they can reach this address (or give it with --ip); then %hvd_restart.",
            )
        self.view = self.client[[r.engine_id for r in self.ranks]]
        self.view.block = False
        for warning in sorted({r.get("warning") for r in rows} - {"", None}):
            print(f"jupyter-hvd: {warning}", file=sys.stderr, flush=True)

    def _store(self) -> dict[str, Any]:
        """The rendezvous of a torch.distributed process group (used where one is asked for, or Horovod is missing):
        a FileStore in the pool's private directory on one host, where the ranks keep Gloo and NCCL on loopback; between
        hosts a store this kernel serves to this start's ranks only (kernel/launch/rendezvous.py says why not a
        TCPStore)."""
        if not self.options.multi_host():
            return {"file": str(self.directory / f"torch-store-{self.engines_started}")}
        if self._rendezvous is not None:  # a new start: the last one's ranks are gone, and their keys go with it
            self._rendezvous.close()
        self._rendezvous = Rendezvous(self.launcher.controller_ip())
        return self._rendezvous.info()

    def _say_loopback(self, env: dict[str, str]) -> None:
        """Say which of the user's GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME a one-host pool's ranks override (the
        engines' environment is this kernel's, with `env` on top)."""
        names = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")
        overridden = {n: v for n in names if (v := env.get(n, os.environ.get(n))) not in (None, "", "lo")}
        if overridden and not self.options.multi_host():
            said = ", ".join(f"{n}={v}" for n, v in overridden.items())
            print(
                f"jupyter-hvd: {said} not used: a pool on one host keeps Gloo's and NCCL's sockets on loopback (lo), "
                "out of other hosts' reach.",
                file=sys.stderr,
                flush=True,
            )

    def replace_engines(self, planned: bool = False) -> None:
        """Replace every engine with a fresh one (same options), Horovod initialised again. What comes back is
        the keep service's job (kernel/keep/service.py), the restart as a whole the owner's (kernel/owner.py).

        `planned` (asked for, not a lost pool): the engines first finish what they were asked, so a snapshot being
        written is not lost. A restart that fails stops the whole pool (half a pool would fail every later cell in
        a new way) and raises PoolError; the options stay, for %hvd_restart.
        """
        with self.lock:  # the watcher reads the channel between cells: not while the new engines say hello
            if planned and self.channel is not None and self.ranks and not self.dead_ranks():
                self.channel.settle(len(self.ranks), timeout=30.0)
            self.set_state("restarting", publish=False)
            self.file.write(self)
            self.launcher.stop_engines(self.ranks)
            self.ranks = []
            self.file.rank_stats = {}
            self.view = None
            try:
                self.timings = {}
                self._start_engines(time.monotonic())
            except BaseException as exc:
                with deferred_interrupts():
                    self.end(keep_directory=True)  # stays the kernel's pool, stopped: %hvd_restart starts it again
                if isinstance(exc, PoolError):
                    raise PoolError(
                        f"The restart failed: {exc.message} The pool was stopped.",
                        f"{exc.hint}\n%hvd_restart starts it again with the same options.".strip(),
                    ) from None
                raise

    def initialised(self) -> str:
        return self.backends.initialised()

    def interrupted_restart(self) -> str:
        """What state a restart left the pool in when the user interrupted it, and what to type."""
        if self.stopped or not self.ranks:
            return (
                "The restart was interrupted while the engines started: the pool is stopped. %hvd_restart starts it "
                "again and brings back the setup journal and the kept names."
            )
        where = f" while {self.coming_back}" if self.coming_back else ""
        return (
            f"The restart was interrupted{where}: the engines run, but what the setup journal and the kept names "
            "bring back is not all there. %hvd_restart brings it all back (%hvd_restart --fresh starts empty)."
        )

    def end(self, keep_directory: bool = False) -> None:
        """Stop engines and controller, leave no process behind; the pool's directory (its snapshots) goes too unless
        `keep_directory` (a failed restart: %hvd_restart starts the pool again with them)."""
        self.stopped = True
        try:
            if self.watcher is not None:
                self.watcher.stop()
            self.set_state("stopping", publish=False)
            self.file.write(self)
            self.launcher.stop(self.ranks)
            self.ranks = []
            self.view = None
            with self.lock:  # not while the watcher reads it
                if self.channel is not None:
                    self.channel.close()
                    self.channel = None
                if self._rendezvous is not None:
                    self._rendezvous.close()
                    self._rendezvous = None
            self.file.remove()
        finally:  # where the file is still there (cut short), the reaper ends what is left, directory and all
            self.launcher.let_reaper_go()
        if not keep_directory:
            shutil.rmtree(self.directory, ignore_errors=True)

    # ---- ranks ---------------------------------------------------------------------------------------------

    def engine_ids(self) -> list[int]:
        """ipyparallel engine ids, in rank order."""
        return [r.engine_id for r in self.ranks]

    def interrupt(self, ranks: list[int], cell: int) -> None:
        """Stop cell (or debug session) `cell` on `ranks` with KeyboardInterrupt: where it runs, and where it has not
        begun yet (wire.Interrupt). A rank that cannot be reached is found dead by the liveness checks."""
        if self.channel is None:
            return
        for rank in ranks:
            try:
                self.channel.send(rank, wire.Interrupt(cell))
            except ChannelError:
                pass

    def signal_interrupt(self, ranks: list[int]) -> None:
        """SIGINT from outside to `ranks`' engines: for a rank whose reading thread cannot take an Interrupt (native
        code holds the GIL), so it runs the cell; such code checks for signals."""
        self.launcher.interrupt([r for r in self.ranks if r.rank in ranks])

    def dead_ranks(self) -> list[int]:
        """Ranks whose engine process is gone; on other hosts, ranks whose engine left the controller."""
        return self.launcher.dead_ranks(self.ranks)

    def frozen_ranks(self) -> list[int]:
        """Local ranks whose engine is stopped by a signal (SIGSTOP, SIGTSTP): alive, but running nothing."""
        return self.launcher.frozen_ranks(self.ranks)

    def mpiexec_alive(self) -> bool:
        return self.launcher.mpiexec_alive()

    def death_report(self) -> str:
        """Which rank died and how, from mpiexec's own message where it gave one."""
        return self.launcher.death_report(self.ranks)

    def note_problem(self, text: str) -> None:
        """Something of jupyter-hvd's own failed in the kernel (a thread): logged, and shown in %hvd_status and the
        sidebar."""
        if self.file.note_problem(text):
            log.warning("jupyter-hvd: %s", text)

    def problems(self) -> list[str]:
        """What failed in jupyter-hvd's own threads or in users' threads, newest first (kernel's, then ranks')."""
        return self.file.problems(self)

    # ---- state ---------------------------------------------------------------------------------------------

    def write_file(self) -> None:
        """Write the pool file now (the watcher's thread does, off the cells' hot path)."""
        self.file.write(self)

    def publish(self) -> None:
        """Have the pool file rewritten soon (off the cell's hot path)."""
        self.file.publish(self)

    def update_rank_stats(self, stats: dict[int, dict[str, Any]], publish: bool = True) -> None:
        """Merge per-rank measurements (CPU, memory, step, loss, last line...) and publish them."""
        self.file.update_ranks(stats)
        if publish and self.client is not None:
            self.publish()

    def set_state(self, pool_state: str, cell: str | None = None, publish: bool = True, own: bool = False) -> None:
        """Record what the pool is doing (idle, running a cell, ...) for the sidebar; `own`: the cell is jupyter-hvd's
        own work (a restore), and `cell` says it in words.

        publish=False leaves the pool file to the watcher's next round (within a second).
        """
        if pool_state == "idle" and self.bringing_back:
            # Between a restart's new engines and the end of its replay and restore: the sidebar waits for idle.
            pool_state = "restarting"
        self.busy_cell = cell
        self.busy_own = own
        self.state = pool_state
        self._idle_since = time.monotonic()
        if pool_state == "running":
            self.resting = False  # the cell wakes Horovod on every rank first
        for r in self.ranks:
            r.state = "busy" if pool_state == "running" else "idle"
        if publish:
            self.publish()

    def brought_back(self) -> None:
        """A restart's replay and restore ended (done, failed or interrupted): the pool, if it runs, is idle again."""
        self.bringing_back = False
        if self.state == "restarting" and not self.stopped and self.channel is not None:
            self.set_state("idle")

    def can_rest(self) -> bool:
        """Whether this pool's Horovod may rest when idle (the engines decide alike, from the same environment)."""
        return self.options.can_rest()

    def rest_if_idle(self) -> bool:
        """Stop Horovod on every rank if the pool has been idle for --rest-after seconds; whether it now rests.

        Called by the watcher thread. Sends only, and only while no cell holds the lock, so a rest request always
        reaches the engines before the next cell does.
        """
        after: float | None = self.options.rest_after
        if after is None:
            after = REST_AFTER_GPU_S if any(r.device.startswith("cuda") for r in self.ranks) else REST_AFTER_CPU_S
        if not self.backends.can_rest() or self.resting or not after or self.channel is None or self.state != "idle":
            return self.resting
        if not self.can_rest():
            return self.resting
        if time.monotonic() - self._idle_since < after or not self.lock.acquire(blocking=False):
            return False
        try:
            if self.state == "idle" and not self.resting and self.channel is not None:
                try:
                    # All ranks or none: the rest is collective (engine/horovod/rest.py).
                    self.channel.send_all(wire.Rest())
                except ChannelError:
                    return False  # a dead rank: the next cell finds out and restarts the pool
                self.resting = True
                self.publish()
        finally:
            self.lock.release()
        return self.resting

    def read_channel(self) -> None:
        """Read what reached the cell channel while no cell runs (called by the watcher): nothing piles up in the
        kernel, and junk is counted for %hvd_status."""
        if self.channel is None or not self.lock.acquire(blocking=False):
            return  # a cell (or a start) reads it meanwhile
        try:
            if self.channel is not None and self.state == "idle":
                self.channel.drain()
        finally:
            self.lock.release()

    def table(self) -> str:
        """The pool's ranks as a fixed-width text table."""
        return rank_table(self.ranks)
