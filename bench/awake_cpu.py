"""What Horovod costs while it is awake but nearly idle, and what waking it after a rest costs.

A 2-rank CPU pool; a cell keeps Horovod awake with one small allreduce every 0.2 s and reads each rank's CPU; then it
sleeps past --rest-after (Horovod rests, engine/horovod/rest.py) and times the first allreduce after each sleep
(Horovod starting again) against one while awake. Each in a pool whose ranks wait in Horovod's negotiation with naps
(engine/horovod/negotiation.py, the default) and in one started with --env JUPYTER_HVD_NEGOTIATION_NAPS=0 (Open MPI's
busy wait, as under mpirun). Their training speed: `.venv/bin/python bench/throughput.py --rounds 4`, with and without
`--start-flags "--env JUPYTER_HVD_NEGOTIATION_NAPS=0"`.

    python bench/awake_cpu.py [--rounds 3] [--seconds 10]

Prints a table and writes bench/results/awake_cpu.json.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import report, setup_env, summary

from jupyter_hvd.testing import Kernel

SETUP = """%%hvd
import json, resource, time
def cpu_s():
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime
"""

AWAKE = """%%hvd --ranks all
hvd.allreduce(torch.ones(1))
c0, w0 = cpu_s(), time.monotonic()
while time.monotonic() - w0 < SECONDS:
    hvd.allreduce(torch.ones(1))
    time.sleep(0.2)
print("AWAKE " + json.dumps([rank, 100 * (cpu_s() - c0) / (time.monotonic() - w0)]), flush=True)
"""

WAKE = """%%hvd --ranks all
time.sleep(3)  # past --rest-after (2 s on CPU ranks): Horovod rests
c0, w0 = cpu_s(), time.perf_counter()
hvd.allreduce(torch.ones(1))
woken = [1e3 * (time.perf_counter() - w0), 1e3 * (cpu_s() - c0)]
w0 = time.perf_counter()
hvd.allreduce(torch.ones(1))
print("WAKE " + json.dumps([rank, *woken, 1e3 * (time.perf_counter() - w0)]), flush=True)
"""


def lines(text: str, tag: str) -> list[list]:
    return [json.loads(m.group(1)) for m in re.finditer(rf"{tag} (\[.*\])$", text, re.M)]


def measure(k: Kernel, rounds: int, seconds: float, flags: str) -> dict[str, list[float]]:
    """{measure: samples} of a pool started in kernel `k` with `flags`."""
    out: dict[str, list[float]] = {}
    try:
        r = k.run(f"%hvd_start -np 2 {flags}", timeout=300)
        assert r.status == "ok", r.error_text
        assert k.run(SETUP, timeout=120).status == "ok"
        for _ in range(rounds):
            r = k.run(AWAKE.replace("SECONDS", str(seconds)), timeout=seconds + 120)
            assert r.status == "ok", r.error_text
            per_rank = sorted(cpu for _, cpu in lines(r.stdout, "AWAKE"))
            out.setdefault("busier", []).append(per_rank[-1])
            out.setdefault("other", []).append(per_rank[0])
            r = k.run(WAKE, timeout=120)
            assert r.status == "ok", r.error_text
            for _, ms, cpu_ms, awake_ms in lines(r.stdout, "WAKE"):
                out.setdefault("wake_ms", []).append(ms)
                out.setdefault("wake_cpu_ms", []).append(cpu_ms)
                out.setdefault("awake_ms", []).append(awake_ms)
    finally:
        k.run("%hvd_stop", timeout=60)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each measurement")
    parser.add_argument("--seconds", type=float, default=10.0, help="seconds Horovod is kept awake per round")
    args = parser.parse_args()
    setup_env()
    ways = {"naps (default)": "", "busy wait (NAPS=0)": "--env JUPYTER_HVD_NEGOTIATION_NAPS=0"}
    k = Kernel()
    try:
        k.run("%load_ext jupyter_hvd\n%config HvdPool.live_view = 'off'")
        samples = {way: measure(k, args.rounds, args.seconds, flags) for way, flags in ways.items()}
    finally:
        k.shutdown()
    what = {
        "busier": f"awake, an allreduce every 0.2 s: the busier rank's CPU % (median of {args.rounds})",
        "other": "the same: the other rank's CPU %",
        "wake_ms": "first allreduce after a rest (Horovod starts again): ms",
        "wake_cpu_ms": "the same: CPU ms of a rank",
        "awake_ms": "an allreduce while awake: ms",
    }
    rows = [
        {"what": text} | {way: round(summary(samples[way][key])["median"], 1) for way in ways}
        for key, text in what.items()
    ]
    report("awake_cpu", rows, ["what", *ways], {"samples": samples})


if __name__ == "__main__":
    main()
