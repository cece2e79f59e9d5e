"""Which processes belong to a pool, recognised again after the kernel is gone, and their end.

A process is recognised by its pid and its start time counted from boot, on the same boot: a change of the wall
clock never changes it, and a reused pid is never taken for it. Only the user's own processes are touched.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import psutil

from .private import POOL_FILE, remove

SLURM_JOB = re.compile(r"^\d+(_\d+)?$")
POOL_ENV = "JUPYTER_HVD_POOL"  # every process launched for a pool carries its id, so a leftover is found again


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
