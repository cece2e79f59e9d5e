"""Horovod's knobs that %hvd_start exposes, measured side by side: which setting trains small and large models fastest.

    python bench/knobs.py [--rounds 4] [--settings "" "--cycle-time 0.5" "--fusion-mb 16" ...]

One kernel with a 2-rank pool per setting; all stay alive for the whole run and take turns, window by window, the
others suspended (bench/common.py). A window is one %%hvd cell that times the small CNN of bench/workload.py, a large
MLP (21 M parameters: 84 MB of gradients, more than Horovod's 64 MB fusion buffer), and allreduce latency at 4 KB and
16 MB. A ratio is the median of per-round ratios against Horovod's defaults (> 1: faster than the default).
On CPU ranks Horovod's only working tensor ops are MPI's (Gloo's crash under the MPI controller, and `%hvd_start`
refuses them), so `--ops` has nothing to compare here; on GPUs it picks NCCL or MPI (not measured yet).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import workload
from common import engines_of, pause, report, result_of, resume, setup_env, summary

from jupyter_hvd.testing import Kernel

# Horovod's defaults (1 ms cycle, 64 MB fusion buffer), then each knob below and above them.
SETTINGS = ["", "--cycle-time 0.5", "--cycle-time 2", "--cycle-time 5", "--fusion-mb 16", "--fusion-mb 128"]

LARGE_SETUP = """
big = nn.Sequential(nn.Linear(2048, 4096), nn.ReLU(), nn.Linear(4096, 2048), nn.ReLU(), nn.Linear(2048, 2048))
big = big.to(device)
big_opt = hvd.DistributedOptimizer(torch.optim.SGD(big.parameters(), lr=0.001),
                                   named_parameters=[("big." + n, p) for n, p in big.named_parameters()])
hvd.broadcast_parameters(big.state_dict(), root_rank=0)
big_x, big_y = torch.randn(16, 2048, generator=g).to(device), torch.randn(16, 2048, generator=g).to(device)
t4k, t16m = torch.ones(1 << 10, device=device), torch.ones(4 << 20, device=device)
"""

WINDOW = """
def timed(fn, n):
    for i in range(2):
        fn(i)
    hvd.allreduce(torch.zeros(1), name="knobs.start")
    t0 = time.perf_counter()
    for i in range(n):
        fn(i)
    hvd.allreduce(torch.zeros(1), name="knobs.end")
    return (time.perf_counter() - t0) / n

def small_step(i):
    x, y = data[i % len(data)]
    opt.zero_grad()
    F.cross_entropy(model(x), y).backward()
    opt.step()

def large_step(i):
    big_opt.zero_grad()
    F.mse_loss(big(big_x), big_y).backward()
    big_opt.step()

bench_result = {
    "small_samples_per_s": batch * size / timed(small_step, SMALL_STEPS),
    "large_samples_per_s": len(big_x) * size / timed(large_step, LARGE_STEPS),
    "allreduce_4KB_ms": timed(lambda i: hvd.allreduce(t4k, name="knobs.4k"), 200) * 1e3,
    "allreduce_16MB_ms": timed(lambda i: hvd.allreduce(t16m, name="knobs.16m"), 20) * 1e3,
}
if rank == 0:
    print("RESULT " + json.dumps(bench_result), flush=True)
"""

MEASURES = ["small_samples_per_s", "large_samples_per_s", "allreduce_4KB_ms", "allreduce_16MB_ms"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4, help="windows of each setting, interleaved")
    parser.add_argument("--small-steps", type=int, default=30)
    parser.add_argument("--large-steps", type=int, default=8)
    parser.add_argument("--settings", nargs="+", default=SETTINGS, help="%%hvd_start options; the first is the base")
    args = parser.parse_args()
    setup_env()
    window = WINDOW.replace("SMALL_STEPS", str(args.small_steps)).replace("LARGE_STEPS", str(args.large_steps))
    kernels: dict[str, Kernel] = {}
    results: dict[str, list[dict]] = {s: [] for s in args.settings}
    try:
        for setting in args.settings:
            k = kernels[setting] = Kernel()
            k.run("%load_ext jupyter_hvd")
            r = k.run(f"%hvd_start -np 2 {setting}", timeout=300)
            assert r.status == "ok", r.stdout + r.error_text
            r = k.run("%%hvd --no-plot\n" + workload.SETUP + LARGE_SETUP, timeout=300)
            assert r.status == "ok", r.error_text
            pause(engines_of(k.pid))
        for _ in range(args.rounds):
            for setting, k in kernels.items():
                engines = engines_of(k.pid)
                resume(engines)
                r = k.run("%%hvd --no-plot\n" + window, timeout=600)
                assert r.status == "ok", r.error_text
                results[setting].append(result_of(r.stdout))
                pause(engines)
    finally:
        for k in kernels.values():
            resume(engines_of(k.pid))
            k.run("%hvd_stop", timeout=60)
            k.shutdown()
    base = results[args.settings[0]]
    rows = []
    for setting, windows in results.items():
        row: dict = {"setting": setting or "Horovod's defaults (1 ms, 64 MB)"}
        for m in MEASURES:
            row[m] = summary([w[m] for w in windows])["median"]
            # Ratios say "faster than the base" above 1: samples/s divide as they are, times the other way round.
            per_round = [
                (w[m] / b[m]) if m.endswith("_per_s") else (b[m] / w[m]) for w, b in zip(windows, base, strict=True)
            ]
            row[m.split("_")[0] + "_" + m.split("_")[1] + " vs base"] = summary(per_round)["median"]
        rows.append(row)
    report("knobs", rows, list(rows[0]), {"rounds": args.rounds, "windows": results})


if __name__ == "__main__":
    main()
