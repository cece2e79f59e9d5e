"""The live training view of a `%%hvd` cell: in a real kernel on a real 2-rank pool, and its pure logic."""

from __future__ import annotations

import base64
import itertools
import re
import threading
import time
from array import array
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import CellResult, Kernel, new_kernel

from jupyter_hvd.digest import Digest
from jupyter_hvd.metrics import parse_line
from jupyter_hvd.widgets.curves import Curves
from jupyter_hvd.widgets.live_view import UPDATES_PER_S
from jupyter_hvd.widgets.log import LogBuffer
from jupyter_hvd.widgets.static_plot import MIME

# ---- pure logic ------------------------------------------------------------------------------------------------


def test_a_tqdm_bar_stays_one_line_and_finished_lines_are_capped() -> None:
    log, digest = LogBuffer(max_lines=5), Digest()
    finished = []
    for i in range(101):
        chunk = digest.feed(0, "stderr", f"\r{i:3d}%|{'#' * (i // 10):10s}| {i}/100")
        log.add(chunk)
        finished += chunk.lines
    log.add(digest.feed(0, "stdout", "".join(f"epoch {e} done\n" for e in range(8))))
    delta = log.take_delta()
    assert delta is not None
    assert delta.partials == [("100%|##########| 100/100", "stderr", 0)]  # the bar: one line, its latest state
    assert [text for text, _, _ in delta.append] == [f"epoch {e} done" for e in range(3, 8)]  # the last 5
    assert delta.total == 8
    assert len(finished) == 100  # each rewritten bar state was handed out once, for parsing
    assert not any(line.ended for line in finished)  # rewritten, not ended: the log keeps only the latest
    assert log.take_delta() is None  # nothing new: nothing to send


def test_carriage_return_newline_ends_a_line_and_lines_keep_their_rank() -> None:
    log, digest = LogBuffer(max_lines=10, prefix_ranks=True), Digest()
    log.add(digest.feed(1, "stdout", "a\r\nb"))
    log.add(digest.feed(1, "stdout", "c\n"))
    assert log.take_delta().append == [("a", "stdout", 1), ("bc", "stdout", 1)]  # the view draws rank 1's lane
    assert log.tail(2) == ["[rank 1] a", "[rank 1] bc"]  # plain text says whose they are


def test_explicit_reports_replace_the_curve_parsed_from_prints() -> None:
    curves = Curves(ranks=2)
    curves.add_printed(parse_line("step 1 loss=5.0 acc=0.1"))
    curves.add_printed(parse_line("step 2 loss=4.0 acc=0.2"))
    curves.add_reports(0, [{"t": 1.0, "step": 2.0, "m": {"loss": 0.5}}])
    curves.add_printed(parse_line("step 3 loss=3.0 acc=0.3"))
    loss, acc = curves.curves["loss@0"], curves.curves["acc@0"]
    assert (loss.source, loss.xs, loss.ys, loss.reset) == ("report", [2.0], [0.5], True)
    assert acc.ys == [0.1, 0.2, 0.3]  # not reported: printed values still count


def test_printed_steps_that_restart_each_epoch_keep_the_x_axis_increasing() -> None:
    curves = Curves(ranks=1)
    for epoch in range(2):
        for step in (100, 200, 300):
            curves.add_printed(parse_line(f"Epoch [{epoch + 1}/2], Step [{step}/300], Loss: 0.5"))
    assert curves.curves["loss@0"].xs == [100, 200, 300, 400, 500, 600]


def test_the_x_axis_is_what_the_lines_say_and_metrics_without_a_position_take_the_last_one() -> None:
    curves = Curves(ranks=1)
    curves.add_printed(parse_line("Train Epoch: 1 [30000/60000 (50%)]\tLoss: 0.5"))
    curves.add_printed(parse_line("Test set: Average loss: 0.4, Accuracy: 90%"))
    curves.add_printed(parse_line("Train Epoch: 2 [30000/60000 (50%)]\tLoss: 0.3"))
    loss, test = curves.curves["loss@0"], curves.curves["test_loss@0"]
    assert (loss.x_kind, loss.xs) == ("epoch", [1.5, 2.5])
    assert (test.x_kind, test.xs) == ("epoch", [1.5])  # at the epoch the test ran after
    timed = Curves(ranks=1)
    timed.add_printed(parse_line("loss=2.0"), now=timed.started + 3.0)
    assert (timed.curves["loss@0"].x_kind, timed.curves["loss@0"].xs) == ("time", [3.0])


