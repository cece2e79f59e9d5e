"""Shared fixtures: a real 2-rank pool in an in-process IPython shell, and real Jupyter kernels."""

from __future__ import annotations

import os
import queue
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest

VENV_BIN = str(Path(__file__).resolve().parents[1] / ".venv" / "bin")


def pool_processes(prefix: str = "hvd-") -> list[psutil.Process]:
    """Live processes that belong to a jupyter-hvd pool whose id starts with `prefix`.

    Controller, mpiexec, engines and nannies all carry the pool's id in IPP_CLUSTER_ID or JUPYTER_HVD_POOL.
    """
    found = []
    for p in psutil.process_iter():
        try:
            env = p.environ()
            if p.status() == psutil.STATUS_ZOMBIE:
                continue
        except psutil.Error:
            continue
        ids = (env.get("IPP_CLUSTER_ID", ""), env.get("JUPYTER_HVD_POOL", ""))
        if any(i.startswith(prefix) for i in ids):
            found.append(p)
    return found


def wait_until_gone(prefix: str, timeout: float = 15.0) -> list[psutil.Process]:
    """Processes of pools matching `prefix` still alive after `timeout` seconds (empty when all exited)."""
    deadline = time.monotonic() + timeout
    left = pool_processes(prefix)
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = pool_processes(prefix)
    return left


@pytest.fixture(autouse=True, scope="session")
def _state_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Pool state files of this test session go to a private directory (other sessions may run beside)."""
    d = tmp_path_factory.mktemp("hvd-state")
    old = os.environ.get("JUPYTER_HVD_STATE_DIR")
    os.environ["JUPYTER_HVD_STATE_DIR"] = str(d)
    os.environ["PATH"] = VENV_BIN + os.pathsep + os.environ.get("PATH", "")
    yield d
    if old is None:
        os.environ.pop("JUPYTER_HVD_STATE_DIR", None)
    else:
        os.environ["JUPYTER_HVD_STATE_DIR"] = old


@pytest.fixture(scope="session")
def ip() -> Any:
    """An in-process IPython shell with jupyter_hvd loaded."""
    from IPython.testing.globalipapp import start_ipython

    shell = start_ipython()
    shell.run_line_magic("load_ext", "jupyter_hvd")
    return shell


@pytest.fixture(scope="module")
def pool(ip: Any) -> Iterator[Any]:
    """A real 2-rank pool (MPI engines, Horovod initialised), stopped after the module."""
    from jupyter_hvd.kernel import pool as pools

    ip.run_line_magic("hvd_start", "-np 2")
    p = pools.current()
    try:
        yield p
    finally:
        if pools.current() is not None:
            ip.run_line_magic("hvd_stop", "")


@dataclass
class CellResult:
    """What a real kernel sent back for one cell: status, stream text with arrival times, errors."""

    status: str
    streams: list[tuple[float, str, str]] = field(default_factory=list)  # (time, name, text)
    error: dict[str, Any] | None = None
    outputs: list[dict[str, Any]] = field(default_factory=list)
    started: float = 0.0
    finished: float = 0.0

    @property
    def stdout(self) -> str:
        return "".join(t for _, n, t in self.streams if n == "stdout")

    @property
    def stderr(self) -> str:
        return "".join(t for _, n, t in self.streams if n == "stderr")

    @property
    def error_text(self) -> str:
        return "\n".join(self.error["traceback"]) if self.error else ""


class Kernel:
    """A real IPython kernel (jupyter_client) with helpers to run a cell and collect what it sends."""

    def __init__(self, extra_env: dict[str, str] | None = None) -> None:
        from jupyter_client.manager import KernelManager

        env = {**os.environ, **(extra_env or {})}
        self.km = KernelManager(kernel_name="python3")
        self.km.start_kernel(env=env)
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=60)
        self.pid: int = self.km.provisioner.process.pid  # type: ignore[union-attr]

    def run(self, code: str, timeout: float = 120.0, on_start: Any = None) -> CellResult:
        """Execute `code`, collect iopub until idle; `on_start(result)` runs once the cell is sent."""
        msg_id = self.kc.execute(code)
        res = CellResult(status="?", started=time.monotonic())
        if on_start is not None:
            on_start(res)
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"cell did not finish within {timeout} s: {code[:80]!r}")
            try:
                msg = self.kc.get_iopub_msg(timeout=min(remaining, 1.0))
            except queue.Empty:
                continue
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                res.streams.append((time.monotonic(), content["name"], content["text"]))
            elif kind == "error":
                res.error = content
            elif kind in ("display_data", "execute_result"):
                res.outputs.append(content)
            elif kind == "status" and content["execution_state"] == "idle":
                break
        reply = self.kc.get_shell_msg(timeout=10)
        res.status = reply["content"]["status"]
        res.finished = time.monotonic()
        return res

    def shutdown(self) -> None:
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=False)


@pytest.fixture
def kernel() -> Iterator[Kernel]:
    """A fresh real kernel, shut down after the test."""
    k = Kernel()
    try:
        yield k
    finally:
        if k.km.is_alive():
            k.shutdown()
