"""How fast `%hvd_pull` / `%hvd_push` move a 100 MB tensor, and how many copies of it they make, against
ipyparallel's own `view.pull` (torch's pickling goes through torch.save: copies on both sides).

Copies are read from memory: a sampler polls the RSS of the kernel and of rank 0's engine every 2 ms during each
transfer; peak growth / tensor size is the number of copies alive at once (the received frame itself counts as 1).

    python bench/transfer.py [--mb 100] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import report, setup_env, summary

from jupyter_hvd.testing import Kernel

POOL = "from jupyter_hvd.kernel.owner import current\n_pool = current()\n"
METHODS = {
    "%hvd_pull": "get_ipython().run_line_magic('hvd_pull', 'big')",
    "ipyparallel view.pull": "big = _pool.client[_pool.ranks[0].engine_id].pull('big', block=True)",
    "%hvd_push (2 ranks)": "get_ipython().run_line_magic('hvd_push', 'sent')",
}


class PeakRSS:
    """The highest RSS of some processes, sampled every 2 ms while the `with` block runs (growth over the start)."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.procs = {name: psutil.Process(pid) for name, pid in pids.items()}
        self.start = {name: p.memory_info().rss for name, p in self.procs.items()}
        self.peak = dict(self.start)
        self._stop = threading.Event()

    def _run(self) -> None:
        while not self._stop.is_set():
            for name, p in self.procs.items():
                self.peak[name] = max(self.peak[name], p.memory_info().rss)
            time.sleep(0.002)

    def __enter__(self) -> PeakRSS:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def growth(self, name: str) -> float:
        return self.peak[name] - self.start[name]


def timed(k: Kernel, code: str) -> float:
    """Run `code` in the kernel, return how long it took there."""
    r = k.run(
        f"import time as _t\n_t0 = _t.perf_counter()\n{code}\nprint(f'@@{{_t.perf_counter() - _t0}}')", timeout=300
    )
    assert r.status == "ok", r.error_text
    return float(r.stdout.rsplit("@@", 1)[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=100, help="tensor size in MB")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    setup_env()
    nbytes = args.mb * 1024 * 1024
    k = Kernel()
    try:
        assert k.run("%load_ext jupyter_hvd\n%hvd_start -np 2", timeout=300).status == "ok"
        n = nbytes // 4
        setup = f"%%hvd --no-plot\nbig = torch.randn({n})\nsmall = torch.ones(4)"
        assert k.run(setup, timeout=300).status == "ok"
        r = k.run(POOL + "import torch\n%hvd_pull small\nprint(_pool.ranks[0].pid)\n" + f"sent = torch.randn({n})")
        assert r.status == "ok", r.error_text
        pids = {"kernel": k.pid, "rank 0": int(r.stdout.split()[-1])}
        rows = []
        for method, code in METHODS.items():
            seconds, kernel_mb, engine_mb = [], [], []
            for _ in range(args.repeats):
                k.run("big = None\nimport gc; gc.collect()" if "pull" in method else "pass")
                k.run("%%hvd --no-plot\nimport gc; sent = None; gc.collect()" if "push" in method else "pass")
                time.sleep(0.3)
                with PeakRSS(pids) as peak:
                    seconds.append(timed(k, code))
                kernel_mb.append(peak.growth("kernel") / 2**20)
                engine_mb.append(peak.growth("rank 0") / 2**20)
            s = summary(seconds)
            rows.append(
                {
                    "method": method,
                    "MB": args.mb,
                    "median_s": s["median"],
                    "min_s": s["min"],
                    "MB_per_s": args.mb / s["median"],
                    "kernel_peak_MB": statistics.median(kernel_mb),
                    "rank0_peak_MB": statistics.median(engine_mb),
                    "kernel_copies": round(statistics.median(kernel_mb) / args.mb, 1),
                    "rank0_copies": round(statistics.median(engine_mb) / args.mb, 1),
                    "samples_s": seconds,
                }
            )
        k.run("%hvd_stop", timeout=60)
    finally:
        k.shutdown()
    columns = ["method", "MB", "median_s", "min_s", "MB_per_s", "kernel_peak_MB", "kernel_copies", "rank0_peak_MB"]
    report("transfer", rows, [*columns, "rank0_copies"])


if __name__ == "__main__":
    main()
