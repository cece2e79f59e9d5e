"""Time to a training cell's first line on a fresh pool: the cell builds a CNN, its torch.optim optimizer wrapped in
hvd.DistributedOptimizer, broadcasts parameters and optimizer state, trains one step and prints its loss.

    python bench/first_line.py [--trials 3] [--pause 5] [--label NAME]

Each trial: a fresh kernel, `%hvd_start -np 2` and the cell at once (as "Run All" sends it); another fresh kernel,
`%hvd_start -np 2`, a pause as a person takes, and the cell. The same cell's first step in a script under mpirun is
the reference. Prints a table and writes bench/results/first_line.json (with --label, first_line_<label>.json, so the
same script run by another checkout's venv gives the figures before a change).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import VENV_BIN, report, setup_env

from jupyter_hvd.testing import Kernel

TRAIN = """
import json, time
T = {"start": time.perf_counter()}
import torch.nn as nn, torch.nn.functional as F
model = nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(),
                      nn.MaxPool2d(2), nn.Flatten(), nn.Linear(64 * 8 * 8, 128), nn.ReLU(), nn.Linear(128, 10))
sgd = torch.optim.SGD(model.parameters(), lr=0.01 * size, momentum=0.9)
T["optimizer"] = time.perf_counter()
opt = hvd.DistributedOptimizer(sgd, named_parameters=model.named_parameters())
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(opt, root_rank=0)
T["broadcasts"] = time.perf_counter()
x, y = torch.randn(64, 1, 16, 16), torch.randint(0, 10, (64,))
opt.zero_grad()
loss = F.cross_entropy(model(x), y)
loss.backward()
opt.step()
T["step"] = time.perf_counter()
print(f"step 0 loss={loss.item():.4f}", flush=True)
if rank == 0:
    print("RESULT " + json.dumps({k: (v - T["start"]) * 1000 for k, v in T.items()}), flush=True)
"""

SCRIPT = (
    "import time\nt0 = time.perf_counter()\nfrom mpi4py import MPI\nimport torch\nimport horovod.torch as hvd\n"
    "hvd.init()\nrank, size = hvd.rank(), hvd.size()\nstarted = time.perf_counter() - t0\n" + TRAIN
)


def first_line(k: Kernel) -> dict[str, float]:
    """Send the training cell; seconds to its first line and to its end, and its phases (ms, rank 0)."""
    r = k.run("%%hvd\n" + TRAIN, timeout=300)
    assert r.status == "ok", r.error_text
    first = next(t for t, name, text in r.streams if name == "stdout" and "step 0" in text)
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("RESULT "))
    return {"first_line_s": first - r.started, "cell_s": r.finished - r.started, **json.loads(line[7:])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument(
        "--pause", type=float, default=5.0, help="seconds between %%hvd_start and the cell in the second pool"
    )
    parser.add_argument("--label", default="", help="a name for this checkout's figures")
    args = parser.parse_args()
    setup_env()
    trials = []
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(SCRIPT)
    for _ in range(args.trials):
        trial: dict = {}
        for case, pause in (("at_once", 0.0), ("after_pause", args.pause)):
            k = Kernel()
            try:
                k.run("%load_ext jupyter_hvd\n%config HvdPool.live_view = 'off'")
                t0 = time.monotonic()
                assert k.run("%hvd_start -np 2", timeout=300).status == "ok"
                trial.setdefault("start_s", time.monotonic() - t0)
                time.sleep(pause)
                trial[case] = first_line(k)
            finally:
                k.run("%hvd_stop", timeout=60)
                k.shutdown()
        t0 = time.monotonic()
        out = subprocess.run(
            [f"{VENV_BIN}/mpirun", "-np", "2", "--bind-to", "none", sys.executable, f.name],
            capture_output=True,
            text=True,
            timeout=300,
        )
        line = next(ln for ln in out.stdout.splitlines() if ln.startswith("RESULT "))
        trial["script"] = json.loads(line[7:])
        trial["script_s"] = time.monotonic() - t0
        trials.append(trial)
        print(json.dumps(trial), flush=True)

    def median(get) -> float:
        return round(statistics.median(get(t) for t in trials), 3)

    rows = [
        {"what": "%hvd_start -np 2, s", "value": median(lambda t: t["start_s"])},
        {
            "what": "the cell at once after %hvd_start: first line, s",
            "value": median(lambda t: t["at_once"]["first_line_s"]),
        },
        {"what": "  of which the torch.optim optimizer, ms", "value": median(lambda t: t["at_once"]["optimizer"])},
        {
            "what": "  of which the first step, ms",
            "value": median(lambda t: t["at_once"]["step"] - t["at_once"]["broadcasts"]),
        },
        {
            "what": f"the cell {args.pause:g} s after %hvd_start: first line, s",
            "value": median(lambda t: t["after_pause"]["first_line_s"]),
        },
        {"what": "  of which the torch.optim optimizer, ms", "value": median(lambda t: t["after_pause"]["optimizer"])},
        {
            "what": "  of which the first step, ms",
            "value": median(lambda t: t["after_pause"]["step"] - t["after_pause"]["broadcasts"]),
        },
        {
            "what": "script under mpirun: its cell part to the first step, ms",
            "value": median(lambda t: t["script"]["step"]),
        },
        {"what": "  of which the torch.optim optimizer, ms", "value": median(lambda t: t["script"]["optimizer"])},
    ]
    report(f"first_line_{args.label}" if args.label else "first_line", rows, ["what", "value"], {"trials": trials})


if __name__ == "__main__":
    main()
