"""What a resize costs against starting the pool again by hand (CPU ranks).

    python bench/resize.py [--rounds 3] [--params 5]

A 2-rank pool with a setup cell (an MLP of --params million parameters, Adam, StepLR, a DistributedSampler) and the
model and optimizer kept, trained one epoch. Then, per round:
- `%hvd_restart -np 3` (stop, start at 3, the setup replayed, the kept state laid out for 3 ranks) and back with
  `%hvd_restart -np 2`: the time of each, from the magic's start to its end;
- against what a user does without it: `%hvd_stop`, `%hvd_start -np 3` and the setup cell (the weights are lost).

Prints a table and writes bench/results/resize.json.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import report, setup_env

from jupyter_hvd.testing import Kernel

SETUP = """%%hvd --setup
hidden = {hidden}
model = torch.nn.Sequential(torch.nn.Linear(hidden, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 1))
base = torch.optim.Adam(model.parameters(), lr=1e-4 * hvd.size())
sched = torch.optim.lr_scheduler.StepLR(base, step_size=1)
data = torch.utils.data.TensorDataset(torch.randn(64, hidden), torch.randn(64, 1))
sampler = torch.utils.data.distributed.DistributedSampler(data, num_replicas=hvd.size(), rank=hvd.rank())
opt = hvd.DistributedOptimizer(base, named_parameters=model.named_parameters())
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
"""

TRAIN = """%%hvd
for i in sampler:
    x, y = data[i]
    opt.zero_grad(); torch.nn.functional.mse_loss(model(x[None]), y[None]).backward(); opt.step()
sched.step()
"""


def timed(k: Kernel, code: str, timeout: float = 600) -> float:
    t0 = time.perf_counter()
    r = k.run(code, timeout=timeout)
    if r.status != "ok":
        raise RuntimeError(f"{code.splitlines()[0]}: {r.error_text}")
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--params", type=float, default=5.0, help="millions of parameters of the model")
    args = parser.parse_args()
    setup_env()
    hidden = int((args.params * 1e6) ** 0.5)
    setup = SETUP.format(hidden=hidden)
    k = Kernel()
    up, down, by_hand = [], [], []
    try:
        timed(k, "%load_ext jupyter_hvd\n%config HvdPool.live_view = 'off'\n%hvd_start -np 2")
        timed(k, setup)
        timed(k, "%hvd_keep model opt sched")
        timed(k, TRAIN)
        for _ in range(args.rounds):
            up.append(timed(k, "%hvd_restart -np 3"))
            down.append(timed(k, "%hvd_restart -np 2"))
        timed(k, "%hvd_stop")
        for _ in range(args.rounds):
            t = timed(k, "%hvd_start -np 3") + timed(k, setup)
            by_hand.append(t)
            timed(k, "%hvd_stop")
    finally:
        k.shutdown()
    rows = [
        {
            "what": "%hvd_restart -np 3 (setup replayed, model and Adam restored)",
            "s": statistics.median(up),
        },
        {"what": "%hvd_restart -np 2 (3 -> 2 ranks)", "s": statistics.median(down)},
        {"what": "%hvd_stop, %hvd_start -np 3, the setup cell (the weights lost)", "s": statistics.median(by_hand)},
    ]
    extra = {"params_millions": args.params, "rounds": args.rounds, "up": up, "down": down, "by_hand": by_hand}
    report("resize", rows, ["what", "s"], extra)


if __name__ == "__main__":
    main()
