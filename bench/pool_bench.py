"""Pool start, empty-cell round trip, and the edit-run loop (warm %%hvd cell vs cold mpirun), in a real kernel.

python bench/pool_bench.py [--np 1 2 4] [--round-trips 200] [--starts 3]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import report, setup_env, summary

from jupyter_hvd.testing import Kernel

REST_WAIT_S = 3.5  # an idle CPU pool rests after 2 s; the watcher looks once a second

TINY_STEP = """
import torch
torch.manual_seed(0)
_m = torch.nn.Linear(32, 1)
_o = hvd.DistributedOptimizer(torch.optim.SGD(_m.parameters(), lr=0.1), named_parameters=_m.named_parameters())
_o.zero_grad(); _m(torch.randn(8, 32)).sum().backward(); _o.step()
if rank == 0:
    print("first step done", flush=True)
"""


def start_times(nps: list[int], repeats: int) -> list[dict]:
    """Each start in a fresh kernel, as a user's first %hvd_start; the median of `repeats`."""
    rows = []
    for np in nps:
        times = []
        for _ in range(repeats):
            k = Kernel()
            try:
                k.run("%load_ext jupyter_hvd")
                extra = " --oversubscribe" if np > 2 else ""
                r = k.run(f"%hvd_start -np {np}{extra}", timeout=300)
                assert r.status == "ok", r.stdout + r.stderr + r.error_text
                times.append(r.finished - r.started)
                k.run("%hvd_stop")
            finally:
                k.shutdown()
        s = summary(times)
        rows.append(
            {
                "what": f"%hvd_start -np {np} (cold, incl. torch import + hvd.init; min {s['min']:.1f} s)",
                "seconds": s["median"],
                "n": s["n"],
            }
        )
    return rows


def warm_loop(round_trips: int, rested_cells: int) -> tuple[list[dict], dict]:
    k = Kernel()
    rows = []
    try:
        k.run("%load_ext jupyter_hvd")
        assert k.run("%hvd_start -np 2", timeout=300).status == "ok"

        plain: list[float] = []

        def round_trips_of(code: str, label: str) -> None:
            """`code` and a plain `pass` cell in turn (A B A B): its time, and what it adds to a plain cell.

            The pairs see the same moment of this VM's drifting speed; the median difference is what the
            magic costs, whatever the kernel itself takes that minute.
            """
            k.run(code)  # warm-up
            k.run("pass")
            cells, plains = [], []
            for _ in range(round_trips):
                r = k.run(code)
                cells.append(r.finished - r.started)
                r = k.run("pass")
                plains.append(r.finished - r.started)
            s = summary(cells)
            extra = summary([a - b for a, b in zip(cells, plains, strict=True)])["median"]
            rows.append(
                {
                    "what": label,
                    "median_ms": s["median"] * 1e3,
                    "p95_ms": s["p95"] * 1e3,
                    "over_plain_ms": extra * 1e3,
                    "n": s["n"],
                }
            )
            plain.extend(plains)

        for view, flags, label in (
            ("text", "--no-plot", "empty %%hvd cell, --no-plot, text view (headless runs)"),
            ("widget", "", "empty %%hvd cell, live view widget (as in JupyterLab)"),
        ):
            # This client draws no widgets: ask for the widget the notebook front ends get.
            k.run(f"%config HvdPool.live_view = '{view}'")
            round_trips_of(f"%%hvd {flags}\npass", label)
        # ipyparallel's own magic on the same engines: the reference the targets were set against.
        k.run("from jupyter_hvd.kernel.owner import current\ncurrent().client[current().engine_ids()].activate()")
        round_trips_of("%%px --stream\npass", "ipyparallel `%%px --stream pass`, same engines (reference)")
        s = summary(plain)
        rows.append(
            {
                "what": "plain kernel cell `pass`, between the above (reference)",
                "median_ms": s["median"] * 1e3,
                "p95_ms": s["p95"] * 1e3,
                "n": s["n"],
            }
        )
        k.run("%config HvdPool.live_view = 'text'")  # the streamed line marks the first step
        # The edit-run loop as people type it: cells seconds apart, so Horovod rests in between (kernel/launch/pool.py's
        # REST_AFTER_CPU_S) and each cell first wakes it on every rank.
        cells, over = [], []
        for _ in range(rested_cells):
            time.sleep(REST_WAIT_S)
            r = k.run("from jupyter_hvd.kernel.owner import current\nprint(current().resting)")
            assert r.stdout.strip() == "True", f"the pool did not rest within {REST_WAIT_S} s"
            r = k.run("%%hvd --no-plot\npass")
            plain = k.run("pass")
            cells.append(r.finished - r.started)
            over.append(cells[-1] - (plain.finished - plain.started))
        s = summary(cells)
        rows.append(
            {
                "what": "empty %%hvd cell on a resting pool (cells seconds apart: wakes Horovod first), text view",
                "median_ms": s["median"] * 1e3,
                "p95_ms": s["p95"] * 1e3,
                "over_plain_ms": summary(over)["median"] * 1e3,
                "n": s["n"],
            }
        )
        # The first training step ever in a pool pays torch's one-time costs (about 2 s here): not an edit-run loop.
        k.run("%%hvd --no-plot\n" + TINY_STEP)
        firsts = []
        for _ in range(10):
            r = k.run("%%hvd --no-plot\n" + TINY_STEP)
            t = next(t for t, _, text in r.streams if "first step done" in text)
            firsts.append(t - r.started)
        warm_first = summary(firsts)
        k.run("%hvd_stop")
    finally:
        k.shutdown()
    return rows, warm_first


def cold_mpirun(repeats: int = 3) -> dict:
    script = (
        "from mpi4py import MPI\nimport torch\nimport horovod.torch as hvd\nhvd.init()\nrank = hvd.rank()\n" + TINY_STEP
    )
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(script)
    times = []
    for _ in range(repeats):
        t0 = time.monotonic()
        subprocess.run(
            ["mpirun", "-np", "2", "--bind-to", "none", sys.executable, f.name], check=True, capture_output=True
        )
        times.append(time.monotonic() - t0)
    return summary(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--np", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--round-trips", type=int, default=200)
    parser.add_argument("--starts", type=int, default=3, help="cold starts per -np (median)")
    parser.add_argument("--rested-cells", type=int, default=15, help="cells timed on a resting pool (%(default)s)")
    args = parser.parse_args()
    setup_env()
    rows = start_times(args.np, args.starts)
    loop_rows, warm_first = warm_loop(args.round_trips, args.rested_cells)
    cold = cold_mpirun()
    rows += loop_rows
    rows.append(
        {
            "what": "run -> first training step: warm %%hvd cell",
            "median_ms": warm_first["median"] * 1e3,
            "p95_ms": warm_first["p95"] * 1e3,
            "n": warm_first["n"],
        }
    )
    rows.append(
        {
            "what": "run -> first training step: cold `mpirun -np 2 python tiny.py`",
            "seconds": cold["median"],
            "n": cold["n"],
        }
    )
    report("pool", rows, ["what", "seconds", "median_ms", "p95_ms", "over_plain_ms", "n"])


if __name__ == "__main__":
    main()
