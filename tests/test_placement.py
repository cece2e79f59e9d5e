"""Where ranks run, without starting them: each placement's launch (mpiexec's arguments, the engines' environment and
arguments), controller settings, which ranks this host sees, and what a launcher says when ranks die."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from jupyter_hvd.kernel.launch import hosts, placement
from jupyter_hvd.kernel.launch.launcher import Launcher
from jupyter_hvd.kernel.launch.options import HvdPool
from jupyter_hvd.kernel.ranks import Rank

MPIEXEC = "/venv/bin/mpiexec"
ENV = {"JUPYTER_HVD_POOL": "hvd-1-1", "CUDA_VISIBLE_DEVICES": ""}
SHORT = Path("/tmp/jupyter-hvd/hvd-1-1")


def gone_pid() -> int:
    """The pid of a process that has ended (and been reaped)."""
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def launch(p: placement.Placement, gpus: int = 0, cores: int = 2) -> dict:
    return p.engine_launch(
        MPIEXEC,
        dict(ENV),
        gpus=gpus,
        cores=cores,
        controller_ip="127.0.0.1",
        connection_file="/sec/engine.json",
        directory=SHORT,
    )


def rank(n: int, host: str, pid: int = 1) -> Rank:
    return Rank(rank=n, engine_id=n, host=host, pid=pid, device="cpu", controller="MPI", tensor_ops="MPI")


@pytest.mark.parametrize(
    ("options", "kind"),
    [
        (HvdPool(np=2), placement.OneHost),
        (HvdPool(np=4, hosts="server1:2,server2:2"), placement.Hosts),
        (HvdPool(np=4, hostfile="/etc/hosts"), placement.Hosts),
        (HvdPool(np=8, slurm=True, nodes=2), placement.Slurm),
        (HvdPool(np=2, nodes=2), placement.OneHost),  # -N without --slurm submits no job
    ],
)
def test_the_options_pick_one_placement(options, kind):
    assert type(placement.choose(options)) is kind


def test_one_host_engines_read_the_connection_file_and_need_no_nanny():
    p = placement.OneHost(HvdPool(np=2, timeout=45))
    kw = launch(p)
    assert kw["mpi_cmd"] == [MPIEXEC]
    # Open MPI's session files go to the pool's private directory, which is removed with the pool.
    assert kw["mpi_args"] == ["--bind-to", "none", "--prtemca", "prte_tmpdir_base", str(SHORT)]
    assert kw["environment"] == {
        **ENV,
        "JUPYTER_HVD_CONNECTION_FILE": "/sec/engine.json",
        "JUPYTER_HVD_CONNECTION_WAIT_S": "45",
        "JUPYTER_HVD_FAULTS_DIR": str(SHORT),  # a crash's stack, for the kernel to quote
    }
    assert kw["engine_args"] == ["--IPEngine.enable_nanny=False", "--IPEngine.max_heartbeat_misses=0"]
    assert not p.send_connection_env  # mpiexec starts the engines while the controller still starts
    assert p.environment() == {"OMPI_MCA_btl": "self,sm"}  # shared memory, no MPI socket on the network
    assert p.controller_args == placement.LOCAL_CONTROLLER_ARGS


def test_hosts_engines_are_placed_and_given_what_remote_hosts_need():
    p = placement.Hosts(HvdPool(np=4, hosts="localhost:2,other.invalid:2"))
    kw = launch(p)
    args = kw["mpi_args"]
    assert args[:2] == ["--bind-to", "none"]
    # Open MPI's session files under a name of the pool's own on every host, not the kernel's private directory
    # (on this host only) nor /tmp/prted.<pid> (where a killed daemon's files stop the next one with its pid).
    session = Path(args[args.index("prte_tmpdir_base") + 1])
    assert session.parent == Path("/tmp") and session.name.startswith("jupyter-hvd-")
    assert session != Path(launch(placement.Hosts(HvdPool(np=4, hosts="localhost:2")))["mpi_args"][-1])
    assert args[args.index("--host") + 1] == "localhost:2,other.invalid:2"
    forwarded = {args[i + 1] for i, a in enumerate(args) if a == "-x"}
    assert {"JUPYTER_HVD_POOL", "CUDA_VISIBLE_DEVICES", "IPP_CONNECTION_INFO"} <= forwarded
    assert kw["environment"] == ENV  # no connection file: ipyparallel sends the controller's address itself
    assert "engine_args" not in kw  # nannies deliver signals to ranks on other hosts
    assert p.send_connection_env and p.environment() == {}
    assert p.controller_args == tuple(hosts.MULTI_HOST_CONTROLLER_ARGS)


def test_a_slurm_job_runs_mpiexec_with_the_same_arguments():
    p = placement.Slurm(HvdPool(np=4, slurm=True, nodes=2, oversubscribe=True))
    assert p.engine_launcher == "slurm"
    kw = launch(p)
    run = kw["batch_template"].strip().splitlines()[-1]
    assert run.startswith(f"{MPIEXEC} --bind-to none --map-by :OVERSUBSCRIBE -x ")
    assert kw["environment"] == ENV and "engine_args" not in kw
    assert p.job_id(SimpleNamespace(job_id=4242)) == "4242" and p.job_id(None) == ""
    assert placement.Hosts(HvdPool(np=2, hosts="a:2")).job_id(SimpleNamespace(job_id=4242)) == ""


def test_cpu_ranks_may_outnumber_this_hosts_cores_but_not_other_hosts_or_gpus():
    oversubscribe = ["--map-by", ":OVERSUBSCRIBE"]
    one = placement.OneHost(HvdPool(np=4))
    assert launch(one, gpus=0, cores=2)["mpi_args"][2:4] == oversubscribe
    assert oversubscribe[1] not in launch(one, gpus=0, cores=4)["mpi_args"]
    assert oversubscribe[1] not in launch(one, gpus=2, cores=2)["mpi_args"]  # GPUs: only when asked
    assert launch(placement.OneHost(HvdPool(np=4, oversubscribe=True)), gpus=2)["mpi_args"][2:4] == oversubscribe
    spread = placement.Hosts(HvdPool(np=4, hosts="a:2,b:2"))
    assert oversubscribe[1] not in launch(spread, gpus=0, cores=1)["mpi_args"]


def test_only_a_pool_on_this_host_listens_on_ipc_sockets():
    assert not placement.OneHost(HvdPool(np=2)).encrypted(SHORT)
    assert placement.OneHost(HvdPool(np=2)).encrypted(Path("/tmp/" + "d" * 120))  # too deep for a socket name
    assert placement.Hosts(HvdPool(np=2, hosts="localhost:2")).encrypted(SHORT)
    assert placement.Slurm(HvdPool(np=2, slurm=True, nodes=1)).encrypted(SHORT)


def test_controller_address_per_placement():
    assert placement.OneHost(HvdPool(np=2)).controller_ip() == "127.0.0.1"
    assert placement.Hosts(HvdPool(np=2, hosts=f"localhost:1,{socket.gethostname()}:1")).controller_ip() == "127.0.0.1"
    # A SLURM job's nodes are not known yet: --ip as given, else the address on the default route.
    assert placement.Slurm(HvdPool(np=2, slurm=True, nodes=1, ip="10.9.8.7")).controller_ip() == "10.9.8.7"


def test_which_ranks_this_host_sees():
    here, there = rank(0, socket.gethostname()), rank(1, "server2")
    assert placement.OneHost(HvdPool(np=2)).split([here, there]) == ([here, there], [])
    assert placement.Hosts(HvdPool(np=2, hosts="a:2")).split([here, there]) == ([here], [there])
    assert placement.OneHost(HvdPool(np=2)).leftovers("hvd-1-1") == []


def test_a_host_that_did_not_come_up_is_named():
    p = placement.Hosts(HvdPool(np=4, hosts="localhost:2,server2.invalid:2"))
    hint = p.start_failed_hint("ORTE was unable to start\nRemote host: server2.invalid\n")
    assert "server2.invalid did not start its engines" in hint and "-H localhost:2" in hint
    assert placement.OneHost(HvdPool(np=2)).start_failed_hint("Remote host: x") == ""


def test_the_launcher_environment_follows_the_placement(tmp_path):
    def env(options: HvdPool) -> dict[str, str]:
        return Launcher("hvd-1-1", options, tmp_path / "pool.json", lambda: None).launch_env()

    assert env(HvdPool(np=2))["OMPI_MCA_btl"] == "self,sm"
    assert "OMPI_MCA_btl" not in env(HvdPool(np=2, hosts="a:2"))
    assert env(HvdPool(np=2, cpu=True))["CUDA_VISIBLE_DEVICES"] == ""


def test_death_report_says_a_remote_rank_stopped_answering(tmp_path):
    def report(options: HvdPool, ranks: list[Rank], registered: list[int]) -> str:
        launcher = Launcher("hvd-1-1", options, tmp_path / "pool.json", lambda: None)
        launcher.client = SimpleNamespace(ids=registered)  # type: ignore[assignment]
        return launcher.death_report(ranks)

    me = socket.gethostname()
    alive = rank(0, me, pid=os.getpid())
    assert report(HvdPool(np=2, hosts="a:2"), [alive, rank(1, "server2")], [0]) == (
        "rank 1 on server2 stopped answering the controller (host down or unreachable)"
    )
    assert report(HvdPool(np=2), [alive, rank(1, me, pid=gone_pid())], [0, 1]) == f"rank 1 on {me} died"
    assert report(HvdPool(np=2), [alive], [0]) == "the engines stopped"
