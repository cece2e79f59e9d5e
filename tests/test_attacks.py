"""Issue 17's attacker, as tests: what another local user (or, where the tests do not run as root, the same user
where the check still applies) can do to a pool, its kernel, its files and the sidebar, and that each attempt is
refused clearly, leaves the pool working and restartable, and grows the kernel by less than 64 MB.

As root, the attacker is a second local user made with `useradd` (jhvd-attacker) and runs tests/attacker.py with
the system's python3 (the project's venv is not readable to it); the same-user variants run as well, since they
exercise the checks themselves (random identities, size limits, owner checks) rather than file permissions.
The figures (bytes sent, kernel RSS growth) are printed; bench/RESULTS.md records a run.
"""

from __future__ import annotations

import json
import os
import pwd
import secrets
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from conftest import Kernel, needs

from jupyter_hvd import state

ATTACKER = Path(__file__).with_name("attacker.py").read_text()
ATTACKER_USER = "jhvd-attacker"
RSS_LIMIT = 64 * 2**20
JUNK_BYTES = 100 * 2**20


# ---- the attacker -------------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def other_user() -> Iterator[pwd.struct_passwd | None]:
    """A second local user when the tests run as root (made here, removed after); None otherwise."""
    if os.geteuid() != 0 or not shutil.which("useradd"):
        yield None
        return
    made = False
    try:
        pwd.getpwnam(ATTACKER_USER)
    except KeyError:
        useradd = ["useradd", "--system", "--no-create-home", "-s", "/usr/sbin/nologin", ATTACKER_USER]
        subprocess.run(useradd, check=True)
        made = True
    yield pwd.getpwnam(ATTACKER_USER)
    if made:
        subprocess.run(["userdel", ATTACKER_USER], check=False)


def attack(order: dict[str, Any], user: pwd.struct_passwd | None, timeout: float = 300) -> dict[str, Any]:
    """Run tests/attacker.py with `order` as `user` (None: this user); what it printed last."""
    python = "/usr/bin/python3" if user is not None and os.path.exists("/usr/bin/python3") else sys.executable
    kw: dict[str, Any] = {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []} if user else {}
    cmd = [python, "-c", ATTACKER]
    out = subprocess.run(cmd, input=json.dumps(order), capture_output=True, text=True, timeout=timeout, cwd="/", **kw)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    assert lines, f"the attacker printed nothing: {out.stderr[-2000:]}"
    return json.loads(lines[-1])


