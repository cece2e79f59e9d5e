"""What a rank waiting for nothing costs: the CPU of each rank during a cell that sleeps after using Horovod, in a pool
(Horovod rests where no rank uses it), in a pool that never rests (--rest-after 0: as before), and in a script under
mpirun; and what the rests cost training (the same loop in both pools, alive together and timed in turn).

    python bench/idle_cpu.py [--sleep 60] [--rounds 6] [--steps 40]

Prints a table and writes bench/results/idle_cpu.json.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import workload
from common import VENV_BIN, engines_of, pause, report, result_of, resume, setup_env, summary

from jupyter_hvd.testing import Kernel

# The sleep, measured in two parts: its first 5 s (Horovod rests after --rest-after, 2 s on CPU ranks), then the rest.
SLEEP = """
import json, time
hvd.allreduce(torch.ones(4), name="idle_cpu.before")
c0, w0 = time.process_time(), time.monotonic()
time.sleep(5)
c1, w1 = time.process_time(), time.monotonic()
time.sleep(SECONDS - 5)
c2, w2 = time.process_time(), time.monotonic()
print("CPU " + json.dumps([rank, 100 * (c2 - c0) / (w2 - w0), 100 * (c2 - c1) / (w2 - w1)]), flush=True)
"""

SCRIPT = "from mpi4py import MPI\nimport torch\nimport horovod.torch as hvd\nhvd.init()\nrank = hvd.rank()\n" + SLEEP


def cpu_lines(text: str) -> dict[int, tuple[float, float]]:
    """rank -> (CPU % over the whole sleep, CPU % after its first 5 s), from the `CPU [...]` lines."""
    found = {}
    for line in text.splitlines():
        match = re.search(r"CPU (\[.*\])", line)
        if match:
            rank, whole, after = json.loads(match.group(1))
            found[rank] = (whole, after)
    return found


def pool(rest_after: str) -> Kernel:
    k = Kernel()
    k.run("%load_ext jupyter_hvd\n%config HvdPool.live_view = 'off'")
    r = k.run(f"%hvd_start -np 2 {rest_after}", timeout=300)
    assert r.status == "ok", r.error_text
    return k


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sleep", type=int, default=60, help="seconds the cell sleeps")
    parser.add_argument("--rounds", type=int, default=6, help="training windows of each pool, interleaved")
    parser.add_argument("--steps", type=int, default=40, help="training steps per window")
    args = parser.parse_args()
    setup_env()
    sleep = SLEEP.replace("SECONDS", str(args.sleep))
    pools = {"pool (rests)": pool(""), "pool --rest-after 0": pool("--rest-after 0")}
    cpu: dict[str, dict[int, tuple[float, float]]] = {}
    training: dict[str, list[float]] = {name: [] for name in pools}
    try:
        for name, k in pools.items():
            for other in pools.values():
                (resume if other is k else pause)(engines_of(other.pid))
            r = k.run("%%hvd --ranks all\n" + sleep, timeout=args.sleep + 120)
            assert r.status == "ok", r.error_text
            cpu[name] = cpu_lines(r.stdout)
        with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
            f.write(SCRIPT.replace("SECONDS", str(args.sleep)))
        for k in pools.values():
            pause(engines_of(k.pid))
        out = subprocess.run(
            [f"{VENV_BIN}/mpirun", "-np", "2", "--bind-to", "none", sys.executable, f.name],
            capture_output=True,
            text=True,
            timeout=args.sleep + 120,
        )
        cpu["mpirun script"] = cpu_lines(out.stdout)
        for k in pools.values():
            resume(engines_of(k.pid))
            r = k.run("%%hvd --no-plot\n" + workload.SETUP, timeout=300)
            assert r.status == "ok", r.error_text
            pause(engines_of(k.pid))
        for _ in range(args.rounds):
            for name, k in pools.items():
                resume(engines_of(k.pid))
                r = k.run("%%hvd --no-plot\n" + workload.window(args.steps, 1), timeout=600)
                assert r.status == "ok", r.error_text
                training[name].append(result_of(r.stdout)["samples_per_s"])
                pause(engines_of(k.pid))
    finally:
        for k in pools.values():
            resume(engines_of(k.pid))
            k.run("%hvd_stop", timeout=60)
            k.shutdown()
    names = [*pools, "mpirun script"]
    rows = []
    for rank in (0, 1):
        rows.append(
            {"what": f"rank {rank}: CPU % over a {args.sleep} s sleep in a cell"}
            | {n: round(cpu[n][rank][0], 1) if rank in cpu.get(n, {}) else None for n in names}
        )
        rows.append(
            {"what": f"rank {rank}: CPU % after the sleep's first 5 s"}
            | {n: round(cpu[n][rank][1], 1) if rank in cpu.get(n, {}) else None for n in names}
        )
    ratios = [a / b for a, b in zip(training["pool (rests)"], training["pool --rest-after 0"], strict=True)]
    rows.append(
        {"what": "training, samples/s (median of windows)"}
        | {n: round(summary(v)["median"]) for n, v in training.items()}
    )
    rows.append(
        {
            "what": f"training, pool (rests) / pool --rest-after 0, median of {args.rounds} rounds "
            f"({min(ratios):.2f}-{max(ratios):.2f})",
            "pool (rests)": round(summary(ratios)["median"], 3),
        }
    )
    report("idle_cpu", rows, ["what", *names], {"cpu": cpu, "training": training})


if __name__ == "__main__":
    main()
