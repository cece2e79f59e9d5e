"""The fault campaign's figures: cycles, hangs, longest time to end per fault, leaks, kernel memory growth.

.venv/bin/python bench/fault_campaign.py [--cycles 50] [--seed 20261124]
"""

from __future__ import annotations

import argparse

from common import report, setup_env

from jupyter_hvd.testing.faults import campaign

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cycles", type=int, default=50)
    parser.add_argument("--seed", type=int, default=20261124)
    args = parser.parse_args()
    setup_env()
    result = campaign(args.cycles, args.seed)  # its kernel has a runtime directory of its own
    rows = [{"fault": f, **t} for f, t in sorted(result["by_fault"].items())]
    totals = {k: v for k, v in result.items() if k not in ("by_fault", "outcomes")}
    report(
        "fault_campaign", rows, ["fault", "n", "median_s", "max_s"], {"totals": totals, "outcomes": result["outcomes"]}
    )
    print({k: v for k, v in totals.items() if k != "unexpected"}, "unexpected:", len(result["unexpected"]))