def test_report_wins_over_a_progress_bar_which_wins_over_printed_lines() -> None:
    curves = Curves(ranks=2)
    curves.add_printed(parse_line("step 1 loss=5.0"))
    curves.add_reports(0, [{"t": 1.0, "step": 1.0, "total": 9, "desc": "train", "auto": True, "m": {"loss": 4.0}}])
    assert (curves.curves["loss@0"].source, curves.curves["loss@0"].ys) == ("progress", [4.0])
    assert (curves.step, curves.total, curves.desc) == (1.0, 9, "train")
    curves.add_reports(0, [{"t": 2.0, "step": 100.0, "total": 500, "m": {"loss": 0.5}}])
    curves.add_reports(0, [{"t": 3.0, "step": 2.0, "total": 9, "auto": True, "m": {"loss": 3.0}}])
    curves.add_printed(parse_line("step 3 loss=2.0"))
    assert (curves.curves["loss@0"].source, curves.curves["loss@0"].ys) == ("report", [0.5])
    assert (curves.step, curves.total) == (100.0, 500)  # the user's own count sets the status line


def test_several_shown_ranks_give_a_curve_each_and_rank_0_the_status() -> None:
    curves = Curves(ranks=2, plot_ranks=[0, 1])
    curves.add_reports(0, [{"t": 1.0, "step": 0.0, "m": {"loss": 1.0}}])
    curves.add_reports(1, [{"t": 1.0, "step": 0.0, "m": {"loss": 2.0}}])
    curves.add_printed(parse_line("step 5 acc=0.5"), rank=1)
    assert sorted(curves.curves) == ["acc@1", "loss@0", "loss@1"]
    assert curves.step == 0.0 and curves.latest == {"loss": 1.0}
    only_0 = Curves(ranks=2)
    only_0.add_reports(1, [{"t": 1.0, "step": 0.0, "m": {"loss": 2.0}, "samples": 8}])
    assert not only_0.curves  # rank 1's values count for samples/s only


def test_the_finished_views_image_has_whole_step_ticks_a_named_axis_and_ends_at_the_last_value() -> None:
    from jupyter_hvd.widgets.curves import Curve
    from jupyter_hvd.widgets.static_plot import panel_svg

    ys = [2.0 / (1 + s / 3) for s in range(7)]
    svg = panel_svg("loss", [Curve("loss", "print", 0, "epoch", xs=[float(s) for s in range(7)], ys=ys)], [0])
    assert svg is not None
    ticks = re.findall(r'text-anchor="middle"[^>]*>([^<]+)</text>', svg)
    assert ticks[-1] == "epoch" and ticks[:-1] and all(t.isdigit() for t in ticks[:-1]), ticks
    assert "smoothed" not in svg  # 7 points: drawn as they are
    assert f"loss {ys[-1]:.4g}" in svg  # the legend says the last value


def test_the_finished_view_is_valid_json_with_gaps_as_null() -> None:
    import json

    from jupyter_hvd.widgets.curves import Curve
    from jupyter_hvd.widgets.static_plot import MIME, SAVED_POINTS, saved_bundle

    ys = [1.0, float("nan"), float("inf"), *[1 / (i + 1) for i in range(20_000)]]
    curve = Curve("loss", "report", 0, "step", xs=[float(i) for i in range(len(ys))], ys=ys)
    log = {"append": [("done", "stdout", 0)], "partials": [], "total": 1}
    bundle = saved_bundle([curve], ["all"], {"state": "done"}, "finished", log, ["done"], 0, [0])
    data = json.loads(json.dumps(bundle[MIME], allow_nan=False))
    (saved,) = data["curves"]
    assert saved["y"][1] is None and saved["y"][2] is None and saved["points"] == len(ys)
    assert len(saved["y"]) <= SAVED_POINTS + 2 and saved["y"][-1] == ys[-1] and saved["x"][-1] == len(ys) - 1


def test_samples_per_second_adds_up_every_rank() -> None:
    curves = Curves(ranks=2)
    for rank in (0, 1):
        curves.add_reports(rank, [{"t": t / 10, "step": float(t), "samples": 32, "m": {}} for t in range(11)])
    assert curves.samples_per_second() == pytest.approx(2 * 320)
    declared = Curves(ranks=2, batch_size=16)
    for t in range(11):
        declared.add_printed(parse_line(f"step {t} loss=1"), now=t / 10)
    assert declared.samples_per_second() == pytest.approx(10 * 16 * 2)
    assert declared.eta_seconds() is None  # no total known


def test_steps_that_arrive_in_one_flush_show_no_rate() -> None:
    curves = Curves(ranks=2, batch_size=16)
    curves.total = 100
    for t in range(20):  # a short cell: its 20 printed lines reached the kernel within 2 ms
        curves.add_printed(parse_line(f"step {t} loss=1"), now=5.0 + t / 10_000)
    assert curves.step == 19
    assert curves.steps_per_second() is None and curves.samples_per_second() is None and curves.eta_seconds() is None


