"""The wheel check: the sidebar and the live view install from the wheel alone, with node hidden, and the sidebar
loads in the browser (scripts/check_wheel.sh)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from lab import CHROMIUM, require_browser_tools

ROOT = Path(__file__).resolve().parents[1]


def test_wheel_installs_and_loads_without_node(tmp_path: Path) -> None:
    """The wheel alone (node hidden) gives an enabled lab- and server extension, and the sidebar in the browser."""
    require_browser_tools()
    out = subprocess.run(
        ["bash", str(ROOT / "scripts" / "check_wheel.sh"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        env={
            "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
            "HOME": str(Path.home()),
            "CHROMIUM": CHROMIUM,
        },
    )
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:]
    assert "wheel check passed" in out.stdout
