"""The one contract between a kernel's pool and everything outside the kernel (server, reaper): the pool file.

Each pool writes one JSON file, atomically and readable by its owner only, under
`<jupyter runtime dir>/jupyter-hvd/pool-<id>.json`: a `PoolRecord` (its fields, and those of `RankRecord`,
`Straggler`, `Nonfinite` and `ProcessEntry`, are the schema; the sidebar's TypeScript model is held to them by
tests/test_state_schema.py). Every number is finite: NaN and Inf are written as null, so the file is always valid
JSON.

Actions from outside the kernel (the sidebar) go the other way: `request_action` writes
`pool-<id>.action.json`, which the kernel's pool watcher takes (removing the file) and carries out.
Actions: interrupt, restart, stop. The server never runs code in a kernel; it can only ask for these.

Only the user gets in: the directory is used only when it is the user's own and nobody else can write to it or to
the directory it is in (as ssh's StrictModes); files are read only when they are the user's own regular files, and
written under random temporary names (O_EXCL | O_NOFOLLOW: a planted symlink is never followed), then renamed into
place. A pool's id comes from its file's name, which must look like a pool id. A process is recognised again by
its pid and its start time counted from boot, on the same boot: a change of the wall clock never changes it.
"""

from __future__ import annotations

import json
import math
import os
import pwd
import re
import secrets
import shutil
import stat
import subprocess
import sys
import time
import warnings
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import psutil

VERSION = 1


@dataclass
class RankRecord:
    """One rank of a pool, as the sidebar shows it."""

    rank: int
    engine_id: int
    host: str
    pid: int
    device: str
    controller: str  # Horovod's controller: MPI or Gloo
    tensor_ops: str  # NCCL, MPI or Gloo
    local_rank: int = 0
    cross_rank: int = 0
    state: str = "idle"  # idle | busy | stalled | dead
    step: float | None = None
    loss: float | None = None
    last_line: str | None = None
    cpu_percent: float | None = None
    rss_mb: float | None = None
    gpu_mem_mb: float | None = None
    gpu_mem_total_mb: float | None = None
    gpu_util: float | None = None
    heartbeat: float | None = None  # epoch s of the last sample
    stalled_on: str | None = None  # tensor names, while stalled
    compute_ms: float | None = None  # per step, recent mean
    wait_ms: float | None = None  # in collectives per step, recent mean


@dataclass
class Straggler:
    """A rank at least 1.3x slower than the others for 10 s."""

    rank: int
    ratio: float
    message: str


@dataclass
class Nonfinite:
    """The first NaN/Inf metric of the running or last cell."""

    rank: int
    step: float | None
    metric: str
    message: str


@dataclass
class ProcessEntry:
    """A process of the pool, recognised again by pid and its start time in seconds since boot (`started`)."""

    pid: int
    create_time: float
    role: str


@dataclass
class PoolRecord:
    """A pool file."""

    id: str
    state: str  # starting | idle | running | restarting | failed | stopping
    np: int
    options: dict[str, Any]
    started: float  # epoch s
    kernel_pid: int
    kernel_started: float  # seconds since boot (`started`)
    kernel_id: str  # the Jupyter server's id of the kernel: a server lists only its own kernels' pools
    notebook: str
    backend: str = ""
    hosts: list[str] = field(default_factory=list)
    cell: str | None = None  # the first line of the running cell
    ranks: list[RankRecord] = field(default_factory=list)
    straggler: Straggler | None = None
    nonfinite: Nonfinite | None = None
    problems: list[str] = field(default_factory=list)  # jupyter-hvd's own threads (and users' threads) that failed
    where: str = ""  # where the ranks were when last asked (the sidebar's Where, the stop button, a stall)
    kept: list[str] = field(default_factory=list)  # the names %hvd_keep keeps
    snapshots: int = 0  # snapshots of them on disk
    kept_bytes: int = 0  # disk those and pushed values take on the kernel's host
    processes: list[ProcessEntry] = field(default_factory=list)
    slurm_job: str = ""  # the SLURM job running the engines (--slurm): cancelled if the kernel dies
    boot_id: str = ""  # the boot the start times count from
    updated: float = 0.0  # epoch s; set when written
    engines_started: float = 0.0  # epoch s: when the running engines started (a restart starts new ones)
    version: int = VERSION


