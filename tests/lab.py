"""A real JupyterLab (or Notebook 7) for the browser tests: free port, token, private state and settings, a notebook;
and the browser scripts of ui-tests/ run against it (run_browser)."""

from __future__ import annotations

import importlib.util
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import nbformat
import psutil
import pytest

from jupyter_hvd import state

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "jupyter_hvd" / "labextension"  # this checkout's build of the sidebar (npm run build)
UI_TESTS = ROOT / "ui-tests"  # the browser scripts and their shared driver (ui-tests/driver.mjs)
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
SETUP = "bash scripts/setup.sh --with-test-tools (or scripts/test.sh, which runs it)"


def require_browser_tools() -> None:
    """Fail (not skip) when a browser test cannot run: a green run must not leave the UI untested."""
    missing = []
    if not shutil.which("node"):
        missing.append("node (Node.js 20 with npm: apt-get install -y nodejs npm)")
    elif not (ROOT / "node_modules" / "playwright-core").is_dir():
        missing.append("playwright-core (npm ci in the repository root)")
    if not Path(CHROMIUM).exists():
        missing.append(f"Chromium at {CHROMIUM} (apt-get install -y chromium, or CHROMIUM=/path/to/chromium)")
    if missing:
        pytest.fail(f"the browser tests need {', '.join(missing)}; {SETUP} installs them", pytrace=False)


# Console errors of the page that are not jupyter-hvd's, allowed in every browser test.
FOREIGN_ERRORS = (
    # Notebook 7.6's own shortcuts settings handler, on every notebook page, with every extension disabled too.
    "Cannot read properties of undefined (reading 'schema')",
    # JupyterLab's, when a kernel closes a comm this page never opened: a widget of a cell that ran before a reload.
    "Comm not found for comm id",
)


