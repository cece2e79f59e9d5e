"""Can Horovod ranks outlive a dead peer and heal with a spare on this stack? (issue: heal a lost rank)

Plain mpiexec, no pool: 3 processes, ranks 0-1 train (Horovod on an MPI communicator of their own), process 2 is a
spare. Rank 1 dies (os._exit) after a first allreduce. With Open MPI 5's ULFM (`--with-ft ulfm`, which needs the
tcp BTL and the ob1 PML: over shared memory a dead peer is never noticed and the survivors hang), the survivor's next
allreduce raises HorovodInternalError; survivors and spare then shrink the world, the spare takes rank 1's number,
and Horovod starts again on that communicator (`hvd.init(comm=...)`). Without ULFM, mpiexec ends the whole job.

Also the price: a 4 MB Horovod allreduce between 2 CPU ranks over shared memory (today's pools) and over TCP
loopback (what ULFM needs).

    python bench/heal_mpi.py [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from common import report, setup_env, summary

RANKS = r"""
import json, os, sys, time
from mpi4py import MPI
import torch
import horovod.torch as hvd

world = MPI.COMM_WORLD
world.Set_errhandler(MPI.ERRORS_RETURN)
me = world.Get_rank()
TRAINING = 2
out = {"process": me}

if sys.argv[1] == "bandwidth":
    hvd.init()
    x = torch.ones(1 << 20)  # 4 MB of float32
    for _ in range(3):
        hvd.allreduce(x, name="warm")
    t = time.perf_counter()
    for i in range(20):
        hvd.allreduce(x, name=f"bw.{i}")
    out["allreduce_ms"] = (time.perf_counter() - t) / 20 * 1e3
    print("RESULT", json.dumps(out), flush=True)
    sys.exit(0)

kept = f"a variable of process {me}"
pid = os.getpid()
train = world.Split(0 if me < TRAINING else 1, me)
if me < TRAINING:
    hvd.init(comm=train)
    hvd.allreduce(torch.ones(1), name="before")
    if me == 1:
        print("RESULT", json.dumps({"process": me, "died_at": time.time()}), flush=True)
        os._exit(1)
    try:
        hvd.allreduce(torch.ones(1), name="after")
        out["after"] = "returned"
    except Exception as exc:  # HorovodInternalError: Horovod's loop saw the peer's MPI failure
        out["after"] = type(exc).__name__
    out["error_at"] = time.time()
    hvd.shutdown()
try:
    world.Barrier()  # the spare learns of the death here (MPI_ERR_PROC_FAILED)
except MPI.Exception:
    pass
world.Revoke()
healed = world.Shrink().Split(0, me if me < TRAINING else 1)  # the spare takes the lost rank's number
hvd.init(comm=healed)
total = hvd.allreduce(torch.tensor([hvd.rank() + 1.0]), op=hvd.Sum, name="healed").item()
out |= {"healed_at": time.time(), "rank": hvd.rank(), "size": hvd.size(), "total": total}
out |= {"same_pid": os.getpid() == pid, "kept": kept == f"a variable of process {me}"}
print("RESULT", json.dumps(out), flush=True)
hvd.shutdown()
"""

FT = ["--with-ft", "ulfm", "--mca", "btl", "tcp,self", "--mca", "pml", "ob1"]


def mpiexec(directory: Path, np: int, args: list[str], mode: str, timeout: float = 60) -> tuple[int, list[dict]]:
    script = directory / "ranks.py"
    script.write_text(RANKS)
    cmd = ["mpiexec", *args, "-np", str(np), "--map-by", ":OVERSUBSCRIBE", "--bind-to", "none"]
    cmd += ["--prtemca", "prte_tmpdir_base", str(directory), sys.executable, str(script), mode]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        text = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
        return -1, [json.loads(ln[7:]) for ln in text.splitlines() if ln.startswith("RESULT ")]
    return done.returncode, [json.loads(ln[7:]) for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]


def heal_once(directory: Path, args: list[str]) -> dict[str, Any]:
    rc, results = mpiexec(directory, 3, args, "heal")
    by = {r["process"]: r for r in results}
    died = by.get(1, {}).get("died_at")
    survivor, spare = by.get(0, {}), by.get(2, {})
    healed = survivor.get("total") == 3.0 and spare.get("rank") == 1 and survivor.get("same_pid") is True
    return {
        "mpiexec_rc": rc,
        "healed": bool(healed and survivor.get("kept")),
        "error_s": survivor["error_at"] - died if died and "error_at" in survivor else None,
        "healed_s": survivor["healed_at"] - died if died and "healed_at" in survivor else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    runs = parser.parse_args().runs
    setup_env()
    rows = []
    with tempfile.TemporaryDirectory(prefix="heal-") as tmp:
        directory = Path(tmp)
        for name, args in (("without ULFM (today)", ["--mca", "btl", "self,sm"]), ("ULFM, tcp", FT)):
            tries = [heal_once(directory, args) for _ in range(runs if args is FT else 1)]
            healed = [t for t in tries if t["healed"]]
            row: dict[str, Any] = {"mpiexec": name, "healed": f"{len(healed)}/{len(tries)}"}
            if healed:
                row["error after death (ms)"] = summary([t["error_s"] * 1e3 for t in healed])["median"]
                row["healed after death (ms)"] = summary([t["healed_s"] * 1e3 for t in healed])["median"]
            rows.append(row)
        for name, args in (("shared memory (today)", ["--mca", "btl", "self,sm"]), ("TCP loopback (ULFM)", FT)):
            _, results = mpiexec(directory, 2, args, "bandwidth")
            rows.append({"mpiexec": f"4 MB allreduce, {name}", "allreduce (ms)": results[0]["allreduce_ms"]})
    columns = ["mpiexec", "healed", "error after death (ms)", "healed after death (ms)", "allreduce (ms)"]
    report("heal_mpi", rows, columns, {"runs": runs})


if __name__ == "__main__":
    main()
