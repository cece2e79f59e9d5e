"""What an empty `%%hvd` cell adds to a plain cell of the same kernel, at 2 and 6 ranks, and where the time goes.

python bench/empty_cell.py [--np 2 6] [--pairs 200]

A real kernel (jupyter_client, the front end's place) and a real pool on this machine. Cells alternate: `%%hvd
--no-plot pass`, then a plain `pass` (A B A B ...), so each pair sees the same moment of this VM's drifting speed;
the median of the per-pair differences is what the magic costs. Cells follow each other at once, as in a loop of
short cells (a pool rests only after `--rest-after` seconds without a cell).

Then, inside the kernel, the same magic is timed over the same number of cells: as a whole (IPython's call of the
magic), its CellRun (sends, the wait for every rank's end, the wind-up), and a bare ping/pong with every rank over the
cell channel, the floor of any cell.

Prints a table and writes bench/results/empty_cell.json.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import report, setup_env, summary

from jupyter_hvd.testing import Kernel

# Run in the kernel: the magic's phases, timed around the functions the cell passes through.
PHASES = r"""
import time, statistics
from jupyter_hvd.kernel.cell import run as _cell
from jupyter_hvd.kernel.owner import current as _current
_p = _current()
_t = {{"magic": [], "cell_run": []}}
_real_run = _cell.CellRun.run
def _run(self, *a, **k):
    t0 = time.perf_counter(); r = _real_run(self, *a, **k); _t["cell_run"].append(time.perf_counter() - t0); return r
_cell.CellRun.run = _run
_ip = get_ipython()
for _ in range({n}):
    t0 = time.perf_counter(); _ip.run_cell_magic("hvd", "--no-plot", "pass")
    _t["magic"].append(time.perf_counter() - t0)
_cell.CellRun.run = _real_run
_pings = []
for _ in range({n}):
    t0 = time.perf_counter(); _p.channel.settle(len(_p.ranks), timeout=5.0); _pings.append(time.perf_counter() - t0)
print({{k: statistics.median(v) * 1e3 for k, v in _t.items()}} | {{"ping_all": statistics.median(_pings) * 1e3}})
"""


def measure(np: int, pairs: int) -> list[dict]:
    k = Kernel()
    rows = []
    try:
        k.run("%load_ext jupyter_hvd\n%config HvdPool.live_view = 'text'")
        extra = " --oversubscribe" if np > 2 else ""
        assert k.run(f"%hvd_start -np {np}{extra}", timeout=300).status == "ok"
        for _ in range(20):  # warm-up: the first cells pay imports and first sends
            k.run("%%hvd --no-plot\npass")
            k.run("pass")
        cells, plains = [], []
        for _ in range(pairs):
            r = k.run("%%hvd --no-plot\npass")
            cells.append(r.finished - r.started)
            r = k.run("pass")
            plains.append(r.finished - r.started)
        over = summary([a - b for a, b in zip(cells, plains, strict=True)])
        s, p = summary(cells), summary(plains)
        rows.append(
            {
                "ranks": np,
                "what": "empty %%hvd cell at the client",
                "median_ms": s["median"] * 1e3,
                "plain_ms": p["median"] * 1e3,
                "over_plain_ms": over["median"] * 1e3,
                "n": s["n"],
            }
        )
        r = k.run(PHASES.format(n=pairs), timeout=300)
        assert r.status == "ok", r.error_text
        phases = eval(r.stdout.strip().splitlines()[-1])  # a dict of floats printed by the cell above
        rows.append({"ranks": np, "what": "in the kernel, by phase (ms, medians)", **phases})
        k.run("%hvd_stop")
    finally:
        k.shutdown()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--np", type=int, nargs="+", default=[2, 6])
    parser.add_argument("--pairs", type=int, default=200)
    args = parser.parse_args()
    setup_env()
    rows = [row for np in args.np for row in measure(np, args.pairs)]
    columns = ["ranks", "what", "median_ms", "plain_ms", "over_plain_ms", "n", "magic", "cell_run", "ping_all"]
    report("empty_cell", rows, columns)
    print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
