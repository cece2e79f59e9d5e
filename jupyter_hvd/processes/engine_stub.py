"""What mpiexec launches as a rank on the kernel's host: a few milliseconds of standard-library Python that has the
warm template (processes/template.py) fork the engine, or starts it cold as its own child, then stands in for it
towards mpiexec.

The engine forked from the template has torch, Horovod and ipyparallel's engine imported already (seconds a rank
otherwise spends before it registers). Either way the engine gets this process's stdin, stdout and stderr (so
mpiexec forwards its output as before) and environment (so MPI's init finds mpiexec's PMIx server and its rank).
This process passes on the signals mpiexec sends, writes how the engine ended to the pool's directory (the kernel's
report of a death: mpiexec, busy or stopped as a rank dies, was seen to reap it without a word), and ends as the
engine ended (its exit code, or the same signal), so mpiexec sees what it would have seen of the engine itself.

Run as `python -S path/to/engine_stub.py ENGINE_ARGS...`: no site, no package import, standard library only.
"""

from __future__ import annotations

import array
import os
import signal
import socket
import struct
import sys

TEMPLATE_ENV = "JUPYTER_HVD_TEMPLATE"  # the template's socket (kernel/launch/template.py sets it)
ENDED_ENV = "JUPYTER_HVD_ENDED"  # where to write how the engine ended: a file named by its pid, "<time> <wait status>"
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2, signal.SIGCONT)
CONNECT_S = 5.0  # a template that does not accept within this long is not there: start cold
STATUS = struct.Struct("!i")  # the template's answers: the engine's pid, then its wait status


def cold(args: list[str]) -> None:
    """Start the engine without the template, as this process's child, and stand in for it until it ends."""
    os.environ.pop(TEMPLATE_ENV, None)
    pid = os.fork()
    if pid == 0:
        try:
            import ctypes

            ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG: ends with this stub, as mpiexec's
        except (OSError, AttributeError):  # SIGKILL of the rank would end the engine itself
            pass
        os.environ.pop(ENDED_ENV, None)
        os.execv(sys.executable, [sys.executable, "-m", "jupyter_hvd.engine.main", *args])
    forward_signals(pid)
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    record(pid, status)
    end_as(status)


def forward_signals(pid: int) -> None:
    """Pass the signals mpiexec sends this process on to the engine `pid`."""

    def forward(signum: int, _frame: object) -> None:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass

    for sig in FORWARDED:
        signal.signal(sig, forward)


def record(pid: int, status: int) -> None:
    """How engine `pid` ended, for the kernel's report of a death (kernel/launch/launcher.py's death_report), written
    before this process ends and so before mpiexec can tell anyone of it."""
    directory = os.environ.get(ENDED_ENV)
    if not directory:
        return
    import time

    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        with open(os.path.join(directory, str(pid)), "w") as f:
            f.write(f"{time.time()} {status}")
    except OSError:
        pass  # the report falls back to mpiexec's words


def request(args: list[str]) -> bytes:
    """What the template reads: this process's environment, working directory and the engine's arguments."""
    env = {k: v for k, v in os.environ.items() if k != TEMPLATE_ENV}
    parts = [os.getcwd(), "\0".join(args), "\0".join(f"{k}={v}" for k, v in env.items())]
    body = "\x1e".join(parts).encode("utf-8", "surrogateescape")
    return struct.pack("!I", len(body)) + body


def read_exact(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            return b""
        data += chunk
    return data


def end_as(status: int) -> None:
    """Exit as the engine did: its code, or killed by its signal (so mpiexec reports the engine's own death)."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig not in (signal.SIGKILL, signal.SIGSTOP):  # (those two have no handler to reset)
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


def main() -> None:
    args = sys.argv[1:]
    path = os.environ.get(TEMPLATE_ENV, "")
    if not path:
        cold(args)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(CONNECT_S)
    try:
        sock.connect(path)
        fds = array.array("i", [0, 1, 2])
        sock.sendmsg([request(args)], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
        # The template answers once its imports are done (seconds on a busy machine when the pool starts with it).
        sock.settimeout(None)
        answer = read_exact(sock, STATUS.size)
    except OSError:
        answer = b""
    if not answer:  # no template, or it could not fork: nothing was started for this rank
        sock.close()
        cold(args)
    (pid,) = STATUS.unpack(answer)
    if pid <= 0:
        sock.close()
        cold(args)

    forward_signals(pid)
    # The engine watches this process: if mpiexec kills it (SIGKILL cannot be passed on), the engine ends too.
    while True:
        try:
            said = read_exact(sock, STATUS.size)
            break
        except InterruptedError:
            continue
    if not said:  # the template ended first: the engine is no longer its child; wait for it by its pid
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            os._exit(1)
        import select

        select.select([fd], [], [])
        os._exit(0)
    (status,) = STATUS.unpack(said)
    record(pid, status)
    end_as(status)


if __name__ == "__main__":
    main()
