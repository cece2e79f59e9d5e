"""Several notebooks on one machine, each starting and stopping its pool at the same time: does every start work?

K real kernels (each with the extension loaded, as a user's after `%load_ext`), in K threads, each `--starts` times:
`%hvd_start -np 2`, an allreduce cell, `%hvd_stop`. Counts the starts that failed and times the ones that worked.
Before the cell channel stopped its monitors before closing them, a kernel whose ranks left as its channel closed
lost its ZeroMQ I/O thread, and each of its later starts failed ("ranks 0-1 did not connect to the kernel's cell
channel"): 3 of 45 starts here with 3 kernels.

    python bench/concurrent_pools.py [--kernels 3] [--starts 15] [--cold]
"""

from __future__ import annotations

import argparse
import threading
import time
from typing import Any

from common import report, setup_env, summary

CELL = "%%hvd\nprint('sum', hvd.allreduce(torch.ones(1), op=hvd.Sum, name='x').item())"


def notebook(starts: int, warm: bool, out: dict[str, Any]) -> None:
    from jupyter_hvd.testing import Kernel

    k = Kernel()
    try:
        k.run(f"%config HvdPool.warm_start = {warm}\n%config HvdPool.live_view = 'text'").check()
        for _ in range(starts):
            t = time.monotonic()
            r = k.run("%hvd_start -np 2 --timeout 40", timeout=120)
            if r.status == "ok" and "sum 2.0" in k.run(CELL, timeout=60).stdout:
                out["seconds"].append(time.monotonic() - t)
            else:
                out["failed"].append((r.error_text + r.stderr)[-300:])
            k.run("%hvd_stop", timeout=60)
    finally:
        k.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", type=int, default=3)
    parser.add_argument("--starts", type=int, default=15)
    parser.add_argument("--cold", action="store_true", help="c.HvdPool.warm_start = False")
    args = parser.parse_args()
    setup_env()
    results = [{"seconds": [], "failed": []} for _ in range(args.kernels)]
    threads = [
        threading.Thread(target=notebook, args=(args.starts, not args.cold, out), daemon=True) for out in results
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rows = []
    for i, out in enumerate(results):
        row: dict[str, Any] = {"kernel": i, "starts": args.starts, "failed": len(out["failed"])}
        if out["seconds"]:
            row["start + cell median (s)"] = summary(out["seconds"])["median"]
        rows.append(row)
    for out in results:
        for text in out["failed"][:1]:
            print("a failed start said:", text.strip().splitlines()[-1] if text.strip() else "(nothing)")
    report("concurrent_pools", rows, ["kernel", "starts", "failed", "start + cell median (s)"], vars(args))


if __name__ == "__main__":
    main()
