"""The wheel check: the sidebar installs and loads from the wheel alone, with node hidden."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LABEXT = ROOT / "labextension"

needs_node_modules = pytest.mark.skipif(
    not shutil.which("node") or not (LABEXT / "node_modules" / "vitest").exists(),
    reason="needs node and the labextension's dev dependencies: cd labextension && npm install",
)


@needs_node_modules
@pytest.mark.skipif(not Path("/usr/bin/chromium").exists(), reason="needs Chromium: apt-get install -y chromium")
def test_wheel_installs_and_loads_without_node(tmp_path: Path) -> None:
    """The wheel alone (node hidden) gives an enabled lab- and server extension, and the sidebar in the browser."""
    out = subprocess.run(
        ["bash", str(ROOT / "scripts" / "check_wheel.sh"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        env={"PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin", "HOME": str(Path.home())},
    )
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:]
    assert "wheel check passed" in out.stdout
