"""%%hvd in a real IPython kernel: live streaming, and no process left behind however the kernel ends."""

from __future__ import annotations

import os
import signal
import time

from conftest import Kernel, new_kernel, pool_processes, wait_until_gone


def start_pool(k: Kernel) -> str:
    r = k.run("%load_ext jupyter_hvd\n%hvd_start -np 2")
    assert r.status == "ok", r.error_text + r.stdout + r.stderr
    assert "Pool ready" in r.stdout
    prefix = f"hvd-{k.pid}-"
    assert len(pool_processes(prefix)) >= 4  # controller, mpiexec, 2 engines (and their nannies)
    return prefix


def test_rank0_output_streams_while_the_cell_runs(kernel):
    start_pool(kernel)
    r = kernel.run("%%hvd\nimport time\nfor i in range(4):\n    print(f'step {i}', flush=True)\n    time.sleep(0.7)\n")
    assert r.status == "ok", r.error_text
    assert [line for line in r.stdout.splitlines() if line.startswith("step")] == [f"step {i}" for i in range(4)]
    first = next(t for t, _, text in r.streams if "step 0" in text)
    # The first line arrived long before the cell ended: it was streamed, not buffered until the end.
    assert r.finished - first > 1.5, (r.finished - first, r.streams)


def test_the_kernel_does_not_import_torch(kernel):
    # torch lives on the ranks; importing it into the kernel cost 2 s of a 5 s %hvd_start (and 300 MB of memory).
    # A cell's value is shown as rank 0 formats it, so neither a tensor nor a class defined in a cell needs importing.
    start_pool(kernel)
    r = kernel.run("%%hvd\nx = torch.ones(2) * rank\nx")
    assert r.status == "ok", r.error_text
    assert [d["data"] for d in r.outputs] == [{"text/plain": "tensor([0., 0.])"}]
    cell = "%%hvd\nclass Shown:\n    def _repr_html_(self):\n        return f'<b>rank {rank}</b>'\nShown()"
    r = kernel.run(cell)
    assert r.status == "ok", r.error_text
    (shown,) = r.outputs
    assert shown["data"]["text/html"] == "<b>rank 0</b>" and "Shown" in shown["data"]["text/plain"]
    # A widget made on a rank has no model in the notebook's kernel: its text, not a view of a model not found.
    r = kernel.run("%%hvd\nimport ipywidgets\nipywidgets.IntSlider(3)")
    assert [d["data"] for d in r.outputs] == [{"text/plain": "IntSlider(value=3)"}], r.outputs
    r = kernel.run("import sys\nprint('torch' in sys.modules)")
    assert r.status == "ok", r.error_text
    assert r.stdout.strip().splitlines()[-1] == "False"


def test_stderr_and_errors_reach_the_notebook(kernel):
    start_pool(kernel)
    r = kernel.run("%%hvd\nimport sys\nprint('careful', file=sys.stderr)\nraise KeyError('missing')")
    assert r.status == "error"
    assert "careful" in r.stderr
    assert "ranks 0-1: KeyError: 'missing'" in r.error_text
    assert "%hvd_start" not in r.error_text


def test_hvd_before_start_tells_what_to_type(kernel):
    r = kernel.run("%load_ext jupyter_hvd\n")
    r = kernel.run("%%hvd\nprint(1)")
    assert r.status == "error"
    # IPython shows a UsageError as one line on stderr, without a traceback.
    assert "UsageError: No jupyter-hvd pool is running. Start one first: %hvd_start -np 2" in r.stderr
    assert "Traceback" not in r.stderr


def test_hvd_stop_leaves_no_process(kernel):
    prefix = start_pool(kernel)
    r = kernel.run("%hvd_stop")
    assert r.status == "ok" and "Pool stopped" in r.stdout
    assert wait_until_gone(prefix) == []


def test_kernel_shutdown_leaves_no_process():
    k = new_kernel()
    prefix = start_pool(k)
    k.shutdown()
    assert wait_until_gone(prefix) == []


def test_kernel_killed_leaves_no_process():
    k = new_kernel()
    prefix = start_pool(k)
    os.kill(k.pid, signal.SIGKILL)
    t0 = time.monotonic()
    left = wait_until_gone(prefix, timeout=20)
    assert left == [], [p.cmdline() for p in left]
    print(f"pool reaped {time.monotonic() - t0:.1f} s after kill -9 of the kernel")
    k.kc.stop_channels()
    k.km.cleanup_resources()


def test_kernel_restart_leaves_no_process():
    k = new_kernel()
    try:
        prefix = start_pool(k)
        k.km.restart_kernel(now=False)
        assert wait_until_gone(prefix) == []
    finally:
        k.shutdown()


def test_extension_loads_from_ipython_config(tmp_path):
    (tmp_path / "profile_default").mkdir()
    (tmp_path / "profile_default" / "ipython_config.py").write_text(
        "c.InteractiveShellApp.extensions = ['jupyter_hvd']\n"
    )
    k = Kernel(extra_env={"IPYTHONDIR": str(tmp_path)})
    try:
        r = k.run("%hvd_status")
        assert r.status == "ok" and "No jupyter-hvd pool is running" in r.stdout, r.stderr
    finally:
        k.shutdown()
