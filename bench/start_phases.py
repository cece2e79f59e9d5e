"""Where the seconds of `%hvd_start -np N` go, against a plain ipyparallel MPI cluster's start, and what an empty
`%%hvd` cell adds to a plain cell in the seconds right after a start (the engines' warm-up runs then).

python bench/start_phases.py [--np 2] [--rounds 5] [--after-s 25]

A real kernel (jupyter_client, the front end's place). Each round starts a pool and reads its phases (the kernel's
Pool.timings: controller up, engines registered, ready; each rank's launch-to-bootstrap and bootstrap), then
alternates `%%hvd --no-plot pass` and `pass` for --after-s seconds and buckets the differences by the time since the
start returned. The plain cluster is `ipp.Cluster(n=N, engines="mpi")` started and connected until N engines
registered, in a fresh Python process as a notebook's first cell would be (its imports counted apart).

Prints tables and writes bench/results/start_phases.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import report, setup_env

from jupyter_hvd.testing import Kernel

PLAIN = r"""
import sys, time, json
t0 = time.monotonic()
import ipyparallel as ipp
imported = time.monotonic() - t0
t1 = time.monotonic()
cluster = ipp.Cluster(n={np}, engines="mpi", log_level=40)
rc = cluster.start_and_connect_sync()
rc.wait_for_engines({np}, timeout=120)
started = time.monotonic() - t1
t2 = time.monotonic()
rc[:].apply_sync(lambda: None)
first = time.monotonic() - t2
cluster.stop_cluster_sync()
print(json.dumps({{"import_s": imported, "start_s": started, "first_call_s": first}}))
"""

BUCKETS = ((0, 5), (5, 10), (10, 20), (20, 10**9))


def hvd_round(np: int, after_s: float) -> tuple[dict, list[tuple[float, float]]]:
    k = Kernel()
    try:
        k.run("%load_ext jupyter_hvd\n%config HvdPool.live_view = 'text'").check()
        r = k.run(f"%hvd_start -np {np}", timeout=300)
        assert r.status == "ok", r.error_text
        phases = {"client_s": r.finished - r.started}
        shown = time.monotonic()
        pairs: list[tuple[float, float]] = []
        while time.monotonic() - shown < after_s:
            at = time.monotonic() - shown
            a = k.run("%%hvd --no-plot\npass")
            b = k.run("pass")
            pairs.append((at, (a.finished - a.started) - (b.finished - b.started)))
        out = k.run(
            "import json\nfrom jupyter_hvd.kernel.owner import current\nprint(json.dumps(current().timings))"
        ).check()
        timings = json.loads(out.stdout.strip().splitlines()[-1])
        ranks = list(timings.pop("ranks").values())
        phases |= timings
        for key in ("launch_to_bootstrap_s", "bootstrap_s"):
            phases[f"rank_{key}"] = max(r.get(key, 0.0) for r in ranks)
        k.run("%hvd_stop", timeout=60)
    finally:
        k.shutdown()
    return phases, pairs


def plain_round(np: int) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", PLAIN.format(np=np)], capture_output=True, text=True, timeout=300, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--np", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--after-s", type=float, default=25.0)
    args = parser.parse_args()
    setup_env()
    hvd, plain, pairs = [], [], []
    for _ in range(args.rounds):  # interleaved, so both see the same moments of this VM's speed
        phases, round_pairs = hvd_round(args.np, args.after_s)
        hvd.append(phases)
        pairs += round_pairs
        plain.append(plain_round(args.np))

    def med(rows: list[dict], key: str) -> float:
        return statistics.median(r[key] for r in rows)

    phases = (
        (hvd, "client_s", f"%hvd_start -np {args.np}, at the client"),
        (hvd, "controller_s", "  controller up"),
        (hvd, "registered_s", "  engines registered"),
        (hvd, "ready_s", "  ready (Horovod initialised, channel open)"),
        (hvd, "rank_launch_to_bootstrap_s", "  a rank: launch to bootstrap (python, imports, registration)"),
        (hvd, "rank_bootstrap_s", "  a rank: its bootstrap (MPI, Horovod, namespace, channel)"),
        (plain, "start_s", f"plain ipyparallel MPI cluster, {args.np} engines: start + connect"),
        (plain, "import_s", "  its `import ipyparallel` (a kernel with jupyter_hvd loaded has it)"),
        (plain, "first_call_s", "  its first apply to every engine"),
    )
    rows = [{"what": what, "median_s": med(source, key)} for source, key, what in phases]
    for lo, hi in BUCKETS:
        added = [d for at, d in pairs if lo <= at < hi]
        if added:
            label = f"{lo}-{hi} s" if hi < 10**9 else f"{lo} s and later"
            what = f"empty %%hvd cell over a plain one, {label} after the start (ms)"
            rows.append({"what": what, "median_s": statistics.median(added) * 1e3, "n": len(added)})
    report("start_phases", rows, ["what", "median_s", "n"], {"hvd": hvd, "plain": plain, "rounds": args.rounds})
    print(json.dumps({"hvd": hvd, "plain": plain}, indent=1))


if __name__ == "__main__":
    main()
