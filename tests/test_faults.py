"""A pool that never hangs: a seeded random fault campaign on a real 2-rank pool in a real kernel
(jupyter_hvd/testing/faults.py: raise, uneven collectives, mismatched names, exit, sys.exit, os._exit, SIGSTOP/SIGCONT,
SIGKILL, the stop button), each followed by a healthy cell.

HVD_FAULT_CYCLES (default 50) and HVD_FAULT_SEED (default 20261124) set the length and the draw; a longer soak:
`HVD_FAULT_CYCLES=300 bash scripts/test.sh -k faults`, or `bench/fault_campaign.py --cycles 300` for the figures.
"""

from __future__ import annotations

import os

import pytest

from jupyter_hvd.testing.faults import campaign


# 50 cycles, a third of them ending in a restart of the pool: about 4 minutes on 2 quiet cores, more beside other work.
# Each cycle has its own bound in the campaign; this only ends a campaign that went wrong as a whole.
@pytest.mark.timeout(900)
def test_faults_never_hang_the_notebook():
    cycles = int(os.environ.get("HVD_FAULT_CYCLES", "50"))
    seed = int(os.environ.get("HVD_FAULT_SEED", "20261124"))
    result = campaign(cycles, seed)
    for name, t in sorted(result["by_fault"].items()):
        print(f"  {name:<20} n={t['n']:<3} median {t['median_s']:.2f} s  max {t['max_s']:.2f} s")
    print(
        f"faults: {cycles} cycles, {result['hung']} hung, {len(result['unexpected'])} unexpected, "
        f"{result['leaked_processes']} leaked, kernel RSS +{result['kernel_rss_growth_mb']:.1f} MB"
    )
    if cycles >= 40:
        assert len(result["by_fault"]) >= 7, result["by_fault"]  # the draw covers most fault kinds
    for o in result["outcomes"]:
        late = "" if o["ended"] else "HUNG" if not o["within_bound"] else ""
        late = late or ("" if o["within_bound"] else "(over its bound)")
        print(f"  cycle {o['cycle']:<3} {o['fault']:<20} {o['seconds']:.2f} s {late}")
    assert result["hung"] == 0, [o for o in result["outcomes"] if not o["ended"]]
    assert result["unexpected"] == [], [str(o) for o in result["unexpected"][:2]]
    assert result["leaked_processes"] == 0
    assert result["kernel_rss_growth_mb"] < 64


def test_faults_in_torch_distributed_collectives_never_hang_the_notebook():
    """The same campaign on a --torch-distributed pool, in dist.all_reduce: every kind once, then at random."""
    cycles = int(os.environ.get("HVD_TORCH_FAULT_CYCLES", "12"))
    result = campaign(cycles, 20261127, torch_distributed=True)
    for o in result["outcomes"]:
        late = "" if o["ended"] else "HUNG" if not o["within_bound"] else ""
        late = late or ("" if o["within_bound"] else "(over its bound)")
        print(f"  cycle {o['cycle']:<3} {o['fault']:<20} {o['seconds']:.2f} s {late}")
    assert result["hung"] == 0, [o for o in result["outcomes"] if not o["ended"]]
    assert result["unexpected"] == [], [str(o) for o in result["unexpected"][:2]]
    assert result["leaked_processes"] == 0
