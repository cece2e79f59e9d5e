"""The sidebar's REST endpoints, on a real Jupyter server (pytest-jupyter's jp_fetch).

Pools here are state files as a kernel writes them (owned by this test process, or by a process that has
died), each naming a real kernel of the test server's kernel manager (a server lists only its own kernels'
pools); the browser test (test_sidebar_ui.py) drives the same endpoints with a real kernel and pool.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import tornado.httpclient

from jupyter_hvd import state

pytest_plugins = ("pytest_jupyter.jupyter_server",)


@pytest.fixture
def state_dir(jp_environ: None, jp_runtime_dir: Path) -> Path:
    """The pools' directory in the server's (and its kernels') Jupyter runtime directory."""
    return Path(jp_runtime_dir) / "jupyter-hvd"


@pytest.fixture
def jp_server_config(state_dir: Path) -> dict:
    return {"ServerApp": {"jpserver_extensions": {"jupyter_hvd": True}}}


@pytest.fixture
def registry(jp_serverapp):
    return jp_serverapp.web_app.settings["jupyter_hvd_registry"]


@pytest.fixture
def kernel_id(jp_serverapp, jp_asyncio_loop) -> str:
    """A kernel of the test server: the kernel a pool file names."""
    return jp_asyncio_loop.run_until_complete(jp_serverapp.kernel_manager.start_kernel(kernel_name="python3"))


def started(p: psutil.Process) -> float:
    """When `p` started, as a pool file records it."""
    return state.started(p)


def write_pool(
    pool_id: str, kernel: psutil.Process, processes: list[psutil.Process] = (), kernel_id: str = "", **extra
) -> Path:
    """A pool file as a kernel's pool writes it; `kernel`: the process that plays the pool's kernel, `kernel_id`: the
    server's id of the kernel."""
    path = state.pool_file(pool_id)
    state.write_json(
        path,
        {
            "id": pool_id,
            "state": "idle",
            "np": 2,
            "started": time.time() - 5,
            "backend": "MPI",
            "hosts": ["localhost"],
            "cell": None,
            "kernel_pid": kernel.pid,
            "kernel_started": getattr(kernel, "started", None) or started(kernel),
            "kernel_id": kernel_id,
            "boot_id": state.boot_id(),
            "notebook": "train.ipynb",
            "ranks": [
                {
                    "rank": i,
                    "host": "localhost",
                    "pid": 1000 + i,
                    "device": "cpu",
                    "tensor_ops": "MPI",
                    "state": "idle",
                    "heartbeat": time.time() - 0.5,
                    "cpu_percent": 1.0,
                    "rss_mb": 300.0,
                }
                for i in range(2)
            ],
            "processes": [{"pid": p.pid, "create_time": started(p), "role": "engine"} for p in processes],
            **extra,
        },
    )
    return path


@pytest.fixture
def dead_kernel() -> psutil.Process:
    """A process object whose process has exited: the kernel of a stale pool."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.5)"])
    p = psutil.Process(proc.pid)
    p.started = started(p)  # read now, while it exists
    proc.wait()
    return p


@pytest.fixture
def orphan():
    """A live process recorded by a stale pool (an engine left behind by a killed kernel)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    yield psutil.Process(proc.pid)
    proc.kill()
    proc.wait()


async def test_lists_every_pool_with_ages(jp_fetch, state_dir, kernel_id):
    write_pool("hvd-1-1", psutil.Process(), kernel_id=kernel_id)
    resp = await jp_fetch("jupyter-hvd", "pools")
    body = json.loads(resp.body)
    assert [p["id"] for p in body["pools"]] == ["hvd-1-1"]
    pool = body["pools"][0]
    assert pool["state"] == "idle" and not pool["stale"]
    assert pool["np"] == 2 and pool["backend"] == "MPI" and pool["notebook"] == "train.ipynb"
    assert 4 <= pool["uptime"] < 60
    assert [r["rank"] for r in pool["ranks"]] == [0, 1]
    assert 0 <= pool["ranks"][0]["heartbeat_age"] < 30


async def test_empty_listing(jp_fetch, state_dir):
    body = json.loads((await jp_fetch("jupyter-hvd", "pools")).body)
    assert body["pools"] == []


async def test_one_pool_and_unknown_pools(jp_fetch, state_dir, kernel_id):
    write_pool("hvd-1-1", psutil.Process(), kernel_id=kernel_id)
    body = json.loads((await jp_fetch("jupyter-hvd", "pools", "hvd-1-1")).body)
    assert body["id"] == "hvd-1-1" and len(body["ranks"]) == 2
    for unknown in ("hvd-9-9", "..%2F..%2Fetc", "pool-hvd-1-1.json"):
        with pytest.raises(tornado.httpclient.HTTPClientError) as e:
            await jp_fetch("jupyter-hvd", "pools", unknown)
        assert e.value.code == 404


async def test_actions_reach_the_pools_kernel(jp_fetch, state_dir, kernel_id):
    write_pool("hvd-1-1", psutil.Process(), kernel_id=kernel_id)
    for action in ("interrupt", "restart", "stop", "where", "where-full"):
        resp = await jp_fetch("jupyter-hvd", "pools", "hvd-1-1", action, method="POST", body="")
        assert resp.code == 202
        # The kernel's watcher takes this file within a second and carries the action out.
        assert state.take_action("hvd-1-1") == state.Action(state.Ask(action))
    with pytest.raises(tornado.httpclient.HTTPClientError) as e:
        await jp_fetch("jupyter-hvd", "pools", "hvd-1-1", "execute", method="POST", body="")
    assert e.value.code == 400
    with pytest.raises(tornado.httpclient.HTTPClientError) as e:
        await jp_fetch("jupyter-hvd", "pools", "hvd-7-7", "stop", method="POST", body="")
    assert e.value.code == 404
    assert state.take_action("hvd-1-1") is None


async def test_a_restart_at_another_size_reaches_the_kernel_and_bad_sizes_are_refused(jp_fetch, state_dir, kernel_id):
    write_pool("hvd-1-1", psutil.Process(), kernel_id=kernel_id)
    resp = await jp_fetch("jupyter-hvd", "pools", "hvd-1-1", "restart", method="POST", body='{"np": 3}')
    assert resp.code == 202
    assert state.take_action("hvd-1-1") == state.Action(state.Ask.RESTART, 3)
    for action, body in (
        ("restart", '{"np": 0}'),
        ("restart", '{"np": "3"}'),
        ("restart", "3,"),
        ("stop", '{"np": 3}'),
    ):
        with pytest.raises(tornado.httpclient.HTTPClientError) as e:
            await jp_fetch("jupyter-hvd", "pools", "hvd-1-1", action, method="POST", body=body)
        assert e.value.code == 400, (action, body)
    assert state.take_action("hvd-1-1") is None  # nothing was asked of the kernel


async def test_refused_without_the_servers_token(jp_fetch, jp_http_port, jp_base_url, state_dir, kernel_id):
    write_pool("hvd-1-1", psutil.Process(), kernel_id=kernel_id)
    client = tornado.httpclient.AsyncHTTPClient()
    base = f"http://localhost:{jp_http_port}{jp_base_url}jupyter-hvd/pools"
    for url, method in ((base, "GET"), (f"{base}/hvd-1-1", "GET"), (f"{base}/hvd-1-1/stop", "POST")):
        resp = await client.fetch(url, method=method, body="" if method == "POST" else None, raise_error=False)
        assert resp.code == 403, (url, resp.code)
    # A wrong token is refused too, and nothing was asked of the pool.
    resp = await client.fetch(
        f"{base}/hvd-1-1/stop", method="POST", body="", headers={"Authorization": "token nope"}, raise_error=False
    )
    assert resp.code == 403
    assert state.take_action("hvd-1-1") is None


async def test_stale_pool_is_shown_then_cleaned_up(jp_fetch, state_dir, registry, dead_kernel, orphan, kernel_id):
    path = write_pool("hvd-2-2", dead_kernel, [orphan], kernel_id=kernel_id, state="running")
    body = json.loads((await jp_fetch("jupyter-hvd", "pools")).body)
    pool = body["pools"][0]
    assert pool["stale"] and pool["state"] == "stale"
    assert {r["state"] for r in pool["ranks"]} == {"dead"}
    # A stale pool's kernel cannot interrupt or restart it: only Stop (clean-up) is accepted.
    with pytest.raises(tornado.httpclient.HTTPClientError) as e:
        await jp_fetch("jupyter-hvd", "pools", "hvd-2-2", "restart", method="POST", body="")
    assert e.value.code == 400
    assert orphan.is_running() and path.exists()
    # Reading never kills: past the grace period a listing still shows it, its processes alive.
    registry.stale_grace_s = 0
    body = json.loads((await jp_fetch("jupyter-hvd", "pools")).body)
    assert [p["id"] for p in body["pools"]] == ["hvd-2-2"] and orphan.is_running()
    # The server's periodic clean-up then does: its processes are killed, its file removed.
    registry.clean_up([kernel_id])
    body = json.loads((await jp_fetch("jupyter-hvd", "pools")).body)
    assert body["pools"] == []
    assert not path.exists()
    orphan.wait(timeout=10)
    assert not orphan.is_running()


async def test_stop_cleans_up_a_stale_pool_at_once(jp_fetch, state_dir, dead_kernel, orphan, kernel_id):
    path = write_pool("hvd-3-3", dead_kernel, [orphan], kernel_id=kernel_id)
    resp = await jp_fetch("jupyter-hvd", "pools", "hvd-3-3", "stop", method="POST", body="")
    assert resp.code == 200 and json.loads(resp.body)["result"] == "cleaned"
    assert not path.exists()
    orphan.wait(timeout=10)


async def test_reused_kernel_pid_counts_as_dead(jp_fetch, state_dir, kernel_id):
    me = psutil.Process()
    path = write_pool("hvd-4-4", me, kernel_id=kernel_id)
    data = json.loads(path.read_text())
    data["kernel_started"] = started(me) - 1000  # same pid, another process: the kernel is gone
    state.write_json(path, data)
    body = json.loads((await jp_fetch("jupyter-hvd", "pools", "hvd-4-4")).body)
    assert body["stale"]


def test_server_extension_is_enabled_by_the_installed_config():
    out = subprocess.run(
        [sys.executable, "-m", "jupyter", "server", "extension", "list"], capture_output=True, text=True, timeout=60
    )
    text = out.stdout + out.stderr
    assert "jupyter_hvd" in text and "enabled" in text.split("jupyter_hvd", 1)[1].splitlines()[0], text


def test_state_dir_is_private(state_dir):
    write_pool("hvd-5-5", psutil.Process())
    assert oct(os.stat(state_dir).st_mode & 0o777) == "0o700"
    assert oct(os.stat(state.pool_file("hvd-5-5")).st_mode & 0o777) == "0o600"


async def test_browser_session_needs_the_xsrf_token(
    jp_fetch, jp_serverapp, jp_http_port, jp_base_url, state_dir, kernel_id
):
    """Logged in by cookie (as a browser is), an action without the XSRF header is refused; with it, accepted."""
    write_pool("hvd-6-6", psutil.Process(), kernel_id=kernel_id)
    client = tornado.httpclient.AsyncHTTPClient()
    base = f"http://localhost:{jp_http_port}{jp_base_url}"
    # Opening a URL with ?token= logs the browser in: the server answers with its login cookie.
    opened = await client.fetch(f"{base}api/me?token={jp_serverapp.identity_provider.token}", raise_error=False)
    assert opened.code == 200
    cookies = dict(h.split(";", 1)[0].split("=", 1) for h in opened.headers.get_list("Set-Cookie"))
    assert any(name.startswith("username-") for name in cookies), cookies
    xsrf = "ab" * 16  # a browser's _xsrf cookie, echoed in the X-XSRFToken header by JupyterLab
    cookie = "; ".join(f"{k}={v}" for k, v in {**cookies, "_xsrf": xsrf}.items())
    listing = await client.fetch(f"{base}jupyter-hvd/pools", headers={"Cookie": cookie}, raise_error=False)
    assert listing.code == 200  # the cookie alone is enough to read
    url = f"{base}jupyter-hvd/pools/hvd-6-6/interrupt"
    refused = await client.fetch(url, method="POST", body="", headers={"Cookie": cookie}, raise_error=False)
    assert refused.code == 403
    assert state.take_action("hvd-6-6") is None
    accepted = await client.fetch(
        url, method="POST", body="", headers={"Cookie": cookie, "X-XSRFToken": xsrf}, raise_error=False
    )
    assert accepted.code == 202
    assert state.take_action("hvd-6-6") == state.Action(state.Ask.INTERRUPT)


async def test_pool_of_a_killed_kernel_is_stale_then_cleaned_up(jp_fetch, jp_serverapp, state_dir, registry):
    """A real kernel of this server with a real 2-rank pool dies with its reaper (kill -9 both): the sidebar shows the
    pool as stale with dead ranks, and the server's clean-up leaves no controller, mpiexec or engine behind."""
    from conftest import wait_until_gone

    manager = jp_serverapp.kernel_manager
    kernel_id = await manager.start_kernel(kernel_name="python3")
    km = manager.get_kernel(kernel_id)
    kc = km.client()
    kc.start_channels()
    try:
        await kc.wait_for_ready(timeout=60)
        said: list[str] = []
        reply = await kc.execute_interactive(
            "%load_ext jupyter_hvd\n%hvd_start -np 2", timeout=240, output_hook=lambda m: said.append(str(m["content"]))
        )
        assert reply["content"]["status"] == "ok", said
        body = json.loads((await jp_fetch("jupyter-hvd", "pools")).body)
        assert [p["state"] for p in body["pools"]] == ["idle"]
        assert body["pools"][0]["kernel_id"] == kernel_id and len(body["pools"][0]["ranks"]) == 2
        kpid = km.provisioner.process.pid
        km.autorestart = False  # a restarted kernel would be alive again under the same id
        procs = psutil.Process(kpid).children(recursive=True)
        reapers = [p for p in procs if "jupyter_hvd.processes.reaper" in " ".join(p.cmdline())]
        assert reapers, "the pool should have a reaper"
        for p in reapers:  # the reaper first, or it would clean up by itself
            p.kill()
        psutil.wait_procs(reapers, timeout=10)  # a killed reaper stays a zombie of the dead kernel: that is gone enough
        psutil.Process(kpid).kill()
        await asyncio.to_thread(psutil.wait_procs, [psutil.Process(kpid)], 10)
        body = json.loads((await jp_fetch("jupyter-hvd", "pools")).body)
        pool = body["pools"][0]
        assert pool["state"] == "stale" and [r["state"] for r in pool["ranks"]] == ["dead", "dead"]
        assert wait_until_gone(f"hvd-{kpid}-", timeout=0.5), "the engines outlive their kernel until cleaned up"
        registry.stale_grace_s = 0
        await asyncio.to_thread(registry.clean_up, [kernel_id])  # what the server runs every 10 s
        body = json.loads((await jp_fetch("jupyter-hvd", "pools")).body)
        assert body["pools"] == []
        assert await asyncio.to_thread(wait_until_gone, f"hvd-{kpid}-") == []
    finally:
        kc.stop_channels()
        try:
            await manager.shutdown_kernel(kernel_id, now=True)
        except Exception:
            pass
        kill_leftovers(state_dir)


async def test_pools_of_other_servers_kernels_are_not_seen_nor_touched(jp_fetch, state_dir, registry, kernel_id):
    """Another Jupyter server of the same user shares the runtime directory: its pools are neither listed, nor
    stopped, nor cleaned up here, even when their kernel died."""
    ours = write_pool("hvd-1-1", psutil.Process(), kernel_id=kernel_id)
    theirs = write_pool("hvd-2-2", psutil.Process(), kernel_id="a-kernel-of-another-server")
    body = json.loads((await jp_fetch("jupyter-hvd", "pools")).body)
    assert [p["id"] for p in body["pools"]] == ["hvd-1-1"]
    for method, path in (("GET", ()), ("POST", ("stop",)), ("POST", ("interrupt",))):
        with pytest.raises(tornado.httpclient.HTTPClientError) as e:
            body = "" if method == "POST" else None
            await jp_fetch("jupyter-hvd", "pools", "hvd-2-2", *path, method=method, body=body)
        assert e.value.code == 404
    assert state.take_action("hvd-2-2") is None
    data = json.loads(theirs.read_text())
    data["kernel_pid"] = 2**22 + 1  # their kernel died: still theirs to clean up
    state.write_json(theirs, data)
    registry.stale_grace_s = 0
    registry.clean_up([kernel_id])
    await jp_fetch("jupyter-hvd", "pools")
    assert theirs.exists() and ours.exists()


async def test_pool_ids_come_from_file_names(jp_fetch, state_dir, kernel_id):
    """A file whose content names another pool than its name is not a pool; names that are not pool ids never reach
    a path."""
    path = write_pool("hvd-7-7", psutil.Process(), kernel_id=kernel_id)
    data = json.loads(path.read_text())
    data["id"] = "hvd-8-8"
    state.write_json(path, data)
    body = json.loads((await jp_fetch("jupyter-hvd", "pools")).body)
    assert body["pools"] == []
    for bad in ("..%2F..%2Fetc%2Fpasswd", "hvd-1-1%2F..%2Fx", "hvd-1-1.action"):
        with pytest.raises(tornado.httpclient.HTTPClientError) as e:
            await jp_fetch("jupyter-hvd", "pools", bad, "stop", method="POST", body="")
        assert e.value.code == 404
    assert sorted(p.name for p in state_dir.iterdir()) == ["pool-hvd-7-7.json"]


async def test_listing_never_blocks_the_server(jp_fetch, state_dir, kernel_id, monkeypatch):
    """Reading pool files and checking processes runs off the event loop: a slow listing leaves the server
    answering."""
    import threading

    write_pool("hvd-1-1", psutil.Process(), kernel_id=kernel_id)
    slow = threading.Event()
    real = state.list_pools

    def list_pools(*args, **kw):
        slow.wait(3)
        return real(*args, **kw)

    monkeypatch.setattr(state, "list_pools", list_pools)
    listing = asyncio.ensure_future(jp_fetch("jupyter-hvd", "pools"))
    await asyncio.sleep(0.2)
    t0 = time.monotonic()
    await jp_fetch("api", "status")
    assert time.monotonic() - t0 < 1.0, "the server stopped answering while a listing was slow"
    slow.set()
    assert [p["id"] for p in json.loads((await listing).body)["pools"]] == ["hvd-1-1"]


def kill_leftovers(state_dir: Path) -> None:
    """Kill whatever a failed test left of the pools it started (found by their state directory)."""
    leftovers = []
    for p in psutil.process_iter():
        try:
            if p.environ().get("JUPYTER_RUNTIME_DIR") == str(state_dir.parent) and p.pid != os.getpid():
                leftovers.append(p)
        except psutil.Error:
            continue
    state.kill_processes(leftovers)
