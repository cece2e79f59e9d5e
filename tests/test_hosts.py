"""Multi-host pools without the network: -H and hostfile parsing, the controller address, mpiexec's arguments."""

from __future__ import annotations

import socket

import pytest
from IPython.core.error import UsageError

from jupyter_hvd.kernel.launch import hosts
from jupyter_hvd.kernel.launch.hosts import Host
from jupyter_hvd.kernel.launch.options import HvdPool


def test_hosts_like_horovodrun():
    assert hosts.parse_hosts("server1:4,server2:4") == [Host("server1", 4), Host("server2", 4)]
    assert hosts.parse_hosts(" a , b:2 ") == [Host("a", 1), Host("b", 2)]
    assert hosts.total_slots(hosts.parse_hosts("server1:4,server2:4")) == 8


@pytest.mark.parametrize("bad", ["", "server1:0", "server1:x", ":4", "a:1,a:2"])
def test_bad_hosts_are_explained(bad):
    with pytest.raises(ValueError, match="-H"):
        hosts.parse_hosts(bad)


def test_open_mpi_hostfile(tmp_path):
    f = tmp_path / "hosts"
    f.write_text("# the lab\nserver1 slots=4 max_slots=8\n\nserver2 slots=2  # newer box\nserver3\n")
    assert hosts.parse_hostfile(f) == [Host("server1", 4), Host("server2", 2), Host("server3", None)]
    assert hosts.total_slots(hosts.parse_hostfile(f)) is None  # server3: mpiexec counts its cores


def test_bad_hostfile_names_the_line(tmp_path):
    f = tmp_path / "hosts"
    f.write_text("server1 slots=4\nserver2 cpus=2\n")
    with pytest.raises(ValueError, match="line 2: 'cpus=2'"):
        hosts.parse_hostfile(f)
    with pytest.raises(ValueError, match="cannot read"):
        hosts.parse_hostfile(tmp_path / "missing")


def test_np_beyond_the_slots_is_refused():
    with pytest.raises(ValueError, match=r"-np 9 asks for more ranks than the 8 slots of server1 \(4\), server2 \(4\)"):
        HvdPool(np=9, hosts="server1:4,server2:4").validate()
    HvdPool(np=9, hosts="server1:4,server2:4", oversubscribe=True).validate()
    with pytest.raises(ValueError, match="not both"):
        HvdPool(np=2, hosts="a:2", hostfile="/etc/hosts").validate()


def test_controller_stays_on_loopback_for_this_host():
    assert hosts.controller_ip([Host("localhost", 2), Host(socket.gethostname(), 2)]) == "127.0.0.1"


def test_controller_ip_follows_the_route_to_the_hosts():
    # 127.0.0.2 is another address of this host's loopback: the route to it leaves from 127.0.0.1.
    assert hosts.controller_ip([Host("127.0.0.1", 1)], override="127.0.0.1") == "127.0.0.1"
    with pytest.raises(ValueError, match="not an address of this host"):
        hosts.controller_ip([Host("server1", 1)], override="192.0.2.77")
    with pytest.raises(ValueError, match=r"No route .* no-such-host\.invalid"):
        hosts.controller_ip([Host("no-such-host.invalid", 1)])


def test_mpiexec_arguments_place_forward_and_use_the_agent(monkeypatch):
    monkeypatch.setenv("HOROVOD_LOG_LEVEL", "info")
    args = hosts.mpiexec_args(
        hosts.parse_hosts("server1:4,server2:4"), env={"JUPYTER_HVD_POOL": "p1", "CUDA_VISIBLE_DEVICES": ""}
    )
    assert args[:2] == ["--host", "server1:4,server2:4"]
    forwarded = {args[i + 1] for i, a in enumerate(args) if a == "-x"}
    assert {"JUPYTER_HVD_POOL", "CUDA_VISIBLE_DEVICES", "HOROVOD_LOG_LEVEL", "PATH"} <= forwarded
    assert "plm_ssh_agent" not in args  # ssh, Open MPI's default
    agent = hosts.mpiexec_args([], hostfile="~/hosts", agent="/opt/enter-host.sh")
    assert agent[:2] == ["--hostfile", str(__import__("pathlib").Path("~/hosts").expanduser())]
    assert agent[-3:] == ["--prtemca", "plm_ssh_agent", "/opt/enter-host.sh"]


def test_mpi_traffic_stays_on_the_controller_network():
    lo = hosts.network_of("127.0.0.1")
    assert lo is not None and lo.startswith("127.")
    assert "btl_tcp_if_include" not in hosts.mpiexec_args(hosts.parse_hosts("a:1"), ip="127.0.0.1")


def test_start_magic_rejects_bad_hosts_before_starting_anything(ip):
    from jupyter_hvd.kernel import owner as pools

    saved = pools.current()
    pools.owner.pool = None  # as if no pool were running, so the arguments themselves are checked
    try:
        with pytest.raises(UsageError, match="host:slots"):
            ip.run_line_magic("hvd_start", "-np 2 -H server1:zero")
        with pytest.raises(UsageError, match="more ranks than the 2 slots"):
            ip.run_line_magic("hvd_start", "-np 4 -H server1:1,server2:1")
        with pytest.raises(UsageError, match="--slurm needs the number of nodes"):
            ip.run_line_magic("hvd_start", "--slurm")
        with pytest.raises(UsageError, match="not both"):
            ip.run_line_magic("hvd_start", "-H a:1 --hostfile /etc/hosts")
    finally:
        pools.owner.pool = saved


def test_an_address_of_another_host_is_explained(ip):
    """A wrong --ip stops the start before any controller runs: the user reads why, and nothing is left running."""
    import psutil

    from jupyter_hvd.kernel import owner as pools
    from jupyter_hvd.kernel.errors import PoolError

    saved = pools.current()
    pools.owner.pool = None
    try:
        with pytest.raises(PoolError, match=r"--ip 198\.51\.100\.77 is not an address of this host"):
            ip.run_line_magic("hvd_start", "-np 2 --ip 198.51.100.77")
        assert pools.current() is None
        left = [p.cmdline() for p in psutil.Process().children(recursive=True) if p.is_running()]
        assert not [c for c in left if "jupyter_hvd.processes.reaper" in c], left
    finally:
        pools.owner.pool = saved


def test_pool_on_hosts_given_with_h_runs_here(ip):
    """`-H` with this host only (no root, no network needed): the multi-host launch path end to end."""
    from jupyter_hvd.kernel import owner as pools

    saved = pools.current()
    pools.owner.pool = None
    try:
        ip.run_line_magic("hvd_start", "-H localhost:2 --cpu --timeout 90")
        pool = pools.current()
        assert pool is not None and pool.options.np == 2  # -np defaults to the hosts' slots
        assert pool.launcher.cluster.controller_ip == "127.0.0.1"  # only local hosts: the controller stays on loopback
        launch = pool.launcher.engine_set().args
        assert "--host" in launch and "localhost:2" in launch
        assert "IPP_CONNECTION_INFO" in launch  # forwarded with -x, as remote hosts need it
        ip.run_cell_magic("hvd", "", "total = hvd.allreduce(torch.tensor([rank + 1.0]), op=hvd.Sum).item()")
        assert [pool.client[r.engine_id].pull("total", block=True) for r in pool.ranks] == [3.0, 3.0]
        assert [(r.local_rank, r.cross_rank) for r in pool.ranks] == [(0, 0), (1, 0)]
    finally:
        if pools.current() is not None:
            ip.run_line_magic("hvd_stop", "")
        pools.owner.pool = saved
