"""The test harness, shared by tests/ and bench/: a real IPython kernel driven as a notebook front end drives it
(kernel.py), the fault campaigns (faults.py, keep_campaign.py). The extension itself never imports it."""

from .kernel import CellResult, Kernel

__all__ = ["CellResult", "Kernel"]
