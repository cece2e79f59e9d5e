"""The quickstart notebook runs to the end in a real kernel and trains a useful model on 2 CPU ranks."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
from nbclient import NotebookClient

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "01_quickstart.ipynb"


def test_quickstart_notebook_trains_to_high_accuracy(tmp_path):
    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    text = "".join(
        o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "stream"
    )
    losses = [float(x) for x in re.findall(r"epoch \d+ loss=([0-9.]+)", text)]
    assert len(losses) == 8, text
    assert losses[-1] < losses[0] / 5, losses  # it learned
    accuracy = float(re.search(r"accuracy in the notebook: ([0-9.]+)", text).group(1))
    assert accuracy > 0.9, text  # chance is 0.1; measured 0.94 on 2 CPU ranks
    assert (tmp_path / "digits_checkpoint.pt").exists()  # rank 0 wrote the checkpoint


def test_the_torch_distributed_notebook_trains_with_ddp_then_fsdp2(tmp_path):
    nb = nbformat.read(NOTEBOOK.with_name("04_torch_distributed.ipynb"), as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    text = "".join(
        o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "stream"
    )
    for name in ("DDP", "FSDP2"):
        losses = [float(x) for x in re.findall(rf"{name} epoch \d+ loss=([0-9.]+)", text)]
        assert len(losses) == 6 and losses[-1] < losses[0] / 3, (name, losses)
    found = re.search(r"accuracy in the notebook: DDP ([0-9.]+), FSDP2 ([0-9.]+)", text)
    assert found and float(found.group(1)) > 0.9 and float(found.group(2)) > 0.9, text
    assert "this rank holds 32 of fc1's 64 rows" in text, text
