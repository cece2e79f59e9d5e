"""Where a pool's ranks run, one strategy each: this host only (`OneHost`), hosts given with -H or --hostfile
(`Hosts`), or a SLURM job of the pool's own (`Slurm`, --slurm).

Runs in the user's kernel. The launcher (kernel/launch/launcher.py) picks one from the options once (`choose`) and asks
it all that differs between them: the controller's address, heartbeat and encryption; the engines' launch (ipyparallel's
engine-set launcher, mpiexec's arguments, the engines' environment and arguments); what to wait for after the
launch; which ranks this host sees (signalled, checked and killed by pid) and which only the controller sees; what
mpiexec leaves behind; what to say when the engines do not come up. As ipyparallel's engine-set launchers (MPI, SSH,
SLURM) are classes picked by name rather than flags tested all over the code. The hosts' and SLURM's own details stay
in kernel/launch/hosts.py and kernel/launch/slurm.py.
"""

from __future__ import annotations

import secrets
import shutil
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

import psutil

from ..channel import IPC_PATH_MAX
from ..ranks import Rank
from . import hosts, slurm
from .options import HvdPool, setting

CONNECTION_FILE_ENV = "JUPYTER_HVD_CONNECTION_FILE"  # where local engines find the controller (engine/main.py)
CONNECTION_WAIT_ENV = "JUPYTER_HVD_CONNECTION_WAIT_S"  # and how long they wait for it (the pool's --timeout)
FAULTS_DIR_ENV = "JUPYTER_HVD_FAULTS_DIR"  # where they write their stack if they crash (engine/main.py)
# ipyparallel's hub completes an engine's registration at its next heartbeat: with the default 3 s period that took
# 6 s of every pool start. Local engines are watched by pid as well, so the hub's patience stays at 30 s.
LOCAL_CONTROLLER_ARGS = ("--ping=250", "--HeartMonitor.max_heartmonitor_misses=120")
LOCAL_ENGINE_ARGS = ("--IPEngine.enable_nanny=False", "--IPEngine.max_heartbeat_misses=0")


class Placement(ABC):
    """Where the ranks of a pool run: what each placement must say, and the defaults most share."""

    engine_launcher = "mpi"  # ipyparallel's engine-set launcher, by its entry-point name: mpiexec run here
    controller_args: tuple[str, ...]  # the controller's heartbeat: how soon it drops an engine that went silent
    send_connection_env: bool  # ipyparallel puts the controller's address and key in the engines' environment
    every_rank_here = False  # every rank runs on this host: its engines can be forked from the kernel's warm template

    def __init__(self, options: HvdPool) -> None:
        self.options = options

    @abstractmethod
    def controller_ip(self) -> str:
        """The address the controller listens on, one the engines reach; ValueError when none can be chosen."""

    @abstractmethod
    def encrypted(self, directory: Path) -> bool:
        """Whether the pool listens on TCP with ZeroMQ CURVE rather than on ipc sockets in its private `directory`."""

    def environment(self) -> dict[str, str]:
        """Variables mpiexec and the engines need for this placement, beside the pool's own."""
        return {}

    def oversubscribed(self, gpus: int, cores: int) -> bool:
        """Whether mpiexec may start more ranks than slots (`gpus`, `cores`: this host's): only when asked."""
        return bool(self.options.oversubscribe)

    def mpi_args(self, gpus: int, cores: int) -> list[str]:
        """mpiexec's own arguments common to the placements: ranks unbound, and oversubscription where allowed."""
        args = ["--bind-to", "none"]
        if self.oversubscribed(gpus, cores):
            args += ["--map-by", ":OVERSUBSCRIBE"]
        return args

    @abstractmethod
    def engine_launch(
        self,
        mpiexec: str,
        env: dict[str, str],
        *,
        gpus: int,
        cores: int,
        controller_ip: str,
        connection_file: str,
        directory: Path,
    ) -> dict[str, Any]:
        """Arguments for ipyparallel's `Cluster.start_engines` (beside `n` and `engine_cmd`) that launch the engines
        with `mpiexec` and environment `env`, given this host's `gpus` and `cores`, the address the controller listens
        on, the path of its engine connection file and the pool's private `directory`."""

    def await_launch(self, engine_set: Any) -> None:
        """Wait until the launched engines can come up at all (a job in a queue); raise PoolError if they cannot.
        mpiexec run here starts them at once: nothing to wait for."""
        return None

    def job_id(self, engine_set: Any) -> str:
        """The batch job running the engines, for the reaper to cancel; "" where there is none."""
        return ""

    def start_failed_hint(self, mpiexec_output: str) -> str:
        """What to add to 'the engines did not register', from what mpiexec printed."""
        return ""

    def cleanup(self) -> None:
        """Remove what the launches left on this host once the pool stopped; the pool's directory goes anyway."""
        return None

    @abstractmethod
    def split(self, ranks: list[Rank]) -> tuple[list[Rank], list[Rank]]:
        """(the ranks on this host, whose pids mean something here; the ranks elsewhere, which only the controller
        sees: their pids are another host's)."""

    @abstractmethod
    def leftovers(self, pool_id: str) -> list[psutil.Process]:
        """Processes on this host that the launch left for pool `pool_id`, besides the engines and mpiexec's own
        children."""


