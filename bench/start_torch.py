"""What `--torch-distributed` adds to a pool's start: `%hvd_start -np 2` with and without it, alternated, 2 CPU ranks.

    python bench/start_torch.py [--rounds 5]

Each start is timed from the magic's call to its return (engines up, Horovod initialised, and with the option the
process group made through the FileStore), then the pool is stopped. Prints a table and writes
bench/results/start_torch.json.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import report, setup_env

from jupyter_hvd.testing import Kernel


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    setup_env()
    k = Kernel()
    times: dict[str, list[float]] = {"plain": [], "--torch-distributed": []}
    try:
        k.run("%load_ext jupyter_hvd\n%config HvdPool.live_view = 'off'")
        for _ in range(args.rounds):
            for name, flag in (("plain", ""), ("--torch-distributed", " --torch-distributed")):
                t0 = time.perf_counter()
                r = k.run(f"%hvd_start -np 2{flag}", timeout=180)
                took = time.perf_counter() - t0
                if r.status != "ok":
                    raise RuntimeError(r.error_text)
                times[name].append(took)
                k.run("%hvd_stop", timeout=60)
                time.sleep(1.0)  # the stopped engines' processes leave
    finally:
        k.shutdown()
    plain = statistics.median(times["plain"])
    torch_dist = statistics.median(times["--torch-distributed"])
    rows = [
        {"start": "%hvd_start -np 2", "median_s": plain, "min_s": min(times["plain"]), "max_s": max(times["plain"])},
        {
            "start": "%hvd_start -np 2 --torch-distributed",
            "median_s": torch_dist,
            "min_s": min(times["--torch-distributed"]),
            "max_s": max(times["--torch-distributed"]),
        },
        {"start": "difference of the medians", "median_s": torch_dist - plain, "min_s": None, "max_s": None},
    ]
    report("start_torch", rows, ["start", "median_s", "min_s", "max_s"], {"times": times})


if __name__ == "__main__":
    main()
