"""Failure paths found by reading the code (issue 23), each shown on a real pool: ranks that decide differently
whether Horovod may rest never block each other.
"""

from __future__ import annotations

import time

from conftest import Kernel, wait_until_gone


def test_ranks_that_disagree_about_resting_never_block_each_other():
    k = Kernel()
    try:
        r = k.run("%load_ext jupyter_hvd\n%config HvdPool.live_view = 'text'\n%hvd_start -np 2", timeout=120)
        assert r.status == "ok", r.error_text
        # Rank 0's environment now forbids a rest (a tuning variable Horovod cannot start again with); rank 1's not.
        r = k.run("%%hvd\nimport os\nif rank == 0:\n    os.environ['HOROVOD_FUSION_THRESHOLD'] = '1048576'")
        assert r.status == "ok", r.error_text
        time.sleep(4)  # idle past --rest-after: the kernel asks every rank to rest
        t0 = time.monotonic()
        r = k.run("%%hvd\nprint('sum', hvd.allreduce(torch.ones(1), op=hvd.Sum, name='after').item())", timeout=60)
        assert r.status == "ok" and "sum 2.0" in r.stdout, r.stdout + r.error_text
        assert time.monotonic() - t0 < 10
    finally:
        k.shutdown()
    assert wait_until_gone(f"hvd-{k.pid}-") == []