def squatter(order: dict[str, Any], user: pwd.struct_passwd | None) -> tuple[subprocess.Popen[str], dict[str, Any]]:
    """Start tests/attacker.py's squat (it holds its connections for order['hold'] s); what it connected."""
    python = "/usr/bin/python3" if user is not None and os.path.exists("/usr/bin/python3") else sys.executable
    kw: dict[str, Any] = {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []} if user else {}
    proc = subprocess.Popen(
        [python, "-c", ATTACKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd="/", **kw
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(json.dumps(order))
    proc.stdin.close()
    return proc, json.loads(proc.stdout.readline())


# ---- a real kernel with a pool ------------------------------------------------------------------------------------

INFO = """
import json
from jupyter_hvd.kernel.owner import current
_pool = current()
_info = _pool.channel.info()
print(json.dumps({"id": _pool.id, "directory": str(_pool.directory), "requests": _info["requests"],
    "events": _info["events"], "generation": _pool.channel.generation, "ranks": len(_pool.ranks),
    "file": str(_pool.file.path)}))
"""


class KernelPool:
    """A real kernel (jupyter_client) running a 2-rank pool; what an attacker would look for in it."""

    def __init__(self, runtime: Path) -> None:
        self.runtime = runtime
        self.kernel = Kernel(extra_env={"JUPYTER_RUNTIME_DIR": str(runtime)})
        r = self.kernel.run("%load_ext jupyter_hvd\n%hvd_start -np 2 --timeout 30", timeout=240)
        assert r.status == "ok" and "Pool ready" in r.stdout, r.stdout + r.stderr + r.error_text
        self.process = psutil.Process(self.kernel.pid)

    def info(self) -> dict[str, Any]:
        r = self.kernel.run(INFO)
        assert r.status == "ok", r.error_text
        return json.loads(r.stdout.strip().splitlines()[-1])

    def rss(self) -> int:
        return self.process.memory_info().rss

    def works(self) -> None:
        """A collective across both ranks gives the right answer."""
        r = self.kernel.run("%%hvd\nprint('sum', hvd.allreduce(torch.tensor([rank + 1.0]), op=hvd.Sum).item())")
        assert r.status == "ok" and "sum 3.0" in r.stdout, r.stdout + r.stderr + r.error_text

    def restarts(self, limit_s: float = 90) -> float:
        """%hvd_restart completes within `limit_s` and the pool works after; its time."""
        t0 = time.monotonic()
        r = self.kernel.run("%hvd_restart", timeout=limit_s)
        took = time.monotonic() - t0
        assert r.status == "ok" and "Pool restarted" in r.stdout, r.stdout + r.stderr + r.error_text
        self.works()
        return took

    def status(self) -> str:
        r = self.kernel.run("%hvd_status")
        assert r.status == "ok", r.error_text
        return r.stdout

    def processes(self) -> list[psutil.Process]:
        """The kernel and every process of its pool."""
        procs = [self.process]
        for p in self.process.children(recursive=True):
            procs.append(p)
        return procs

    def jupyter_ports(self) -> set[int]:
        """The kernel's own Jupyter ports (shell, iopub, ...; and ipykernel's pipe for forked subprocesses' output,
        which listens on loopback TCP too): Jupyter's, not the pool's."""
        info = self.kernel.km.get_connection_info()
        r = self.kernel.run("print(getattr(get_ipython().kernel.iopub_thread, '_pipe_port', 0))")
        return {int(v) for k, v in info.items() if k.endswith("_port")} | {int(r.stdout.strip() or 0)}

    def stop(self) -> None:
        try:
            self.kernel.run("%hvd_stop", timeout=60)
        finally:
            self.kernel.shutdown()


@pytest.fixture(scope="module")
def kpool() -> Iterator[KernelPool]:
    # Where others can reach it (pytest's own temporary directories are closed to them): /tmp, then a directory of
    # this user that others may enter, as a runtime directory usually is. Only the pools' own directories keep them out.
    runtime = Path(tempfile.mkdtemp(prefix="jhvd-attacked-", dir="/tmp"))
    runtime.chmod(0o755)
    pool = KernelPool(runtime)
    try:
        yield pool
    finally:
        pool.stop()
        shutil.rmtree(runtime, ignore_errors=True)


class RssWatch:
    """The peak RSS of a process while a block runs, sampled every 50 ms."""

    def __init__(self, process: psutil.Process) -> None:
        self.process = process
        self.before = process.memory_info().rss
        self.peak = self.before
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._done.wait(0.05):
            try:
                self.peak = max(self.peak, self.process.memory_info().rss)
            except psutil.Error:
                return

    def __enter__(self) -> RssWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join(5)

    @property
    def growth(self) -> int:
        return self.peak - self.before


def listening(procs: list[psutil.Process], skip_ports: set[int]) -> dict[str, str]:
    """Every socket these processes listen on (TCP ports but `skip_ports`, and unix sockets), as attacker targets,
    each with the name of the process that listens."""
    targets = {}
    for p in procs:
        try:
            name = p.name()
            for c in p.net_connections(kind="inet"):
                if c.status == psutil.CONN_LISTEN and c.laddr.port not in skip_ports:
                    host = "127.0.0.1" if c.laddr.ip in ("0.0.0.0", "127.0.0.1") else c.laddr.ip
                    targets[f"tcp:{host}:{c.laddr.port}"] = name
            for c in p.net_connections(kind="unix"):
                path = c.laddr
                if path and c.status in (psutil.CONN_NONE, psutil.CONN_LISTEN) and not c.raddr:
                    abstract = path.startswith(("\0", "@"))
                    targets[f"abstract:{path[1:]}" if abstract else f"ipc:{path}"] = name
        except psutil.Error:
            continue
    return dict(sorted(targets.items()))


# ---- the attacks --------------------------------------------------------------------------------------------------


def test_identity_squatting_before_a_restart(kpool, other_user):
    """DEALERs that connect first under the identities the next engines would use (the old predictable
    `generation:rank`, and random guesses) do not delay the restart: identities are drawn at random per start, a
    hello counts only when signed, and the engine's own connection takes its identity over."""
    info = kpool.info()
    guesses = [f"{info['generation'] + g}:{r}" for g in (1, 2) for r in range(info["ranks"])]
    guesses += [os.urandom(16).hex() for _ in range(20)]
    order = {"attack": "squat", "targets": [info["requests"]], "identities": guesses, "hold": 120}
    if other_user is not None:  # another user cannot even reach the channel: its sockets are in a 0700 directory
        proc, made = squatter(order, other_user)
        proc.kill()
        assert made[info["requests"]]["connections"] == 0
        assert "PermissionError" in made[info["requests"]]["error"], made
    proc, made = squatter(order, None)  # this user can: the identities themselves must hold
    try:
        assert made[info["requests"]]["connections"] == len(guesses), made
        with RssWatch(kpool.process) as rss:
            took = kpool.restarts(limit_s=60)
        assert proc.poll() is None, "the squatter should still hold its connections during the restart"
    finally:
        proc.kill()
        proc.wait()
    print(f"restart with {len(guesses)} squatted identities: {took:.1f} s; kernel RSS +{rss.growth / 2**20:.1f} MB")
    assert took < 30, f"the restart took {took:.0f} s with squatters connected"
    assert rss.growth < RSS_LIMIT


def test_junk_on_every_socket_of_the_pool_and_kernel(kpool, other_user):
    """100 MB of random bytes and 100 MB of ZeroMQ-framed junk (a 1 GB frame header first) on every socket the pool
    and the kernel listen on, beyond Jupyter's own: the pool still works and restarts, the kernel grows by less than
    64 MB, and %hvd_status counts what reached the cell channel."""
    info = kpool.info()
    owners = listening(kpool.processes(), kpool.jupyter_ports())
    targets = list(owners)
    print("kernel's own sockets:", list(listening([kpool.process], kpool.jupyter_ports())))
    print("TCP ports:", {t: owner for t, owner in owners.items() if t.startswith("tcp:")})
    channel = [f"ipc:{info['requests'][6:]}", f"ipc:{info['events'][6:]}"]
    assert set(channel) <= set(targets), (channel, targets)
    assert not [t for t in targets if t.startswith("abstract:")], f"abstract unix sockets take anyone: {targets}"
    reports = []
    with RssWatch(kpool.process) as rss:
        for user in [other_user, None] if other_user is not None else [None]:
            who = "another user" if user is not None else "this user"
            # Another user: everything. This user: the channel (the checks behind the directory's permissions).
            aim = targets if user is not None else channel
            for zmtp in (False, True):
                order = {"attack": "junk", "targets": aim, "bytes": JUNK_BYTES, "seconds": 15, "zmtp": zmtp}
                out = attack(order, user)
                reports.append((who, zmtp, out))
                print(f"after {who}'s {'zmtp' if zmtp else 'raw'} junk: kernel RSS +{rss.growth / 2**20:.1f} MB")
    for who, zmtp, out in reports:
        for target, r in out.items():
            print(f"{who} {'zmtp' if zmtp else 'raw'} {target}: {r['sent'] / 2**20:.0f} MB in {r['connections']} "
                  f"connections; {r['error'] or 'no error'}")  # fmt: skip
            if who == "another user" and target in channel:
                assert r["sent"] == 0 and "PermissionError" in r["error"], (target, r)
    print(f"kernel RSS before {rss.before / 2**20:.0f} MB, peak +{rss.growth / 2**20:.1f} MB")
    assert rss.growth < RSS_LIMIT, f"the kernel grew by {rss.growth / 2**20:.0f} MB"
    kpool.works()
    status = kpool.status()
    print(status)
    assert "cell channel: dropped" in status, "the junk that reached the channel should be counted"
    kpool.restarts()
    assert kpool.rss() - rss.before < RSS_LIMIT


def test_state_directory_of_someone_else_or_writable_by_others_is_refused(ip, tmp_path, monkeypatch, other_user):
    """A world-writable or foreign-owned state directory (or one in a directory others can change): %hvd_start
    refuses with one line naming the directory and the fix, and starts nothing."""
    runtime = tmp_path / "runtime"
    d = runtime / "jupyter-hvd"
    d.mkdir(parents=True)
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(runtime))
    cases = [(0o777, None, "can be written by others (mode 777)", f"chmod 700 {d}")]
    if other_user is not None:
        cases.append((0o700, other_user.pw_uid, f"belongs to {ATTACKER_USER}, not to you", "remove it"))
    for mode, owner, what, fix in cases:
        d.chmod(mode)
        if owner is not None:
            os.chown(d, owner, -1)
        from jupyter_hvd.kernel.errors import PoolError

        with pytest.raises(PoolError) as e:
            ip.run_line_magic("hvd_start", "-np 1")
        message = str(e.value)
        assert str(d) in message and what in message and fix in message, message
        assert "\n" not in message.strip(), "one line"
        assert list(d.iterdir()) == [], "nothing was written there"
        os.chown(d, os.geteuid(), -1)
    d.chmod(0o700)
    runtime.chmod(0o777)  # the directory it is in: others could swap ours for theirs
    with pytest.raises(state.UnsafeStateDir, match="which others can write to"):
        state.state_dir()
    runtime.chmod(0o1777)  # sticky, like /tmp: others cannot rename what is ours
    assert state.state_dir() == d


def test_a_template_in_a_directory_others_can_change_is_not_borrowed(tmp_path, other_user):
    """Kernels borrow each other's warm template through JUPYTER_HVD_TEMPLATE_DIR: one planted where others can write
    (its socket would receive the ranks' environment and stdio) is not used; the pool starts cold and works."""
    from jupyter_hvd.kernel.launch.launcher import find_mpiexec
    from jupyter_hvd.kernel.launch.template import KEY, import_time_env, mpi_lib, package_dir, template

    assert template.ready(), "the test run's shared template (tests/conftest.py) is the one named"
    shared = tmp_path / "templates"
    planted = shared / "template-999"
    planted.mkdir(parents=True)
    (planted / "ready").touch()
    key = {"pid": template.pid, "python": sys.executable, "package": package_dir(), "mpi_lib": mpi_lib(find_mpiexec())}
    state.write_json(planted / KEY, {**key, "env": import_time_env(dict(os.environ))})
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(planted / "engines"))
    listener.listen(8)
    listener.setblocking(False)
    cases = [(0o777, None)] + ([(0o755, other_user.pw_uid)] if other_user is not None else [])
    try:
        for mode, owner in cases:
            shared.chmod(mode)
            if owner is not None:
                os.chown(shared, owner, -1)
            k = Kernel(extra_env={"JUPYTER_HVD_TEMPLATE_DIR": str(shared)})
            try:
                r = k.run("%hvd_start -np 2", timeout=120)
                assert r.status == "ok", r.error_text + r.stderr
                r = k.run("%%hvd --ranks all\nimport os\nprint('warm', os.environ.get('JUPYTER_HVD_WARM_ENGINE'))")
                assert r.stdout.count("warm None") == 2, r.error_text + r.stdout
            finally:
                k.shutdown()
            with pytest.raises(BlockingIOError):
                listener.accept()  # no stub came
            os.chown(shared, os.geteuid(), -1)
    finally:
        listener.close()


