"""Pools across several hosts: `-H host:slots,...` and hostfiles, the controller address, and mpiexec's arguments.

Runs in the user's kernel. Engines on other hosts are started by `mpiexec` (over ssh, or the launch agent set as
c.HvdPool.launch_agent) and reach the ipyparallel controller over the network, so the controller must listen on
an address those hosts can reach: chosen here from the route to the first remote host, or given with `--ip`.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
from dataclasses import dataclass
from pathlib import Path

import psutil

from ... import state

# Variables every remote engine needs besides the pool's own environment; mpiexec forwards only what `-x` names.
FORWARDED = ("PATH", "LD_LIBRARY_PATH", "PYTHONPATH", "VIRTUAL_ENV")
# ipyparallel puts these in mpiexec's environment: the controller's address and key travel in IPP_CONNECTION_INFO,
# so remote hosts need no shared home directory.
FROM_LAUNCHER = ("IPP_CONNECTION_INFO", "IPP_CLUSTER_ID", "IPP_PROFILE_DIR")
FORWARDED_PREFIXES = ("HOROVOD_", "NCCL_", "JUPYTER_HVD_", "IPP_")


@dataclass(frozen=True)
class Host:
    """One machine of a multi-host pool and how many ranks it takes (None: let mpiexec count its cores)."""

    name: str
    slots: int | None = 1


def parse_hosts(text: str) -> list[Host]:
    """Parse `-H server1:4,server2:4` (horovodrun's syntax; a host without `:N` takes one rank)."""
    hosts: list[Host] = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, slots = item.rpartition(":")
        if not sep:
            name, slots = item, "1"
        if not name or not slots.isdigit() or int(slots) < 1:
            raise ValueError(f"-H expects host:slots entries like server1:4,server2:4 (got {item!r})")
        hosts.append(Host(name, int(slots)))
    if not hosts:
        raise ValueError("-H needs at least one host, e.g. -H server1:4,server2:4")
    _no_duplicates(hosts, "-H")
    return hosts


def parse_hostfile(path: str | Path) -> list[Host]:
    """Read an Open MPI hostfile: `host slots=N` per line (`max_slots=` ignored, `#` starts a comment)."""
    try:
        text = Path(path).expanduser().read_text()
    except OSError as exc:
        raise ValueError(f"--hostfile {path}: cannot read it ({exc.strerror})") from None
    hosts: list[Host] = []
    for number, line in enumerate(text.splitlines(), 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        slots: int | None = None
        for word in words[1:]:
            key, sep, value = word.partition("=")
            if key in ("slots", "slot") and sep and value.isdigit() and int(value) > 0:
                slots = int(value)
            elif key not in ("max_slots", "max-slots"):
                raise ValueError(f"--hostfile {path}, line {number}: {word!r} is not understood; write `host slots=N`")
        hosts.append(Host(words[0], slots))
    if not hosts:
        raise ValueError(f"--hostfile {path} names no hosts; write one `host slots=N` per line")
    _no_duplicates(hosts, f"--hostfile {path}")
    return hosts


def _no_duplicates(hosts: list[Host], where: str) -> None:
    names = [h.name for h in hosts]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"{where} names {', '.join(twice)} more than once; give each host once with all its slots")


def total_slots(hosts: list[Host]) -> int | None:
    """Ranks the hosts can take, or None when a hostfile leaves some counts to mpiexec."""
    if any(h.slots is None for h in hosts):
        return None
    return sum(h.slots or 0 for h in hosts)


def local_addresses() -> set[str]:
    """Every IPv4/IPv6 address of this host's interfaces."""
    found = set()
    for addrs in psutil.net_if_addrs().values():
        for a in addrs:
            if a.family in (socket.AF_INET, socket.AF_INET6):
                found.add(a.address.split("%")[0])
    return found


def _resolve(name: str) -> list[str]:
    try:
        infos = socket.getaddrinfo(name, None, proto=socket.IPPROTO_TCP)
    except OSError:
        return []
    return [str(i[4][0]) for i in infos]


def is_local(name: str) -> bool:
    """Whether `name` is this host (its hostname, localhost, or one of its addresses)."""
    if name in ("localhost", socket.gethostname(), socket.gethostname().split(".")[0]):
        return True
    addresses = _resolve(name)
    mine = local_addresses()
    return bool(addresses) and all(a in mine or a.startswith("127.") or a == "::1" for a in addresses)


def controller_ip(hosts: list[Host], override: str = "") -> str:
    """The address the controller listens on: `override` (--ip), loopback for local hosts, else the source
    address of this host's route to the first remote host (no packet is sent to find it)."""
    if override:
        mine = local_addresses()
        if override not in mine:  # listening on every interface is not offered: one address, one network
            raise ValueError(f"--ip {override} is not an address of this host (it has: {', '.join(sorted(mine))})")
        return override
    remote = [h.name for h in hosts if not is_local(h.name)]
    if not remote:
        return "127.0.0.1"
    for name in remote:
        for address in _resolve(name):
            if ":" in address:
                continue
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                try:
                    s.connect((address, 9))  # UDP connect only asks the routing table: nothing is sent
                    return str(s.getsockname()[0])
                except OSError:
                    continue
    raise ValueError(
        f"No route from this host to {', '.join(remote)}, so no controller address can be chosen. "
        "Check the host names, or give the address the hosts can reach with --ip."
    )


def network_of(ip: str) -> str | None:
    """The CIDR network of local address `ip` (e.g. 10.0.3.0/24), to keep MPI traffic on that interface."""
    for addrs in psutil.net_if_addrs().values():
        for a in addrs:
            if a.family == socket.AF_INET and a.address == ip and a.netmask:
                return str(ipaddress.ip_network(f"{ip}/{a.netmask}", strict=False))
    return None


def forwarded_keys(env: dict[str, str]) -> list[str]:
    """Names of the variables remote engines must receive: the pool's environment plus the process's own."""
    keys = set(env) | set(FROM_LAUNCHER)
    keys.update(k for k in FORWARDED if k in os.environ or k in env)
    keys.update(k for k in os.environ if k.startswith(FORWARDED_PREFIXES))
    return sorted(keys)


def mpiexec_args(
    hosts: list[Host],
    hostfile: str = "",
    ip: str = "",
    env: dict[str, str] | None = None,
    agent: str = "",
) -> list[str]:
    """mpiexec arguments that place ranks on `hosts` (from -H or `hostfile`), forward `env` with `-x`,
    keep MPI's traffic on the network of `ip`, and use `agent` instead of ssh when one is given (Open MPI 5 takes
    it as `--prtemca plm_ssh_agent`)."""
    args: list[str] = []
    if hostfile:
        args += ["--hostfile", str(Path(hostfile).expanduser())]
    else:
        args += ["--host", ",".join(f"{h.name}:{h.slots}" if h.slots else h.name for h in hosts)]
    for key in forwarded_keys(env or {}):
        args += ["-x", key]
    network = network_of(ip) if ip and not ip.startswith("127.") else None
    if network:
        # Only the interface the hosts share: MPI would otherwise try docker/virtual bridges and stall.
        args += ["--mca", "btl_tcp_if_include", network, "--prtemca", "oob_tcp_if_include", network]
    if agent:
        args += ["--prtemca", "plm_ssh_agent", agent]
    return args


def describe(hosts: list[Host]) -> str:
    """`server1 (4), server2 (4)`, for messages."""
    return ", ".join(f"{h.name} ({h.slots if h.slots else 'all cores'})" for h in hosts)


def pool_hosts(hosts: str = "", hostfile: str = "") -> list[Host]:
    """The hosts of a pool from `-H` or `--hostfile`; [] for a pool on this host only."""
    if hosts and hostfile:
        raise ValueError("Give either -H host:slots,... or --hostfile FILE, not both")
    if hosts:
        return parse_hosts(hosts)
    if hostfile:
        return parse_hostfile(hostfile)
    return []


def check_slots(hosts: list[Host], np: int, oversubscribe: bool) -> None:
    """Raise ValueError when -np asks for more ranks than the hosts offer (no hosts: this host, no limit here)."""
    if not hosts:
        return
    slots = total_slots(hosts)
    if slots is not None and np > slots and not oversubscribe:
        raise ValueError(
            f"-np {np} asks for more ranks than the {slots} slots of {describe(hosts)}: "
            f"use -np {slots}, give more slots per host, or add --oversubscribe"
        )


def is_this_host(name: str) -> bool:
    """Whether an engine that reported hostname `name` runs on the kernel's host (its pid means something here)."""
    return name == socket.gethostname()


# The controller pings engines every second and drops one after 5 missed pings: a host that vanishes is noticed
# in about 6 s instead of ipyparallel's default 30 s.
MULTI_HOST_CONTROLLER_ARGS = ["--ping=1000", "--HeartMonitor.max_heartmonitor_misses=5"]


def outward_ip() -> str:
    """This host's address on its default route (for engines whose hosts are not known yet, e.g. a SLURM job)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # TEST-NET-1; a UDP connect only consults the routing table
            return str(s.getsockname()[0])
        except OSError:
            raise ValueError("This host has no default route, so no address for the controller can be chosen") from None


def launch_processes(pool_id: str) -> list[psutil.Process]:
    """Processes on this host that mpiexec started for pool `pool_id` and may outlive it: ssh clients (or the
    launch agent) to hosts that stopped answering. They carry the pool's id in $JUPYTER_HVD_POOL."""
    found = []
    for p in psutil.process_iter():
        try:
            if p.uids().real == os.getuid() and p.environ().get(state.POOL_ENV) == pool_id:
                found.append(p)
        except psutil.Error:
            continue
    return found


def unreachable_hint(mpiexec_output: str, hosts: list[Host]) -> str:
    """What to do when mpiexec could not start its daemon on some host (down, unreachable, or no ssh)."""
    named = re.findall(r"Remote host:\s*(\S+)", mpiexec_output)
    lost = sorted(set(named)) or [h.name for h in hosts if not is_local(h.name)]
    if not lost:
        return ""
    others = [h for h in hosts if h.name not in lost]
    hint = (
        f"\n{', '.join(lost)} did not start its engines: check that it is up and that this host reaches it "
        "(ssh without a password, the controller's ports and MPI's ports open), then type %hvd_restart."
    )
    if others:
        spec = ",".join(f"{h.name}:{h.slots}" if h.slots else h.name for h in others)
        n = total_slots(others)
        hint += f" To go on without it: %hvd_stop, then %hvd_start{f' -np {n}' if n else ''} -H {spec}"
    return hint
