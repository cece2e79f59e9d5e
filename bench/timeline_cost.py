"""What `%%hvd --timeline` costs, during its cell and after it: training throughput before, during and after.

    python bench/timeline_cost.py [--rounds 6] [--steps 150]

One kernel, one plain 2-rank pool (started without --timeline). Each round runs three %%hvd cells of the same
training window (bench/workload.py): a plain cell, a `--timeline` cell (Horovod restarted with its timeline on,
recording), and a plain cell right after it (Horovod restarted without the timeline by that cell's first act).
A fourth cell is the reference for what used to stay: a plain cell on a Horovod started with HOROVOD_TIMELINE=DYNAMIC
but not recording (what every cell of a pool started with `%hvd_start --timeline` ran on). A ratio is the median of
per-round ratios against the plain cell before (< 1: slower). "after" should be 1: the cost must not stay.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import workload
from common import report, result_of, setup_env

from jupyter_hvd.testing import Kernel


def ok(res: Any) -> Any:
    """The cell's result, or exit with its error."""
    if res.status != "ok":
        sys.exit(f"cell failed: {res.error_text}\n{res.stderr}")
    return res


# Tiny cells that set the variable on every rank: the next cell's first act starts Horovod again with (without) it.
SWITCH_ON = "%%hvd\nfrom jupyter_hvd.engine.horovod import rest\nrest.set_horovod_env({'HOROVOD_TIMELINE': 'DYNAMIC'})"
SWITCH_OFF = "%%hvd\nfrom jupyter_hvd.engine.horovod import rest\nrest.set_horovod_env({'HOROVOD_TIMELINE': None})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--steps", type=int, default=150)
    args = parser.parse_args()
    setup_env()
    trace_dir = tempfile.mkdtemp(prefix="hvd-timeline-cost-")
    kernel = Kernel()
    try:
        ok(kernel.run("%load_ext jupyter_hvd"))
        ok(kernel.run("%hvd_start -np 2", timeout=180))
        ok(kernel.run("%%hvd\n" + workload.SETUP))
        cell = workload.window(args.steps, 0)
        rows = []
        for r in range(args.rounds):
            row: dict[str, float | int] = {"round": r}
            for phase, flags in (("before", ""), ("during", f" --timeline {trace_dir}"), ("after", "")):
                res = ok(kernel.run(f"%%hvd{flags}\n" + cell, timeout=600))
                row[phase] = result_of(res.stdout)["samples_per_s"]
            ok(kernel.run(SWITCH_ON))
            row["dynamic_on"] = result_of(ok(kernel.run("%%hvd\n" + cell, timeout=600)).stdout)["samples_per_s"]
            ok(kernel.run(SWITCH_OFF))
            row["dynamic_ratio"] = row["dynamic_on"] / row["before"]
            row["during_ratio"] = row["during"] / row["before"]
            row["after_ratio"] = row["after"] / row["before"]
            rows.append(row)
            print(f"round {r}: {row}", flush=True)
        check = ok(
            kernel.run(
                "%%hvd\nimport os, json\nfrom jupyter_hvd.engine.horovod import rest\n"
                "print('RESULT ' + json.dumps({'env': os.environ.get('HOROVOD_TIMELINE'), "
                "'started_with': rest.horovod_env('HOROVOD_TIMELINE')}))"
            )
        )
        after_state = result_of(check.stdout)
    finally:
        kernel.shutdown()
    during = statistics.median(r["during_ratio"] for r in rows)
    after = statistics.median(r["after_ratio"] for r in rows)
    dynamic = statistics.median(r["dynamic_ratio"] for r in rows)
    print(
        f"\nmedian ratio against the plain cell before: during the timeline cell {during:.3f}, after it {after:.3f}; "
        f"a cell on Horovod with the timeline enabled but not recording (the old --timeline pool) {dynamic:.3f}"
    )
    print(f"Horovod's timeline setting on the ranks after the last round: {after_state}")
    report(
        "timeline_cost",
        rows,
        ["round", "before", "during", "after", "dynamic_on", "during_ratio", "after_ratio", "dynamic_ratio"],
        {
            "median_during_ratio": during,
            "median_after_ratio": after,
            "median_dynamic_ratio": dynamic,
            "steps": args.steps,
            "after_state": after_state,
        },
    )


if __name__ == "__main__":
    main()
