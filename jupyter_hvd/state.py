"""The one contract between a kernel's pool and everything outside the kernel (server, reaper): the pool file.

Each pool writes one JSON file, atomically and readable by its owner only, under
`<jupyter runtime dir>/jupyter-hvd/pool-<id>.json`: a `PoolRecord` (its fields, and those of `RankRecord`,
`Straggler`, `Nonfinite` and `ProcessEntry`, are the schema; the sidebar's TypeScript model is held to them by
tests/test_state_schema.py). Every number is finite: NaN and Inf are written as null, so the file is always valid
JSON.

Actions from outside the kernel (the sidebar) go the other way: `request_action` writes
`pool-<id>.action.json`, which the kernel's pool watcher takes (removing the file) and carries out.
Actions: interrupt, restart, stop. The server never runs code in a kernel; it can only ask for these.
"""

from __future__ import annotations

import json
import math
import os
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
    """A process of the pool, recognised again by pid and its own start time (psutil's create_time)."""

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
    kernel_started: float
    kernel_id: str
    notebook: str
    backend: str = ""
    hosts: list[str] = field(default_factory=list)
    cell: str | None = None  # the first line of the running cell
    ranks: list[RankRecord] = field(default_factory=list)
    straggler: Straggler | None = None
    nonfinite: Nonfinite | None = None
    problems: list[str] = field(default_factory=list)  # jupyter-hvd's own threads (and users' threads) that failed
    processes: list[ProcessEntry] = field(default_factory=list)
    updated: float = 0.0  # epoch s; set when written
    version: int = VERSION


def field_names(record: type) -> list[str]:
    """The field names of one of the records above, in order."""
    return [f.name for f in fields(record)]


LEGACY_DIR_ENV = "JUPYTER_HVD_STATE_DIR"  # read for one more release, with a warning


def state_dir() -> Path:
    """Where pool files live: `jupyter-hvd/` in the Jupyter runtime directory (`jupyter --runtime-dir`; moved with
    JUPYTER_RUNTIME_DIR), shared by kernels and the server."""
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
    d.mkdir(parents=True, exist_ok=True, mode=0o700)
    return d


def pool_file(pool_id: str) -> Path:
    """The state file of pool `pool_id`."""
    return state_dir() / f"pool-{pool_id}.json"


def pool_directory(pool_id: str) -> Path:
    """The private directory of pool `pool_id` (mode 0700): what only the pool's kernel and engines may read or
    write (snapshots of kept names). Created here; the pool removes it when it stops."""
    d = state_dir() / pool_id
    d.mkdir(mode=0o700, exist_ok=True)
    return d


def write_pool(path: Path, record: PoolRecord) -> None:
    """Write a pool's state atomically (readers never see half a file), mode 0600."""
    record.updated = time.time()
    write_json(path, asdict(record))


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write `data` to `path` atomically, mode 0600."""
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    text = json.dumps(finite(data), allow_nan=False)  # a bare NaN is not JSON: every reader would fail on it
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


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
    """A pool's state, or None if the file is gone or unreadable."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def list_pools() -> list[dict[str, Any]]:
    """Every pool file in the state directory, each with `stale` set when its kernel is gone."""
    pools = []
    for p in sorted(state_dir().glob("pool-*.json")):
        if p.name.endswith(".action.json"):
            continue
        data = read_pool(p)
        if data is None:
            continue
        data["stale"] = not kernel_alive(data)
        pools.append(data)
    return pools


def kernel_alive(data: dict[str, Any]) -> bool:
    """Whether the kernel that owns a pool still runs (its pid alive, with the recorded start time if known)."""
    try:
        pid = int(data.get("kernel_pid") or 0)
        if pid <= 0:
            return False
        p = psutil.Process(pid)
        started = data.get("kernel_started")
        alive = p.status() != psutil.STATUS_ZOMBIE
        return alive and (started is None or abs(p.create_time() - float(started)) < 0.01)
    except (psutil.Error, ValueError):
        return False


ACTIONS = ("interrupt", "restart", "stop")


def action_file(pool_id: str) -> Path:
    """Where the server leaves an action for pool `pool_id`."""
    return state_dir() / f"pool-{pool_id}.action.json"


def request_action(pool_id: str, action: str) -> None:
    """Ask the kernel that owns pool `pool_id` to interrupt, restart or stop it."""
    if action not in ACTIONS:
        raise ValueError(f"unknown action {action!r}; expected one of {', '.join(ACTIONS)}")
    write_json(action_file(pool_id), {"action": action, "requested": time.time()})


def take_action(pool_id: str) -> str | None:
    """The pending action for pool `pool_id`, removed so it is carried out once; None if there is none."""
    path = action_file(pool_id)
    data = read_pool(path)
    remove(path)
    return data.get("action") if data else None


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
        "kernel_started": psutil.Process().create_time(),  # a reused pid is not mistaken for the kernel
        "kernel_id": kernel_id,
        "notebook": os.environ.get("JPY_SESSION_NAME", ""),
    }


def recorded_processes(data: dict[str, Any]) -> list[psutil.Process]:
    """The live processes a state file names, checked by start time so a reused pid is never touched."""
    procs = []
    for entry in data.get("processes", []):
        try:
            p = psutil.Process(int(entry["pid"]))
            if abs(p.create_time() - float(entry["create_time"])) < 0.01:
                procs.append(p)
        except (psutil.Error, KeyError, ValueError):
            continue
    return procs


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