def test_a_snapshot_directory_someone_else_made_is_refused_and_nothing_is_written_there(tmp_path, other_user):
    """On a host without a shared file system the ranks make the snapshots' directory themselves: one that another
    user made first (or that others can write) is refused, said, and no snapshot goes into it."""
    runtime = tmp_path / "runtime"
    k = Kernel(extra_env={"JUPYTER_RUNTIME_DIR": str(runtime)})
    try:
        assert k.run("%load_ext jupyter_hvd\n%hvd_start -np 2", timeout=120).status == "ok"
        pool_dir = Path(json.loads(k.run(INFO).stdout.strip().splitlines()[-1])["directory"])
        kept = pool_dir / "kept"
        kept.mkdir(mode=0o777)
        kept.chmod(0o777)  # as the other host's attacker would leave it
        if other_user is not None:
            os.chown(kept, other_user.pw_uid, other_user.pw_gid)
        r = k.run("%%hvd --setup\nw = torch.ones(300_000) * (rank + 1)\n\n")
        assert r.status == "ok", r.error_text
        said = k.run("%hvd_keep w").stderr + k.run("%%hvd\npass").stderr
        what = f"belongs to {ATTACKER_USER}, not to you" if other_user is not None else "can be written by others"
        assert "snapshots of the kept names cannot be written on this rank's host" in said and what in said, said
        assert list(kept.iterdir()) == [], "nothing was written there"
    finally:
        k.shutdown()


