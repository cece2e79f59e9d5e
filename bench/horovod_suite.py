"""Horovod's own PyTorch tests (test/parallel/test_torch.py of Horovod 0.28.1, written by Horovod's authors) on 2 CPU
ranks: under plain mpirun, and by pytest.main() inside a %%hvd cell of a pool, so a cell is measured against what a
script under mpirun gets.

    python bench/horovod_suite.py --tests DIR

DIR is the test/ folder of Horovod 0.28.1's sources (`git clone --branch v0.28.1 https://github.com/horovod/horovod`,
then DIR is horovod/test); the sources on PyPI leave the tests out. Horovod's test helpers import the `mock` package:
a stand-in for it (unittest.mock) is put on their path. Prints passed/failed/skipped per place and rank, the tests that
failed, and writes bench/results/horovod_suite.json.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import VENV_BIN, report, setup_env

from jupyter_hvd.testing import Kernel

PYTEST_ARGS = ["test_torch.py", "-q", "-p", "no:cacheprovider", "-rf", "--color=no"]


def counts(text: str) -> dict[str, int]:
    """passed/failed/skipped/errors of pytest's last summary line in `text`."""
    found = {"passed": 0, "failed": 0, "skipped": 0, "errors": 0}
    summaries = [ln for ln in text.splitlines() if re.search(r"\d+ (passed|failed)", ln)]
    for number, word in re.findall(r"(\d+) (passed|failed|skipped|errors?)", summaries[-1] if summaries else ""):
        found["errors" if word.startswith("error") else word] = int(number)
    return found


def by_rank(text: str) -> dict[int, str]:
    """What each rank printed, from `[rank N] ` prefixed lines (a cell with --ranks all, or mpirun --tag-output)."""
    out: dict[int, list[str]] = {}
    for line in text.splitlines():
        match = re.match(r"\[(?:rank |1,)(\d+)\](?:<stdout>:)?\s?(.*)", line)
        if match:
            out.setdefault(int(match.group(1)), []).append(match.group(2))
    return {rank: "\n".join(lines) for rank, lines in out.items()}


def failed_tests(text: str) -> list[str]:
    return sorted(set(re.findall(r"FAILED \S+::(\w+)", text)))


def under_mpirun(parallel: Path, shim: str) -> tuple[dict[int, str], float]:
    env = {**os.environ, "PYTHONPATH": shim}
    command = [f"{VENV_BIN}/mpirun", "-np", "2", "--bind-to", "none", "--tag-output", "-x", "PYTHONPATH"]
    t0 = time.monotonic()
    out = subprocess.run(
        [*command, sys.executable, "-m", "pytest", *PYTEST_ARGS],
        cwd=parallel,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    return by_rank(out.stdout), time.monotonic() - t0


def in_a_cell(parallel: Path, shim: str, start: str) -> tuple[dict[int, str], float]:
    k = Kernel()
    try:
        k.run("%load_ext jupyter_hvd\n%config HvdPool.live_view = 'off'")
        r = k.run(f"%hvd_start -np 2 {start}", timeout=300)
        assert r.status == "ok", r.error_text
        cell = (
            f"%%hvd --ranks all --log-lines 100000\nimport os, sys, pytest\nos.chdir({str(parallel)!r})\n"
            f"sys.path.insert(0, {shim!r})\nprint('EXIT', pytest.main({PYTEST_ARGS!r}))"
        )
        t0 = time.monotonic()
        r = k.run(cell, timeout=1800)
        seconds = time.monotonic() - t0
        after = k.run("%%hvd\nprint('after', hvd.allreduce(torch.ones(1), op=hvd.Sum, name='after').item())")
        assert after.status == "ok" and "after 2.0" in after.stdout, "the pool did not survive the suite"
        return by_rank(r.stdout), seconds
    finally:
        k.run("%hvd_stop", timeout=60)
        k.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", required=True, type=Path, help="Horovod 0.28.1's test/ folder")
    args = parser.parse_args()
    setup_env()
    parallel = args.tests.resolve() / "parallel"
    if not (parallel / "test_torch.py").exists():
        sys.exit(f"{parallel / 'test_torch.py'} is missing: --tests names Horovod 0.28.1's test/ folder")
    shim = tempfile.mkdtemp(prefix="horovod-suite-")
    Path(shim, "mock.py").write_text("from unittest.mock import *  # noqa: F403  (Horovod's tests import mock)\n")
    places = {
        "plain mpirun -np 2": lambda: under_mpirun(parallel, shim),
        "%%hvd cell, %hvd_start -np 2": lambda: in_a_cell(parallel, shim, ""),
        "%%hvd cell, --env HOROVOD_DYNAMIC_PROCESS_SETS=1": lambda: in_a_cell(
            parallel, shim, "--env HOROVOD_DYNAMIC_PROCESS_SETS=1"
        ),
    }
    rows, failures = [], {}
    for place, run in places.items():
        ranks, seconds = run()
        for rank in sorted(ranks):
            failures[f"{place}, rank {rank}"] = failed_tests(ranks[rank])
            rows.append(
                {"where": place, "rank": rank, **counts(ranks[rank]), "seconds": round(seconds, 1)}
                | {"failed tests": ", ".join(failed_tests(ranks[rank]))}
            )
    columns = ["where", "rank", "passed", "failed", "skipped", "errors", "seconds", "failed tests"]
    report("horovod_suite", rows, columns, {"failures": failures})


if __name__ == "__main__":
    main()
