"""The notebook side of the two-host test, run inside host A's network namespace by tests/test_multihost.py.

Drives an in-process IPython shell with jupyter_hvd loaded, like a user typing cells, and reports each step as one
`@@ {json}` line on stdout; rank 0's streamed output lands on stdout between them. It waits for a line on stdin
where the test must change the network first.
"""

from __future__ import annotations

import json
import signal
import sys
import time
from dataclasses import asdict

# A dist.all_reduce, and which keys tests/store_attacker.py tried to plant are in the store the ranks use.
TORCH_CHECK = """from torch.distributed import distributed_c10d as c10d
t = torch.tensor([rank + 1.0])
dist.all_reduce(t)
total = t.item()
rendezvous = c10d._get_default_store().underlying_store
planted = [key for key in ("planted", "start-2/planted") if rendezvous.check([key])]
"""


def emit(event: str, **data: object) -> None:
    print("@@ " + json.dumps({"event": event, **data}), flush=True)


def main() -> None:
    from IPython.testing.globalipapp import start_ipython

    from jupyter_hvd.kernel import owner as pools

    start_line = sys.argv[1]
    # A kernel takes SIGINT as KeyboardInterrupt while a cell runs; this process may have inherited it ignored
    # (pytest started in the background by a non-interactive shell), so ask for it as a kernel would.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    ip = start_ipython()
    ip.run_line_magic("load_ext", "jupyter_hvd")

    def run(line: str | None = None, cell: str | None = None) -> str:
        """Run a line or cell magic; return '' on success, else the error as the user would read it."""
        try:
            if cell is None:
                ip.run_line_magic(*line.split(" ", 1))
            else:
                ip.run_cell_magic("hvd", "", cell)
        except Exception as exc:
            render = getattr(exc, "_render_traceback_", None)
            return "\n".join(render()) if render else f"{type(exc).__name__}: {exc}"
        return ""

    def pull(name: str) -> list[object]:
        pool = pools.current()
        return [pool.client[r.engine_id].pull(name, block=True) for r in pool.ranks]

    def allreduce_check() -> None:
        err = run(cell="import socket\ntotal = hvd.allreduce(torch.tensor([rank + 1.0]), op=hvd.Sum).item()\n")
        emit("allreduce", error=err, total=pull("total") if not err else None)

    def torch_check() -> None:
        """A dist.all_reduce, and whether the keys an attacker tried to plant are in the store the ranks use."""
        err = run(cell=TORCH_CHECK)
        emit("torch", error=err, total=pull("total") if not err else None, planted=pull("planted") if not err else None)

    def served_rendezvous() -> dict[str, str] | None:
        """Where the kernel serves the ranks' store, and its public key: what an attacker may learn (None: no such)."""
        served = getattr(pools.current(), "_rendezvous", None)
        return None if served is None else {"endpoint": served.info()["endpoint"], "server": served.server_public}

    t0 = time.monotonic()
    err = run("hvd_start " + start_line)
    pool = pools.current()
    emit(
        "started",
        error=err,
        seconds=time.monotonic() - t0,
        ranks=[asdict(r) for r in pool.ranks] if pool else [],
        table=pool.table() if pool else "",
    )
    if err:
        return
    allreduce_check()
    if "--short" in sys.argv[2:]:  # start, one allreduce, stop
        emit("stopped", error=run("hvd_stop "))
        return
    if "--torch" in sys.argv[2:]:  # the process group: checked, the test looks at (or attacks) it, restart, checked
        torch_check()
        emit("waiting", rendezvous=served_rendezvous())
        sys.stdin.readline()
        t0 = time.monotonic()
        err = run("hvd_restart ")
        emit("restarted", error=err, seconds=time.monotonic() - t0)
        if not err:
            torch_check()
        emit("stopped", error=run("hvd_stop "))
        return

    # Long cells: the test interrupts the first (Ctrl-C), and removes host B's link while the second runs.
    loop = "import time\nfor i in range(3000):\n    hvd.allreduce(torch.ones(1))\n    print(f'step {i}', flush=True)\n"
    t0 = time.monotonic()
    err = run(cell=loop + "    time.sleep(0.05)\n")
    emit("interrupted", error=err, seconds=time.monotonic() - t0)
    allreduce_check()

    t0 = time.monotonic()
    err = run(cell=loop + "    time.sleep(0.05)\n")
    emit("cut_cell", error=err, seconds=time.monotonic() - t0)

    emit("waiting")  # the test restores the link, then answers
    sys.stdin.readline()
    t0 = time.monotonic()
    err = run("hvd_restart ")
    pool = pools.current()
    emit("restarted", error=err, seconds=time.monotonic() - t0, ranks=[asdict(r) for r in pool.ranks] if pool else [])
    if not err:
        allreduce_check()
    status = run("hvd_stop ")
    emit("stopped", error=status)


if __name__ == "__main__":
    main()