def field_names(record: type) -> list[str]:
    """The field names of one of the records above, in order."""
    return [f.name for f in fields(record)]


LEGACY_DIR_ENV = "JUPYTER_HVD_STATE_DIR"  # read for one more release, with a warning
POOL_ID = re.compile(r"^hvd-\d{1,10}-\d{1,10}$")  # what pool ids look like (kernel/pool.py makes them)
POOL_FILE = re.compile(r"^pool-(hvd-\d{1,10}-\d{1,10})\.json$")
MAX_FILE_BYTES = 8 * 2**20  # a pool file is a few KB: anything bigger is not one


class UnsafeStateDir(Exception):
    """The state directory could be changed by someone else: nothing is read from it or written to it."""


def state_dir() -> Path:
    """Where pool files live: `jupyter-hvd/` in the Jupyter runtime directory (`jupyter --runtime-dir`; moved with
    JUPYTER_RUNTIME_DIR), shared by kernels and the server. Created 0700; raises UnsafeStateDir when it (or the
    directory it is in) can be written by another user."""
    from jupyter_core.paths import jupyter_runtime_dir

    legacy = os.environ.get(LEGACY_DIR_ENV)
    if legacy:
        warnings.warn(
            f"{LEGACY_DIR_ENV} is deprecated and will be ignored from the next release: pool files go to "
            "jupyter-hvd/ in the Jupyter runtime directory, which JUPYTER_RUNTIME_DIR moves.",
            FutureWarning,
            stacklevel=2,
        )
    d = Path(legacy) if legacy else Path(jupyter_runtime_dir()) / "jupyter-hvd"
    try:
        d.mkdir(parents=True, exist_ok=True, mode=0o700)
    except FileExistsError:
        pass  # a file or a dangling symlink in its place: check_private says what it is
    check_private(d)
    return d


def check_private(d: Path) -> None:
    """Raise UnsafeStateDir, with what is wrong and the fix in one line, unless `d` is a directory of this user that
    no one else can write to, in a directory no one else can change (or a sticky one, like /tmp)."""
    me = os.geteuid()
    try:
        st = os.lstat(d)
    except OSError as exc:
        raise UnsafeStateDir(f"{d} cannot be used for pool files ({exc.strerror}).") from None
    fix = "point JUPYTER_RUNTIME_DIR at a directory of your own"
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        what = "a symlink" if stat.S_ISLNK(st.st_mode) else "not a directory"
        raise UnsafeStateDir(f"{d} is {what}, so it cannot hold pool files safely: remove it, or {fix}.")
    if st.st_uid != me:
        raise UnsafeStateDir(
            f"{d} belongs to {_user(st.st_uid)}, not to you ({_user(me)}), who could fake or stop your pools: "
            f"remove it (it is made again), or {fix}."
        )
    if st.st_mode & 0o022:
        raise UnsafeStateDir(
            f"{d} can be written by others (mode {stat.S_IMODE(st.st_mode):o}), who could fake or stop your pools: "
            f"run `chmod 700 {d}`, or {fix}."
        )
    parent = d.parent.resolve()
    pst = os.stat(parent)
    if pst.st_uid not in (0, me):
        raise UnsafeStateDir(
            f"{d} is inside {parent}, which belongs to {_user(pst.st_uid)}, who could replace your pools' directory: "
            f"{fix}."
        )
    if pst.st_mode & 0o022 and not pst.st_mode & stat.S_ISVTX:
        raise UnsafeStateDir(
            f"{d} is inside {parent}, which others can write to (mode {stat.S_IMODE(pst.st_mode):o}), so they could "
            f"replace your pools' directory: run `chmod go-w {parent}`, or {fix}."
        )


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def valid_pool_id(pool_id: str) -> bool:
    """Whether `pool_id` looks like a pool id (so it names a file in the state directory, nothing else)."""
    return bool(POOL_ID.match(pool_id))


def _checked(pool_id: str) -> str:
    if not valid_pool_id(pool_id):
        raise ValueError(f"{pool_id!r} is not a jupyter-hvd pool id (hvd-<pid>-<n>)")
    return pool_id


def pool_file(pool_id: str) -> Path:
    """The state file of pool `pool_id`."""
    return state_dir() / f"pool-{_checked(pool_id)}.json"