def test_updates_are_coalesced_and_carry_every_point_and_line_once(capsys: pytest.CaptureFixture[str]) -> None:
    from jupyter_hvd.widgets.live_view import UPDATES_PER_S, LiveView

    view = LiveView(ranks=2, show_ranks=[0], log_lines=100_000, plots=["loss"])
    view.show()
    sent: list[tuple[float, dict[str, Any], list[bytes]]] = []
    assert view.widget is not None
    view.widget.send = lambda content, buffers=None: sent.append((time.monotonic(), content, buffers or []))
    t0, digest = time.monotonic(), Digest()
    for i in range(3000):
        view.output(digest.feed(0, "stdout", f"step {i} loss={1 / (i + 1):.6f}\n"))
        if i % 3 == 0:
            view.metrics(1, [{"t": time.time(), "samples": 8, "m": {"loss": 9.0}}])  # rank 1: not plotted
        time.sleep(0.0005)
    view.close(ok=True)
    elapsed = time.monotonic() - t0
    assert len(sent) <= elapsed * UPDATES_PER_S + 2
    xs, lines = [], []
    for _, content, buffers in sent:
        for k, curve in enumerate(content["curves"]):
            assert curve["start"] == len(xs)  # each point crosses the wire once, in order
            xs += array("d", buffers[2 * k])
        if content["log"]:
            lines += [text for text, _, _ in content["log"]["append"]]
    assert xs == list(range(3000))
    assert lines == [f"step {i} loss={1 / (i + 1):.6f}" for i in range(3000)]
    assert sent[-1][1]["status"]["state"] == "done"
    # A page reloaded later asks for a full copy: the finished cell's elapsed time must not have grown.
    final = sent[-1][1]["status"]["elapsed"]
    time.sleep(0.3)
    assert view.status()["elapsed"] == final
    capsys.readouterr()


def test_a_slow_copy_never_holds_back_an_update(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The copy in the notebook is built on a thread of its own: while a long run's copy is being made (here one that
    does not end until the test lets it), the lines the view shows still go out. How long a line waits:
    bench/live_view_overhead.py's print-to-widget latency."""
    from jupyter_hvd.widgets import live_view

    monkeypatch.setattr(live_view, "COPY_EVERY_S", 0.01)
    view = live_view.LiveView(ranks=2, show_ranks=[0], log_lines=1000, plots=["loss"])
    view.show()
    assert view.widget is not None
    arrived: list[str] = []

    def send(content: dict[str, Any], buffers: Any = None) -> None:
        arrived.extend(text for text, _, _ in (content["log"] or {}).get("append", []))

    view.widget.send = send
    real = live_view.saved_bundle
    copying, release = threading.Event(), threading.Event()
    held_up: list[bool] = []  # a copy that was not let go: the lines waited for it (or the test failed meanwhile)

    def slow(*args: Any, **kwargs: Any) -> dict[str, Any]:
        copying.set()
        held_up.append(not release.wait(20))
        return real(*args, **kwargs)

    monkeypatch.setattr(live_view, "saved_bundle", slow)
    monkeypatch.setattr(live_view, "update_display", lambda *args, **kwargs: None)
    digest = Digest()
    lines = [f"step {i} loss=1" for i in range(60)]
    try:
        for i, line in enumerate(lines):
            view.output(digest.feed(0, "stdout", line + "\n"))
            if i == 0:
                assert copying.wait(10), "no copy was started while the lines came"
            time.sleep(0.005)
        deadline = time.monotonic() + 10
        while len(arrived) < len(lines) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert arrived == lines, f"{len(arrived)} of {len(lines)} lines went out while a copy was being made"
    finally:
        release.set()
        view.close(ok=True)
    assert not any(held_up), "the lines went out only once the copy gave up"
    capsys.readouterr()


def test_report_batches_records_off_the_training_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    from jupyter_hvd.engine import outbox
    from jupyter_hvd.engine.cell import report as engine_report

    published: list[list[dict[str, Any]]] = []
    monkeypatch.setattr(outbox, "send_metrics", published.append)
    t0 = time.monotonic()
    for step in range(300):
        engine_report.report(step=step, loss=1.0 / (step + 1), samples=4, acc=0.5)
        time.sleep(0.002)
    engine_report.flush()
    elapsed = time.monotonic() - t0
    records = [r for batch in published for r in batch]
    assert [r["step"] for r in records] == list(range(300))
    assert records[10]["m"] == {"acc": 0.5, "loss": pytest.approx(1 / 11)} and records[10]["samples"] == 4
    assert len(published) <= elapsed * engine_report.PUBLISH_HZ + 2


