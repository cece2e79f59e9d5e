"""What keeping a model across restarts costs, and how fast a crash is trained again (2 CPU ranks).

    python bench/keep.py [--params 25] [--window 60] [--rounds 3]
    python bench/keep.py --snapshots [--params 25] [--rounds 10]
    python bench/keep.py --fsdp [--params 25] [--rounds 5]

- snapshot at a cell's end: a ~25 M-parameter MLP with Adam kept (%hvd_keep model opt); what the training thread
  waits for (each rank's copy) and what the background write takes, from the ranks' own timing;
- the end-of-cell check: an empty cell with the model kept and unchanged, against nothing kept;
- a restore (%hvd_rewind): its time and the peak extra memory of each rank while it loads (PSS: the snapshot's
  pages, mapped by every rank of the host, count once);
- training throughput with jupyter_hvd.commit() every 30 s against the same loop without, interleaved windows of
  --window seconds (the goal: at most 2% slower);
- crash to trained again: rank 1 killed (SIGKILL) during training; from the kill until the next cell trains from the
  restored snapshot (restart, setup replay, restore), against a plain %hvd_start of the same pool, and against a
  plain start followed by the setup cell and a first step (how a user got training again before, weights lost).

With --snapshots, only the two costs of keeping the model: the end-of-cell check with everything kept and unchanged
(an empty cell against nothing kept: target +30 ms), and what the training thread waits per snapshot when everything
changed (one step, then the cell's end: target 0.2 s; every kept tensor's bytes are read for a digest and copied).

With --fsdp, the same MLP sharded with FSDP2 (`fully_shard`) on a --torch-distributed pool, Adam over its DTensors
(%hvd_keep model opt): per snapshot (one step, then the cell's end) what the training thread waits for and what the
background write takes, a %hvd_rewind of it, and a %hvd_restart that restores it (medians of --rounds).

Prints a table and writes bench/results/keep.json (keep_fsdp.json with --fsdp).
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import report, setup_env

from jupyter_hvd.testing import Kernel

SETUP = """%%hvd --setup
hidden = {hidden}
model = torch.nn.Sequential(torch.nn.Linear(hidden, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, hidden // 2))
opt = hvd.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=1e-4), named_parameters=model.named_parameters())
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
x = torch.randn(16, hidden)
y = torch.randn(16, hidden // 2)
steps = 0
print("params", sum(p.numel() for p in model.parameters()))
"""

# Trains for `window` seconds; commits every `every` seconds (0: never); prints steps per second.
TRAIN = """%%hvd
import time, jupyter_hvd
t0 = last = time.perf_counter()
n = 0
while True:
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()
    n += 1
    steps += 1
    now = time.perf_counter()
    if {every} and now - last >= {every}:
        jupyter_hvd.commit()
        last = now
    # every rank must take the same number of steps: rank 0 decides when the window is over
    if hvd.broadcast_object(now - t0 >= {window} if rank == 0 else None, 0, name="bench.window"):
        break
print(f"RATE {{n / (time.perf_counter() - t0):.4f}}")
"""


FSDP_SETUP = """%%hvd --setup
from torch.distributed.fsdp import fully_shard
hidden = {hidden}
model = torch.nn.Sequential(torch.nn.Linear(hidden, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, hidden // 2))
for layer in model:
    if isinstance(layer, torch.nn.Linear):
        fully_shard(layer)
fully_shard(model)
opt = torch.optim.Adam(model.parameters(), lr=1e-4)
x = torch.randn(16, hidden)
y = torch.randn(16, hidden // 2)
print("params", sum(p.numel() for p in model.parameters()))
"""
STEP = "%%hvd\nopt.zero_grad(); torch.nn.functional.mse_loss(model(x), y).backward(); opt.step()"


def run(k: Kernel, code: str, timeout: float = 600) -> str:
    r = k.run(code, timeout=timeout)
    if r.status != "ok":
        raise RuntimeError(r.error_text + r.stderr)
    return r.stdout


def end_of_cell_cost(k: Kernel, cells: int = 40) -> list[dict]:
    """What an empty cell costs with the model, its optimizer and a counter kept and unchanged, against nothing
    kept: the end-of-cell check, which must cost in proportion to what changed."""
    medians = {}
    for label, keep in (
        ("nothing kept", "%hvd_keep --forget model opt steps"),
        ("kept, unchanged", "%hvd_keep model opt steps"),
    ):
        run(k, keep)
        run(k, "%%hvd\npass")
        times = []
        for _ in range(cells):
            t0 = time.perf_counter()
            run(k, "%%hvd\npass")
            times.append(time.perf_counter() - t0)
        medians[label] = statistics.median(times) * 1000
    return [
        {"what": "empty %%hvd cell, nothing kept (median)", "value": f"{medians['nothing kept']:.1f} ms"},
        {
            "what": "empty %%hvd cell, model + Adam + counter kept, unchanged",
            "value": f"{medians['kept, unchanged']:.1f} ms",
        },
    ]


def restore_memory(k: Kernel) -> list[dict]:
    """Extra memory of each rank while %hvd_rewind loads the snapshot: proportional set size (shared pages of the
    snapshot's files count once over the ranks that map them), sampled every 10 ms."""
    import threading

    import psutil

    out = k.run("%%hvd --ranks all\nimport os\nprint('PID', os.getpid())").stdout
    procs = [psutil.Process(int(p)) for p in re.findall(r"PID (\d+)", out)]
    run(k, "%%hvd\nopt.zero_grad(); torch.nn.functional.mse_loss(model(x), y).backward(); opt.step()")
    run(k, "%hvd_snapshots")
    before = [p.memory_full_info().pss for p in procs]
    peak = list(before)
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            for i, p in enumerate(procs):
                peak[i] = max(peak[i], p.memory_full_info().pss)
            time.sleep(0.01)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    t0 = time.perf_counter()
    said = run(k, "%hvd_rewind")
    seconds = time.perf_counter() - t0
    time.sleep(0.2)
    done.set()
    sampler.join()
    extra = [(b - a) / 2**20 for a, b in zip(before, peak, strict=True)]
    return [
        {"what": "%hvd_rewind of the snapshot", "value": f"{seconds:.2f} s ({said.strip()[:60]}...)"},
        {"what": "restore: peak extra memory per rank (PSS)", "value": " / ".join(f"{e:.0f} MB" for e in extra)},
        {"what": "restore: peak extra memory, all ranks", "value": f"{sum(extra):.0f} MB"},
    ]


def newest_snapshot(k: Kernel, after: int, timeout: float = 120) -> tuple[int, float, float, str]:
    """(number, seconds the training thread waited, seconds written in the background, size) of the newest snapshot,
    once one newer than `after` is written on every rank."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        listing = run(k, "%hvd_keep")
        found = re.search(r"Last snapshot \(#(\d+)\).*ago, (\S+ \S+) \(training waited (\S+) s.* in (\S+) s", listing)
        if found and int(found.group(1)) > after:
            return int(found.group(1)), float(found.group(3)), float(found.group(4)), found.group(2)
        time.sleep(0.2)
    raise RuntimeError(f"no snapshot after #{after} within {timeout} s")


def fsdp(args: argparse.Namespace, hidden: int) -> None:
    """An FSDP2 model and its Adam kept: the snapshot's cost, and the time to restore it."""
    k = Kernel()
    rows: list[dict] = []
    extra: dict = {}
    try:
        run(k, "%load_ext jupyter_hvd\n%config HvdPool.live_view = 'off'\n%hvd_start -np 2 --torch-distributed")
        params = int(re.search(r"params (\d+)", run(k, FSDP_SETUP.format(hidden=hidden))).group(1))
        run(k, "%hvd_keep model opt")
        number, copies, writes, size = 0, [], [], ""
        for _ in range(args.rounds):
            run(k, STEP)
            number, copy_s, write_s, size = newest_snapshot(k, number)
            copies.append(copy_s)
            writes.append(write_s)
        rewinds, restarts = [], []
        for _ in range(args.rounds):
            t0 = time.perf_counter()
            said = run(k, "%hvd_rewind")
            rewinds.append(time.perf_counter() - t0)
            assert "restored model, opt" in said, said
        for _ in range(args.rounds):
            said = run(k, "%hvd_restart", timeout=300)
            assert "restored model, opt" in said, said
            restarts.append(float(re.search(r"Pool restarted in (\S+) s", said).group(1)))
        run(k, STEP)
        rows += [
            {"what": "model", "value": f"{params / 1e6:.1f} M parameters (FSDP2, 2 ranks) + Adam, snapshot {size}"},
            {"what": "snapshot: the training thread waits (median)", "value": f"{statistics.median(copies):.3f} s"},
            {"what": "snapshot: written in the background (median)", "value": f"{statistics.median(writes):.3f} s"},
            {"what": "%hvd_rewind of the snapshot (median)", "value": f"{statistics.median(rewinds):.2f} s"},
            {"what": "%hvd_restart, restoring it (median)", "value": f"{statistics.median(restarts):.1f} s"},
        ]
        extra.update(copies=copies, writes=writes, rewinds=rewinds, restarts=restarts)
        run(k, "%hvd_stop")
    finally:
        k.shutdown()
    report("keep_fsdp", rows, ["what", "value"], extra)


def snapshots(args: argparse.Namespace, hidden: int) -> None:
    """The end-of-cell check (everything kept, nothing changed) and the wait per snapshot (everything changed)."""
    k = Kernel()
    rows: list[dict] = []
    extra: dict = {}
    try:
        run(k, "%load_ext jupyter_hvd\n%config HvdPool.live_view = 'off'\n%hvd_start -np 2")
        params = int(re.search(r"params (\d+)", run(k, SETUP.format(hidden=hidden))).group(1))
        rows.append({"what": "model", "value": f"{params / 1e6:.1f} M parameters + Adam, 2 ranks"})
        rows += end_of_cell_cost(k)
        number, copies, writes = 0, [], []
        for _ in range(args.rounds):
            run(k, "%%hvd\nopt.zero_grad(); torch.nn.functional.mse_loss(model(x), y).backward(); opt.step()")
            number, copy_s, write_s, size = newest_snapshot(k, number)
            copies.append(copy_s)
            writes.append(write_s)
        rows += [
            {"what": f"snapshot {size}: training waits, median s", "value": f"{statistics.median(copies):.3f}"},
            {"what": "  the first (its staging buffers are new), s", "value": f"{copies[0]:.3f}"},
            {"what": "  the slowest after the first, s", "value": f"{max(copies[1:] or copies):.3f}"},
            {"what": "snapshot: written in the background, median s", "value": f"{statistics.median(writes):.3f}"},
        ]
        extra.update(copies=copies, writes=writes)
        run(k, "%hvd_stop")
    finally:
        k.shutdown()
    report("keep_snapshots", rows, ["what", "value"], extra)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", type=float, default=25.0, help="millions of model parameters (about)")
    parser.add_argument("--window", type=float, default=60.0, help="seconds of training per measured window")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--fsdp", action="store_true", help="an FSDP2 model instead (the snapshot and restore only)")
    parser.add_argument("--snapshots", action="store_true", help="only the end-of-cell check and the wait per snapshot")
    args = parser.parse_args()
    setup_env()
    hidden = int((args.params * 1e6 / 1.5) ** 0.5)  # hidden^2 + hidden^2/2 weights
    if args.fsdp:
        fsdp(args, hidden)
        return
    if args.snapshots:
        snapshots(args, hidden)
        return
    k = Kernel()
    rows = []
    extra: dict = {}
    try:
        t0 = time.monotonic()
        run(k, "%load_ext jupyter_hvd\n%config HvdPool.live_view = 'off'\n%hvd_start -np 2")
        start_s = time.monotonic() - t0
        params = int(re.search(r"params (\d+)", run(k, SETUP.format(hidden=hidden))).group(1))
        run(k, "%hvd_keep model opt steps")
        rates: dict[str, list[float]] = {"no commit": [], "commit every 30 s": []}
        for _ in range(args.rounds):
            for name, every in (("no commit", 0), ("commit every 30 s", 30)):
                out = run(k, TRAIN.format(every=every, window=args.window))
                rates[name].append(float(re.search(r"RATE (\S+)", out).group(1)))
        listing = run(k, "%hvd_keep")
        copy_s = float(re.search(r"training waited (\S+) s", listing).group(1))
        write_s = float(re.search(r"in the background in (\S+) s", listing).group(1))
        size = re.search(r"ago, (\S+ \S+) \(", listing).group(1)
        base = statistics.median(rates["no commit"])
        with_commit = statistics.median(rates["commit every 30 s"])
        rows += [
            {"what": "model", "value": f"{params / 1e6:.1f} M parameters + Adam, snapshot {size}"},
            {"what": "snapshot: the training thread waits (each rank's copy)", "value": f"{copy_s:.2f} s"},
            {"what": "snapshot: written in the background", "value": f"{write_s:.2f} s"},
            {"what": "steps/s without commit (median of rounds)", "value": f"{base:.3f}"},
            {"what": "steps/s with commit() every 30 s", "value": f"{with_commit:.3f}"},
            {"what": "throughput with commit / without", "value": f"{with_commit / base:.3f}"},
        ]
        extra["rates"] = rates
        rows += end_of_cell_cost(k)
        rows += restore_memory(k)
        # Crash to trained again: kill rank 1 a few seconds into training.
        run(k, "%%hvd\nimport os\nprint('PID', os.getpid())")
        pids = k.run("%%hvd --ranks all\nimport os\nprint('PID', os.getpid())").stdout
        rank1 = int(re.findall(r"\[rank 1\] PID (\d+)", pids)[0])
        import os
        import signal
        import threading

        killed: list[float] = []

        def kill_later(_res: object) -> None:
            def later() -> None:
                time.sleep(5)
                killed.append(time.monotonic())
                os.kill(rank1, signal.SIGKILL)

            threading.Thread(target=later, daemon=True).start()

        crashed = k.run(TRAIN.format(every=0, window=60), timeout=300, on_start=kill_later)
        back = re.search(r"The pool was restarted in (\S+) s: (.*)", crashed.error_text)
        t_first = time.monotonic()
        run(k, "%%hvd\nopt.zero_grad(); torch.nn.functional.mse_loss(model(x), y).backward(); opt.step()")
        trained_again = time.monotonic() - killed[0]
        rows += [
            {"what": "plain %hvd_start -np 2", "value": f"{start_s:.1f} s"},
            {"what": "crash (SIGKILL) to trained again", "value": f"{trained_again:.1f} s"},
            {"what": "  of which restart + replay + restore", "value": f"{back.group(1) if back else '?'} s"},
            {"what": "  of which the next cell's first step", "value": f"{time.monotonic() - t_first:.1f} s"},
        ]
        extra["came_back"] = back.group(2) if back else crashed.error_text[-500:]
        # Without the restore: a plain start, the setup cell again and a first step (and the training is lost).
        run(k, "%hvd_stop")
        t0 = time.monotonic()
        run(k, "%hvd_start -np 2")
        run(k, SETUP.format(hidden=hidden))
        run(k, "%%hvd\nopt.zero_grad(); torch.nn.functional.mse_loss(model(x), y).backward(); opt.step()")
        rows.append(
            {
                "what": "plain start + the setup cell + a first step (nothing restored)",
                "value": f"{time.monotonic() - t0:.1f} s",
            }
        )
        run(k, "%hvd_stop")
    finally:
        k.shutdown()
    report("keep", rows, ["what", "value"], extra)


if __name__ == "__main__":
    main()
