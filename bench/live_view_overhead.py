"""What the live training view costs a training loop, and how far behind it shows what rank 0 does.

A real kernel (jupyter_client) with the live widget view, a real 2-rank pool. Two measures:

1. Step-time overhead: the same Horovod loop (a matmul sized to ~10 ms, then an allreduce: about 100 steps/s)
   with `report()` + `print()` at every step vs with neither. Three readings, from the most to the least
   robust on a shared host: the time report()+print() take inside a step; one loop whose even steps report
   and print and odd steps do not (median step times compared); whole loops of each variant, alternated over
   several rounds. Target: <= 1 % at 100 steps/s.
2. Latency from rank 0 to the widget: rank 0 prints a line (and reports a metric) carrying its wall-clock
   time; the bench, in the front end's place, reads the widget's update messages and subtracts (one host,
   one clock). Median and p95, for printed lines and for reported metrics.

Prints a table and writes bench/results/live_view_overhead.json.
Usage: python bench/live_view_overhead.py [--steps 400] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import time
from array import array
from pathlib import Path
from typing import Any

from jupyter_hvd.testing import Kernel

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"

SETUP = """%%hvd
import time, statistics, torch
from jupyter_hvd import report
torch.manual_seed(0)
a = torch.randn(256, 256)
grad = torch.randn(1000)

def work(reps):
    for _ in range(reps):
        a @ a
    hvd.allreduce(grad, name="bench.grad")

# Calibrate the step to ~10 ms (100 steps/s); every rank uses rank 0's choice.
reps = 1
while True:
    t0 = time.perf_counter()
    for _ in range(20):
        work(reps)
    dt = (time.perf_counter() - t0) / 20
    reps = int(hvd.broadcast(torch.tensor(reps if dt >= 0.009 else reps * 2), 0, name=f"bench.reps{reps}"))
    if dt >= 0.009 or reps > 4096:
        break

def loop(steps, live):
    times, extra = [], []
    for i in range(steps):
        t0 = time.perf_counter()
        work(reps)
        t1 = time.perf_counter()
        if live:
            report(step=i, loss=1.0 / (i + 1), samples=32)
            print(f"step {i} loss={1.0 / (i + 1):.5f}")
        t2 = time.perf_counter()
        times.append(t2 - t0)
        extra.append(t2 - t1)
    return times, extra

def interleaved(steps):
    # Even steps report and print, odd steps do not: load drift on a shared host hits both alike.
    with_, without = [], []
    for i in range(steps):
        t0 = time.perf_counter()
        work(reps)
        if i % 2 == 0:
            report(step=i, loss=1.0 / (i + 1), samples=32)
            print(f"step {i} loss={1.0 / (i + 1):.5f}")
        (with_ if i % 2 == 0 else without).append(time.perf_counter() - t0)
    return with_, without
"""

INTERLEAVED = """%%hvd --plot loss
_with, _without = interleaved({steps})
"""

LOOP = """%%hvd --plot loss
_times, _extra = loop({steps}, {live})
"""

LATENCY = """%%hvd --plot stamp
import time
for i in range({lines}):
    now = time.time()
    report(step=i, stamp=now)
    print(f"LAT {{now:.6f}}", flush=False)
    time.sleep(0.02)
"""

MICRO = """%%hvd
import time
t0 = time.perf_counter()
for i in range(20000):
    report(step=i, loss=0.5, samples=32)
