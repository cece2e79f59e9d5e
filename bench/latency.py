"""How late a line printed on rank 0 reaches the notebook, and what a flood of output costs the kernel.

A real kernel (jupyter_client, the front end's place) and a real 2-rank pool on this machine. Rank 0 prints its
wall-clock time every 50 ms; the bench stamps each IOPub message on arrival and subtracts (one host, one clock):

- text view (c.HvdPool.live_view = "text"): `stream` messages;
- widget view (c.HvdPool.live_view = "widget"): the live view's `comm_msg` updates, log lines decoded;
- ipyparallel's `%%px --stream --targets 0` on the same engines, in the same run, as the reference.

Then a flood: rank 0 prints a million lines, in each view: IOPub messages per second while it runs, and how much the
kernel's memory (RSS) grew.

Prints a table and writes bench/results/latency.json.
Usage: python bench/latency.py [--lines 200] [--flood 1000000]
"""

from __future__ import annotations

import argparse
import itertools
import os
import re
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import report, setup_env, summary

from jupyter_hvd.testing import CellResult, Kernel

STAMPS = re.compile(r"LAT (\d+\.\d+)")
TICKER = """{magic}
import os, time
for i in range({lines}):
    if os.environ["OMPI_COMM_WORLD_RANK"] == "0":
        print(f"LAT {{time.time():.6f}}")
    time.sleep(0.05)
"""
SUSTAINED = """%%hvd --log-lines 100000000
import time
end = time.time() + {seconds}
while time.time() < end:
    print("step", time.time(), "loss=0.1")
"""
FLOOD = """%%hvd
for i in range({lines}):
    print(i, "some text a training loop might print")
"""


def collect(k: Kernel, code: str, timeout: float = 600) -> CellResult:
    """Run `code`; every IOPub message of the cell, with %%px --stream's unparented stream messages."""
    return k.run(code, timeout=timeout, unparented_streams=True).check()


def latencies_ms(result: CellResult) -> list[float]:
    """Arrival minus print time of each time stamp, where it first appeared."""
    first: dict[str, float] = {}
    for t, text in result.shown_text():
        for stamp in STAMPS.findall(text):
            first.setdefault(stamp, t)
    return [(t - float(stamp)) * 1e3 for stamp, t in first.items()]


def set_view(k: Kernel, mode: str) -> None:
    collect(k, f"%config HvdPool.live_view = {mode!r}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=200, help="time stamps per path (one per 50 ms)")
    parser.add_argument("--flood", type=int, default=1_000_000, help="lines printed by the flood cell")
    parser.add_argument("--sustained", type=float, default=5.0, help="seconds of printing as fast as it can")
    args = parser.parse_args()
    setup_env()
    k = Kernel()
    rows: list[dict[str, Any]] = []
    try:
        collect(k, "%load_ext jupyter_hvd\n%hvd_start -np 2")
        collect(k, "from jupyter_hvd.kernel.owner import current\n_v = current().client[:]\n_v.block = True")
        collect(k, "_v.activate()")
        paths = [
            ("text view", "text", "%%hvd"),
            ("widget view", "widget", "%%hvd"),
            ("%%px --stream, 2 engines (reference)", None, "%%px --stream"),
            ("%%px --stream --targets 0 (reference)", None, "%%px --stream --targets 0"),
        ]
        for what, mode, magic in paths:
            if mode:
                set_view(k, mode)
            collect(k, TICKER.format(magic=magic, lines=5))  # warm-up
            lat = latencies_ms(collect(k, TICKER.format(magic=magic, lines=args.lines)))
            if len(lat) < args.lines:
                raise RuntimeError(f"{what}: {len(lat)} of {args.lines} time stamps arrived")
            s = summary(lat)
            rows.append({"what": f"print -> {what}", "median_ms": s["median"], "p95_ms": s["p95"], "n": s["n"]})
        proc = psutil.Process(k.pid)
        floods = [(f"flood of {args.flood} lines", FLOOD.format(lines=args.flood))]
        floods.append(
            (f"{args.sustained:g} s of back-to-back prints, no line limit", SUSTAINED.format(seconds=args.sustained))
        )
        for (flood, code), (what, mode) in itertools.product(
            floods, (("text view", "text"), ("widget view", "widget"))
        ):
            set_view(k, mode)
            rss0 = proc.memory_info().rss
            t0 = time.time()
            flooded = collect(k, code)
            took = time.time() - t0
            rss1 = proc.memory_info().rss
            shown = [t for t, _ in flooded.of("stream") + flooded.of("comm_msg")]
            per_s = Counter(int(t - t0) for t in shown)
            rows.append(
                {
                    "what": f"{flood} -> {what}",
                    "msgs_per_s": len(shown) / took,
                    "max_msgs_in_1s": max(per_s.values()) if per_s else 0,
                    "rss_growth_mb": (rss1 - rss0) / 2**20,
                    "cell_s": took,
                }
            )
        collect(k, "%hvd_stop", timeout=60)
    finally:
        k.shutdown()
    report(
        "latency",
        rows,
        ["what", "median_ms", "p95_ms", "n", "msgs_per_s", "max_msgs_in_1s", "rss_growth_mb", "cell_s"],
        {"lines": args.lines, "flood": args.flood, "ranks": 2, "cadence_s": 0.05, "command": " ".join(sys.argv)},
    )


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