def test_report_rejects_what_is_not_a_number() -> None:
    from jupyter_hvd import report

    with pytest.raises(TypeError, match=r"report\(loss=...\) needs a number"):
        report(step=1, loss="low")


# ---- a real kernel and a real 2-rank pool ----------------------------------------------------------------------


def saved_outputs(run: CellResult, until: float | None = None) -> list[Any]:
    """The cell's outputs as the notebook saves them (at `until`, or at the end): each display, updated in place by
    update_display_data."""
    import nbformat

    outputs: list[Any] = []
    by_id: dict[str, Any] = {}
    for t, m in run.messages:
        if until is not None and t > until:
            break
        content = m["content"]
        display_id = (content.get("transient") or {}).get("display_id")
        if m["msg_type"] == "display_data":
            out = nbformat.v4.new_output("display_data", data=content["data"], metadata=content["metadata"])
            outputs.append(out)
            if display_id:
                by_id[display_id] = out
        elif m["msg_type"] == "update_display_data" and display_id in by_id:
            by_id[display_id]["data"] = content["data"]
    return outputs


@pytest.fixture(scope="module")
def live() -> Iterator[Kernel]:
    """A real kernel whose %%hvd cells show the live widget, with a 2-rank pool; both stopped afterwards."""
    k = new_kernel()
    try:
        k.run("%load_ext jupyter_hvd\n%config HvdPool.live_view = 'widget'\n%hvd_start -np 2", timeout=180).check()
        yield k
    finally:
        try:
            k.run("%hvd_stop", timeout=60)
        finally:
            k.shutdown()


TRAIN = """%%hvd {options}
import sys, time
from jupyter_hvd import report
for step in range({steps}):
    time.sleep(0.02)
    report(step=step, loss=(rank + 1) * 10.0 / (step + 1), samples=16{average})
    sys.stderr.write(f"\\r{{step + 1}}/{steps} [{{'#' * (step * 20 // {steps}):20s}}]")
    if step % 25 == 0:
        print(f"\\x1b[32mstep {{step}}\\x1b[0m", flush=True)
print("done")
"""


def test_the_plot_grows_while_the_cell_runs_and_the_log_keeps_up(live: Kernel) -> None:
    run = live.run(TRAIN.format(options="", steps=150, average=""))
    assert run.error is None, run.error_text
    updates = run.updates
    assert updates, "no live updates were sent"
    first_point = next(t for t, content, _ in updates if content["curves"])
    assert run.finished - first_point > 1.5, "points only arrived at the end of the cell"
    xs, ys = run.points("loss")
    assert xs == list(range(150))  # every step, once, in order
    assert ys == pytest.approx([10.0 / (s + 1) for s in range(150)])  # rank 0's values
    span = updates[-1][0] - updates[0][0]
    # Batched under load: at most UPDATES_PER_S a second (plus the leading update after a quiet spell).
    assert len(updates) <= span * UPDATES_PER_S + 3, f"{len(updates)} updates in {span:.1f} s"
    appended = [text for _, c, _ in updates if c["log"] for text, _, _ in c["log"]["append"]]
    assert [a for a in appended if "step" in a] == [f"\x1b[32mstep {s}\x1b[0m" for s in range(0, 150, 25)]
    assert not [a for a in appended if "/150 [" in a][:-1], "the progress bar became many lines"
    bars = [c["log"]["partials"] for _, c, _ in updates if c["log"] and c["log"]["partials"]]
    assert len(bars) > 5 and all(len(b) == 1 for b in bars)  # one line, rewritten in place
    status = updates[-1][1]["status"]
    assert status["state"] == "done" and status["ranks"] == 2 and status["step"] == 149
    # No total was given: `for step in range(150)` around report(step=step) gives it, and so an ETA.
    assert status["total"] == 150
    assert any(c["status"]["eta"] is not None for _, c, _ in updates if c["status"]["state"] == "running")
    assert status["samples_per_s"] > 0
    assert run.stdout == "", "output went to the plain stream as well as the live view"
    (widget,) = [m for _, m in run.of("display_data")]
    assert "application/vnd.jupyter.widget-view+json" in widget["content"]["data"]
    # When the cell ends, the output becomes the finished view: one output, no widget left.
    final = run.of("update_display_data")[-1][1]
    assert final["content"]["transient"]["display_id"] == widget["content"]["transient"]["display_id"]
    data = final["content"]["data"]
    assert "application/vnd.jupyter.widget-view+json" not in data
    assert "data:image/svg+xml;base64," in data["text/html"] and "done" in data["text/plain"]
    view = data[MIME]
    (loss,) = view["curves"]
    assert loss["x"] == list(range(150)) and loss["y"][-1] == pytest.approx(10.0 / 150)
    assert run.of("comm_close"), "the widget was not closed"


