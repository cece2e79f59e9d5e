"""Run tests N times and print each test's pass rate, so a flaky test is found by its rate, not by luck.

    .venv/bin/python scripts/repeat_tests.py -n 20 tests/test_where_and_debug.py
    .venv/bin/python scripts/repeat_tests.py -n 5 --load 2 tests/test_keep_everyday.py -k differs
    .venv/bin/python scripts/repeat_tests.py -n 3 --json rates.json          # the whole suite, three times

Each round is a pytest process of its own (arguments after the options go to pytest as they are); outcomes are read
from pytest's JUnit XML. `--load K` runs K processes that keep a core busy beside the tests (the suite must not depend
on a quiet machine). The table lists every test that did not pass every time first, with its first failure's message.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Rate:
    """How one test fared over the rounds."""

    passed: int = 0
    failed: int = 0
    skipped: int = 0
    seconds: float = 0.0
    first_failure: str = ""
    failed_rounds: list[int] = field(default_factory=list)

    @property
    def runs(self) -> int:
        return self.passed + self.failed


def _burn() -> None:
    """Keep one core busy until killed."""
    x = 0
    while True:
        x = (x * 1103515245 + 12345) % 2**31


def _outcomes(report: Path) -> dict[str, tuple[str, float, str]]:
    """test id -> (passed | failed | skipped, seconds, message) from a JUnit XML report."""
    out: dict[str, tuple[str, float, str]] = {}
    if not report.exists():
        return out
    for case in ET.parse(report).getroot().iter("testcase"):
        classname = case.get("classname", "")
        test = f"{classname.replace('.', '/')}.py::{case.get('name')}" if classname else str(case.get("name"))
        seconds = float(case.get("time") or 0.0)
        failure = case.find("failure")
        if failure is None:
            failure = case.find("error")
        if failure is not None:
            message = (failure.get("message") or failure.text or "").strip().splitlines()
            out[test] = ("failed", seconds, message[0][:200] if message else "")
        elif case.find("skipped") is not None:
            out[test] = ("skipped", seconds, "")
        else:
            out[test] = ("passed", seconds, "")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", "--rounds", type=int, default=10, help="how many times to run the tests (default 10)")
    parser.add_argument("--load", type=int, default=0, metavar="K", help="busy processes beside the tests")
    parser.add_argument("--json", type=Path, default=None, help="write the rates to this file too")
    parser.add_argument("--stop-on-failure", action="store_true", help="stop after the first round with a failure")
    parser.add_argument("--logs", type=Path, default=None, help="keep each failed round's pytest output in this folder")
    args, pytest_args = parser.parse_known_args()
    env = {**os.environ, "PATH": f"{ROOT / '.venv' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
    burners = [multiprocessing.Process(target=_burn, daemon=True) for _ in range(args.load)]
    for burner in burners:
        burner.start()
    rates: dict[str, Rate] = {}
    rounds: list[dict[str, object]] = []
    try:
        with tempfile.TemporaryDirectory(prefix="repeat-tests-") as tmp:
            for i in range(1, args.rounds + 1):
                report = Path(tmp) / f"round-{i}.xml"
                t0 = time.monotonic()
                proc = subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "pytest",
                        "-q",
                        "-p",
                        "no:cacheprovider",
                        f"--junitxml={report}",
                        *pytest_args,
                    ],
                    cwd=ROOT,
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                )
                seconds = time.monotonic() - t0
                outcomes = _outcomes(report)
                for test, (outcome, took, message) in outcomes.items():
                    rate = rates.setdefault(test, Rate())
                    rate.seconds += took
                    if outcome == "passed":
                        rate.passed += 1
                    elif outcome == "skipped":
                        rate.skipped += 1
                    else:
                        rate.failed += 1
                        rate.failed_rounds.append(i)
                        rate.first_failure = rate.first_failure or message
                failed = sorted(t for t, (o, _, _) in outcomes.items() if o == "failed")
                if args.logs is not None and (failed or proc.returncode not in (0, 5)):
                    args.logs.mkdir(parents=True, exist_ok=True)
                    (args.logs / f"round-{i}.log").write_text(proc.stdout)
                rounds.append({"round": i, "exit": proc.returncode, "seconds": round(seconds, 1), "failed": failed})
                print(
                    f"round {i}/{args.rounds}: exit {proc.returncode}, {len(outcomes)} tests, {len(failed)} failed, "
                    f"{seconds:.0f} s" + (f": {', '.join(failed)}" if failed else ""),
                    flush=True,
                )
                if not outcomes:
                    print("  pytest reported no test (a collection error?): run it once by hand", flush=True)
                if failed and args.stop_on_failure:
                    break
    finally:
        for burner in burners:
            burner.kill()
    ordered = sorted(rates.items(), key=lambda item: (item[1].failed == 0, item[0]))
    print(f"\n{'pass rate':>10}  {'runs':>4}  {'mean s':>7}  test")
    for test, rate in ordered:
        if not rate.runs:
            continue
        share = f"{rate.passed}/{rate.runs}"
        print(f"{share:>10}  {rate.runs:>4}  {rate.seconds / max(rate.runs, 1):7.1f}  {test}")
        if rate.failed:
            print(f"{'':>25}first failure (rounds {rate.failed_rounds}): {rate.first_failure}")
    flaky = sum(1 for r in rates.values() if r.failed)
    print(f"\n{len(rates)} tests, {flaky} failed at least once, over {len(rounds)} rounds (load: {args.load} busy)")
    if args.json is not None:
        args.json.write_text(
            json.dumps(
                {
                    "pytest_args": pytest_args,
                    "load": args.load,
                    "rounds": rounds,
                    "rates": {t: {**r.__dict__, "runs": r.runs} for t, r in rates.items()},
                },
                indent=1,
            )
        )
    return 1 if flaky else 0


if __name__ == "__main__":
    sys.exit(main())