class OneHost(Placement):
    """Every rank on this host: the pool listens on ipc sockets in its private directory, ranks talk through shared
    memory, and engines are found, signalled and checked by pid."""

    controller_args = LOCAL_CONTROLLER_ARGS
    # Local engines read the controller's connection file themselves (engine/main.py), so mpiexec starts them while
    # the controller is still starting (about 1 s here), instead of after.
    send_connection_env = False
    every_rank_here = True

    def controller_ip(self) -> str:
        return hosts.controller_ip([], self.options.ip)

    def encrypted(self, directory: Path) -> bool:
        """TCP with CURVE only where the private directory is too deep for ipc socket names."""
        return len(str(directory / "ipp:65535")) > IPC_PATH_MAX

    def environment(self) -> dict[str, str]:
        # Ranks talk through shared memory, and no MPI socket listens on the network.
        return {"OMPI_MCA_btl": "self,sm"}

    def oversubscribed(self, gpus: int, cores: int) -> bool:
        # CPU ranks may outnumber cores (a laptop): allowed, with fewer threads each; GPUs only when asked.
        return super().oversubscribed(gpus, cores) or (not gpus and (self.options.np or 0) > cores)

    def engine_launch(
        self,
        mpiexec: str,
        env: dict[str, str],
        *,
        gpus: int,
        cores: int,
        controller_ip: str,
        connection_file: str,
        directory: Path,
    ) -> dict[str, Any]:
        return {
            "mpi_cmd": [mpiexec],
            # Open MPI's session files in the pool's private directory: removed with it (an mpiexec killed in a
            # restart leaves its /tmp/ompi.<pid> behind), and out of other pools' way.
            "mpi_args": [*self.mpi_args(gpus, cores), "--prtemca", "prte_tmpdir_base", str(directory)],
            "environment": {
                **env,
                CONNECTION_FILE_ENV: connection_file,
                CONNECTION_WAIT_ENV: f"{self.options.timeout:g}",
                FAULTS_DIR_ENV: str(directory),
            },
            # Local ranks are signalled by pid; a nanny per engine would only add a process to start. Nor do they
            # watch the controller's heartbeat (the reaper ends them with it): that watch listens on loopback TCP,
            # where any local user could feed it.
            "engine_args": list(LOCAL_ENGINE_ARGS),
        }

    def split(self, ranks: list[Rank]) -> tuple[list[Rank], list[Rank]]:
        return list(ranks), []

    def leftovers(self, pool_id: str) -> list[psutil.Process]:
        return []  # mpiexec runs no ssh here: its children are all there is