def test_symlinks_at_temporary_and_final_names_are_not_followed(kpool, tmp_path, monkeypatch, other_user):
    """Symlinks planted where pool files are written (the old predictable temporary names, a known random name, the
    final name) never lead a write elsewhere; another user cannot plant them at all."""
    info = kpool.info()
    directory = Path(info["file"]).parent
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    if other_user is not None:
        out = attack({"attack": "write", "path": str(directory / "planted"), "text": "x"}, other_user)
        assert not out["written"] and "PermissionError" in out["error"], out
    # The kernel's pool file is rewritten every second: links at the names earlier releases wrote through.
    pid = kpool.kernel.pid
    planted = [Path(info["file"]).with_suffix(f".tmp{pid}"), directory / f".pool-{info['id']}.json.tmp"]
    for link in planted:
        link.symlink_to(victim)
    time.sleep(2.5)
    assert victim.read_text() == "precious"
    assert state.read_pool(Path(info["file"]))["id"] == info["id"], "the pool file is still written"
    for link in planted:
        link.unlink()
    # This process writes under a name it draws: a link planted at exactly that name is refused, not followed.
    path = state.state_dir() / "pool-hvd-1-1.json"
    monkeypatch.setattr(secrets, "token_hex", lambda n: "0" * (2 * n))
    trap = path.with_name(f".{path.name}.{'0' * 16}.tmp")
    trap.symlink_to(victim)
    with pytest.raises(FileExistsError):
        state.write_json(path, {"id": "hvd-1-1"})
    assert victim.read_text() == "precious" and trap.is_symlink()
    trap.unlink()
    monkeypatch.undo()
    # A link at the final name is replaced by the file; a link is never read as a pool file.
    path.symlink_to(victim)
    assert state.read_pool(path) is None
    state.write_json(path, {"id": "hvd-1-1"})
    assert not path.is_symlink() and victim.read_text() == "precious"
    path.unlink()
    kpool.works()


