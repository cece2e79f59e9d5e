"""The front ends' unit tests (vitest): the sidebar's model and rendering, the live view's plot and log.

Run from pytest so that `scripts/test.sh` and CI count them with everything else: each workspace of the root's
npm workspace (package.json) by its own `npm test`, as the root's `npm test` runs them all.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("workspace", ["labextension", "widgets-js"])
def test_vitest_suite(workspace: str) -> None:
    if not shutil.which("npm") or not (ROOT / "node_modules" / "vitest").is_dir():
        pytest.fail(
            "the JS unit tests need node 20 with npm and the workspace's dev dependencies: npm ci (in the repository "
            "root; bash scripts/setup.sh --with-test-tools does it)",
            pytrace=False,
        )
    out = subprocess.run(
        ["npm", "test", f"--workspace={workspace}"], cwd=ROOT, capture_output=True, text=True, timeout=240
    )
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert " passed" in out.stdout and " failed" not in out.stdout, out.stdout[-2000:]
