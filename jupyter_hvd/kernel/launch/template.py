"""The kernel's warm template of engines (processes/template.py): started once, when the extension loads, and used by
every pool on this host whose engines could not tell a forked engine from a freshly started one. A kernel that finds
a ready template of another kernel of its user, started with the same Python, package and import-time environment,
borrows it instead (about 3 CPU-seconds and the memory of torch's import saved per kernel); where that kernel ends,
the next pool start makes its own.

Runs in the user's kernel. A pool's launch asks `engine_command` for what mpiexec runs per rank: on this host the stub
(processes/engine_stub.py), which has the template fork the engine where the template can serve the pool and else
starts it cold as its own child, and writes how the engine ended (`endings` reads it); on other hosts the engine
itself. A stub that finds no template starts the engine cold, so a template that died or never started costs time,
never a pool.
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil

from ... import state, wire
from ..channel import IPC_PATH_MAX

log = logging.getLogger("jupyter_hvd")

TEMPLATE_ENV = "JUPYTER_HVD_TEMPLATE"  # the stub's: where the template listens (processes/engine_stub.py)
ENDED_ENV = "JUPYTER_HVD_ENDED"  # the stub's: where it writes how its engine ended (processes/engine_stub.py)
ENGINE_CMD = [sys.executable, "-m", "jupyter_hvd.engine.main"]
STUB = Path(__file__).resolve().parents[2] / "processes" / "engine_stub.py"
# Horovod's negotiation waited for with naps (engine/horovod/negotiation.py), where scripts/setup.sh built it.
NEGOTIATION_LIBRARY = Path(__file__).resolve().parents[2] / "engine" / "horovod" / "libnegotiation.so"
# What Python or the loader read before the template's imports: an engine given other values must start cold.
# (OMP_NUM_THREADS is not among them: a forked engine sets its threads from it, processes/template.py.)
IMPORT_TIME = ("PYTHONPATH", "PYTHONHOME", "PYTHONNOUSERSITE", "PYTHONSAFEPATH", "LD_PRELOAD", "LD_LIBRARY_PATH")
IMPORT_TIME_PREFIXES = ("OMP_", "GOMP_", "KMP_", "MKL_")
# The template waits 1 s before its imports (processes/template.py's HOLD_S): a start asked within this long of the
# template's can still tell it to wait until the start is done.
HOLD_WITHIN_S = 0.75
# Where kernels find each other's templates: the state directory unless this names another of the user's own (the
# tests' kernels each have a runtime directory of their own and share their worker's template through it).
TEMPLATE_DIR_ENV = "JUPYTER_HVD_TEMPLATE_DIR"
KEY = "template.json"  # beside the socket: what a borrower must match (Python, package, MPI, namespaces, env)


def templates_dir() -> Path:
    """Where this kernel's template goes and where it looks for others' (TEMPLATE_DIR_ENV, else the state directory);
    raises state.UnsafeStateDir where others could write to it."""
    named = os.environ.get(TEMPLATE_DIR_ENV)
    if not named:
        return state.state_dir()
    state.check_private(Path(named))
    return Path(named)


def directory_of(where: Path, kernel_pid: int) -> Path:
    """The directory of kernel `kernel_pid`'s template: its socket, and the `ready` file it writes once warm
    (processes/template.py's READY). A symlink to the lender's directory where the kernel borrowed one."""
    return where / f"template-{kernel_pid}"


def import_time_env(env: dict[str, str]) -> dict[str, str]:
    """What of `env` Python or the loader reads when a process starts: a forked engine keeps the template's."""
    return {
        key: value
        for key, value in env.items()
        if key in IMPORT_TIME or (key.startswith(IMPORT_TIME_PREFIXES) and key != "OMP_NUM_THREADS")
    }


def package_dir() -> str:
    return str(Path(__file__).resolve().parents[2])


def namespaces() -> dict[str, str]:
    """This process's Linux namespaces: a forked engine lives in its template's (a kernel in another network
    namespace, as on a host made with `ip netns`, must not borrow one)."""
    found = {}
    for kind in ("net", "mnt", "pid", "ipc", "uts", "user", "cgroup"):
        try:
            found[kind] = os.readlink(f"/proc/self/ns/{kind}")
        except OSError:
            found[kind] = ""
    return found


def mpi_lib(mpiexec: str) -> str:
    """The library directory `mpiexec` puts first in its ranks' LD_LIBRARY_PATH (its installation's lib/)."""
    return str(Path(mpiexec).resolve().parents[1] / "lib")


class Template:
    """The template process of this kernel, and the socket its stubs reach it on."""

    def __init__(self) -> None:
        self.process: subprocess.Popen[bytes] | None = None  # this kernel's own; None where it borrowed one
        self.pid: int | None = None  # the template process, this kernel's or the one it borrowed
        self.directory: Path | None = None
        self.link: Path | None = None  # directory_of(this kernel) where it borrowed: a symlink to the lender's
        self.env: dict[str, str] = {}  # what it was started with (of a borrowed one: what is read at import)
        self.started_at = 0.0
        self.mpi_lib = ""  # the library directory of the mpiexec it was started for
        self.holding = False  # a start runs cold and the template waits for it before its imports

    @property
    def socket(self) -> str:
        return str(self.directory / "engines") if self.directory is not None else ""

    def start(self, mpiexec: str) -> None:
        """Start the template in the background (its imports take seconds on a core of their own); a second call
        while it lives does nothing. A failure is logged: pools then start their engines cold. `mpiexec`: the one
        that will launch the stubs."""
        if self.alive():
            return
        self.stop()  # (one that died: its directory and link go)
        try:
            where = templates_dir()
            if self.borrow(where, mpiexec):
                return
            directory = directory_of(where, os.getpid())
            if directory.is_symlink():
                directory.unlink()
            shutil.rmtree(directory, ignore_errors=True)
            directory.mkdir(mode=0o700)
            state.check_private(directory)
        except (OSError, state.UnsafeStateDir) as exc:
            log.debug("no warm template: %s", exc)
            return
        if len(str(directory / "engines")) > IPC_PATH_MAX:
            shutil.rmtree(directory, ignore_errors=True)
            return
        self.directory, self.env = directory, dict(os.environ)
        env = dict(os.environ)
        env.pop("PYTEST_CURRENT_TEST", None)
        # mpiexec gives its ranks its own library directory first in LD_LIBRARY_PATH, which the loader reads once, at
        # a process's start: the template must start with it, or a forked rank's MPI may not load (mpi4py without
        # Horovod, which would have loaded it).
        self.mpi_lib = mpi_lib(mpiexec)
        env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (self.mpi_lib, env.get("LD_LIBRARY_PATH")) if p)
        env[state.POOL_ENV] = "_" * 64  # room for a forked engine's pool id (processes/template.py's show_pool)
        # Listening before the template runs: a pool started at once has its stubs wait in the backlog, not miss it.
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(self.socket)
            listener.listen(64)
            self.process = subprocess.Popen(
                [sys.executable, "-m", "jupyter_hvd.processes.template", str(listener.fileno()), str(directory)],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env=env,
                pass_fds=(listener.fileno(),),
                start_new_session=True,  # a Ctrl-C in the kernel must not reach it (or the engines it forks)
            )
        except OSError as exc:
            log.debug("no warm template: %s", exc)
            self.stop()
            return
        finally:
            listener.close()
        self.pid = self.process.pid
        self.started_at = time.monotonic()
        key: dict[str, object] = {"pid": self.pid, "python": sys.executable, "package": package_dir()}
        key.update(mpi_lib=self.mpi_lib, namespaces=namespaces())
        try:
            state.write_json(directory / KEY, {**key, "env": import_time_env(self.env)})
        except OSError as exc:
            log.debug("the template cannot be lent: %s", exc)

    def borrow(self, where: Path, mpiexec: str) -> bool:
        """Use a ready template of another kernel in `where` that would fork engines as this kernel's own would."""
        wanted: dict[str, object] = {"python": sys.executable, "package": package_dir(), "mpi_lib": mpi_lib(mpiexec)}
        wanted["namespaces"] = namespaces()
        env = import_time_env(dict(os.environ))
        for directory in sorted(where.glob("template-*")):
            if directory.is_symlink() or directory.name == f"template-{os.getpid()}":
                continue  # another borrower's link; this kernel's own from before
            key = state.read_pool(directory / KEY)
            if not key or any(key.get(k) != v for k, v in wanted.items()) or key.get("env") != env:
                continue
            pid = key.get("pid")
            if not isinstance(pid, int) or not (directory / "ready").exists() or not is_template(pid):
                continue
            link = directory_of(where, os.getpid())
            try:
                link.unlink(missing_ok=True)
                link.symlink_to(directory)
            except OSError:
                return False
            self.pid, self.directory, self.link, self.env = pid, directory, link, env
            self.mpi_lib, self.started_at = mpi_lib(mpiexec), 0.0  # (never held: it is ready)
            return True
        return False

    def alive(self) -> bool:
        if self.process is not None:
            return self.process.poll() is None
        # A borrowed one: its directory goes when its kernel ends (it then serves no one new).
        return self.pid is not None and self.directory is not None and (self.directory / "engines").exists()

    def ready(self) -> bool:
        """Whether it lives and its imports are done (a pool started now waits for no import)."""
        return self.alive() and self.directory is not None and (self.directory / "ready").exists()

    def serves(self, env: dict[str, str], mpiexec: str) -> bool:
        """Whether engines with `env` (what the launch adds to this kernel's environment), launched by `mpiexec`, can
        come from the template: it lives, and nothing read at a process's start differs from what it started with."""
        if not self.alive() or mpi_lib(mpiexec) != self.mpi_lib:
            return False
        return import_time_env({**os.environ, **env}) == import_time_env(self.env)

    @contextmanager
    def aside(self) -> Iterator[None]:
        """For a pool's start: where the template has not begun its imports (the start comes right after `%load_ext`,
        as in a notebook run top to bottom), the ranks start cold and the template waits until the block ends.
        Measured on 2 cores: 3.4 s from `%load_ext` through a cold start, 4.4 s waiting for the template's imports,
        5.2 s with both importing at once (bench/RESULTS.md)."""
        held = self.alive() and time.monotonic() - self.started_at < HOLD_WITHIN_S and self._say(b"h")
        self.holding = held
        try:
            yield
        finally:
            if held:
                self.holding = False
                self._say(b"g")

    def _say(self, word: bytes) -> bool:
        try:
            self.process.stdin.write(word)  # type: ignore[union-attr]
            self.process.stdin.flush()  # type: ignore[union-attr]
        except (OSError, ValueError, AttributeError):
            return False
        return True

    def engine_command(self, env: dict[str, str], mpiexec: str, local: bool, wanted: bool, ended: Path) -> list[str]:
        """The command mpiexec runs per rank. `local` (every rank runs on this host): the stub, which writes how its
        engine ended to `ended` (endings() reads it), with the template's socket in `env` where `wanted` (the pool's
        c.HvdPool.warm_start) and the template can serve the pool; elsewhere the engine itself."""
        if not local:
            return list(ENGINE_CMD)
        env[ENDED_ENV] = str(ended)
        if wanted and not self.holding and self.serves(env, mpiexec):
            env[TEMPLATE_ENV] = self.socket
        # Every rank waits in Horovod's negotiation with naps, or none: ranks started cold load the wrapper before
        # Horovod themselves, but those the template forks have it only if the template loaded it before its imports.
        if NEGOTIATION_LIBRARY.is_file() and (TEMPLATE_ENV not in env or self.has_loaded(NEGOTIATION_LIBRARY)):
            env.setdefault(wire.NEGOTIATION_NAPS_ENV, "1")
        return [sys.executable, "-S", str(STUB)]

    def has_loaded(self, library: Path) -> bool:
        """Whether the template process has `library` loaded (its memory map names it)."""
        if self.pid is None:
            return False
        try:
            with open(f"/proc/{self.pid}/maps") as maps:
                return any(line.rstrip().endswith(str(library)) for line in maps)
        except OSError:
            return False

    def stop(self) -> None:
        """End the template (its pipe closes; engines it forked live on with their pools)."""
        process, self.process, self.pid = self.process, None, None
        if process is not None:
            try:
                process.stdin.close()  # type: ignore[union-attr]
                process.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                if not serving_engines(process.pid):  # (engines of kernels that borrowed it: it ends after them)
                    process.kill()
            if self.directory is not None:
                shutil.rmtree(self.directory, ignore_errors=True)
        if self.link is not None:  # a borrowed one lives on with its kernel
            self.link.unlink(missing_ok=True)
        self.directory = self.link = None


def serving_engines(pid: int) -> bool:
    """Whether template `pid` has forked engines still running."""
    try:
        return bool(psutil.Process(pid).children())
    except psutil.Error:
        return False


def is_template(pid: int) -> bool:
    """Whether process `pid` is a template (processes/template.py) of this user."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            command = f.read()
        return os.stat(f"/proc/{pid}").st_uid == os.getuid() and b"jupyter_hvd.processes.template" in command
    except OSError:
        return False


template = Template()  # one per kernel
atexit.register(template.stop)


def endings(directory: Path | None, pids: list[int]) -> dict[int, tuple[float, int]]:
    """How those of the engines `pids` whose stubs wrote to `directory` ended: pid -> (when, wait status)."""
    found: dict[int, tuple[float, int]] = {}
    if directory is None:
        return found
    for pid in pids:
        try:
            when, status = (directory / str(pid)).read_text().split()
            found[pid] = (float(when), int(status))
        except (OSError, ValueError):
            continue
    return found


def forget_endings(directory: Path | None, pids: list[int]) -> None:
    """Those engines' endings were reported (or their pool stopped): their files go."""
    if directory is not None:
        for pid in pids:
            (directory / str(pid)).unlink(missing_ok=True)