def pool_directory(pool_id: str) -> Path:
    """The private directory of pool `pool_id` (mode 0700): what only the pool's kernel and engines may read or
    write (its cell channel's sockets, snapshots of kept names). Created here; the pool removes it when it stops."""
    d = state_dir() / _checked(pool_id)
    d.mkdir(mode=0o700, exist_ok=True)
    check_private(d)
    return d


def write_pool(path: Path, record: PoolRecord) -> None:
    """Write a pool's state atomically (readers never see half a file), mode 0600."""
    record.updated = time.time()
    write_json(path, asdict(record))


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write `data` to `path` atomically, mode 0600 (write_private)."""
    write_private(path, json.dumps(finite(data), allow_nan=False))  # a bare NaN is not JSON: readers would fail


def write_private(path: Path, text: str) -> None:
    """Write `text` to `path` atomically, mode 0600: under a random temporary name, created exclusively and never
    through a symlink, then renamed over `path` (a symlink at `path` is replaced, not followed)."""
    for _ in range(5):
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except FileExistsError:
            continue  # someone put something at that name: draw another
        try:
            with os.fdopen(fd, "w") as f:
                f.write(text)
            os.replace(tmp, path)
        except BaseException:
            remove(tmp)
            raise
        return
    raise FileExistsError(f"no free temporary name for {path} after 5 tries: something is creating files there")


def finite(value: Any) -> Any:
    """`value` with every NaN and Inf (in nested dicts, lists and tuples) replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def read_pool(path: Path) -> dict[str, Any] | None:
    """A pool's state, or None if the file is gone, unreadable, not a regular file of this user (a symlink, or
    another user's file), or not JSON."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_size > MAX_FILE_BYTES:
            return None
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = json.loads(f.read(MAX_FILE_BYTES))
        return data if isinstance(data, dict) else None
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)


def list_pools(kernel_ids: set[str] | None = None) -> list[dict[str, Any]]:
    """Every pool file in the state directory (of the kernels `kernel_ids`, when given), each with its `id` taken
    from the file's name and `stale` set when its kernel is gone."""
    pools = []
    directory = state_dir()
    for name in sorted(os.listdir(directory)):
        m = POOL_FILE.match(name)
        if not m:
            continue
        data = read_pool(directory / name)
        if data is None or data.get("id") != m.group(1):
            continue  # a file that names another pool than its own is not a pool's
        if kernel_ids is not None and str(data.get("kernel_id") or "") not in kernel_ids:
            continue
        data["stale"] = not kernel_alive(data)
        pools.append(data)
    return pools


