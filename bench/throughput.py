"""Training throughput: the same loop as a %%hvd cell (live view on) and as a script under mpirun, interleaved.

python bench/throughput.py [--rounds 10] [--steps 40] [--view widget|text|off] [--np N] [--ddp]

Both sets of ranks stay alive and take turns: each timed window of one runs while the other is suspended.
Where there are GPUs, both run one rank per GPU (NCCL); elsewhere 2 CPU ranks (MPI). With --ddp: torch's DDP in
the cell (a pool started with --torch-distributed) against the same script under torchrun (Gloo on CPUs).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import workload
from common import SCRIPTS, Script, report, result_of, setup_env, summary, take_turns

from jupyter_hvd.testing import Kernel


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10, help="timed windows of each, interleaved A B A B")
    parser.add_argument("--steps", type=int, default=40, help="training steps per timed window")
    parser.add_argument("--print-every", type=int, default=1, help="rank 0 prints the loss every N steps")
    parser.add_argument("--view", default="widget", choices=["widget", "text", "off"], help="the cell's live view")
    parser.add_argument("--np", type=int, default=None, help="ranks (default: one per GPU, else 2 CPU ranks)")
    parser.add_argument("--start-flags", default="", help="more %%hvd_start flags for the cell's pool")
    parser.add_argument(
        "--ddp", action="store_true", help="torch's DDP on the pool's torch.distributed group, against torchrun"
    )
    args = parser.parse_args()
    setup_env()
    import torch

    np = args.np or (torch.cuda.device_count() if torch.cuda.is_available() else 2)
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        if args.ddp:
            f.write(workload.script_ddp(args.steps, args.print_every, args.rounds))
        else:
            f.write(workload.script(args.steps, args.print_every, args.rounds))
    # The live view widget, as JupyterLab and Notebook 7 get it (this client would get the text view otherwise).
    k = Kernel()
    if args.ddp:
        scripts = [Script(f"torchrun --nproc-per-node {np} script.py", ["torchrun"], f.name, np)]
    else:
        scripts = [Script(name, mca, f.name, np) for name, mca in SCRIPTS]
    setup = workload.SETUP_DDP if args.ddp else workload.SETUP
    train = workload.window_ddp if args.ddp else workload.window
    try:
        k.run(f"%load_ext jupyter_hvd\n%config HvdPool.live_view = {args.view!r}")
        start = f"%hvd_start -np {np} {args.start_flags}" + (" --torch-distributed" if args.ddp else "")
        assert k.run(start, timeout=300).status == "ok"
        assert k.run("%%hvd\n" + setup, timeout=300).status == "ok"

        def cell_window() -> dict:
            r = k.run("%%hvd\n" + train(args.steps, args.print_every), timeout=600)
            assert r.status == "ok", r.error_text
            # Rank 0's output went into the widget's log: fetch the result itself.
            r = k.run("%hvd_pull bench_result\nimport json\nprint('RESULT ' + json.dumps(bench_result))")
            return result_of(r.stdout)

        cell_rates = [w["samples_per_s"] for w in take_turns(k.pid, scripts, args.rounds, cell_window)]
        k.run("%hvd_stop")
    finally:
        for script in scripts:
            script.kill()
        k.shutdown()
    c = summary(cell_rates)
    rows = [{"run": f"%%hvd cell ({args.view} view)", "samples_per_s": c["median"], "min": c["min"], "max": c["max"]}]
    extra: dict = {"cell": cell_rates, "steps": args.steps, "print_every": args.print_every, "np": np}
    for script in scripts:
        s = summary(script.rates())
        rows.append({"run": script.name, "samples_per_s": s["median"], "min": s["min"], "max": s["max"]})
    for script in scripts:
        q = summary([a / b for a, b in zip(cell_rates, script.rates(), strict=True)])
        rows.append(
            {
                "run": f"ratio cell / {script.short}, per round",
                **{k: q[k] for k in ("min", "max")},
                "samples_per_s": q["median"],
            }
        )
        extra[script.short] = script.rates()
    report("throughput_ddp" if args.ddp else "throughput", rows, ["run", "samples_per_s", "min", "max"], extra)


if __name__ == "__main__":
    main()