def test_forged_action_files_are_ignored(kpool, other_user, tmp_path, monkeypatch):
    """An action file not written by the owner (another user's, or a symlink to one) is dropped unread: the pool
    keeps running. Another user cannot write one at all."""
    info = kpool.info()
    action = Path(info["file"]).with_name(f"pool-{info['id']}.action.json")
    if other_user is not None:
        out = attack({"attack": "write", "path": str(action), "text": '{"action": "stop"}'}, other_user)
        assert not out["written"] and "PermissionError" in out["error"], out
    forged = tmp_path / "forged.json"
    forged.write_text('{"action": "stop"}')
    action.symlink_to(forged)  # this user's link to a file anywhere: not a pool file
    time.sleep(2.5)
    assert not action.exists() and not action.is_symlink(), "the watcher drops what it will not read"
    if other_user is not None:  # a file of another user in the directory (e.g. one that was group-writable)
        state.write_json(action, {"action": "stop"})
        os.chown(action, other_user.pw_uid, other_user.pw_gid)
        time.sleep(2.5)
        assert not action.exists()
    kpool.works()  # still running: no stop was taken
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(kpool.runtime))
    state.request_action(info["id"], "interrupt")  # the owner's own request still works (an idle pool: harmless)
    time.sleep(2.5)
    assert not action.exists()
    kpool.works()


