"""What every benchmark shares: machine description, timing statistics, the results table and JSON file."""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
VENV_BIN = str(Path(sys.executable).parent)


def setup_env() -> None:
    """The venv's mpiexec first on PATH, Open MPI allowed as root, pool state in a private directory."""
    os.environ["PATH"] = VENV_BIN + os.pathsep + os.environ.get("PATH", "")
    if os.geteuid() == 0:
        os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    os.environ.setdefault("JUPYTER_HVD_STATE_DIR", str(RESULTS / "state"))


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
    path.write_text(json.dumps({"machine": machine(), "rows": rows, **(extra or {})}, indent=2))
    print(f"-> {path}")
    return path


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"
    return "" if v is None else str(v)
