"""A warm template of engines: one process per kernel that has imported torch, Horovod and ipyparallel's engine and
made a first optimizer, and forks a ready engine for each rank mpiexec launches (processes/engine_stub.py).

A rank's start was mostly imports: about 2.5 CPU-seconds a rank, two ranks on two cores, before it could register
(bench/start_phases.py). Forked from here, a rank starts with all of it done and shares the pages of it with its
peers. Nothing here starts a thread, opens a zmq context or initialises MPI or CUDA before a fork: a forked child
gets only the calling thread, and MPI's and CUDA's state cannot be shared. The child then takes the stub's stdio and
environment, and becomes ipyparallel's engine as `python -m jupyter_hvd.engine.main` would.

Started by the kernel (kernel/launch/template.py) with a pipe on stdin: its end (the kernel exited) ends the
template once the engines it forked have ended (they may be other kernels', which borrowed it); it serves no one new
meanwhile. Each engine is tied to its stub, and so to mpiexec and the pool's reaper.
Usage: `python -m jupyter_hvd.processes.template FD DIRECTORY` (FD: the listening socket, inherited; DIRECTORY: where
it says it is ready).
"""

from __future__ import annotations

import array
import os
import select
import selectors
import signal
import socket
import struct
import sys
import threading
from dataclasses import dataclass

from jupyter_hvd.state import POOL_ENV

STATUS = struct.Struct("!i")  # as processes/engine_stub.py reads them: the engine's pid, then its wait status
PLACEHOLDER = "_"  # the template's JUPYTER_HVD_POOL is made of these, room for a forked engine's pool id
HOLD_S = 1.0  # how long it waits for the kernel's HOLD before its imports (kernel/launch/template.py)
GO = b"g"  # the kernel's word that the start it held for is done
READY = "ready"  # written beside the socket once the imports and the warm-up are done
WARM_ENV = "JUPYTER_HVD_WARM_ENGINE"  # set in a forked engine: its stub's pid (engine/bootstrap.py reads it)


@dataclass
class Request:
    """What a stub sent: where and how the engine must run, and the stub's stdio to give it."""

    stub_pid: int
    cwd: str
    args: list[str]
    env: dict[str, str]
    fds: list[int]
    threads: int = 0  # torch's default number of threads, which the template set to 1


def import_engine() -> int:
    """The imports every rank would otherwise do while it starts (engine/main.py's preload); returns torch's default
    number of threads."""
    from jupyter_hvd.engine.horovod import negotiation

    negotiation.load()  # before Horovod's library, switched off: each forked rank switches it on if its pool says so
    try:
        import horovod.torch  # noqa: F401  (MPI is initialised in the engine, by hvd.init())
    except ImportError:
        pass  # a set-up where Horovod did not build: pools run torch.distributed alone
    import ipyparallel.engine.app  # noqa: F401
    import torch

    import jupyter_hvd.engine.main  # noqa: F401

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread: OpenMP's pool must not exist when a rank is forked
    return threads


def warm_up() -> None:
    """A first forward, backward and optimizer step (the bootstrap's CPU warm-up): the first optimizer imports
    torch._dynamo (1-4 s), oneDNN and the first traceback's formatting start at first use. Done while no rank
    waits: an engine forked before it does its own, in its preload thread, as one started cold."""
    import torch

    from jupyter_hvd.engine import bootstrap

    bootstrap.warm_up(torch, torch.device("cpu"))


def read_request(conn: socket.socket) -> Request | None:
    """One request (engine_stub.request's format) with the stub's three descriptors; None if it is not one."""
    fds = array.array("i")
    head, ancillary, _flags, _addr = conn.recvmsg(4, socket.CMSG_SPACE(3 * fds.itemsize))
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - (len(data) % fds.itemsize)])
    if len(head) != 4 or len(fds) != 3:
        for fd in fds:
            os.close(fd)
        return None
    (size,) = struct.unpack("!I", head)
    body = b""
    while len(body) < size:
        chunk = conn.recv(size - len(body))
        if not chunk:
            return None
        body += chunk
    cwd, args, env = body.decode("utf-8", "surrogateescape").split("\x1e")
    pid, uid, _gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    if uid != os.getuid():  # the socket's directory is private; a stranger's request is refused all the same
        for fd in fds:
            os.close(fd)
        return None
    variables = dict(item.split("=", 1) for item in env.split("\0") if "=" in item)
    return Request(pid, cwd, [a for a in args.split("\0") if a], variables, list(fds))


def end(directory: str) -> None:
    """The kernel is gone (its pipe ended): remove the socket's directory and exit. Engines forked from here live on,
    each tied to its stub."""
    import shutil

    shutil.rmtree(directory, ignore_errors=True)
    os._exit(0)


def hold(directory: str) -> None:
    """Wait HOLD_S before the imports, and longer if the kernel says so: a pool started right after `%load_ext`
    has its ranks import for themselves (two cores beat one), and this process would only slow them down."""
    ready, _, _ = select.select([sys.stdin], [], [], HOLD_S)
    if not ready:
        return
    said = os.read(sys.stdin.fileno(), 64)
    while said and not said.endswith(GO):
        said = os.read(sys.stdin.fileno(), 64)
    if not said:
        end(directory)