@pytest.fixture
def orphan() -> Iterator[psutil.Process]:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    yield psutil.Process(proc.pid)
    proc.kill()
    proc.wait()


def test_a_clock_step_changes_nothing(tmp_path, monkeypatch, orphan):
    """The wall clock jumps an hour (NTP, `date`): the reaper still finds the pool's processes and the server still
    sees a live kernel as alive, because start times are counted from boot and compared exactly."""
    import psutil._pslinux as pslinux

    from jupyter_hvd.processes import reaper

    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path))
    me = psutil.Process()
    path = state.pool_file("hvd-1-1")
    record = {
        "id": "hvd-1-1",
        **state.kernel_identity(),
        "processes": [{"pid": orphan.pid, "create_time": state.started(orphan), "role": "engine"}],
    }
    state.write_json(path, record)
    before = me.create_time()
    real_boot, real_time = pslinux.boot_time, time.time
    monkeypatch.setattr(pslinux, "boot_time", lambda: real_boot() + 3600.0)  # what a clock step does to btime
    monkeypatch.setattr(psutil, "boot_time", lambda: real_boot() + 3600.0)
    monkeypatch.setattr(time, "time", lambda: real_time() + 3600.0)
    assert abs(psutil.Process(me.pid).create_time() - before - 3600) < 1, "the clock step is faked"
    assert state.kernel_alive(record), "a live kernel must not look dead after a clock step"
    assert [p.pid for p in state.recorded_processes(record)] == [orphan.pid]
    assert reaper.reap(path) == 1
    orphan.wait(timeout=10)
    assert not path.exists()


def test_a_pool_file_cannot_point_the_reaper_at_other_processes(tmp_path, monkeypatch, other_user):
    """A pid whose start time does not match, or a process of another user, is never killed."""
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path))
    kw: dict[str, Any] = {"user": other_user.pw_uid, "group": other_user.pw_gid} if other_user else {}
    theirs = subprocess.Popen(["sleep", "60"], **kw)
    mine = subprocess.Popen(["sleep", "60"])
    try:
        p, q = psutil.Process(theirs.pid), psutil.Process(mine.pid)
        entries = [{"pid": q.pid, "create_time": state.started(q) + 0.01, "role": "engine"}]  # wrong start: a reuse
        if other_user is not None:
            entries.append({"pid": p.pid, "create_time": state.started(p), "role": "engine"})
        record = {"id": "hvd-1-1", **state.kernel_identity(), "processes": entries}
        assert state.recorded_processes(record) == []
        path = state.pool_file("hvd-1-1")
        state.write_json(path, record)
        from jupyter_hvd.processes import reaper

        assert reaper.reap(path) == 0
        assert p.is_running() and q.is_running()
    finally:
        theirs.kill()
        mine.kill()
        theirs.wait()
        mine.wait()


