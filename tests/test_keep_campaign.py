"""The restart campaign (jupyter_hvd/testing/keep_campaign.py): at least 30 random cycles of kept objects times failure
points; every rank's state after each equals the state at a commit, or what did not come back is named.

`HVD_KEEP_CYCLES=100 bash scripts/test.sh -k keep_campaign` for more; the figures: bench/RESULTS.md, Restart campaign.
"""

from __future__ import annotations

import os

import pytest
from conftest import new_kernel, wait_until_gone

from jupyter_hvd.testing.keep_campaign import campaign


@pytest.mark.timeout(900)  # 30 cycles of restarts: about 3-5 minutes on 2 cores
def test_every_restart_brings_back_each_ranks_state_or_names_what_it_could_not(tmp_path):
    cycles = int(os.environ.get("HVD_KEEP_CYCLES", "30"))
    k = new_kernel()
    try:
        r = k.run("%load_ext jupyter_hvd\n%config HvdPool.live_view = 'off'\n%hvd_start -np 2", timeout=120)
        assert r.status == "ok", r.error_text
        out = campaign(k, cycles, seed=20261127, state=tmp_path)
    finally:
        k.shutdown()
    assert wait_until_gone(f"hvd-{k.pid}-") == []
    summary = f"{out.cycles} cycles in {out.seconds:.0f} s: {out.by_kind}"
    assert out.cycles == cycles, summary
    assert not out.silent and not out.errors, "\n".join([summary, *out.errors, *out.silent])
