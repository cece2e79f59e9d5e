"""What a kernel's warm template costs, its own or borrowed from another kernel (kernel/launch/template.py).

Kernels one after another, each: started with jupyter_hvd loaded and handed over once its template is ready, a
2-rank pool started, one cell, the pool stopped, the kernel shut down. Either each kernel starts a template of its own
(JUPYTER_HVD_TEMPLATE_DIR empty: a runtime directory per kernel), or all borrow the ready template of one kernel that
lives beside them (the kernels of one Jupyter server, the test run's workers). CPU is the whole machine's
(/proc/stat): run it on an otherwise idle machine.

    python bench/kernel_start.py [--kernels 5]

Prints a table and writes bench/results/kernel_start.json.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import report, setup_env, summary

from jupyter_hvd.kernel.launch.template import TEMPLATE_DIR_ENV
from jupyter_hvd.testing import Kernel


def busy_s() -> float:
    """CPU seconds the machine has been busy (all cores), from /proc/stat."""
    with open("/proc/stat") as f:
        user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, f.readline().split()[1:9])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def one_kernel(env: dict[str, str]) -> dict[str, float]:
    b0, t0 = busy_s(), time.monotonic()
    k = Kernel(extra_env=env)
    ready = time.monotonic() - t0
    try:
        t1 = time.monotonic()
        r = k.run("%hvd_start -np 2", timeout=300)
        assert r.status == "ok", r.error_text
        start = time.monotonic() - t1
        r = k.run("%%hvd\nprint(hvd.allreduce(torch.ones(1)).item())", timeout=120)
        assert r.status == "ok", r.error_text
        k.run("%hvd_stop", timeout=60)
    finally:
        k.shutdown()
    time.sleep(1.0)  # what the processes do as they end counts too
    return {"cpu_s": busy_s() - b0, "ready_s": ready, "pool_start_s": start}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", type=int, default=5, help="kernels started one after another per way")
    args = parser.parse_args()
    setup_env()
    shared = tempfile.mkdtemp(prefix="hvd-t-")  # short: the template's socket is in it
    samples: dict[str, dict[str, list[float]]] = {"own template": {}, "borrowed template": {}}
    lender = Kernel(extra_env={TEMPLATE_DIR_ENV: shared})
    try:
        for way, env in (("own template", {TEMPLATE_DIR_ENV: ""}), ("borrowed template", {TEMPLATE_DIR_ENV: shared})):
            for _ in range(args.kernels):
                for key, value in one_kernel(env).items():
                    samples[way].setdefault(key, []).append(value)
    finally:
        lender.shutdown()
        shutil.rmtree(shared, ignore_errors=True)
    what = {
        "cpu_s": "a kernel's life (start, pool, a cell, stop, shutdown): CPU-s of the machine",
        "ready_s": "the kernel handed over (its template ready): s",
        "pool_start_s": "%hvd_start -np 2: s",
    }
    ways = list(samples)
    rows = [
        {"what": f"{text} (median of {args.kernels})"}
        | {way: round(summary(samples[way][key])["median"], 2) for way in ways}
        for key, text in what.items()
    ]
    report("kernel_start", rows, ["what", *ways], {"samples": samples})


if __name__ == "__main__":
    main()
