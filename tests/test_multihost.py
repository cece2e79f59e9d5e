"""A real two-host pool on one machine: two network namespaces joined by a veth pair play hostA and hostB.

mpiexec reaches hostB through tests/netns_agent.sh (Open MPI's ssh agent replaced by "enter the namespace, with
hostname hostB and a clean environment"), so nothing but the address, the forwarded variables and the launch path
connects the two hosts: the same as ssh between two machines. The notebook side (tests/multihost_driver.py) runs
in hostA's namespace. Needs root and iproute2; skipped with the reason otherwise.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import needs

HERE = Path(__file__).resolve().parent
VENV_BIN = str(HERE.parent / ".venv" / "bin")
SUBNET = "10.251.77"  # lives only between the two namespaces; no other interface sees it
ADDR = {"hostA": f"{SUBNET}.1", "hostB": f"{SUBNET}.2"}


def _why_no_namespaces() -> str:
    if os.geteuid() != 0:
        return "needs root to create network namespaces (ip netns add)"
    if not shutil.which("ip") or not shutil.which("unshare"):
        return "needs iproute2 (ip) and util-linux (unshare)"
    probe = f"jhvdprobe{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode:
        return f"cannot create a network namespace here: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return ""


WHY = _why_no_namespaces()


@pytest.fixture(autouse=True)
def _namespaces() -> None:
    needs(WHY)


def sh(*args: str) -> str:
    return subprocess.run(args, check=True, capture_output=True, text=True).stdout


class TwoHosts:
    """hostA and hostB: a namespace each, their own address, /etc/hosts naming both, one cable between.

    hostA's address sits on a bridge (its switch port), so pulling hostB's cable leaves hostA's address, and the
    controller listening on it, in place: only hostB disappears, as when a remote machine goes down.
    """

    def __init__(self) -> None:
        tag = f"jh{os.getpid() % 100000}"
        self.prefix = f"{tag}-"
        self.ns = {h: self.prefix + h for h in ADDR}
        self.bridge, self.cable_a, self.cable_b = f"{tag}br", f"{tag}a", f"{tag}b"
        for ns in self.ns.values():
            sh("ip", "netns", "add", ns)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            etc = Path("/etc/netns") / ns  # `ip netns exec` bind-mounts these over /etc
            etc.mkdir(parents=True, exist_ok=True)
            (etc / "hosts").write_text("127.0.0.1 localhost\n" + "".join(f"{a} {h}\n" for h, a in ADDR.items()))
        a = self.ns["hostA"]
        sh("ip", "-n", a, "link", "add", self.bridge, "type", "bridge")
        sh("ip", "-n", a, "addr", "add", f"{ADDR['hostA']}/24", "dev", self.bridge)
        sh("ip", "-n", a, "link", "set", self.bridge, "up")
        self.connect()

    def connect(self) -> None:
        """Plug hostB's cable in: a veth pair from hostA's bridge to hostB."""
        a, b = self.ns["hostA"], self.ns["hostB"]
        sh("ip", "link", "add", self.cable_a, "type", "veth", "peer", "name", self.cable_b)
        sh("ip", "link", "set", self.cable_a, "netns", a)
        sh("ip", "-n", a, "link", "set", self.cable_a, "master", self.bridge, "up")
        sh("ip", "link", "set", self.cable_b, "netns", b)
        sh("ip", "-n", b, "addr", "add", f"{ADDR['hostB']}/24", "dev", self.cable_b)
        sh("ip", "-n", b, "link", "set", self.cable_b, "up")

    def cut(self) -> None:
        """Pull hostB's cable: deleting its end of the veth removes the pair."""
        sh("ip", "-n", self.ns["hostB"], "link", "del", self.cable_b)

    def pids(self, *hosts: str) -> list[int]:
        """Processes running "on" the hosts (in their namespaces); all hosts when none are named."""
        found = []
        for host in hosts or tuple(self.ns):
            out = subprocess.run(["ip", "netns", "pids", self.ns[host]], capture_output=True, text=True).stdout
            found += [int(p) for p in out.split()]
        return found

    def power_off(self, *hosts: str) -> None:
        """End every process running on the hosts, as a reboot would."""
        for pid in self.pids(*hosts):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def remove(self) -> None:
        self.power_off()
        for ns in self.ns.values():
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
            shutil.rmtree(Path("/etc/netns") / ns, ignore_errors=True)


@pytest.fixture
def two_hosts() -> Any:
    net = TwoHosts()
    try:
        yield net
    finally:
        net.remove()


def _tree(pid: int) -> list[int]:
    import psutil

    try:
        p = psutil.Process(pid)
        return [pid, *(c.pid for c in p.children(recursive=True))]
    except psutil.Error:
        return []


