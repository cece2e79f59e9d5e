"""Training throughput: the same loop as a %%hvd cell (live view on) and as a script under mpirun, interleaved.

python bench/throughput.py [--rounds 3] [--steps 150]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
import workload
from common import report, setup_env, summary

from jupyter_hvd.testing import Kernel


def engines_of(kernel_pid: int) -> list[psutil.Process]:
    """The pool's engine processes (their environment names the pool, whose id starts with the kernel's pid)."""
    found = []
    for p in psutil.process_iter():
        try:
            if p.environ().get("JUPYTER_HVD_POOL", "").startswith(f"hvd-{kernel_pid}-") and p.name() == "python":
                found.append(p)
        except psutil.Error:
            continue
    return found


def result_of(text: str) -> dict:
    line = next(ln for ln in text.splitlines() if ln.startswith("RESULT "))
    return json.loads(line[len("RESULT ") :])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--print-every", type=int, default=1, help="rank 0 prints the loss every N steps")
    parser.add_argument("--view", default="widget", choices=["widget", "text", "off"], help="the cell's live view")
    args = parser.parse_args()
    setup_env()
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(workload.script(args.steps, args.print_every))
    # The live view widget, as JupyterLab and Notebook 7 get it (this client would get the text view otherwise).
    k = Kernel(extra_env={"JUPYTER_HVD_LIVE_VIEW": args.view})
    cell_rates, script_rates = [], []
    try:
        k.run("%load_ext jupyter_hvd")
        assert k.run("%hvd_start -np 2", timeout=300).status == "ok"
        for _ in range(args.rounds):  # A B A B: both see the same machine state
            r = k.run("%%hvd\n" + workload.cell(args.steps, args.print_every), timeout=600)
            assert r.status == "ok", r.error_text
            # Rank 0's output went into the widget's log: fetch the result itself.
            r = k.run("%hvd_pull bench_result\nimport json\nprint('RESULT ' + json.dumps(bench_result))")
            cell_rates.append(result_of(r.stdout)["samples_per_s"])
            # An idle pool's ranks still spin in Horovod's negotiation (MPI busy-waits): pause them while the
            # script runs, or the script would share the cores with them.
            engines = engines_of(k.pid)
            for p in engines:
                p.suspend()
            try:
                out = subprocess.run(
                    ["mpirun", "-np", "2", "--bind-to", "none", sys.executable, f.name],
                    check=True,
                    capture_output=True,
                    text=True,
                ).stdout
            finally:
                for p in engines:
                    p.resume()
            script_rates.append(result_of(out)["samples_per_s"])
        k.run("%hvd_stop")
    finally:
        k.shutdown()
    c, s = summary(cell_rates), summary(script_rates)
    rows = [
        {"run": f"%%hvd cell ({args.view} view)", "samples_per_s": c["median"], "min": c["min"], "max": c["max"]},
        {"run": "mpirun -np 2 python script.py", "samples_per_s": s["median"], "min": s["min"], "max": s["max"]},
        {"run": "ratio cell / script", "samples_per_s": c["median"] / s["median"]},
    ]
    report("throughput", rows, ["run", "samples_per_s", "min", "max"], {"cell": cell_rates, "script": script_rates})


if __name__ == "__main__":
    main()
