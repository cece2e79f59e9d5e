"""Where the seconds of `%hvd_start -np N` go, against a plain ipyparallel MPI cluster's start, and what an empty
`%%hvd` cell adds to a plain cell in the seconds right after a start (the engines' warm-up runs then).

python bench/start_phases.py [--np 2] [--rounds 5] [--after-s 25]

A real kernel (jupyter_client, the front end's place). Each round starts pools in fresh kernels: in the cell
after `%load_ext` once the warm template is ready (kernel/launch/template.py), in the same cell as `%load_ext` (the
template still importing), again after a stop, and with `c.HvdPool.warm_start = False` (each rank imports); it reads
each start's phases (the kernel's Pool.timings: controller up, engines registered, ready; each rank's
launch-to-bootstrap and bootstrap). After the warm start it alternates `%%hvd --no-plot pass` and `pass` for
--after-s seconds and buckets the differences by the time since the start returned. The plain cluster is
`ipp.Cluster(n=N, engines="mpi")` started and connected until N engines registered, in a fresh Python process as a
notebook's first cell would be (its imports counted apart).

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


def timed_start(k: Kernel, np: int, before: str = "") -> dict:
    """One `%hvd_start` (after `before`, in the same cell): the time at the client and the pool's own phases."""
    r = k.run(f"{before}%hvd_start -np {np}", timeout=300)
    assert r.status == "ok", r.error_text
    out = k.run("import json\nfrom jupyter_hvd.kernel.owner import current\nprint(json.dumps(current().timings))")
    timings = json.loads(out.check().stdout.strip().splitlines()[-1])
    ranks = list(timings.pop("ranks").values())
    phases = {"client_s": r.finished - r.started, **timings}
    for key in ("launch_to_bootstrap_s", "bootstrap_s"):
        phases[f"rank_{key}"] = max(r.get(key, 0.0) for r in ranks)
    return phases


def wait_warm(k: Kernel) -> None:
    code = (
        "import time\nfrom jupyter_hvd.kernel.launch.template import template\n"
        "while not template.ready(): time.sleep(0.05)"
    )
    k.run(code, timeout=120).check()


def hvd_round(np: int, after_s: float) -> tuple[dict[str, dict], list[tuple[float, float]]]:
    """A fresh kernel's starts: right after `%load_ext` in the same cell (the template still importing), after the
    extension's cell (the template warm), a second pool after a stop, and one with the template off (cold)."""
    k = Kernel()
    starts: dict[str, dict] = {}
    try:
        starts["same_cell"] = timed_start(k, np, "%load_ext jupyter_hvd\n%config HvdPool.live_view = 'text'\n")
        k.run("%hvd_stop", timeout=60).check()
        k.shutdown()
        k = Kernel()
        k.run("%load_ext jupyter_hvd\n%config HvdPool.live_view = 'text'").check()
        wait_warm(k)
        starts["warm"] = timed_start(k, np)
        shown = time.monotonic()
        pairs: list[tuple[float, float]] = []
        while time.monotonic() - shown < after_s:
            at = time.monotonic() - shown
            a = k.run("%%hvd --no-plot\npass")
            b = k.run("pass")
            pairs.append((at, (a.finished - a.started) - (b.finished - b.started)))
        k.run("%hvd_stop", timeout=60).check()
        starts["again"] = timed_start(k, np)
        k.run("%hvd_stop\n%config HvdPool.warm_start = False", timeout=60).check()
        starts["cold"] = timed_start(k, np)
        k.run("%hvd_stop", timeout=60)
    finally:
        k.shutdown()
    return starts, pairs


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
    hvd: list[dict[str, dict]] = []
    plain: list[dict] = []
    pairs: list[tuple[float, float]] = []
    for _ in range(args.rounds):  # interleaved, so both see the same moments of this VM's speed
        starts, round_pairs = hvd_round(args.np, args.after_s)
        hvd.append(starts)
        pairs += round_pairs
        plain.append(plain_round(args.np))

    def med(rows: list[dict], key: str) -> float:
        return statistics.median(r[key] for r in rows)

    def of(kind: str) -> list[dict]:
        return [starts[kind] for starts in hvd]

    phases = (
        (
            of("warm"),
            "client_s",
            f"%hvd_start -np {args.np} in the cell after %load_ext (warm), at the client",
        ),
        (of("warm"), "controller_s", "  controller up"),
        (of("warm"), "registered_s", "  engines registered"),
        (of("warm"), "ready_s", "  ready (Horovod initialised, channel open)"),
        (of("warm"), "rank_launch_to_bootstrap_s", "  a rank: launch to bootstrap (fork, registration)"),
        (of("warm"), "rank_bootstrap_s", "  a rank: its bootstrap (MPI, Horovod, namespace, channel)"),
        (of("again"), "client_s", f"%hvd_start -np {args.np} after %hvd_stop, at the client"),
        (of("same_cell"), "client_s", f"%load_ext + %hvd_start -np {args.np} in one cell (template importing)"),
        (of("cold"), "client_s", f"%hvd_start -np {args.np} with warm_start off (each rank imports), at the client"),
        (of("cold"), "rank_launch_to_bootstrap_s", "  a rank: launch to bootstrap (python, imports, registration)"),
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
