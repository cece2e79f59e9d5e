"""Bad input gets one clear message saying what to do, and leaves no process behind."""

from __future__ import annotations

import shutil
import subprocess
import sys

import psutil
import pytest
from conftest import Kernel, new_kernel, pool_processes, script_env, wait_until_gone
from IPython.core.error import UsageError

from jupyter_hvd.kernel import owner as pools
from jupyter_hvd.kernel.errors import PoolError
from jupyter_hvd.kernel.launch import launcher

HAS_GPU = bool(shutil.which("nvidia-smi")) and launcher.visible_gpus() > 0


def test_gloo_ops_are_refused_with_the_reason(ip):
    with pytest.raises(UsageError, match="Gloo collectives crash"):
        ip.run_line_magic("hvd_start", "-np 2 --ops gloo")


@pytest.mark.skipif(HAS_GPU, reason="checks the message on a host without GPUs")
def test_nccl_without_gpus(ip):
    with pytest.raises(PoolError, match="--ops nccl needs GPUs"):
        ip.run_line_magic("hvd_start", "-np 2 --ops nccl")
    assert pools.current() is None


@pytest.mark.skipif(not HAS_GPU, reason="needs GPUs: -np above the GPU count is refused only where GPUs exist")
def test_more_ranks_than_gpus_is_refused(ip):
    n = launcher.visible_gpus()
    with pytest.raises(PoolError, match=f"more ranks than the {n} GPUs"):
        ip.run_line_magic("hvd_start", f"-np {n + 1}")


def test_mpiexec_missing(ip):
    ip.run_line_magic("config", "HvdPool.mpiexec = '/nonexistent/bin/mpiexec'")
    try:
        with pytest.raises(PoolError) as info:
            ip.run_line_magic("hvd_start", "-np 2")
    finally:
        ip.run_line_magic("config", "HvdPool.mpiexec = ''")
    assert "/nonexistent/bin/mpiexec, which is not an executable file" in str(info.value)
    assert "%config HvdPool.mpiexec" in info.value.hint
    assert pools.current() is None
    assert wait_until_gone(f"hvd-{psutil.Process().pid}-", timeout=10) == []


def test_config_set_after_the_defaults_were_read_without_a_shell_still_applies(tmp_path):
    """`%config HvdPool.mpiexec = ...` reaches the pool's defaults even where they were first read before the shell
    loaded the extension (find_mpiexec() reads them without one); a fresh process, as the defaults are per process."""
    script = tmp_path / "probe.py"
    script.write_text(
        "from jupyter_hvd.kernel.launch import launcher, options\n"
        "launcher.find_mpiexec()\n"
        "from IPython.testing.globalipapp import start_ipython\n"
        "shell = start_ipython()\n"
        "shell.run_line_magic('load_ext', 'jupyter_hvd')\n"
        "shell.run_line_magic('config', \"HvdPool.mpiexec = '/nonexistent/bin/mpiexec'\")\n"
        "print('mpiexec:', options.setting('mpiexec'))\n"
    )
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=script_env())
    assert "mpiexec: /nonexistent/bin/mpiexec" in out.stdout, out.stdout + out.stderr[-2000:]


def test_the_old_environment_variable_still_works_with_a_warning(ip, monkeypatch):
    from jupyter_hvd.kernel.launch import options

    monkeypatch.setattr(options, "_defaults", options.HvdPool())  # a kernel whose config does not set mpiexec
    monkeypatch.setattr(options, "_warned", set())
    monkeypatch.setenv("JUPYTER_HVD_MPIEXEC", "/nonexistent/bin/mpiexec")
    with pytest.warns(FutureWarning, match=r"JUPYTER_HVD_MPIEXEC is deprecated.*c\.HvdPool\.mpiexec"):
        with pytest.raises(PoolError, match="/nonexistent/bin/mpiexec, which is not an executable file"):
            ip.run_line_magic("hvd_start", "-np 2")
    assert pools.current() is None


def test_horovod_missing_on_the_engines_gives_a_torch_distributed_pool(tmp_path):
    fake = tmp_path / "horovod"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise ImportError('No module named horovod.torch (test stand-in)')\n")
    k = Kernel(extra_env={"PYTHONPATH": str(tmp_path)})
    try:
        r = k.run("%load_ext jupyter_hvd\n%hvd_start -np 2", timeout=120)
        assert r.status == "ok", r.error_text
        assert "Horovod is not installed here" in r.stdout and "torch/Gloo" in r.stdout, r.stdout
        r = k.run("%%hvd\nx = torch.ones(1)\ndist.all_reduce(x)\nprint('sum', x.item(), 'hvd' in globals())")
        assert r.status == "ok" and "sum 2.0 False" in r.stdout, r.stdout + r.error_text
    finally:
        k.shutdown()
    assert wait_until_gone(f"hvd-{k.pid}-") == []


def test_output_flood_is_capped_and_memory_bounded():
    k = new_kernel()
    try:
        assert k.run("%load_ext jupyter_hvd\n%hvd_start -np 2").status == "ok"
        kernel = psutil.Process(k.pid)
        before = kernel.memory_info().rss
        r = k.run("%%hvd --no-plot\nfor i in range(1_000_000):\n    print(i)\nprint('done')", timeout=240)
        assert r.status == "ok", r.error_text
        grown = (kernel.memory_info().rss - before) / 2**20
        lines = r.stdout.splitlines()
        assert len(lines) < 10_100, len(lines)
        assert "990001 more lines were not shown" in r.stdout
        assert lines[-1] == "done"  # the end of the flood is still shown
        assert grown < 150, f"kernel memory grew by {grown:.0f} MB"
        healthy = k.run("%%hvd\nprint('sum', hvd.allreduce(torch.ones(1), op=hvd.Sum).item())")
        assert "sum 2.0" in healthy.stdout
    finally:
        k.shutdown()
    assert pool_processes(f"hvd-{k.pid}-") == [] or wait_until_gone(f"hvd-{k.pid}-") == []