TQDM = """%%hvd
import time
from tqdm.auto import tqdm
bar = tqdm(range(40), desc="train")
for i in bar:
    time.sleep(0.02)
    bar.set_postfix(loss=(rank + 1) / (i + 1))
"""


def test_a_tqdm_bar_fills_the_plot_the_status_and_every_ranks_loss_in_the_sidebar(live: Kernel) -> None:
    run = live.run(TQDM)
    assert run.error is None, run.error_text
    xs, ys = run.points("loss")
    assert xs == list(range(1, 41)) and ys == pytest.approx([1 / (i + 1) for i in range(40)])  # exact, rank 0's
    status = run.updates[-1][1]["status"]
    assert (status["step"], status["total"], status["desc"]) == (40, 40, "train")
    shown = [m["content"]["data"] for _, m in run.of("display_data")]
    assert len(shown) == 1, "tqdm.auto displayed a notebook widget from an engine"
    bars = [p for _, c, _ in run.updates if c["log"] for p in c["log"]["partials"]]
    assert bars and "train:" in bars[-1][0], "the text bar is drawn in the log"
    deadline, losses = time.monotonic() + 10, {}
    while time.monotonic() < deadline and losses != {0: 1 / 40, 1: 2 / 40}:
        pool = live.pool()
        losses = {r["rank"]: r["loss"] for r in pool["ranks"]}
        time.sleep(0.2)
    assert losses == pytest.approx({0: 1 / 40, 1: 2 / 40}), "every rank's loss in the sidebar"


def test_average_true_plots_the_mean_of_the_ranks(live: Kernel) -> None:
    run = live.run(TRAIN.format(options="", steps=20, average=", average=True"))
    assert run.error is None, run.error_text
    xs, ys = run.points("loss")
    assert xs == list(range(20))
    # rank 0 reports 10/(s+1), rank 1 reports 20/(s+1): their mean.
    assert ys == pytest.approx([15.0 / (s + 1) for s in range(20)])


def test_printed_metrics_plot_with_no_code_change(live: Kernel) -> None:
    code = (
        "%%hvd --plot loss,acc\nimport time\nfor epoch in range(6):\n"
        "    time.sleep(0.05)\n    print(f'Epoch {epoch}: loss={1 / (epoch + 1):.3f} acc={epoch / 10:.2f}')\n"
    )
    run = live.run(code)
    assert run.points("loss") == ([0, 1, 2, 3, 4, 5], pytest.approx([1, 0.5, 0.333, 0.25, 0.2, 0.167]))
    assert run.points("acc")[1] == pytest.approx([0, 0.1, 0.2, 0.3, 0.4, 0.5])


def test_no_plot_sends_the_log_but_no_points(live: Kernel) -> None:
    run = live.run("%%hvd --no-plot\nprint('loss=1.0')\nprint('loss=0.5')")
    assert all(not c["curves"] for _, c, _ in run.updates)
    assert [t for _, c, _ in run.updates if c["log"] for t, _, _ in c["log"]["append"]] == ["loss=1.0", "loss=0.5"]


def test_the_saved_notebook_shows_the_final_curve_without_widgets(live: Kernel) -> None:
    import nbformat
    from nbconvert import HTMLExporter

    source = TRAIN.format(options="", steps=30, average="")
    run = live.run(source)
    outputs = saved_outputs(run)
    assert len(outputs) == 1 and not any("widget" in mime for mime in outputs[0]["data"])  # no widget left
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source, outputs=outputs)])
    nbformat.validate(nb)  # the saved data is valid JSON (no NaN)
    html, _ = HTMLExporter().from_notebook_node(nb)
    image = re.search(r'alt="loss curve"[^>]*src="data:image/svg\+xml;base64,([A-Za-z0-9+/=]+)"', html)
    assert image, "the saved notebook's HTML has no loss curve"
    svg = base64.b64decode(image[1]).decode()
    smoothed, raw = re.findall(r'data-metric="loss@0" points="([^"]+)"', svg)
    assert len(raw.split()) == len(smoothed.split()) == 30  # every step of the curve, raw and smoothed
    assert "30/30 [" in html and "done" in html  # the end of the log
    assert "finished · 2 ranks · step 29" in html  # the status


def test_a_kernel_without_a_widget_front_end_streams_text_and_keeps_a_final_plot(live: Kernel) -> None:
    live.run("%config HvdPool.live_view = 'text'")
    try:
        run = live.run(TRAIN.format(options="", steps=40, average=""))
    finally:
        live.run("%config HvdPool.live_view = 'widget'")
    assert not run.updates and not run.of("comm_open")
    assert "step 25" in run.stdout and "done" in run.stdout
    (final,) = [m["content"]["data"] for _, m in run.of("display_data")]
    assert "data:image/svg+xml;base64," in final["text/html"]
    assert "loss" in final["text/plain"]


