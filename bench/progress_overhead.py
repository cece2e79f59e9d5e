"""What feeding the live view from progress bars and loops costs per iteration (engine/cell/progress.py).

    python bench/progress_overhead.py [--steps 100000] [--repeats 5]

In one process, without MPI: a tqdm loop (drawing into a buffer) with and without the engines' hooks, with
set_postfix(loss=...) at every step, and report(step=i, loss=...) in `for i in range(N)` with the loop's total read
from the cell (once per call site) against the total given. What the hooks send is dropped where it would leave for
the kernel. Each case's median microseconds per iteration, and the difference the hooks make.
"""

from __future__ import annotations

import argparse
import io
import sys
import time
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import report, setup_env, summary


def per_step(loop, steps: int) -> float:  # type: ignore[no-untyped-def]
    t0 = time.perf_counter()
    loop(steps)
    return (time.perf_counter() - t0) / steps * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    setup_env()
    from tqdm import tqdm

    from jupyter_hvd.engine import outbox
    from jupyter_hvd.engine.cell import progress
    from jupyter_hvd.engine.cell import report as engine_report

    outbox.channel = types.SimpleNamespace(cell=1, rank=0)  # as inside a running cell
    outbox.send_metrics = lambda records: None

    def bar_only(n: int) -> None:
        for _ in tqdm(range(n), file=io.StringIO()):
            pass

    def bar_postfix(n: int) -> None:
        bar = tqdm(range(n), file=io.StringIO())
        for i in bar:
            bar.set_postfix(loss=1.0 / (i + 1))

    def report_read_total(n: int) -> None:
        for step in range(n):
            engine_report.report(step=step, loss=0.5)

    def report_given_total(n: int) -> None:
        for step in range(n):
            engine_report.report(step=step, loss=0.5, total=n)

    def median(loop) -> float:  # type: ignore[no-untyped-def]
        return summary([per_step(loop, args.steps) for _ in range(args.repeats)])["median"]

    plain = {"tqdm loop": median(bar_only), "tqdm loop + set_postfix": median(bar_postfix)}
    given = median(report_given_total)
    progress.install()
    rows = []
    for name, loop in (("tqdm loop", bar_only), ("tqdm loop + set_postfix", bar_postfix)):
        hooked = median(loop)
        rows.append({"case": name, "without_us": plain[name], "with_us": hooked, "added_us": hooked - plain[name]})
    read = median(report_read_total)
    rows.append({"case": "report(step=i) in range(N)", "without_us": given, "with_us": read, "added_us": read - given})
    engine_report.flush()
    report("progress_overhead", rows, ["case", "without_us", "with_us", "added_us"], {"steps": args.steps})


if __name__ == "__main__":
    main()
