"""The crash-and-restore notebook runs to the end in a real kernel: a rank dies at epoch 4, the pool comes back with
the model, optimizer and epoch of the last commit, and the same cell trains epochs 5 and 6 only."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
from nbclient import NotebookClient

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "03_crash_and_restore.ipynb"


def test_the_crash_notebook_comes_back_and_finishes_training(tmp_path):
    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    crashed, again = (c for c in nb.cells if c.cell_type == "code" and "while epoch < 6" in c.source)
    error = "".join("".join(o.get("traceback", [])) for o in crashed.outputs if o.output_type == "error")
    assert "died on signal 9" in error and "restored model, opt, epoch from commit() in cell" in error, error
    printed = "".join(o.get("text", "") for o in again.outputs if o.output_type == "stream")
    assert re.findall(r"epoch (\d+) loss", printed) == ["5", "6"], printed
    accuracy = float(re.search(r"accuracy after epoch 6: ([0-9.]+)", printed).group(1))
    assert accuracy > 0.8, printed
    assert (tmp_path / "train_digits.py").exists()
