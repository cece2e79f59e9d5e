"""What every benchmark shares: machine description, timing statistics, the results table and JSON file."""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

RESULTS = Path(__file__).resolve().parent / "results"
VENV_BIN = str(Path(sys.executable).parent)


def setup_env() -> None:
    """The venv's mpiexec first on PATH, Open MPI allowed as root, pool state in a private directory."""
    os.environ["PATH"] = VENV_BIN + os.pathsep + os.environ.get("PATH", "")
    if os.geteuid() == 0:
        os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    os.environ.setdefault("JUPYTER_RUNTIME_DIR", str(RESULTS / "runtime"))


def machine() -> dict[str, Any]:
    """The machine the figures were taken on."""
    import torch

    return {
        "date": time.strftime("%Y-%m-%d"),
        "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "load_avg_1m": os.getloadavg()[0],
    }


def summary(samples: list[float]) -> dict[str, float]:
    """median, p95, min and max of `samples`, with their count."""
    s = sorted(samples)
    return {
        "n": len(s),
        "median": statistics.median(s),
        "p95": s[min(len(s) - 1, round(0.95 * (len(s) - 1)))],
        "min": s[0],
        "max": s[-1],
    }


def report(name: str, rows: list[dict[str, Any]], columns: list[str], extra: dict[str, Any] | None = None) -> Path:
    """Print `rows` as a table and write them, with the machine, to bench/results/<name>.json."""
    widths = {c: max(len(c), *(len(_fmt(r.get(c))) for r in rows)) for c in columns}
    print("  ".join(c.ljust(widths[c]) for c in columns))
    for r in rows:
        print("  ".join(_fmt(r.get(c)).ljust(widths[c]) for c in columns))
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    command = " ".join([".venv/bin/python", f"bench/{Path(sys.argv[0]).name}", *sys.argv[1:]])
    record = {"machine": machine(), "command": command, "columns": columns, "rows": rows, **(extra or {})}
    path.write_text(json.dumps(record, indent=2, default=str))
    print(f"-> {path}")
    return path


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"
    return "" if v is None else str(v)


# ---- taking turns: several sets of ranks stay alive, and only the one being timed runs ---------------------------
# This VM's speed drifts by 20% within minutes. Processes that stay alive and take turns (the others suspended)
# see the same drift; runs one after the other, each with its own start-up, do not.


def engines_of(kernel_pid: int) -> list[psutil.Process]:
    """A kernel's pool engines (their environment names the pool, whose id starts with the kernel's pid)."""
    found = []
    for p in psutil.process_iter():
        try:
            if p.environ().get("JUPYTER_HVD_POOL", "").startswith(f"hvd-{kernel_pid}-") and p.name() == "python":
                found.append(p)
        except psutil.Error:
            continue
    return found


def pause(procs: list[psutil.Process]) -> None:
    for p in procs:
        p.suspend()


def resume(procs: list[psutil.Process]) -> None:
    for p in procs:
        p.resume()


def result_of(text: str) -> dict:
    """The JSON of the first `RESULT {...}` line in `text`."""
    line = next(ln for ln in text.splitlines() if ln.startswith("RESULT "))
    return json.loads(line[len("RESULT ") :])


# The Horovod way with Open MPI's defaults, and with the one MPI setting pools change (jupyter_hvd/kernel/pool.py).
SCRIPTS = [
    ("mpirun -np N python script.py", []),
    ("the same, --mca mpi_yield_when_idle 1", ["--mca", "mpi_yield_when_idle", "1"]),
]


class Script:
    """A benchmark script under `mpirun`, alive for the whole run: one timed window per `window()` call.

    The script waits on rank 0 for a line on stdin before each window and prints `RESULT {...}` after it
    (bench/workload.py's `script()` and bench/allreduce.py write such scripts).
    """

    def __init__(self, name: str, mca: list[str], path: str, np: int = 2) -> None:
        self.name, self.mca, self.path, self.np = name, mca, path, np
        self.short = {"": "script", "torchrun": "torchrun script"}.get(mca[0] if mca else "", "script (yield)")
        self.results: list[dict] = []
        self.launcher: subprocess.Popen | None = None
        self.ranks: list[psutil.Process] = []

    def start(self) -> None:
        if self.mca and self.mca[0] == "torchrun":  # a torch.distributed script: torchrun starts its ranks
            cmd = [str(Path(sys.executable).parent / "torchrun"), "--nproc-per-node", str(self.np), self.path]
        else:
            cmd = ["mpirun", "-np", str(self.np), "--bind-to", "none", *self.mca, sys.executable, self.path]
        self.launcher = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def window(self) -> dict:
        """Let the script run one window (its ranks resumed meanwhile, suspended after); its RESULT."""
        assert self.launcher is not None and self.launcher.stdin is not None
        resume(self.ranks)
        self.launcher.stdin.write("go\n")
        self.launcher.stdin.flush()
        self.results.append(result_of(_until_result(self.launcher.stdout)))
        self.ranks = self.ranks or [
            p for p in psutil.Process(self.launcher.pid).children(recursive=True) if p.name().startswith("python")
        ]
        pause(self.ranks)
        return self.results[-1]

    def rates(self) -> list[float]:
        return [r["samples_per_s"] for r in self.results]

    def finish(self) -> None:
        assert self.launcher is not None and self.launcher.stdin is not None
        resume(self.ranks)
        self.launcher.stdin.close()
        self.launcher.wait(timeout=60)

    def kill(self) -> None:
        if self.launcher is not None and self.launcher.poll() is None:
            resume(self.ranks)
            self.launcher.kill()


def _until_result(stream: Any) -> str:
    """Lines from the script's stdout up to and including its next RESULT line."""
    lines = []
    for line in stream:
        lines.append(line)
        if line.startswith("RESULT "):
            return "".join(lines)
    raise RuntimeError("the mpirun script ended before its RESULT line:\n" + "".join(lines[-20:]))


def take_turns(kernel_pid: int, scripts: list[Script], rounds: int, cell_window: Callable[[], dict]) -> list[dict]:
    """`rounds` times: a window of every script, then one of the kernel's pool (`cell_window()` runs it and returns
    its result), each with the others suspended. Returns the pool's results; the scripts keep theirs."""
    engines = engines_of(kernel_pid)
    pause(engines)
    results = []
    try:
        for script in scripts:
            script.start()
        for _ in range(rounds):
            for script in scripts:
                script.window()
            resume(engines)
            results.append(cell_window())
            pause(engines)
        for script in scripts:
            script.finish()
    finally:
        resume(engines)
    return results