def test_a_failed_cell_ends_the_view_as_stopped_and_shows_the_error(live: Kernel) -> None:
    run = live.run(
        "%%hvd\nimport time\nprint('loss=1.0', flush=True)\ntime.sleep(0.3)\nif rank == 1:\n    raise KeyError('boom')"
    )
    assert run.updates[-1][1]["status"]["state"] == "failed"
    assert run.error and "KeyError" in run.error_text
    (final,) = saved_outputs(run)
    assert "stopped (error or interrupt)" in final["data"]["text/plain"]
    assert final["data"][MIME]["status"]["state"] == "failed"


def test_every_failed_cell_ends_with_the_same_status_line(live: Kernel) -> None:
    """A quick NameError (no view shown yet) and a ValueError after some output end alike: a status line, then the
    error."""
    quick = live.run("%%hvd\nundefined_name")
    late = live.run("%%hvd\nimport time\nprint('working', flush=True)\ntime.sleep(0.3)\nraise ValueError('boom')")
    statuses = []
    for run in (quick, late):
        assert run.error is not None
        (final,) = saved_outputs(run)
        statuses.append(final["data"][MIME]["status"])
        assert final["data"]["text/plain"].splitlines()[-1].startswith("[jupyter-hvd] stopped (error or interrupt)")
    assert [s["state"] for s in statuses] == ["failed", "failed"]
    assert not quick.of("comm_open"), "a quick failed cell needs no widget for its status line"


def test_a_quick_silent_cell_shows_no_view_and_a_long_one_does(live: Kernel) -> None:
    quick = live.run("%%hvd\nimport torch\nmodel = torch.nn.Linear(4, 2)")
    assert not quick.of("comm_open") and not quick.of("display_data") and quick.error is None
    slow = live.run("%%hvd\nimport time\ntime.sleep(1.6)")
    opened = min(t for t, _ in slow.of("comm_open"))  # the widget (and its ipywidgets layout)
    assert slow.finished - opened > 0.3  # shown while the cell still ran, not at its end
    assert slow.updates[-1][1]["status"]["state"] == "done"


def test_a_silent_cell_says_it_runs_from_its_first_second(live: Kernel) -> None:
    """A cell that prints nothing (a stuck collective, a long data load) shows its status line within a second: the
    output and the widget's first update come at once, with the state and the ranks."""
    run = live.run("%%hvd\nimport time\ntime.sleep(2.5)")
    shown, first = run.of("display_data")[0]
    assert shown - run.started < 0.8, f"the view came {shown - run.started:.2f} s after the cell started"
    assert first["content"]["data"][MIME]["status"]["state"] == "running"  # the copy already says it runs
    t, update, _ = run.updates[0]
    assert t - run.started < 0.8 and update["status"]["state"] == "running" and update["status"]["ranks"] == 2


def test_a_notebook_saved_mid_run_holds_the_run_up_to_then(live: Kernel) -> None:
    """From its first moment the output is a copy of the view (data, SVG, text) with the widget beside it, refreshed
    while the cell runs: a notebook saved at any moment (autosave) holds the plot and the log up to a few seconds
    before, and no widget is needed to show them. At the end: the final copy, without the widget."""
    import nbformat
    from nbconvert import HTMLExporter

    from jupyter_hvd.widgets.live_view import COPY_EVERY_S

    source = TRAIN.format(options="", steps=300, average="")  # about 6 s
    run = live.run(source)
    assert run.error is None, run.error_text
    (first,) = [m["content"]["data"] for _, m in run.of("display_data")]
    assert {MIME, "text/html", "text/plain", "application/vnd.jupyter.widget-view+json"} <= set(first)
    assert first[MIME]["view_id"]  # the live widget's view: the renderer draws its data while it is on the page
    copies = [(t, m["content"]["data"]) for t, m in run.of("update_display_data")]
    *mid_run, (_, final) = copies
    assert len(mid_run) >= 2, "the copy was not refreshed while the cell ran"
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(copies)]
    assert max(gaps[:-1]) < COPY_EVERY_S + 1.5, gaps  # never much older than COPY_EVERY_S
    saved_at = mid_run[len(mid_run) // 2][0] + 0.1  # a save in the middle of the run
    (saved,) = saved_outputs(run, until=saved_at)
    view = saved["data"][MIME]
    assert view["status"]["state"] == "running" and 0 < len(view["curves"][0]["x"]) < 300
    assert view["log"]["append"] and "saved while running" in saved["data"]["text/plain"]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source, outputs=[saved])])
    nbformat.validate(nb)
    html, _ = HTMLExporter().from_notebook_node(nb)
    assert 'alt="loss curve"' in html and "saved while running" in html  # nbviewer's and GitHub's view of it
    assert "application/vnd.jupyter.widget-view+json" not in final and final[MIME]["view_id"] is None
    assert final[MIME]["status"]["state"] == "done" and len(final[MIME]["curves"][0]["x"]) == 300


