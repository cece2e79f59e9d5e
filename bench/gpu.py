"""NCCL allreduce in a GPU pool (one rank per GPU): latency and bus bandwidth, against the GPU's own copy bandwidth.

    python bench/gpu.py [--iters 50]

Without a CUDA GPU it prints why it skipped and writes that to bench/results/gpu.json. Bus bandwidth uses NCCL's
convention (bytes * 2 (n-1)/n / time; n/a for one rank, where the latency is Horovod's own per-op cycle, not NCCL's);
the algorithm bandwidth is bytes / time; the copy bandwidth is a device-to-device copy of the same buffer (bytes read
plus bytes written, per second), the ceiling a single GPU's allreduce is held against.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import report, result_of, setup_env

SIZES = [64 << 10, 1 << 20, 16 << 20, 64 << 20, 256 << 20]

MEASURE = """
import json, time
out = {}
for nbytes in SIZES:
    t = torch.ones(nbytes // 4, device=device)
    for i in range(3):
        hvd.allreduce(t, name=f"gpu.warm.{nbytes}.{i}", op=hvd.Sum)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for i in range(ITERS):
        hvd.allreduce(t, name=f"gpu.ar.{nbytes}", op=hvd.Sum)
    torch.cuda.synchronize()
    ar = (time.perf_counter() - t0) / ITERS
    dst = torch.empty_like(t)
    dst.copy_(t)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for i in range(ITERS):
        dst.copy_(t)
    torch.cuda.synchronize()
    out[nbytes] = (ar, (time.perf_counter() - t0) / ITERS)
if rank == 0:
    print("RESULT " + json.dumps(out), flush=True)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=50)
    args = parser.parse_args()
    setup_env()
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if not gpus:
        report("gpu", [{"skipped": "no CUDA GPU on this machine (torch.cuda.is_available() is False)"}], ["skipped"])
        return
    from jupyter_hvd.testing import Kernel

    k = Kernel()
    try:
        k.run("%load_ext jupyter_hvd\n%config HvdPool.live_view = 'off'")
        r = k.run(f"%hvd_start -np {gpus}", timeout=600)
        assert r.status == "ok", r.stdout + r.error_text
        r = k.run("%%hvd\n" + MEASURE.replace("SIZES", repr(SIZES)).replace("ITERS", str(args.iters)), timeout=600)
        assert r.status == "ok", r.error_text
        result = result_of(r.stdout.replace("[rank 0] ", ""))
        k.run("%hvd_stop")
    finally:
        k.shutdown()
    rows = []
    for nbytes, (ar_s, copy_s) in ((int(n), v) for n, v in result.items()):
        # NCCL's bus bandwidth counts bytes crossing between GPUs: none with one rank (n/a there, not 0).
        busbw = nbytes * 2 * (gpus - 1) / gpus / ar_s / 1e9 if gpus > 1 else None
        rows.append(
            {
                "size": f"{nbytes >> 10} KB" if nbytes < (1 << 20) else f"{nbytes >> 20} MB",
                "ranks": gpus,
                "nccl_allreduce_ms": ar_s * 1e3,
                "alg_bw_GBps": nbytes / ar_s / 1e9,
                "bus_bw_GBps": busbw,
                "copy_bw_GBps": 2 * nbytes / copy_s / 1e9,
            }
        )
    report("gpu", rows, list(rows[0]), {"device": torch.cuda.get_device_name(0)})


if __name__ == "__main__":
    main()
