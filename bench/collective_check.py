"""What the ranks' agreement before a blocking torch.distributed collective costs (engine/distributed/matching.py):
the same `dist.all_reduce` in a cell, checked (the pool's `dist.all_reduce`) and unchecked (torch's own, which the
pool's wraps), alternating in rounds, at a few sizes, on a `--torch-distributed` CPU pool (Gloo).

python bench/collective_check.py [--rounds 5] [--calls 500]

Prints a table and writes bench/results/collective_check.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import report, setup_env

from jupyter_hvd.testing import Kernel

SIZES = {"4 B": 1, "4 KB": 1024, "1 MB": 1 << 18}

CELL = """%%hvd
import time, torch
_t = torch.ones({n})
_fns = {{"checked": dist.all_reduce, "unchecked": dist.all_reduce.__wrapped__}}
_out = {{}}
for _name in {order}:
    _f = _fns[_name]
    for _ in range(20):
        _f(_t)
    t0 = time.perf_counter()
    for _ in range({calls}):
        _f(_t)
    _out[_name] = (time.perf_counter() - t0) / {calls} * 1e6
print(_out)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=500)
    args = parser.parse_args()
    setup_env()
    k = Kernel()
    rows = []
    try:
        start = "%load_ext jupyter_hvd\n%config HvdPool.live_view = 'text'\n%hvd_start -np 2 --torch-distributed"
        assert k.run(start, timeout=300).status == "ok"
        for size, n in SIZES.items():
            checked, unchecked = [], []
            for i in range(args.rounds):
                order = ["checked", "unchecked"] if i % 2 == 0 else ["unchecked", "checked"]
                r = k.run(CELL.format(n=n, calls=args.calls, order=order), timeout=600)
                assert r.status == "ok", r.error_text
                got = eval(r.stdout.strip().splitlines()[-1])  # the dict of floats the cell printed
                checked.append(got["checked"])
                unchecked.append(got["unchecked"])
            c, u = statistics.median(checked), statistics.median(unchecked)
            rows.append({"size": size, "checked_us": c, "unchecked_us": u, "added_us": c - u, "ratio": c / u})
        k.run("%hvd_stop")
    finally:
        k.shutdown()
    report("collective_check", rows, ["size", "checked_us", "unchecked_us", "added_us", "ratio"])
    print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