def jupyter_server(runtime: Path, root: Path, log: Path) -> tuple[subprocess.Popen[bytes], str, str]:
    """A Jupyter server of this user on a free port, with the pools' runtime directory `runtime`; its url, token."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    token = os.urandom(16).hex()
    cmd = [
        sys.executable, "-m", "jupyter", "server", "--no-browser", "--allow-root", f"--ServerApp.port={port}",
        "--ServerApp.ip=127.0.0.1", f"--ServerApp.token={token}", f"--ServerApp.root_dir={root}",
    ]  # fmt: skip
    # Its kernels run in `root`: they import this tree's jupyter_hvd, as the server does.
    path = os.pathsep.join(p for p in (str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(runtime), "PYTHONPATH": path}
    proc = subprocess.Popen(cmd, env=env, stdout=open(log, "wb"), stderr=subprocess.STDOUT, cwd=Path.cwd())
    return proc, f"http://127.0.0.1:{port}/", token


def call(url: str, token: str, method: str = "GET", body: bytes | None = None) -> tuple[int, Any]:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(url, data=body, method=method, headers={"Authorization": f"token {token}"})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, json.loads(answer.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, None
    except urllib.error.URLError:
        return 0, None  # not listening (yet)


def test_a_second_jupyter_server_does_not_see_the_first_ones_pool(tmp_path):
    """Two Jupyter servers of the same user share the runtime directory: the pool of a kernel of server A is listed
    and stoppable in A's sidebar only; B neither sees nor stops it, and it keeps working."""
    from jupyter_client import BlockingKernelClient

    runtime, root = tmp_path / "runtime", tmp_path / "root"
    runtime.mkdir(mode=0o700)
    root.mkdir()
    servers = [jupyter_server(runtime, root, tmp_path / f"server-{n}.log") for n in "ab"]
    kc = None
    try:
        for proc, url, token in servers:
            deadline = time.monotonic() + 60
            while call(f"{url}api/status", token)[0] != 200:
                assert time.monotonic() < deadline and proc.poll() is None, "a Jupyter server did not start"
                time.sleep(0.5)
        (_, a, a_token), (_, b, b_token) = servers
        code, kernel = call(f"{a}api/kernels", a_token, "POST", b'{"name": "python3"}')
        assert code == 201, code
        kc = BlockingKernelClient(connection_file=str(runtime / f"kernel-{kernel['id']}.json"))
        kc.load_connection_file()
        kc.start_channels()
        kc.wait_for_ready(timeout=60)
        said: list[str] = []
        reply = kc.execute_interactive(
            "%load_ext jupyter_hvd\n%hvd_start -np 2", timeout=240, output_hook=lambda m: said.append(str(m["content"]))
        )
        assert reply["content"]["status"] == "ok", reply["content"].get("evalue")
        code, listing = call(f"{a}jupyter-hvd/pools", a_token)
        assert code == 200 and [p["kernel_id"] for p in listing["pools"]] == [kernel["id"]]
        pool_id = listing["pools"][0]["id"]
        assert call(f"{b}jupyter-hvd/pools", b_token)[1]["pools"] == []
        assert call(f"{b}jupyter-hvd/pools/{pool_id}", b_token)[0] == 404
        for action in ("stop", "restart", "interrupt"):
            assert call(f"{b}jupyter-hvd/pools/{pool_id}/{action}", b_token, "POST", b"")[0] == 404
        time.sleep(2)
        reply = kc.execute_interactive(
            "%%hvd\nassert hvd.allreduce(torch.tensor([1.0]), op=hvd.Sum).item() == 2.0", timeout=60, output_hook=print
        )
        assert reply["content"]["status"] == "ok", "the pool should still run (B stopped nothing)"
        assert call(f"{a}jupyter-hvd/pools/{pool_id}/stop", a_token, "POST", b"")[0] == 202
        deadline = time.monotonic() + 30
        while call(f"{a}jupyter-hvd/pools", a_token)[1]["pools"]:
            assert time.monotonic() < deadline, "A's sidebar could not stop its own pool"
            time.sleep(0.5)
    finally:
        if kc is not None:
            kc.stop_channels()
        for proc, _, _ in servers:
            proc.terminate()
        for proc, _, _ in servers:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        leftovers = []
        for p in psutil.process_iter():
            try:
                if p.environ().get("JUPYTER_RUNTIME_DIR") == str(runtime) and p.pid != os.getpid():
                    leftovers.append(p)
            except psutil.Error:
                continue
        state.kill_processes(leftovers)


def test_the_attack_modes_are_real(other_user):
    """The attacker really is another user where the tests run as root (else these tests say what they ran as)."""
    needs("" if os.geteuid() == 0 else "not root: the attacks ran as this user (the file permission checks did not)")
    assert other_user is not None and other_user.pw_uid != 0
    out = attack({"attack": "write", "path": "/root/jhvd-attacker-probe", "text": "x"}, other_user)
    assert not out["written"], "the attacker should not be able to write where root's files are"
    assert stat.S_IMODE(os.stat("/root").st_mode) & 0o002 == 0