def run_browser(script: str, env: dict[str, str], timeout: float) -> tuple[dict, subprocess.CompletedProcess[str]]:
    """Run ui-tests/`script` with node and return the result it printed (its last JSON line) and the process. The
    test fails here if the page logged an error that is not one of FOREIGN_ERRORS."""
    require_browser_tools()
    out = subprocess.run(
        ["node", str(UI_TESTS / script)],
        cwd=ROOT,
        env={**os.environ, "CHROMIUM": CHROMIUM, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        pytest.fail(f"ui-tests/{script} printed no result:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    result = json.loads(lines[-1])
    errors = [e for e in result.get("errors", []) if not e.startswith(FOREIGN_ERRORS)]
    if errors:
        failed = result.get("failed_requests", [])
        pytest.fail(
            f"the page logged errors (ui-tests/{script}): {errors}\nfailed requests: {failed}\n"
            f"the check: {result.get('error', 'passed')}\nthe cells' outputs: {result.get('outputs', [])}"
        )
    return result, out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def jupyterlab(
    tmp_path: Path, notebook: str, cells: list[str], env: dict[str, str] | None = None, app: str = "lab"
) -> Iterator[dict]:
    """Serve `notebook` (made of `cells`) from a fresh JupyterLab; stop it and check nothing of it is left.

    app "lab" runs `jupyter lab`, "notebook" runs `jupyter notebook` (Notebook 7): the same flags, the settings
    and workspaces directories given to the app that serves the page.
    Yields url, token, server (the Popen), log (path), notebook_url (where the notebook opens, token included),
    state_dir (the pools' state directory of this server and its kernels, where a test may put a pool file).
    On exit every kernel's pool must be gone: processes that carry this run's pool state directory are killed
    (so nothing leaks) and then reported as a failure.
    """
    if app not in ("lab", "notebook"):
        raise ValueError(f"app must be 'lab' or 'notebook', not {app!r}")
    if app == "notebook" and importlib.util.find_spec("notebook") is None:
        pytest.fail("needs Notebook 7: pip install 'notebook>=7.2,<8' (scripts/setup.sh installs it)", pytrace=False)
    require_browser_tools()
    root = tmp_path / "root"
    root.mkdir()
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, root / notebook)
    # JupyterLab's question about fetching its news would cover the outputs in every screenshot.
    news = tmp_path / "settings" / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    news.parent.mkdir(parents=True)
    news.write_text(json.dumps({"fetchNews": "false"}))
    token, port = secrets.token_hex(16), free_port()
    runtime = str(tmp_path / "runtime")  # the server's and its kernels' own: their pool files go to jupyter-hvd/ in it
    state_dir = str(Path(runtime) / "jupyter-hvd")
    full_env = {**os.environ, "JUPYTER_RUNTIME_DIR": runtime}
    full_env.update(env or {})
    settings = "LabApp" if app == "lab" else "JupyterNotebookApp"  # whose settings and workspaces are private
    cmd = [
        sys.executable, "-m", "jupyter", app, "--no-browser", "--allow-root",
        f"--ServerApp.port={port}", "--ServerApp.ip=127.0.0.1", f"--ServerApp.token={token}",
        f"--ServerApp.root_dir={root}", f"--{settings}.user_settings_dir={tmp_path / 'settings'}",
        f"--{settings}.workspaces_dir={tmp_path / 'workspaces'}",
    ]  # fmt: skip
    log_path = tmp_path / "lab.log"
    log = open(log_path, "wb")
    server = subprocess.Popen(cmd, env=full_env, stdout=log, stderr=subprocess.STDOUT, cwd=root)
    url = f"http://127.0.0.1:{port}/"
    leftovers: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{url}api/status?token={token}", timeout=2)
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError(f"jupyter {app} did not start: " + log_path.read_text()) from None
                time.sleep(0.5)
        page = f"lab/tree/{notebook}" if app == "lab" else f"notebooks/{notebook}"
        notebook_url = f"{url}{page}?token={token}"
        yield {
            "url": url,
            "token": token,
            "server": server,
            "log": log_path,
            "notebook_url": notebook_url,
            "state_dir": Path(state_dir),
        }
    finally:
        # Engines forked from the test run's shared template show its environment, not this server's: they are
        # found by their kernels' pool ids.
        kernels = []
        for p in ours(runtime):
            try:
                if "ipykernel" in " ".join(p.cmdline()):
                    kernels.append(p.pid)
            except psutil.Error:
                continue
        server.terminate()  # kernels are shut down with the server; their pools stop with them
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()
        deadline = time.monotonic() + 15
        while True:
            leftovers = ours(runtime, tuple(f"hvd-{pid}-" for pid in kernels))
            if not leftovers or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        state.kill_processes(leftovers)
    assert not leftovers, f"processes left after jupyter {app} stopped: {[p.pid for p in leftovers]}"


def ours(runtime: str, pools: tuple[str, ...] = ()) -> list[psutil.Process]:
    """Live processes started with Jupyter runtime directory `runtime`, or of a pool whose id starts with one of
    `pools`."""
    found = []
    for p in psutil.process_iter():
        try:
            env = p.environ()
            if p.status() != psutil.STATUS_ZOMBIE and (
                env.get("JUPYTER_RUNTIME_DIR") == runtime or (pools and env.get(state.POOL_ENV, "").startswith(pools))
            ):
                found.append(p)
        except psutil.Error:
            continue
    return found


def this_checkouts_sidebar(tmp_path: Path) -> dict[str, str]:
    """Environment for a JupyterLab that serves this checkout's build of the sidebar: JUPYTER_PATH comes before the
    environment's labextensions (which may link another checkout's build)."""
    if not (BUILD / "package.json").exists():
        pytest.fail("the sidebar is not built: npm run build (in the repository root)", pytrace=False)
    share = tmp_path / "share"
    (share / "labextensions").mkdir(parents=True)
    (share / "labextensions" / "jupyter-hvd").symlink_to(BUILD)
    paths = [str(share), *filter(None, os.environ.get("JUPYTER_PATH", "").split(os.pathsep))]
    return {"JUPYTER_PATH": os.pathsep.join(paths)}


def served_build(lab: dict[str, object]) -> str:
    """The sidebar's remote entry that JupyterLab's page loads."""
    with urllib.request.urlopen(f"{lab['url']}lab?token={lab['token']}", timeout=30) as page:
        html = page.read().decode()
    build = json.loads((BUILD / "package.json").read_text())["jupyterlab"]["_build"]["load"]
    return build if build in html else f"not {build}"