def _controller_processes(pid: int) -> list[Any]:
    import psutil

    found = []
    for p in psutil.Process(pid).children(recursive=True):
        try:
            if "ipyparallel.controller" in " ".join(p.cmdline()):
                found.append(p)
        except psutil.Error:
            continue
    return found


def _listening(ns: str, pids: set[int]) -> list[str]:
    """Local addresses of the TCP sockets that processes `pids` listen on, in namespace `ns`."""
    out = sh("ip", "netns", "exec", ns, "ss", "-ltnpH")
    found = []
    for line in out.splitlines():
        fields = line.split()
        if len(fields) >= 6 and any(f"pid={p}," in fields[-1] for p in pids):
            found.append(fields[3])
    return found


def _tcp_sockets(ns: str, pids: set[int]) -> list[tuple[int, str, str]]:
    """(pid, state, local address) of every TCP socket of processes `pids` (listening or connected), in `ns`."""
    found = []
    for fields in (line.split() for line in sh("ip", "netns", "exec", ns, "ss", "-tanpH").splitlines()):
        found += [(p, fields[0], fields[3]) for p in pids if f"pid={p}," in fields[-1]]
    return found


class Driver:
    """The notebook, running in hostA's namespace with hostname hostA; reads its `@@` events."""

    def __init__(
        self, net: TwoHosts, state_dir: Path, start_line: str, *flags: str, env: dict[str, str] | None = None
    ) -> None:
        # mpiexec reaches hostB through the network namespace, not ssh: c.HvdPool.launch_agent, as a user would set
        # it in jupyter_hvd_config.json.
        config = state_dir / "jupyter-config"
        config.mkdir(exist_ok=True)
        (config / "jupyter_hvd_config.json").write_text(
            json.dumps({"HvdPool": {"launch_agent": str(HERE / "netns_agent.sh")}})
        )
        env = {
            **os.environ,
            "PATH": VENV_BIN + os.pathsep + os.environ.get("PATH", ""),
            "JUPYTER_RUNTIME_DIR": str(state_dir / "runtime"),
            "JUPYTER_CONFIG_DIR": str(config),
            "JHVD_NETNS_PREFIX": net.prefix,
            # What hostB's login shell would have on PATH: the same environment installed at the same path.
            "JHVD_REMOTE_PATH": VENV_BIN + ":/usr/bin:/bin",
            "PYTHONUNBUFFERED": "1",
            **(env or {}),
        }
        cmd = 'hostname hostA && exec "$0" "$@"'
        in_host_a = ["ip", "netns", "exec", net.ns["hostA"], "unshare", "--uts", "sh", "-c", cmd]
        self.proc = subprocess.Popen(
            [*in_host_a, sys.executable, str(HERE / "multihost_driver.py"), start_line, *flags],
            env=env,
            cwd=str(HERE.parent),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: list[str] = []

    def next_event(self, timeout: float, until_line: str | None = None) -> dict[str, Any]:
        """The next `@@` event (or, with `until_line`, return as soon as a line starts with it)."""
        deadline = time.monotonic() + timeout
        assert self.proc.stdout is not None
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            self.lines.append(line)
            if until_line is not None and line.startswith(until_line):
                return {"event": "line", "line": line}
            if line.startswith("@@ "):
                return json.loads(line[3:])
        raise AssertionError(f"no event within {timeout:g} s; the notebook printed:\n{''.join(self.lines[-60:])}")

    def answer(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)


def allreduce_then_stop_leaves_nothing(driver: Driver, net: TwoHosts) -> None:
    """The driver's allreduce sums to 3 on both ranks, %hvd_stop succeeds, and nothing runs on either host after."""
    assert driver.next_event(60) == {"event": "allreduce", "error": "", "total": [3.0, 3.0]}
    assert driver.next_event(60) == {"event": "stopped", "error": ""}
    driver.proc.wait(timeout=30)
    deadline = time.monotonic() + 15
    while net.pids() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert net.pids() == []


def test_two_hosts_allreduce_and_a_lost_host(two_hosts: TwoHosts, tmp_path: Path) -> None:
    driver = Driver(two_hosts, tmp_path, f"-np 2 -H hostA:1,hostB:1 --ip {ADDR['hostA']} --cpu --timeout 60")
    try:
        started = driver.next_event(120)
        assert started["event"] == "started" and not started["error"], started
        ranks = {r["rank"]: r for r in started["ranks"]}
        # One rank per host, each its own node for Horovod: local rank 0 on both, cross ranks 0 and 1.
        assert {r: (v["host"], v["local_rank"], v["cross_rank"]) for r, v in ranks.items()} == {
            0: ("hostA", 0, 0),
            1: ("hostB", 0, 1),
        }
        assert "hostB" in started["table"]
        # The controller listens on hostA's chosen address only (and loopback), never on every interface.
        controller = {c.pid for c in _controller_processes(driver.proc.pid)}
        listening = _listening(two_hosts.ns["hostA"], controller)
        assert listening and all(a.startswith((f"{ADDR['hostA']}:", "127.0.0.1:")) for a in listening), listening

        reduced = driver.next_event(60)
        assert reduced == {"event": "allreduce", "error": "", "total": [3.0, 3.0]}

        # Ctrl-C in the notebook stops both ranks, the one on hostB through its engine's nanny.
        driver.next_event(60, until_line="step 5")
        driver.proc.send_signal(signal.SIGINT)
        interrupted = driver.next_event(60)
        assert interrupted["event"] == "interrupted", interrupted
        assert "Interrupted" in interrupted["error"] and "restarted" not in interrupted["error"], interrupted
        assert interrupted["seconds"] < 30
        assert driver.next_event(60) == {"event": "allreduce", "error": "", "total": [3.0, 3.0]}

        driver.next_event(60, until_line="step 5")  # the long cell runs on both hosts
        cut_at = time.monotonic()
        two_hosts.cut()
        failed = driver.next_event(120)
        assert failed["event"] == "cut_cell"
        lost_after = time.monotonic() - cut_at
        said = "".join(driver.lines)
        # The user reads which rank on which host went away; the automatic restart cannot reach hostB either,
        # and says so, with what to type next.
        assert "rank 1 on hostB stopped answering the controller (host down or unreachable)" in said, said
        assert "hostB did not start its engines" in failed["error"], failed
        assert "then type %hvd_restart" in failed["error"], failed
        assert "%hvd_start -np 1 -H hostA:1" in failed["error"], failed
        assert lost_after < 60, lost_after
        print(
            f"\ntwo-host pool: started in {started['seconds']:.1f} s; hostB lost, reported and restart refused "
            f"{lost_after:.1f} s after its cable was pulled"
        )

        assert driver.next_event(30)["event"] == "waiting"
        # Nothing of the lost pool is left on hostA beside the notebook's own (controller, reaper).
        assert set(two_hosts.pids("hostA")) - set(_tree(driver.proc.pid)) == set()
        two_hosts.power_off("hostB")  # hostB comes back from a reboot, cable plugged in again
        two_hosts.connect()
        driver.answer()
        restarted = driver.next_event(120)
        assert restarted["event"] == "restarted" and not restarted["error"], restarted["error"] + "".join(driver.lines)
        print(f"two-host pool: %hvd_restart with hostB back took {restarted['seconds']:.1f} s")
        assert sorted(r["host"] for r in restarted["ranks"]) == ["hostA", "hostB"]
        allreduce_then_stop_leaves_nothing(driver, two_hosts)
    finally:
        driver.close()


def _plant_stale_session_files(count: int) -> list[Path]:
    """What daemons killed before a reboot leave in /tmp, for the next `count` pids: Open MPI's session files of
    prterun on hostA and of prted on hostB (the two hosts share this machine's /tmp). The directories made."""
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    last = int(Path("/proc/sys/kernel/ns_last_pid").read_text())
    made = []
    for i in range(1, count + 1):
        pid = (last + i) % pid_max
        for name, host in (("ompi", "hostA"), ("prted", "hostB")):
            d = Path("/tmp") / f"{name}.{pid}"
            if pid < 300 or d.exists():  # the kernel skips pids below 300 on wrapping
                continue
            d.mkdir()
            made.append(d)
            for rendezvous in (f"pmix.{host}.tool", f"pmix.{host}.tool.{pid}"):
                (d / rendezvous).write_text(f"prterun-{host}-{pid}@0.1;tcp4://127.0.0.1:9\n5.0.11\n{pid}\n0:0\n")
    return made


def test_two_hosts_from_a_hostfile(two_hosts: TwoHosts, tmp_path: Path) -> None:
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# Open MPI syntax, as for mpirun --hostfile\nhostA slots=1\nhostB slots=1\n")
    # Hosts that rebooted after losing daemons: a daemon whose pid one of those had must still start.
    stale = _plant_stale_session_files(3000)
    driver = Driver(
        two_hosts, tmp_path, f"-np 2 --hostfile {hostfile} --ip {ADDR['hostA']} --cpu --timeout 60", "--short"
    )
    try:
        started = driver.next_event(120)
        assert started["event"] == "started" and not started["error"], started
        assert {r["rank"]: r["host"] for r in started["ranks"]} == {0: "hostA", 1: "hostB"}
        allreduce_then_stop_leaves_nothing(driver, two_hosts)
    finally:
        driver.close()
        for d in stale:
            shutil.rmtree(d, ignore_errors=True)


def _attack_store(net: TwoHosts, ports: list[int], server: str | None) -> dict[str, Any]:
    """tests/store_attacker.py on hostB, outside the pool: what it read and wrote of the kernel's store."""
    plan = {
        "host": ADDR["hostA"],
        "ports": ports,
        "server": server,
        # Gloo's address of rank 0 in the live start (as each store names it), and keys the next start would see.
        "read": ["0//cpu//0/0", "start-1/0//cpu//0/0"],
        "plant": ["planted", "start-2/planted"],
    }
    attacker = [str(Path(VENV_BIN) / "python"), str(HERE / "store_attacker.py"), json.dumps(plan)]
    out = sh("ip", "netns", "exec", net.ns["hostB"], *attacker)
    return json.loads(out.strip().splitlines()[-1])


def test_two_hosts_rendezvous_lets_in_the_pool_only(two_hosts: TwoHosts, tmp_path: Path) -> None:
    start = f"-np 2 -H hostA:1,hostB:1 --ip {ADDR['hostA']} --cpu --timeout 60 --torch-distributed"
    driver = Driver(two_hosts, tmp_path, start, "--torch")
    try:
        started = driver.next_event(120)
        assert started["event"] == "started" and not started["error"], started
        print(f"\ntwo-host --torch-distributed pool: started in {started['seconds']:.1f} s")
        assert driver.next_event(60) == {"event": "allreduce", "error": "", "total": [3.0, 3.0]}
        assert driver.next_event(60) == {"event": "torch", "error": "", "total": [3.0, 3.0], "planted": [[], []]}
        waiting = driver.next_event(30)
        assert waiting["event"] == "waiting", waiting
        kernel = _listening(two_hosts.ns["hostA"], {driver.proc.pid})
        assert kernel, "the notebook's kernel listens on no TCP port"

        # A process on hostB that is not in the pool reads none of the live pool's keys and plants none for the next
        # start, whatever it speaks to each port of the kernel (even knowing the rendezvous' public key).
        found = _attack_store(
            two_hosts, [int(a.rpartition(":")[2]) for a in kernel], (waiting["rendezvous"] or {}).get("server")
        )
        assert (found["listed"], found["read"], found["planted"], found["answers"]) == ([], [], [], []), found
        print("the attacker on hostB tried: " + "; ".join(found["tries"]))
        # The kernel listens on the pool's address only, never on every interface.
        assert all(a.startswith(f"{ADDR['hostA']}:") for a in kernel), kernel

        driver.answer()
        restarted = driver.next_event(120)
        assert restarted["event"] == "restarted" and not restarted["error"], restarted["error"] + "".join(driver.lines)
        print(f"two-host --torch-distributed pool: %hvd_restart took {restarted['seconds']:.1f} s")
        # The new start's process group works, and sees no key of the attacker's.
        assert driver.next_event(60) == {"event": "torch", "error": "", "total": [3.0, 3.0], "planted": [[], []]}
        assert driver.next_event(60) == {"event": "stopped", "error": ""}
        driver.proc.wait(timeout=30)
    finally:
        driver.close()


def test_one_host_pool_keeps_gloo_on_loopback(two_hosts: TwoHosts, tmp_path: Path) -> None:
    # hostA's bridge (10.251.77.1) is a non-loopback interface this test made; the user's environment names it.
    nic = two_hosts.bridge
    env = {"GLOO_SOCKET_IFNAME": nic, "NCCL_SOCKET_IFNAME": nic}
    driver = Driver(two_hosts, tmp_path, "-np 2 --cpu --timeout 60 --torch-distributed", "--torch", env=env)
    try:
        started = driver.next_event(120)
        assert started["event"] == "started" and not started["error"], started
        assert driver.next_event(60) == {"event": "allreduce", "error": "", "total": [3.0, 3.0]}
        assert driver.next_event(60) == {"event": "torch", "error": "", "total": [3.0, 3.0], "planted": [[], []]}
        assert driver.next_event(30)["event"] == "waiting"
        ranks = {r["pid"] for r in started["ranks"]}
        sockets = _tcp_sockets(two_hosts.ns["hostA"], ranks)
        # Each rank listens (Gloo does, for its peers), and every socket of theirs, listening or connected, is on
        # loopback.
        assert {pid for pid, state, _ in sockets if state == "LISTEN"} == ranks, sockets
        assert all(local.startswith("127.0.0.1:") for _, _, local in sockets), sockets
        driver.answer()
        restarted = driver.next_event(120)
        assert restarted["event"] == "restarted" and not restarted["error"], restarted["error"] + "".join(driver.lines)
        assert driver.next_event(60) == {"event": "torch", "error": "", "total": [3.0, 3.0], "planted": [[], []]}
        assert driver.next_event(60) == {"event": "stopped", "error": ""}
        driver.proc.wait(timeout=30)
        said = "".join(driver.lines)
        # Said once, at the start, naming what the user had set.
        assert said.count(f"GLOO_SOCKET_IFNAME={nic}, NCCL_SOCKET_IFNAME={nic} not used") == 1, said
    finally:
        driver.close()