def test_between_hosts_traffic_is_encrypted_and_only_the_pools_keys_get_in(ip, monkeypatch):
    """A pool whose traffic crosses the network (forced here on one host): ipyparallel runs with CURVE and keeps its
    message signing; the cell channel binds TCP with CURVE and admits only the pool's client key. A plain ZeroMQ peer
    and a CURVE peer with a key of its own are refused at the handshake (and counted); a client without the
    controller's key gets nothing; cells run."""
    import ipyparallel as ipp
    import zmq

    from jupyter_hvd import wire
    from jupyter_hvd.kernel import owner as pools
    from jupyter_hvd.kernel.launch.launcher import Launcher

    monkeypatch.setattr(Launcher, "encrypted", lambda self: True)
    ip.run_line_magic("hvd_start", "-np 2")
    pool = pools.current()
    try:
        info = pool.channel.info()
        assert info["requests"].startswith("tcp://127.0.0.1:") and set(info["curve"]) == {"server", "public", "secret"}
        security = Path(pool.launcher.cluster.profile_dir) / "security"
        client_file = security / f"ipcontroller-{pool.id}-client.json"
        connection = json.loads(client_file.read_text())
        assert connection["curve_serverkey"] and connection["key"], "CURVE on, and messages still signed"
        config = pool.directory / "ipcontroller_config.py"
        assert stat.S_IMODE(config.stat().st_mode) == 0o600  # the signing key is in no command line
        assert not any(connection["key"] in " ".join(p.cmdline()) for p in psutil.Process().children(recursive=True))
        ctx = zmq.Context()
        peers = [ctx.socket(zmq.DEALER) for _ in range(2)]
        public, secret = zmq.curve_keypair()
        peers[1].curve_serverkey, peers[1].curve_publickey, peers[1].curve_secretkey = (
            info["curve"]["server"].encode(), public, secret,
        )  # fmt: skip
        from zmq.utils.monitor import recv_monitor_message

        watch = [peer.get_monitor_socket() for peer in peers]
        for peer in peers:
            peer.linger, peer.sndtimeo = 0, 2000  # a send after the refusal would wait for a peer for ever
            peer.connect(info["requests"])
            try:
                peer.send_multipart(wire.pack(pool.channel.key, wire.Hello(0, 1), pool.channel.identities[0], 99))
            except zmq.Again:
                pass  # refused at the handshake before the message could go: what is checked below
        seen: list[set[int]] = [set(), set()]
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            for events, monitor in zip(seen, watch, strict=True):
                while monitor.poll(10):
                    events.add(recv_monitor_message(monitor)["event"])
        for events in seen:
            assert zmq.EVENT_HANDSHAKE_SUCCEEDED not in events, "an outsider got through the handshake"
        assert zmq.EVENT_HANDSHAKE_FAILED_AUTH in seen[1], "the pool's ZAP handler should refuse a key of its own"
        with pool.lock:
            pool.channel.drain()
        assert pool.channel.dropped["refused"] >= 2, dict(pool.channel.dropped)
        for peer, monitor in zip(peers, watch, strict=True):
            peer.disable_monitor()
            monitor.close()
            peer.close()
        ctx.term()
        del connection["curve_serverkey"]  # a client that knows the address and signing key, not the CURVE key
        stranger = security / f"stranger-{pool.id}-client.json"
        stranger.write_text(json.dumps(connection))
        try:
            with pytest.raises((TimeoutError, OSError)):
                ipp.Client(str(stranger), timeout=5).close()
        finally:
            stranger.unlink()
        ip.run_cell_magic("hvd", "", "encrypted = hvd.allreduce(torch.tensor([rank + 1.0]), op=hvd.Sum).item()")
        ip.run_line_magic("hvd_pull", "encrypted")
        assert ip.user_ns["encrypted"] == 3.0
        assert "connections refused at the handshake" in pool.channel.dropped_text()
    finally:
        if pools.current() is not None:
            ip.run_line_magic("hvd_stop", "")