_report_us = (time.perf_counter() - t0) / 20000 * 1e6
"""


class BenchKernel(Kernel):
    """A real kernel whose %%hvd cells use the live widget view, with a state directory of its own."""

    def __init__(self, state_dir: str) -> None:
        super().__init__(
            {"JUPYTER_RUNTIME_DIR": state_dir, "PATH": f"{ROOT / '.venv' / 'bin'}{os.pathsep}{os.environ['PATH']}"}
        )

    def pull(self, name: str) -> Any:
        """A value of rank 0's namespace, through %hvd_pull and a JSON print in the kernel."""
        return json.loads(self.run(f"%hvd_pull {name}\nimport json\nprint(json.dumps({name}))").check().stdout)

    def stop(self) -> None:
        try:
            self.run("%hvd_stop", timeout=60)
        finally:
            self.shutdown()


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--lines", type=int, default=200)
    args = parser.parse_args()
    state = tempfile.mkdtemp(prefix="hvd-bench-")
    k = BenchKernel(state)
    result: dict[str, Any] = {"steps": args.steps, "rounds": args.rounds, "ranks": 2}
    try:
        k.run("%load_ext jupyter_hvd\n%config HvdPool.live_view = 'widget'\n%hvd_start -np 2").check()
        k.run(SETUP, timeout=600).check()
        k.run(LOOP.format(steps=50, live=True), timeout=600).check()  # warm-up
        per_variant: dict[str, list[float]] = {"neither": [], "report+print": []}
        loop_means: dict[str, list[float]] = {"neither": [], "report+print": []}
        in_step: list[float] = []  # time report() + print() took inside each step of the live variant
        for _ in range(args.rounds):
            for name, live in (("neither", False), ("report+print", True)):
                k.run(LOOP.format(steps=args.steps, live=live), timeout=600).check()
                times = k.pull("_times")
                per_variant[name] += times
                loop_means[name].append(statistics.fmean(times))
                if live:
                    in_step += k.pull("_extra")
        base = statistics.median(per_variant["neither"])
        live = statistics.median(per_variant["report+print"])
        result["step_ms"] = {n: statistics.median(v) * 1e3 for n, v in per_variant.items()}
        result["step_ms_mean_per_round"] = {n: [m * 1e3 for m in v] for n, v in loop_means.items()}
        result["steps_per_s"] = 1 / base
        result["overhead_pct_median"] = (live - base) / base * 100
        result["overhead_pct_mean"] = (
            (statistics.fmean(per_variant["report+print"]) - statistics.fmean(per_variant["neither"]))
            / statistics.fmean(per_variant["neither"])
            * 100
        )
        k.run(INTERLEAVED.format(steps=2 * args.steps * args.rounds), timeout=600).check()
        with_, without = k.pull("_with"), k.pull("_without")
        result["interleaved_step_ms"] = {
            "report+print": statistics.median(with_) * 1e3,
            "neither": statistics.median(without) * 1e3,
        }
        result["overhead_pct_interleaved"] = (statistics.median(with_) / statistics.median(without) - 1) * 100
        k.run(MICRO, timeout=600).check()
        result["in_step_us"] = {"median": statistics.median(in_step) * 1e6, "p95": pct(in_step, 0.95) * 1e6}
        result["in_step_pct_of_10ms_step"] = statistics.median(in_step) / 0.010 * 100
        result["report_call_us"] = k.pull("_report_us")

        ups = k.run(LATENCY.format(lines=args.lines), timeout=600).check().updates
        line_lat = []
        metric_lat = []
        for t, content, buffers in ups:
            if content["log"]:
                for text, *_ in content["log"]["append"]:
                    m = re.match(r"LAT (\d+\.\d+)", text)
                    if m:
                        line_lat.append(t - float(m[1]))
            for i, curve in enumerate(content["curves"]):
                if curve["name"] == "stamp":
                    metric_lat += [t - y for y in array("d", bytes(buffers[2 * i + 1]))]
        result["print_to_widget_ms"] = {
            "median": statistics.median(line_lat) * 1e3,
            "p95": pct(line_lat, 0.95) * 1e3,
            "n": len(line_lat),
        }
        result["report_to_widget_ms"] = {
            "median": statistics.median(metric_lat) * 1e3,
            "p95": pct(metric_lat, 0.95) * 1e3,
            "n": len(metric_lat),
        }
        span = ups[-1][0] - ups[0][0] if len(ups) > 1 else 0
        result["widget_updates_per_s"] = (len(ups) - 1) / span if span else None
    finally:
        k.stop()

    rows = [
        ("step time, neither (median)", f"{result['step_ms']['neither']:.2f} ms"),
        ("step time, report()+print() (median)", f"{result['step_ms']['report+print']:.2f} ms"),
        ("steps/s without", f"{result['steps_per_s']:.0f}"),
        (
            "interleaved steps: with vs without (median)",
            f"{result['interleaved_step_ms']['report+print']:.2f} vs {result['interleaved_step_ms']['neither']:.2f} ms"
            f" = {result['overhead_pct_interleaved']:+.2f} % (target <= 1 %)",
        ),
        ("A/B step time difference, median", f"{result['overhead_pct_median']:+.2f} % (noisy on a shared host)"),
        ("A/B step time difference, mean", f"{result['overhead_pct_mean']:+.2f} %"),
        ("A/B per-round means, neither", " ".join(f"{m:.2f}" for m in result["step_ms_mean_per_round"]["neither"])),
        (
            "A/B per-round means, report+print",
            " ".join(f"{m:.2f}" for m in result["step_ms_mean_per_round"]["report+print"]),
        ),
        (
            "report()+print() inside a step",
            f"median {result['in_step_us']['median']:.0f} us, p95 {result['in_step_us']['p95']:.0f} us "
            f"= {result['in_step_pct_of_10ms_step']:.2f} % of a 10 ms step (target <= 1 %)",
        ),
        ("report() call alone", f"{result['report_call_us']:.1f} us"),
        (
            "rank-0 print -> widget update",
            f"median {result['print_to_widget_ms']['median']:.0f} ms, p95 {result['print_to_widget_ms']['p95']:.0f} ms",
        ),
        (
            "report() -> widget update",
            f"median {result['report_to_widget_ms']['median']:.0f} ms, "
            f"p95 {result['report_to_widget_ms']['p95']:.0f} ms",
        ),
        ("widget updates/s while printing", f"{result['widget_updates_per_s']:.1f}"),
    ]
    width = max(len(r[0]) for r in rows)
    print(f"live view overhead: 2 ranks, {args.steps} steps x {args.rounds} rounds per variant")
    for name, value in rows:
        print(f"  {name:<{width}}  {value}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / "live_view_overhead.json"
    result["when"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    result["python"] = sys.version.split()[0]
    out.write_text(json.dumps(result, indent=2))
    print(f"written: {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
