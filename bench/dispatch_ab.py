"""An empty `%%hvd` cell's round trip, this tree against another (an earlier commit's), interleaved on one machine.

python bench/dispatch_ab.py --baseline /tmp/jhvd-base [--round-trips 200]

Two real kernels run at once, each with a 2-rank pool: one imports jupyter_hvd from this tree, the other from the
baseline tree (e.g. `git archive <commit> | tar -x -C /tmp/jhvd-base`, plus the built widget files of
jupyter_hvd/widgets/static/). Cells alternate between them (A B B A A B ..., each followed by a plain `pass` cell in
the same kernel), so this VM's drifting speed falls on both alike. Reported: each side's median and p95, and the median
of the per-pair differences. Single runs moved by up to 0.5 ms either way here: run several, half of them with
--baseline-first.
"""

from __future__ import annotations

import argparse
import os
import sys
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import report, setup_env, summary

from jupyter_hvd.testing import Kernel

HERE = Path(__file__).resolve().parents[1]


@contextmanager
def working_directory(path: Path):
    """The kernel (and its engines) import jupyter_hvd from their working directory: start them in `path`."""
    old = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


def start(tree: Path) -> Kernel:
    with working_directory(tree):
        k = Kernel()
    r = k.run("%load_ext jupyter_hvd\nimport jupyter_hvd\nprint(jupyter_hvd.__file__)")
    assert str(tree) in r.stdout, f"the kernel imported {r.stdout.strip()}, not {tree}'s jupyter_hvd"
    r = k.run("%config HvdPool.live_view = 'text'\n%hvd_start -np 2", timeout=300)
    assert r.status == "ok", r.stdout + r.stderr + r.error_text
    return k


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, required=True, help="a tree with the jupyter_hvd to compare with")
    parser.add_argument("--round-trips", type=int, default=200)
    parser.add_argument(
        "--baseline-first",
        action="store_true",
        help="start the baseline's kernel first (which kernel starts first moved single runs here: run both orders)",
    )
    args = parser.parse_args()
    setup_env()
    trees = [("this tree", HERE), (f"baseline ({args.baseline})", args.baseline.resolve())]
    kernels = dict((name, start(tree)) for name, tree in (reversed(trees) if args.baseline_first else trees))
    kernels = {name: kernels[name] for name, _ in trees}
    cells: dict[str, list[float]] = {name: [] for name in kernels}
    over: dict[str, list[float]] = {name: [] for name in kernels}
    try:
        for k in kernels.values():  # warm-up
            k.run("%%hvd --no-plot\npass")
            k.run("pass")
        for i in range(args.round_trips):
            for name, k in sorted(kernels.items(), reverse=bool(i % 2)):  # each goes first in half the rounds
                r = k.run("%%hvd --no-plot\npass")
                plain = k.run("pass")
                assert r.status == "ok", r.error_text
                cells[name].append(r.finished - r.started)
                over[name].append(cells[name][-1] - (plain.finished - plain.started))
        for k in kernels.values():
            k.run("%hvd_stop")
    finally:
        for k in kernels.values():
            k.shutdown()
    rows = []
    for name in kernels:
        s = summary(cells[name])
        rows.append(
            {
                "what": f"empty %%hvd cell, text view: {name}",
                "median_ms": s["median"] * 1e3,
                "p95_ms": s["p95"] * 1e3,
                "over_plain_ms": summary(over[name])["median"] * 1e3,
                "n": s["n"],
            }
        )
    a, b = list(kernels)
    diffs = [x - y for x, y in zip(cells[a], cells[b], strict=True)]
    rows.append({"what": f"{a} minus {b}, median of pairs", "median_ms": summary(diffs)["median"] * 1e3})
    report("dispatch_ab", rows, ["what", "median_ms", "p95_ms", "over_plain_ms", "n"])


if __name__ == "__main__":
    main()
