"""Progress bars and loops feed the live view with no change to the cell (jupyter_hvd/engine/cell/progress.py).

Real tqdm with the engines' hooks installed, in this process; what the hooks would send to the kernel is caught
where it leaves (outbox.send_metrics). The same on a real pool: tests/test_live_view.py.
"""

from __future__ import annotations

import io
import sys
import types
from collections.abc import Iterator
from typing import Any

import pytest

from jupyter_hvd.engine import outbox
from jupyter_hvd.engine.cell import progress, report


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[dict[str, Any]]]:
    """The records report() publishes, with a cell running (each test its own cell number)."""
    records: list[dict[str, Any]] = []
    monkeypatch.setattr(outbox, "send_metrics", lambda batch: records.extend(batch))
    cell = types.SimpleNamespace(cell=id(records), rank=0, count=1)
    monkeypatch.setattr(outbox, "channel", cell)
    progress.install()
    yield records
    report.flush()


def flushed(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    report.flush()
    return [r for r in records if "pace" not in r]


def test_tqdm_auto_draws_a_text_bar_on_the_engines(monkeypatch: pytest.MonkeyPatch) -> None:
    import IPython  # noqa: F401 - tqdm.autonotebook asks IPython which front end it runs in

    monkeypatch.setitem(sys.modules, "ipykernel.zmqshell", types.ModuleType("ipykernel.zmqshell"))  # as on an engine
    monkeypatch.delitem(sys.modules, "tqdm.auto", raising=False)
    monkeypatch.delitem(sys.modules, "tqdm.autonotebook", raising=False)
    progress.install()
    from tqdm.auto import tqdm
    from tqdm.std import tqdm as text_tqdm

    assert issubclass(tqdm, text_tqdm)
    assert "notebook" not in tqdm.__module__ and not any("notebook" in c.__module__ for c in tqdm.__mro__)


def test_set_postfix_gives_exact_metrics_at_the_step_the_loop_is_at(sent: list[dict[str, Any]]) -> None:
    from tqdm import tqdm

    bar = tqdm(range(30), desc="train", file=io.StringIO(), mininterval=0)
    for i in bar:
        bar.set_postfix(loss=1 / (i + 1), acc=f"{i / 30:.2f}", note="text is not a metric")
    records = flushed(sent)
    with_metrics = [r for r in records if r["m"]]
    assert [r["step"] for r in with_metrics] == list(range(1, 31))  # as the bar counts: 1..30
    assert [r["m"]["loss"] for r in with_metrics] == [1 / (i + 1) for i in range(30)]  # not the bar's rounded text
    assert with_metrics[3]["m"]["acc"] == 0.1 and "note" not in with_metrics[3]["m"]
    assert all(r["auto"] and r["total"] == 30 and r["desc"] == "train" for r in records)
    assert records[-1]["step"] == 30  # the bar's end


def test_a_bar_per_epoch_keeps_counting_and_the_status_follows_the_inner_bar(sent: list[dict[str, Any]]) -> None:
    from tqdm import tqdm, trange

    for epoch in trange(2, desc="epochs", file=io.StringIO(), mininterval=0):
        bar = tqdm(range(5), desc=f"epoch {epoch}", file=io.StringIO(), mininterval=0, leave=False)
        for _ in bar:
            bar.set_postfix(loss=0.5)
    records = flushed(sent)
    inner = [r for r in records if r["m"]]
    assert [r["step"] for r in inner] == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]  # the second epoch's bar counts on
    assert {r["desc"] for r in inner} == {"epoch 0", "epoch 1"}
    assert inner[-1]["total"] == 10
    while_inner = [r for r in records if r.get("desc", "").startswith("epoch ")]
    assert while_inner and all(r["step"] <= 10 for r in while_inner)


def test_a_reused_bar_counts_on_after_reset(sent: list[dict[str, Any]]) -> None:
    """PyTorch Lightning keeps one bar for every epoch and resets it."""
    from tqdm import tqdm

    bar = tqdm(total=4, file=io.StringIO(), mininterval=0)
    for _ in range(2):
        bar.reset(total=4)
        for _ in range(4):
            bar.update(1)
            bar.set_postfix({"train_loss": 0.25, "v_num": "0"})
    bar.close()
    steps = [r["step"] for r in flushed(sent) if r["m"]]
    assert steps == [1, 2, 3, 4, 5, 6, 7, 8]


def test_a_disabled_bar_still_reports_its_metrics(sent: list[dict[str, Any]]) -> None:
    """`tqdm(..., disable=rank != 0)`: the other ranks draw nothing, and the sidebar still has their loss."""
    from tqdm import tqdm

    bar = tqdm(range(3), disable=True)
    for _ in bar:
        bar.set_postfix(loss=2.0)
    assert [r["m"] for r in flushed(sent) if r["m"]] == [{"loss": 2.0}] * 3


def test_a_loop_over_a_range_gives_report_its_total(sent: list[dict[str, Any]]) -> None:
    steps, loader = 40, list(range(12))
    for step in range(steps):
        report.report(step=step, loss=1.0)
    for i, _batch in enumerate(loader):
        report.report(step=i, loss=1.0)
    for step in range(2, steps // 4, 1):
        report.report(step=step)
    for step in range(len(loader) * 2):
        report.report(step=step, total=7)  # a total said is the total
    records = flushed(sent)
    assert [r.get("total") for r in records] == [40] * 40 + [12] * 12 + [10] * 8 + [7] * 24


def test_a_loop_whose_bounds_are_not_plain_gives_no_total(sent: list[dict[str, Any]]) -> None:
    calls: list[int] = []

    def count() -> int:
        calls.append(1)
        return 3

    for step in range(count()):
        report.report(step=step)
    steps = [0, 1]
    for step in steps:
        report.report(step=step)
    assert [r.get("total") for r in flushed(sent)] == [None] * 5
    assert calls == [1]  # the loop's bounds were not evaluated again