def serve(fd: int, directory: str) -> Request:
    """Answer stubs on the listening socket `fd` until the kernel's pipe ends (then exit); returns only in a forked
    child, with its request."""
    # The kernel bound and listens on it before starting this process: stubs that come while the imports run wait
    # in its backlog.
    listener = socket.socket(fileno=fd)
    hold(directory)
    threads = import_engine()
    warm = False
    closing = False  # the kernel that started it is gone
    children: dict[int, tuple[socket.socket, int]] = {}  # pidfd -> (the stub's connection, the engine's pid)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, "listener")
    selector.register(sys.stdin.fileno(), selectors.EVENT_READ, "kernel")
    while True:
        events = selector.select(None if warm else 0.2)
        if not events and not warm:  # no rank waits: warm up now
            warm_up()
            warm = True
            open(os.path.join(directory, READY), "w").close()  # the kernel's template.ready()
        for key, _ in events:
            if key.data == "kernel":  # (a late HOLD or GO: too late to matter)
                if os.read(sys.stdin.fileno(), 4096):
                    continue
                if not children:
                    end(directory)
                # Engines forked for kernels that borrowed this template still run: it serves no one new, and stays
                # to tell their stubs how each ends (the report of a death), then exits with the last.
                import shutil

                shutil.rmtree(directory, ignore_errors=True)
                selector.unregister(listener)
                selector.unregister(sys.stdin.fileno())
                listener.close()
                closing = warm = True
            elif key.data == "listener":
                if closing:
                    continue
                conn, _ = listener.accept()
                conn.settimeout(5.0)  # a stub sends its request at once: one that does not must not hold the others
                try:
                    request = read_request(conn)
                except OSError:
                    request = None
                if request is None:
                    conn.close()
                    continue
                conn.settimeout(None)
                pid = os.fork()
                if pid == 0:
                    selector.close()
                    listener.close()
                    for stub, _engine in children.values():
                        stub.close()
                    for fd in children:
                        os.close(fd)
                    conn.close()
                    request.threads = threads
                    return request
                for fd in request.fds:
                    os.close(fd)
                pidfd = os.pidfd_open(pid)
                children[pidfd] = (conn, pid)
                selector.register(pidfd, selectors.EVENT_READ, "child")
                try:
                    conn.sendall(STATUS.pack(pid))
                except OSError:
                    pass  # the stub is gone: the engine sees that and ends
            else:
                pidfd = key.fd
                conn, pid = children.pop(pidfd)
                selector.unregister(pidfd)
                os.close(pidfd)
                _, status = os.waitpid(pid, 0)  # the stub records it (processes/engine_stub.py)
                try:
                    conn.sendall(STATUS.pack(status))
                except OSError:
                    pass
                conn.close()
                if closing and not children:
                    os._exit(0)


def watch_stub(pid: int) -> None:
    """End this engine when its stub ends: mpiexec's SIGKILL of a rank reaches the stub only."""
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        os.kill(os.getpid(), signal.SIGKILL)
        return

    def wait() -> None:
        import select

        select.select([fd], [], [])
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=wait, name="jupyter-hvd stub watch", daemon=True).start()


def show_pool(pool_id: str) -> None:
    """Write the pool's id into the placeholder the kernel gave the template (kernel/launch/template.py).

    The kernel, its reaper and the tests find a pool's processes by JUPYTER_HVD_POOL in /proc/PID/environ, which
    shows the environment a process was started with, not os.environ: a forked engine would show the template's.
    The placeholder's bytes are that environment's, so the id written there is what /proc shows."""
    import ctypes

    prefix = f"{POOL_ENV}=".encode()
    environ = ctypes.POINTER(ctypes.c_char_p).in_dll(ctypes.CDLL(None), "environ")
    i = 0
    while environ[i] is not None:
        entry = environ[i]
        if entry.startswith(prefix) and set(entry[len(prefix) :]) == {ord(PLACEHOLDER)}:
            room = len(entry) - len(prefix)
            value = pool_id.encode()[:room].ljust(room, b"\0")
            address = ctypes.cast(environ, ctypes.POINTER(ctypes.c_void_p))[i]
            ctypes.memmove(address + len(prefix), value, room)
            return
        i += 1


def become_engine(request: Request) -> None:
    """In the forked child: take the stub's place, then run the engine as engine/main.py's main would."""
    show_pool(request.env.get(POOL_ENV, ""))
    for target, fd in enumerate(request.fds):  # sys.stdin, stdout and stderr are these descriptors from now on
        os.dup2(fd, target)
        os.close(fd)
    os.setpgid(0, 0)  # out of the template's group: a signal for the template is not one for its engines
    os.environ.clear()
    os.environ.update(request.env)  # MPI's init reads mpiexec's PMIx variables from here, at hvd.init()
    os.environ[WARM_ENV] = str(request.stub_pid)  # where this rank came from (its launch time, in the bootstrap)
    if sys.path and sys.path[0] == os.getcwd():  # `python -m` put the template's directory first, a cold engine its own
        sys.path[0] = request.cwd  # (that of a kernel that borrowed the template may be another)
    os.chdir(request.cwd)
    import jupyter_hvd.engine.main as engine

    # As `python -m jupyter_hvd.engine.main ARGS` has it, in the stub's directory: ipyparallel changes to its
    # work_dir, whose default is the directory it was imported in (the template's).
    sys.argv = [engine.__file__, f"--work-dir={request.cwd}", *request.args]
    threads = os.environ.get("OMP_NUM_THREADS", "")
    import numpy
    import torch

    numpy.random.seed()  # each rank its own stream, as a freshly started process has
    # torch read OMP_NUM_THREADS at the template's import: what a rank started cold would have.
    torch.set_num_threads(int(threads) if threads.isdigit() and int(threads) > 0 else request.threads)
    watch_stub(request.stub_pid)

    engine.main()


def main() -> None:
    request = serve(int(sys.argv[1]), sys.argv[2])
    become_engine(request)


if __name__ == "__main__":
    main()