def boot_id() -> str:
    """This boot of the machine (Linux's boot_id); "" where the system does not say."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


def started(p: psutil.Process) -> float:
    """When process `p` started, as a number that no change of the wall clock (NTP, `date`) alters: on Linux, seconds
    since boot (the kernel's tick count in /proc/<pid>/stat; psutil's create_time adds the wall clock's boot time,
    which moves with the clock); elsewhere psutil's create_time, which those systems record once at the start."""
    if sys.platform.startswith("linux"):
        try:
            with open(f"/proc/{p.pid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            return int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22, starttime (fields[0] is field 3)
        except (OSError, IndexError, ValueError):
            raise psutil.NoSuchProcess(p.pid) from None
    return p.create_time()


def _same_process(pid: Any, start: Any, boot: Any) -> psutil.Process | None:
    """The live process `pid` if it is the one that started at `start` on boot `boot` (compared exactly); else
    None (gone, a zombie, or a reused pid)."""
    try:
        if int(pid) <= 0 or boot != boot_id():
            return None
        p = psutil.Process(int(pid))
        if started(p) != float(start) or p.status() == psutil.STATUS_ZOMBIE:
            return None
        return p
    except (psutil.Error, TypeError, ValueError):
        return None


def kernel_alive(data: dict[str, Any]) -> bool:
    """Whether the kernel that owns a pool still runs: its pid alive, with the start time recorded."""
    return _same_process(data.get("kernel_pid"), data.get("kernel_started"), data.get("boot_id", "")) is not None


ACTIONS = ("interrupt", "restart", "stop", "where")


def action_file(pool_id: str) -> Path:
    """Where the server leaves an action for pool `pool_id`."""
    return state_dir() / f"pool-{_checked(pool_id)}.action.json"


def request_action(pool_id: str, action: str) -> None:
    """Ask the kernel that owns pool `pool_id` to interrupt, restart or stop it."""
    if action not in ACTIONS:
        raise ValueError(f"unknown action {action!r}; expected one of {', '.join(ACTIONS)}")
    write_json(action_file(pool_id), {"action": action, "requested": time.time()})


def take_action(pool_id: str) -> str | None:
    """The pending action for pool `pool_id`, removed so it is carried out once; None if there is none, or if the
    file is not this user's own (read_pool refuses it)."""
    path = action_file(pool_id)
    data = read_pool(path)
    remove(path)
    action = data.get("action") if data else None
    return action if action in ACTIONS else None


def remove(path: Path) -> None:
    """Remove a pool's state file (the pool has stopped)."""
    try:
        path.unlink()
    except FileNotFoundError:
        pass


def kernel_identity() -> dict[str, Any]:
    """Which kernel (and notebook, where the server told the kernel) a pool belongs to."""
    kernel_id = ""
    try:
        from ipykernel import get_connection_file

        name = Path(get_connection_file()).stem
        kernel_id = name.removeprefix("kernel-")
    except Exception:
        pass
    return {
        "kernel_pid": os.getpid(),
        "kernel_started": started(psutil.Process()),  # a reused pid is not mistaken for the kernel
        "kernel_id": kernel_id,
        "notebook": os.environ.get("JPY_SESSION_NAME", ""),
        "boot_id": boot_id(),
    }


def recorded_processes(data: dict[str, Any]) -> list[psutil.Process]:
    """The live processes a state file names, each checked by its exact start time on this boot, so a reused pid
    (or a pid the file lies about) is never touched; and only processes of this user."""
    procs = []
    for entry in data.get("processes", []):
        if not isinstance(entry, dict):
            continue
        p = _same_process(entry.get("pid"), entry.get("create_time"), data.get("boot_id", ""))
        try:
            if p is not None and p.uids().real == os.getuid():
                procs.append(p)
        except psutil.Error:
            continue
    return procs


SLURM_JOB = re.compile(r"^\d+(_\d+)?$")


def clean_up(path: Path, data: dict[str, Any]) -> int:
    """End what is left of a pool whose kernel died: its SLURM job is cancelled, its recorded processes and their
    children killed, its files removed. Returns how many processes were killed."""
    job = str(data.get("slurm_job") or "")
    scancel = shutil.which("scancel")
    if job and SLURM_JOB.match(job) and scancel:
        try:
            subprocess.run([scancel, job], capture_output=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            pass  # the job ends at its time limit; killing the processes below still ends the engines here
    roots = recorded_processes(data)
    procs = list(roots)
    for p in roots:
        try:
            procs += p.children(recursive=True)
        except psutil.Error:
            pass
    kill_processes(procs)
    remove(path)
    pool_id = POOL_FILE.match(path.name)
    if pool_id:
        remove(path.with_name(f"pool-{pool_id.group(1)}.action.json"))
        shutil.rmtree(path.with_name(pool_id.group(1)), ignore_errors=True)
    return len(procs)


def kill_processes(procs: Iterable[psutil.Process], grace: float = 2.0) -> None:
    """SIGTERM, then SIGKILL whatever is still alive after `grace` seconds (grace 0: SIGKILL at once)."""
    procs = list({p.pid: p for p in procs}.values())
    for p in procs:
        try:
            p.terminate() if grace > 0 else p.kill()
        except psutil.Error:
            pass
    alive = _wait_gone(procs, grace)
    for p in alive:
        try:
            p.kill()
        except psutil.Error:
            pass
    _wait_gone(alive, max(grace, 1.0))


def _wait_gone(procs: list[psutil.Process], timeout: float) -> list[psutil.Process]:
    """The processes still running after up to `timeout` seconds. A zombie counts as gone: it runs nothing, and its
    parent reaps it (psutil.wait_procs waited out its whole timeout for such processes)."""
    deadline = time.monotonic() + timeout
    while True:
        alive = []
        for p in procs:
            try:
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                    alive.append(p)
            except psutil.Error:
                continue
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.01)
