"""What a rank waiting for a slow peer costs: the CPU of each rank while rank 0 waits in an allreduce that rank 1
joins only after a sleep, and what a collective takes when nobody is late.

Horovod's own synchronize() waits in a loop of std::this_thread::yield(), so a waiting rank keeps a core busy;
a pool's ranks poll the op with naps instead (jupyter_hvd/engine/collectives.py). Each is measured in the same pool:
the cell's `hvd.allreduce` (the pool's wait) and the same op waited for through Horovod's C++ wait directly (as in a
script under mpirun), interleaved.

    python bench/wait_cpu.py [--sleep 5] [--rounds 3] [--ops 500]

Prints a table and writes bench/results/wait_cpu.json.
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
import json, time, torch
import horovod.torch as hvd
from horovod.torch import mpi_ops

def horovods_wait(tensor, name):
    # Horovod's synchronize() without the pool's wrap: its C++ wait, then its table entry.
    handle = mpi_ops.allreduce_async(tensor, name=name)
    mpi_ops.mpi_lib.horovod_torch_wait_and_clear(handle)
    return mpi_ops._handle_map.pop(handle)[-1]

def pools_wait(tensor, name):
    return hvd.allreduce(tensor, name=name)

WAYS = {"pool": pools_wait, "horovod": horovods_wait}
"""

LATE_PEER = """%%hvd
for way, allreduce in WAYS.items():
    allreduce(torch.ones(4), f"wait_cpu.{way}.before.ROUND")
    c0, w0 = time.process_time(), time.monotonic()
    if rank == 1:
        time.sleep(SECONDS)
    allreduce(torch.ones(4), f"wait_cpu.{way}.late.ROUND")
    cpu = 100 * (time.process_time() - c0) / (time.monotonic() - w0)
    print("CPU " + json.dumps([way, rank, cpu]), flush=True)
"""

ON_TIME = """%%hvd
tensor = torch.ones(1000)
for way, allreduce in WAYS.items():
    hvd.barrier()
    c0, w0 = time.process_time(), time.perf_counter()
    for i in range(OPS):
        allreduce(tensor, f"wait_cpu.{way}.{i % 50}")
    ms, cpu_ms = 1e3 * (time.perf_counter() - w0) / OPS, 1e3 * (time.process_time() - c0) / OPS
    print("OP " + json.dumps([way, rank, ms, cpu_ms]), flush=True)
"""


def lines(text: str, tag: str) -> list[list]:
    """The JSON lists printed after `tag` (a rank's prefix may come before it)."""
    return [json.loads(m.group(1)) for m in re.finditer(rf"{tag} (\[.*\])$", text, re.M)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sleep", type=float, default=5.0, help="seconds rank 1 is late")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each measurement")
    parser.add_argument("--ops", type=int, default=500, help="allreduces timed per round when nobody is late")
    args = parser.parse_args()
    setup_env()
    k = Kernel()
    cpu: dict[tuple[str, int], list[float]] = {}
    op: dict[str, list[tuple[float, float]]] = {}
    try:
        k.run("%load_ext jupyter_hvd\n%config HvdPool.live_view = 'off'")
        r = k.run("%hvd_start -np 2", timeout=300)
        assert r.status == "ok", r.error_text
        r = k.run(SETUP, timeout=120)
        assert r.status == "ok", r.error_text
        for n in range(args.rounds):
            cell = LATE_PEER.replace("SECONDS", str(args.sleep)).replace("ROUND", str(n))
            r = k.run("%%hvd --ranks all" + cell[len("%%hvd") :], timeout=args.sleep * 4 + 120)
            assert r.status == "ok", r.error_text
            for way, rank, value in lines(r.stdout, "CPU"):
                cpu.setdefault((way, rank), []).append(value)
            r = k.run(ON_TIME.replace("OPS", str(args.ops)), timeout=600)
            assert r.status == "ok", r.error_text
            for way, rank, ms, cpu_ms in lines(r.stdout, "OP"):
                if rank == 0:
                    op.setdefault(way, []).append((ms, cpu_ms))
    finally:
        k.run("%hvd_stop", timeout=60)
        k.shutdown()
    names = {"pool": "the pool's wait", "horovod": "Horovod's own wait"}
    rows = []
    for rank, what in ((0, "waits"), (1, "is late (sleeps)")):
        rows.append(
            {"what": f"rank {rank} {what} {args.sleep:g} s: CPU %, median of {args.rounds}"}
            | {names[w]: round(summary(cpu[(w, rank)])["median"], 1) for w in names}
        )
    rows.append(
        {"what": f"allreduce of 1000 floats, nobody late: ms per op (median of {args.rounds} x {args.ops})"}
        | {names[w]: round(summary([ms for ms, _ in op[w]])["median"], 3) for w in names}
    )
    rows.append(
        {"what": "the same: rank 0's CPU ms per op"}
        | {names[w]: round(summary([c for _, c in op[w]])["median"], 3) for w in names}
    )
    report(
        "wait_cpu",
        rows,
        ["what", *names.values()],
        {"cpu": {f"{w} rank {r}": v for (w, r), v in cpu.items()}, "op": op},
    )


if __name__ == "__main__":
    main()
