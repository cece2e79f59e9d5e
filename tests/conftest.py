"""Shared fixtures: a real 2-rank pool in an in-process IPython shell, and real Jupyter kernels."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psutil
import pytest

from jupyter_hvd.testing import CellResult, Kernel  # noqa: F401  (tests import them from here)

VENV_BIN = str(Path(__file__).resolve().parents[1] / ".venv" / "bin")


def script_env() -> dict[str, str]:
    """The environment of a script run as a user would, outside the pool: the venv first, this checkout importable."""
    checkout = str(Path(__file__).parents[1])
    env = {**os.environ, "PATH": VENV_BIN + os.pathsep + os.environ["PATH"], "PYTHONPATH": checkout}
    if os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return env


def run_under_mpirun(
    script: Path, np: int = 2, mpirun_args: tuple[str, ...] = (), timeout: float = 180
) -> subprocess.CompletedProcess[str]:
    """`mpirun -np NP python SCRIPT` in the script's directory, as a user would type it."""
    # Session files beside the script: in /tmp, those of an mpirun killed before a reboot stop the next with its pid.
    session = ("--prtemca", "prte_tmpdir_base", str(script.parent))
    command = [str(Path(VENV_BIN) / "mpirun"), "-np", str(np), "--bind-to", "none", *session, "-x", "PYTHONPATH"]
    return subprocess.run(
        [*command, *mpirun_args, sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=script_env(),
        cwd=script.parent,
    )


def needs(why: str) -> None:
    """Skip the calling test for `why` (a missing tool, not root) on a developer's machine; in CI (where set-up
    installs every tool and runs as root) a test that cannot run is an error, not a green skip."""
    if not why:
        return
    if os.environ.get("CI"):
        pytest.fail(f"CI cannot run this test: {why}. scripts/setup.sh --with-test-tools installs what it needs.")
    pytest.skip(why)


def pool_processes(prefix: str = "hvd-") -> list[psutil.Process]:
    """Live processes that belong to a jupyter-hvd pool whose id starts with `prefix`.

    Controller, mpiexec, engines and nannies all carry the pool's id in IPP_CLUSTER_ID or JUPYTER_HVD_POOL.
    """
    found = []
    for p in psutil.process_iter():
        try:
            env = p.environ()
            if p.status() == psutil.STATUS_ZOMBIE:
                continue
        except psutil.Error:
            continue
        ids = (env.get("IPP_CLUSTER_ID", ""), env.get("JUPYTER_HVD_POOL", ""))
        if any(i.startswith(prefix) for i in ids):
            found.append(p)
    return found


def wait_until_gone(prefix: str, timeout: float = 15.0) -> list[psutil.Process]:
    """Processes of pools matching `prefix` still alive after `timeout` seconds (empty when all exited)."""
    deadline = time.monotonic() + timeout
    left = pool_processes(prefix)
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = pool_processes(prefix)
    return left


@pytest.fixture(autouse=True, scope="session")
def _state_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Pool files of this test session go to a private Jupyter runtime directory (other sessions may run beside);
    yields the pools' directory in it."""
    runtime = tmp_path_factory.mktemp("runtime")
    old = os.environ.get("JUPYTER_RUNTIME_DIR")
    os.environ["JUPYTER_RUNTIME_DIR"] = str(runtime)
    os.environ["PATH"] = VENV_BIN + os.pathsep + os.environ.get("PATH", "")
    yield runtime / "jupyter-hvd"
    if old is None:
        os.environ.pop("JUPYTER_RUNTIME_DIR", None)
    else:
        os.environ["JUPYTER_RUNTIME_DIR"] = old


@pytest.fixture(autouse=True, scope="session")
def _worker_template(_state_dir: Path) -> Iterator[None]:
    """One warm template for this worker's kernels, as the kernels of one Jupyter server share one: a kernel's own
    costs about 3 CPU-s (torch's import and a first optimizer step), a fifth of the suite's CPU. Kernels that test
    a template of their own set JUPYTER_HVD_TEMPLATE_DIR to "" (their runtime directory's, as a lone user's)."""
    from jupyter_hvd import state
    from jupyter_hvd.kernel.errors import PoolError
    from jupyter_hvd.kernel.launch.launcher import find_mpiexec
    from jupyter_hvd.kernel.launch.template import TEMPLATE_DIR_ENV, template

    os.environ[TEMPLATE_DIR_ENV] = str(state.state_dir())  # (made here: _state_dir's, in this worker's runtime)
    try:
        template.start(find_mpiexec())
    except PoolError:
        pass  # no mpiexec: the tests that need one say so
    deadline = time.monotonic() + 60
    while template.alive() and not template.ready() and time.monotonic() < deadline:
        time.sleep(0.05)
    yield
    os.environ.pop(TEMPLATE_DIR_ENV, None)


@pytest.fixture(scope="session")
def _shell() -> Any:
    from IPython.testing.globalipapp import start_ipython

    from jupyter_hvd.kernel.launch.template import template

    shell = start_ipython()
    shell.run_line_magic("load_ext", "jupyter_hvd")
    # Handed over once its warm template is ready, as Kernel() is: a pool started right away would start cold (and
    # import torch and Horovod in every rank) as a notebook's first cell does; the tests of that have kernels of their
    # own.
    deadline = time.monotonic() + 60
    while template.alive() and not template.ready() and time.monotonic() < deadline:
        time.sleep(0.05)
    return shell


@pytest.fixture(scope="module")
def ip(_shell: Any) -> Iterator[Any]:
    """An in-process IPython shell with jupyter_hvd loaded. IPython allows one per process, so modules share it; each
    module gets it as new: no pool and the default HvdPool config at the start, none left at the end."""
    from jupyter_hvd.kernel import owner as pools
    from jupyter_hvd.kernel.launch.options import defaults

    def fresh() -> None:
        if pools.current() is not None:
            _shell.run_line_magic("hvd_stop", "")
        configured = defaults(_shell)
        configured.config.pop("HvdPool", None)
        for name, trait in configured.traits(config=True).items():
            configured.set_trait(name, trait.default())

    fresh()
    yield _shell
    fresh()


@pytest.fixture(scope="module")
def pool(ip: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
    """A real 2-rank pool (MPI engines, Horovod initialised), stopped after the module."""
    from jupyter_hvd.kernel import owner as pools

    # A module adds its own %hvd_start flags with POOL_FLAGS (e.g. --timeline).
    flags = getattr(request.module, "POOL_FLAGS", "")
    ip.run_line_magic("hvd_start", f"-np 2 --env JUPYTER_HVD_TEST=yes {flags}")
    p = pools.current()
    try:
        yield p
    finally:
        if pools.current() is not None:
            ip.run_line_magic("hvd_stop", "")


# A kernel takes 3-7 s to start with its warm template (torch and Horovod imported), mostly while the test before it
# waits on ranks: each worker starts the next test's kernel in the background and hands it over when asked.
_starter = ThreadPoolExecutor(max_workers=1, thread_name_prefix="next-kernel")
_next_kernel: Future[Kernel] | None = None


def new_kernel() -> Kernel:
    """A fresh real kernel with jupyter_hvd loaded and its warm template ready, as `Kernel()` gives, started while
    the test before ran (with this process's environment then: a test that sets one for its kernel calls Kernel());
    the next one starts now."""
    global _next_kernel
    started, _next_kernel = _next_kernel, _starter.submit(Kernel)
    k = None
    if started is not None:
        try:
            k = started.result(timeout=120)
        except Exception:
            k = None
        if k is not None and not k.km.is_alive():
            k = None
    return k if k is not None else Kernel()


@pytest.fixture(autouse=True, scope="session")
def _no_kernel_left() -> Iterator[None]:
    yield
    if _next_kernel is not None:
        try:
            _next_kernel.result(timeout=120).shutdown()
        except Exception:
            pass


@pytest.fixture
def kernel() -> Iterator[Kernel]:
    """A fresh real kernel, shut down after the test."""
    k = new_kernel()
    try:
        yield k
    finally:
        if k.km.is_alive():
            k.shutdown()


class PoolKernel:
    """A kernel that ran a module's POOL_SETUP, handed to one test after another while each leaves it healthy: a pool
    start and a kernel cost about 10 s of the 2 cores, and a test that ends with its pool answering has nothing to
    clean up. Before each test the module's POOL_CHECK cell (one that checks the pool, or starts it anew) must print
    POOL_CHECK_SAYS; otherwise the kernel is shut down (nothing of it may be left) and a new one set up. For tests
    that change no config, keep no name and mark no setup cell: the kernel's side is the next test's too."""

    def __init__(self, setup: str, check: str, says: str) -> None:
        self.setup, self.check, self.says = setup, check, says
        self.k: Kernel | None = None

    def get(self) -> Kernel:
        if self.k is not None and self.k.km.is_alive():
            r = self.k.run(self.check, timeout=60)
            if r.status == "ok" and self.says in r.stdout:
                return self.k
        self.close()
        k = self.k = new_kernel()
        r = k.run(self.setup, timeout=120)
        assert r.status == "ok", r.error_text + r.stderr
        return k

    def close(self) -> None:
        k, self.k = self.k, None
        if k is not None:
            if k.km.is_alive():
                k.shutdown()
            assert wait_until_gone(f"hvd-{k.pid}-") == []


@pytest.fixture(scope="module")
def _module_pool_kernel(request: pytest.FixtureRequest) -> Iterator[PoolKernel]:
    m = request.module
    shared = PoolKernel(m.POOL_SETUP, m.POOL_CHECK, m.POOL_CHECK_SAYS)
    try:
        yield shared
    finally:
        shared.close()


@pytest.fixture
def pool_kernel(_module_pool_kernel: PoolKernel) -> Kernel:
    """A kernel with a healthy pool as the module's POOL_SETUP left it (class PoolKernel): the test before's if it
    left it so."""
    return _module_pool_kernel.get()


# The files that take 20 s or more on 2 cores, longest first (a serial run's --durations summed per file, from 216 s
# down): with several workers they start first, so that no worker draws a long one at the end and holds the run up.
LONG_FILES = (
    "test_ui_run_view",
    "test_torch_distributed",
    "test_faults",
    "test_where_and_debug",
    "test_attacks",
    "test_horovod_in_cells",
    "test_keep_campaign",
    "test_ui_training_view",
    "test_keep_everyday",
    "test_ui_journey",
    "test_failure_paths",
    "test_live_view",
    "test_resize",
    "test_keep",
    "test_never_hangs",
    "test_replays",
    "test_warm_start",
    "test_sidebar_ui",
    "test_kernel",
    "test_keep_failures",
    "test_ui_latency",
    "test_sidebar_frontend",
    "test_sidebar_actions",
    "test_sidebar_resize",
    "test_latency",
    "test_server",
    "test_keep_writes",
    "test_ui_live_view",
    "test_ui_notebook7",
    "test_straggler",
    "test_quickstart",
    "test_slurm",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """With several workers (pytest-xdist's -n, as scripts/test.sh runs), LONG_FILES go first, in that order; each
    file's tests keep theirs. A run on one worker keeps the files' order."""
    if not getattr(config.option, "numprocesses", None):
        return

    def rank(item: pytest.Item) -> int:
        name = item.path.stem
        return LONG_FILES.index(name) if name in LONG_FILES else len(LONG_FILES)

    items.sort(key=rank)  # stable: the others keep their order
