"""Run every benchmark and print their tables (results in bench/results/*.json).

.venv/bin/python bench/run_all.py
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCHES = [
    "pool_bench.py",
    "throughput.py",
    "allreduce.py",
    "knobs.py",
    "gpu.py",
    "failure_latency.py",
    "timeline_cost.py",
    "transfer.py",
    "fault_campaign.py",
]

if __name__ == "__main__":
    failed = []
    for name in BENCHES + sorted(p.name for p in HERE.glob("*_overhead.py")):
        print(f"\n=== {name}", flush=True)
        if subprocess.run([sys.executable, str(HERE / name)]).returncode != 0:
            failed.append(name)
    sys.exit(f"failed: {', '.join(failed)}" if failed else 0)
