"""The front ends' unit tests (vitest): the sidebar's model and rendering, the live view's plot and log.

Run from pytest so that `scripts/test.sh` and CI count them with everything else.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("package", ["labextension", "widgets-js"])
def test_vitest_suite(package: str) -> None:
    where = ROOT / package
    vitest = where / "node_modules" / "vitest" / "vitest.mjs"
    if not shutil.which("node") or not vitest.exists():
        pytest.skip(f"needs node and {package}'s dev dependencies: cd {package} && npm install")
    out = subprocess.run(["node", str(vitest), "run"], cwd=where, capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert " passed" in out.stdout and " failed" not in out.stdout, out.stdout[-2000:]
