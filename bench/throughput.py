"""Training throughput: the same loop as a %%hvd cell (live view on) and as a script under mpirun, interleaved.

python bench/throughput.py [--rounds 10] [--steps 40] [--view widget|text|off]

Both sets of ranks stay alive and take turns: each timed window of one runs while the other is suspended.
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


def ranks_of(launcher: subprocess.Popen) -> list[psutil.Process]:
    """The Python processes `mpirun` started."""
    return [p for p in psutil.Process(launcher.pid).children(recursive=True) if p.name().startswith("python")]


def pause(procs: list[psutil.Process]) -> None:
    for p in procs:
        p.suspend()


def resume(procs: list[psutil.Process]) -> None:
    for p in procs:
        p.resume()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10, help="timed windows of each, interleaved A B A B")
    parser.add_argument("--steps", type=int, default=40, help="training steps per timed window")
    parser.add_argument("--print-every", type=int, default=1, help="rank 0 prints the loss every N steps")
    parser.add_argument("--view", default="widget", choices=["widget", "text", "off"], help="the cell's live view")
    args = parser.parse_args()
    setup_env()
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(workload.script(args.steps, args.print_every, args.rounds))
    # The live view widget, as JupyterLab and Notebook 7 get it (this client would get the text view otherwise).
    k = Kernel(extra_env={"JUPYTER_HVD_LIVE_VIEW": args.view})
    scripts = [Script(name, mca, f.name) for name, mca in SCRIPTS]
    cell_rates: list[float] = []
    try:
        k.run("%load_ext jupyter_hvd")
        assert k.run("%hvd_start -np 2", timeout=300).status == "ok"
        assert k.run("%%hvd\n" + workload.SETUP, timeout=300).status == "ok"
        engines = engines_of(k.pid)
        # Every set of ranks stays alive for the whole run, each suspended while another is timed, so machine
        # drift (this VM's speed varies by 20% within minutes) falls on all alike.
        pause(engines)
        for script in scripts:
            script.start()
        for _ in range(args.rounds):
            for script in scripts:
                script.window()
            resume(engines)
            r = k.run("%%hvd\n" + workload.window(args.steps, args.print_every), timeout=600)
            assert r.status == "ok", r.error_text
            # Rank 0's output went into the widget's log: fetch the result itself.
            r = k.run("%hvd_pull bench_result\nimport json\nprint('RESULT ' + json.dumps(bench_result))")
            cell_rates.append(result_of(r.stdout)["samples_per_s"])
            pause(engines)
        for script in scripts:
            script.finish()
        resume(engines)
        k.run("%hvd_stop")
    finally:
        for script in scripts:
            script.kill()
        k.shutdown()
    c = summary(cell_rates)
    rows = [{"run": f"%%hvd cell ({args.view} view)", "samples_per_s": c["median"], "min": c["min"], "max": c["max"]}]
    extra: dict = {"cell": cell_rates, "steps": args.steps, "print_every": args.print_every}
    for script in scripts:
        s = summary(script.rates)
        rows.append({"run": script.name, "samples_per_s": s["median"], "min": s["min"], "max": s["max"]})
    for script in scripts:
        q = summary([a / b for a, b in zip(cell_rates, script.rates, strict=True)])
        rows.append(
            {
                "run": f"ratio cell / {script.short}, per round",
                **{k: q[k] for k in ("min", "max")},
                "samples_per_s": q["median"],
            }
        )
        extra[script.short] = script.rates
    report("throughput", rows, ["run", "samples_per_s", "min", "max"], extra)


# The Horovod way with Open MPI's defaults, and with the one MPI setting pools change (jupyter_hvd/kernel/pool.py).
SCRIPTS = [
    ("mpirun -np 2 python script.py", []),
    ("the same, --mca mpi_yield_when_idle 1", ["--mca", "mpi_yield_when_idle", "1"]),
]


class Script:
    """The workload under `mpirun -np 2`, one timed window per `window()` call."""

    def __init__(self, name: str, mca: list[str], path: str) -> None:
        self.name, self.mca, self.path = name, mca, path
        self.short = "script (yield)" if mca else "script"
        self.rates: list[float] = []
        self.launcher: subprocess.Popen | None = None
        self.ranks: list[psutil.Process] = []

    def start(self) -> None:
        cmd = ["mpirun", "-np", "2", "--bind-to", "none", *self.mca, sys.executable, self.path]
        self.launcher = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def window(self) -> None:
        assert self.launcher is not None and self.launcher.stdin is not None
        resume(self.ranks)
        self.launcher.stdin.write("go\n")
        self.launcher.stdin.flush()
        self.rates.append(result_of(_until_result(self.launcher.stdout))["samples_per_s"])
        self.ranks = self.ranks or ranks_of(self.launcher)
        pause(self.ranks)

    def finish(self) -> None:
        assert self.launcher is not None and self.launcher.stdin is not None
        resume(self.ranks)
        self.launcher.stdin.close()
        self.launcher.wait(timeout=60)

    def kill(self) -> None:
        if self.launcher is not None and self.launcher.poll() is None:
            resume(self.ranks)
            self.launcher.kill()


def _until_result(stream) -> str:
    """Lines from the script's stdout up to and including its next RESULT line."""
    lines = []
    for line in stream:
        lines.append(line)
        if line.startswith("RESULT "):
            return "".join(lines)
    raise RuntimeError("the mpirun script ended before its RESULT line:\n" + "".join(lines[-20:]))


if __name__ == "__main__":
    main()
