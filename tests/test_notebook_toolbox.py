"""notebooks/02_horovod_toolbox.ipynb runs to the end in a real kernel on 2 ranks, and shows what it promises."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import nbformat
from conftest import wait_until_gone
from nbclient import NotebookClient

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "02_horovod_toolbox.ipynb"


def cell_text(cell) -> str:
    parts = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            parts.append(out["text"])
        elif "data" in out and "text/plain" in out["data"]:
            parts.append(out["data"]["text/plain"])
    return "".join(parts)


def test_toolbox_notebook_runs_to_the_end(tmp_path):
    work = tmp_path / "notebooks"
    work.mkdir()
    shutil.copy(NOTEBOOK, work / NOTEBOOK.name)
    nb = nbformat.read(work / NOTEBOOK.name, as_version=4)
    client = NotebookClient(
        nb, kernel_name="python3", timeout=240, resources={"metadata": {"path": str(work)}}, allow_errors=False
    )
    pool_id = None
    try:
        client.execute()
    finally:
        texts = [cell_text(c) for c in nb.cells if c.cell_type == "code"]
        found = re.search(r"Pool (hvd-\d+-\d+)", "".join(texts))
        pool_id = found.group(1) if found else None
        if pool_id:
            assert wait_until_gone(pool_id) == []  # %hvd_stop (or the kernel's shutdown) left no process
    out = "\n".join(texts)
    assert pool_id, out[:2000]

    # Training converged with fp16 gradients and a warmed-up learning rate.
    accuracies = [float(a) for a in re.findall(r"epoch \d+: .*test accuracy ([\d.]+)%", out)]
    assert len(accuracies) == 6 and accuracies[-1] >= 90.0, accuracies
    assert "lr 0.100" in out  # base_lr * size after warm-up
    # allgather and broadcast_object, seen on both ranks.
    assert "[rank 1] 148 own predictions, 297 gathered; settings chosen on rank 0" in out
    # hvd.join with one batch fewer on rank 1.
    assert "[rank 0] ran 24 batches; the last rank to join was rank 0" in out
    assert "[rank 1] ran 23 batches; the last rank to join was rank 0" in out
    assert "activations in torch.bfloat16, gradients in torch.float32" in out
    assert "Adasum: [1.0, 1.0]" in out and "fp16 average: inf" in out and "divided before the sum: 40000.0" in out
    # The timeline summary names the model's tensors and points at the trace file.
    assert "allreduce.hidden.weight" in out and "allreduce.out.bias" in out
    trace = re.search(r"Full trace .*?: (\S+\.json)", out).group(1)
    assert Path(trace).is_file() and Path(trace).parent == work / "hvd_timelines"
    # Resume after %hvd_restart: both ranks hold exactly the saved weights and momentum.
    saved = re.search(r"saved epoch 21 .*weights digest (-?[\d.]+), test accuracy ([\d.]+)%", out)
    resumed = re.findall(
        r"\[rank (\d)\] resumed at epoch 21; weights digest (-?[\d.]+), momentum digest (-?[\d.]+), "
        r"lr 0.100 after 144 steps, test accuracy ([\d.]+)%",
        out,
    )
    assert saved and len(resumed) == 2, out[-3000:]
    assert {r[1] for r in resumed} == {saved.group(1)}
    assert resumed[0][2] == resumed[1][2] and float(resumed[0][2]) != 0.0
    assert {r[3] for r in resumed} == {saved.group(2)}
    # The re-wrapped optimizer was noticed and the step still worked.
    assert "already a hvd.DistributedOptimizer" in out
    assert "zero_grad(set_to_none=True): fine" in out
