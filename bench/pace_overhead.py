"""What timing each training step costs (engine/cell/pace.py): the wrap around Horovod's synchronize, per step.

    python bench/pace_overhead.py [--calls 200000]

In one process, without MPI: a no-op stands in for Horovod's synchronize, and the wrapped no-op is called as a
training loop calls it (one blocking wait per step, or one optimizer synchronize with 8 per-tensor waits inside).
The difference per step is what the straggler check adds to every step; it is set against a step of
bench/workload.py's small CNN on 2 CPU ranks (measured here as well, one rank, no allreduce: a lower bound).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import report, setup_env, summary

from jupyter_hvd.engine.cell import pace


def per_call(fn, calls: int) -> float:  # type: ignore[no-untyped-def]
    t0 = time.perf_counter()
    for _ in range(calls):
        fn(None)
    return (time.perf_counter() - t0) / calls


class _Optimizer:
    def __init__(self, wait, tensors: int) -> None:  # type: ignore[no-untyped-def]
        self.wait, self.tensors = wait, tensors

    def synchronize(self) -> None:
        for _ in range(self.tensors):
            self.wait(None)


def cnn_step_s() -> float:
    import torch
    import torch.nn.functional as F
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(32, 64, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(64 * 8 * 8, 128),
        nn.ReLU(),
        nn.Linear(128, 10),
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(64, 1, 16, 16), torch.randint(0, 10, (64,))
    times = []
    for i in range(60):
        t0 = time.perf_counter()
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
        if i >= 10:
            times.append(time.perf_counter() - t0)
    return summary(times)["median"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    setup_env()
    import types

    from jupyter_hvd.engine import outbox

    outbox.channel = types.SimpleNamespace(cell=1)  # as inside a running cell (the engine's channel says which)
    pace._send = lambda summary: None  # the real one appends to report()'s list, once every SEND_EVERY_S

    def bare(handle: object) -> None:
        return None

    wrapped = pace._timed_wait(bare)
    plain_opt = _Optimizer(bare, 8)
    timed_opt_sync = pace._timed_optimizer_sync(_Optimizer.synchronize)
    timed_opt = _Optimizer(wrapped, 8)
    rows = []
    for name, base, timed, calls in (
        ("hvd.allreduce (1 wait per step)", bare, wrapped, args.calls),
        (
            "optimizer.step (8 tensor waits)",
            lambda _: plain_opt.synchronize(),
            lambda _: timed_opt_sync(timed_opt),
            args.calls // 8,
        ),
    ):
        diffs = []
        for _ in range(args.repeats):
            diffs.append((per_call(timed, calls) - per_call(base, calls)) * 1e6)
        rows.append({"case": name, "overhead_us_per_step": summary(diffs)["median"], "repeats": args.repeats})
    step = cnn_step_s()
    for row in rows:
        row["cnn_step_ms"] = step * 1e3
        row["share_of_step_pct"] = row["overhead_us_per_step"] / (step * 1e6) * 100
    report("pace_overhead", rows, ["case", "overhead_us_per_step", "cnn_step_ms", "share_of_step_pct"])


if __name__ == "__main__":
    main()