def prompt(k: Kernel) -> int:
    """The execution count the next cell gets (its prompt, In[n])."""
    return int(k.run("get_ipython().execution_count").outputs[-1]["execution_count"]) + 1


# Stuck for a while: rank 1 in the user's code, rank 0 in a collective that waits for it.
STUCK = """%%hvd
import time
def load_batch():
    time.sleep({seconds})
if rank == 1:
    load_batch()
total = hvd.allreduce(torch.ones(4), name='grad_sync')
"""


def test_a_quiet_cell_says_what_its_ranks_do(live: Kernel) -> None:
    from jupyter_hvd.kernel.cell.run import QUIET_S

    time.sleep(4)  # idle past the pool's --rest-after (2 s): Horovod rests, and the allreduce starts it again
    n = prompt(live)
    run = live.run(STUCK.format(seconds=14), timeout=90)
    assert run.error is None, run.error_text
    assert run.updates[0][1]["status"]["state"] == "running"  # the status line (from the first second: see above)
    said = [(t, c["status"]["activity"]) for t, c, _ in run.updates if c["status"].get("activity")]
    assert said, "the view never said what the ranks do"
    t, text = said[0]
    assert t - run.started < QUIET_S + 4, f"said {t - run.started:.1f} s into the cell"
    assert text.startswith("no output yet; where the ranks are:\n"), text
    assert f"rank 0: waiting in allreduce 'grad_sync' (Cell In[{n}], line 6)" in text, text
    assert f"rank 1: in load_batch() (Cell In[{n}], line 3) -> time.sleep(14)" in text, text
    assert "again" not in text and "restart" not in text, text  # Horovod waking from its rest is no restart
    assert run.updates[-1][1]["status"]["activity"] is None  # the finished view says nothing of it


def test_a_quiet_cell_without_widgets_says_it_runs_and_what_its_ranks_do(live: Kernel) -> None:
    live.run("%config HvdPool.live_view = 'text'")
    try:
        n = prompt(live)
        time.sleep(4)
        run = live.run(STUCK.format(seconds=9).replace(", name='grad_sync'", ""), timeout=90)
    finally:
        live.run("%config HvdPool.live_view = 'widget'")
    assert run.error is None, run.error_text
    (shown, first), *_ = run.of("display_data")
    text = first["content"]["data"]["text/plain"]
    assert shown - run.started < 1.8 and text.startswith("[jupyter-hvd] running · 2 ranks · "), text
    updated = [m["content"]["data"]["text/plain"] for _, m in run.of("update_display_data")]
    quiet = [u for u in updated if "no output yet; where the ranks are:" in u]
    # Horovod rested (idle past --rest-after), and starts again for an op of a tensor it has not named yet.
    assert quiet and f"rank 0: waiting in allreduce (an unnamed tensor) (Cell In[{n}], line 6)" in quiet[-1], updated
    outputs = saved_outputs(run)
    assert len(outputs) == 1, outputs  # one output, which became the final status line
    (final,) = outputs
    assert final["data"]["text/plain"].startswith("[jupyter-hvd] finished · 2 ranks · "), final


EPOCHS = """%%hvd
model = torch.nn.Linear(4, 1)
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01), named_parameters=model.named_parameters())
for epoch in range(1, 9):
    for step in range(24):
        opt.zero_grad()
        model(torch.ones(8, 4)).pow(2).mean().backward()
        opt.step()
    print(f"epoch {epoch} loss=0.5")
"""


def test_after_epochs_the_status_line_and_the_sidebar_count_the_same_steps(live: Kernel) -> None:
    run = live.run(EPOCHS, timeout=120)
    assert run.error is None, run.error_text
    status = run.updates[-1][1]["status"]
    assert (status["state"], status["epoch"], status["step"]) == ("done", 8, None)
    steps = status["steps"]
    assert steps and steps >= 8 * 24, status
    (final,) = saved_outputs(run)
    assert f"epoch 8 · {steps:,} steps" in final["data"]["text/plain"]  # the status line's text, in its unit
    deadline, sidebar = time.monotonic() + 10, None
    while time.monotonic() < deadline and sidebar != steps:
        pool = live.pool()
        sidebar = pool["ranks"][0]["step"]
        time.sleep(0.2)
    assert sidebar == steps, f"the sidebar says {sidebar} steps, the status line {steps}"