class Hosts(Placement):
    """Ranks on the hosts of -H or --hostfile, started by mpiexec over ssh (or c.HvdPool.launch_agent); the pool
    listens, encrypted, on an address those hosts reach."""

    controller_args = tuple(hosts.MULTI_HOST_CONTROLLER_ARGS)
    send_connection_env = True  # no shared home directory needed

    def __init__(self, options: HvdPool) -> None:
        super().__init__(options)
        # Open MPI's session files on every host, under a name of this pool's own. By default a daemon writes them
        # in /tmp/prted.<pid>, and one killed (a host lost, a restart) leaves that behind: a later daemon with the
        # same pid (a rebooted host counts pids from the start again) finds its files there and exits (status 213).
        # A literal /tmp: the kernel's $TMPDIR need not exist on the other hosts.
        self.session_files = Path("/tmp") / f"jupyter-hvd-{secrets.token_hex(6)}"

    def encrypted(self, directory: Path) -> bool:
        return True  # the pool's traffic crosses the network

    def split(self, ranks: list[Rank]) -> tuple[list[Rank], list[Rank]]:
        here = [r for r in ranks if hosts.is_this_host(r.host)]
        return here, [r for r in ranks if not hosts.is_this_host(r.host)]

    def leftovers(self, pool_id: str) -> list[psutil.Process]:
        """ssh clients (or the launch agent) to hosts that stopped answering, which outlive a killed mpiexec."""
        return hosts.launch_processes(pool_id)

    def host_list(self) -> list[hosts.Host]:
        """The hosts, read from the options each time (a hostfile is read again at a restart, as mpiexec does)."""
        return self.options.host_list()

    def controller_ip(self) -> str:
        return hosts.controller_ip(self.host_list(), self.options.ip)

    def engine_launch(
        self,
        mpiexec: str,
        env: dict[str, str],
        *,
        gpus: int,
        cores: int,
        controller_ip: str,
        connection_file: str,
        directory: Path,
    ) -> dict[str, Any]:
        agent = setting("launch_agent")
        placing = hosts.mpiexec_args(self.host_list(), self.options.hostfile, controller_ip, env, agent)
        session = ["--prtemca", "prte_tmpdir_base", str(self.session_files)]
        return {"mpi_cmd": [mpiexec], "mpi_args": self.mpi_args(gpus, cores) + placing + session, "environment": env}

    def start_failed_hint(self, mpiexec_output: str) -> str:
        """The host that did not come up, and how to go on without it."""
        return hosts.unreachable_hint(mpiexec_output, self.host_list())

    def cleanup(self) -> None:
        """This host's share of the session files (the other hosts' daemons remove theirs when they exit)."""
        shutil.rmtree(self.session_files, ignore_errors=True)


class Slurm(Hosts):
    """Ranks in a SLURM job of the pool's own, submitted with sbatch by ipyparallel's SLURM launcher: its nodes are
    not known before it runs, so the controller listens on this host's outward address."""

    engine_launcher = slurm.ENGINE_LAUNCHER

    def controller_ip(self) -> str:
        return self.options.ip or hosts.outward_ip()

    def engine_launch(
        self,
        mpiexec: str,
        env: dict[str, str],
        *,
        gpus: int,
        cores: int,
        controller_ip: str,
        connection_file: str,
        directory: Path,
    ) -> dict[str, Any]:
        return slurm.launcher_kwargs(self.options, env, [mpiexec, *self.mpi_args(gpus, cores)])

    def await_launch(self, engine_set: Any) -> None:
        """Show the job's queue state until it runs (slurm.wait_for_job)."""
        slurm.wait_for_job(engine_set, self.options.timeout)

    def job_id(self, engine_set: Any) -> str:
        return str(getattr(engine_set, "job_id", "") or "")


def choose(options: HvdPool) -> Placement:
    """The placement the options ask for: a SLURM job (--slurm -N), the hosts of -H/--hostfile, else this host."""
    if options.slurm_nodes:
        return Slurm(options)
    if options.hosts or options.hostfile:
        return Hosts(options)
    return OneHost(options)