SETUP = """%%hvd
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
model(torch.ones(2, 4)).sum().backward()
opt.step()  # momentum buffers: the optimizer's state has tensors to broadcast
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(opt, root_rank=0)
settings = hvd.broadcast_object({"lr": 0.01}, root_rank=0)
print("ready")
"""


def test_a_setup_cells_broadcasts_are_no_training_steps(live: Kernel) -> None:
    run = live.run(SETUP, timeout=120)
    assert run.error is None, run.error_text
    assert any("ready" in text for _, text in run.shown_text()), run.shown_text()
    status = run.updates[-1][1]["status"]
    assert not status["steps"], status
    (final,) = saved_outputs(run)
    assert "step" not in final["data"]["text/plain"], final["data"]["text/plain"]
    # The sidebar, once the pool file is written for this cell (at its end: it cleared the cell before's figures),
    # shows neither this cell's broadcasts nor the last cell's steps.
    deadline, pool = time.monotonic() + 10, live.pool()
    while pool["cell_started"] < run.started and time.monotonic() < deadline:
        time.sleep(0.1)
        pool = live.pool()
    assert pool["cell_started"] >= run.started, "the pool file was not written for this cell within 10 s"
    assert not pool["ranks"][0]["step"], pool["ranks"][0]


def test_a_line_that_never_ends_keeps_only_its_tail() -> None:
    from jupyter_hvd.digest import MAX_LINE_CHARS

    log, digest = LogBuffer(max_lines=10), Digest()
    for _ in range(1000):
        log.add(digest.feed(0, "stdout", "x" * 100))
    (partial,) = log.take_delta().partials
    assert len(partial[0]) == MAX_LINE_CHARS


def test_a_metrics_bug_never_stops_the_log(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from jupyter_hvd import digest as digest_module
    from jupyter_hvd import metrics
    from jupyter_hvd.widgets import live_view

    def broken(line: str) -> Any:
        raise ValueError("unreadable")

    monkeypatch.setattr(metrics, "parse_line", broken)
    view = live_view.LiveView(ranks=2, show_ranks=[0, 1], log_lines=100, plots=["loss"])
    view.show()
    assert view.widget is not None
    view.widget.send = lambda content, buffers=None: None
    view.output(digest_module.Digest().feed(0, "stdout", "loss=1\nloss=2\n"))
    view.close(ok=True)
    assert [(t, r) for t, _, r in view.log.lines] == [
        ("loss=1", 0),
        ("loss=2", 0),
        ("[jupyter-hvd] a printed line could not be read for metrics (ValueError: unreadable)", -1),  # said once
    ]
    capsys.readouterr()


@pytest.mark.gpu
def test_a_cuda_loss_is_read_on_the_publishing_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU here")
    from jupyter_hvd.engine import outbox
    from jupyter_hvd.engine.cell import report as engine_report

    published: list[Any] = []
    monkeypatch.setattr(outbox, "send_metrics", published.append)
    loss = torch.tensor(0.25, device="cuda")
    engine_report.report(step=0, loss=loss)
    assert engine_report._pending[-1]["m"]["loss"].is_cuda  # not synchronised in the training step
    engine_report.flush()
    assert published[-1][-1]["m"] == {"loss": 0.25}


def test_the_view_follows_the_front_end(monkeypatch: pytest.MonkeyPatch) -> None:
    from jupyter_hvd.widgets import front_end_draws_widgets, view_for_cell
    from jupyter_hvd.widgets.plain import PlainView
    from jupyter_hvd.widgets.text_view import TextView

    class Kernel_:
        def __init__(self, metadata: dict[str, Any]) -> None:
            self.parent = {"metadata": metadata}

        def get_parent(self) -> dict[str, Any]:
            return self.parent

    class Shell:
        def __init__(self, metadata: dict[str, Any] | None) -> None:
            if metadata is not None:
                self.kernel = Kernel_(metadata)

    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    monkeypatch.delenv("VSCODE_PID", raising=False)
    assert isinstance(view_for_cell(Shell(None), 2, [0], 10, ["loss"], None), PlainView)  # a terminal
    assert isinstance(view_for_cell(Shell({}), 2, [0], 10, ["loss"], None), TextView)  # nbclient
    assert front_end_draws_widgets(Shell({"cellId": "c1"}))  # JupyterLab, Notebook 7, VS Code
    assert isinstance(view_for_cell(Shell({"cellId": "c1"}), 2, [0], 10, ["loss"], None, "off"), PlainView)
    assert isinstance(view_for_cell(Shell({"cellId": "c1"}), 2, [0], 10, ["loss"], None, "text"), TextView)
