"""`%%hvd --timeline` on 2 real ranks: Horovod's timeline of one cell, summarised under it."""

from __future__ import annotations

import json
import re
from pathlib import Path

from jupyter_hvd.kernel.diagnose.timeline import format_summary, load_trace, summarize

# A plain pool: `%%hvd --timeline` switches Horovod's timeline on for its cell only. The last tests start a pool with
# fixed tuning, which cannot restart Horovod, and so refuses unless started with --timeline.
POOL_FLAGS = ""

TRAIN = """
torch.manual_seed(0)
model = torch.nn.Sequential()
model.add_module("encoder", torch.nn.Linear(64, 32))
model.add_module("act", torch.nn.ReLU())
model.add_module("classifier", torch.nn.Linear(32, 10))
optimizer = hvd.DistributedOptimizer(
    torch.optim.SGD(model.parameters(), lr=0.05), named_parameters=model.named_parameters()
)
g = torch.Generator().manual_seed(rank)
for step in range(5):
    optimizer.zero_grad()
    x, y = torch.randn(16, 64, generator=g), torch.randint(0, 10, (16,), generator=g)
    torch.nn.functional.cross_entropy(model(x), y).backward()
    optimizer.step()
print("trained")
"""


def trace_file(text: str) -> Path:
    m = re.search(r"Full trace \(.*?\): (\S+\.json)", text)
    assert m, text
    return Path(m.group(1))


def test_summary_names_the_models_tensors_and_phases(ip, pool, tmp_path, capsys):
    ip.run_cell_magic("hvd", f"--timeline {tmp_path}", TRAIN)
    out = capsys.readouterr().out
    assert "trained" in out
    summary = out[out.index("Horovod timeline") :]
    for name in ("encoder.weight", "encoder.bias", "classifier.weight", "classifier.bias"):
        row = next((line for line in summary.splitlines() if name in line), None)
        assert row is not None, summary
        # 5 steps: each gradient was allreduced 5 times.
        assert int(row.split()[1]) == 5, row
    assert "NEGOTIATE_ALLREDUCE" in summary and "MPI_ALLREDUCE" in summary
    assert re.search(r"^\s+MEMCPY_IN_FUSION_BUFFER\s", summary, re.M), summary  # nested under ALLREDUCE
    assert "4 tensors, 20 collective ops" in summary
    path = trace_file(summary)
    assert path.parent == tmp_path
    events = json.loads(path.read_text())  # the file was closed: valid JSON
    assert any(e.get("args", {}).get("name") == "allreduce.encoder.weight" for e in events)


def test_timeline_covers_that_cell_only(ip, pool, tmp_path, capsys):
    ip.run_cell_magic("hvd", "", "hvd.allreduce(torch.ones(3), name='before')")
    ip.run_cell_magic("hvd", f"--timeline {tmp_path / 'metric.json'}", "hvd.allreduce(torch.ones(3), name='during')")
    ip.run_cell_magic("hvd", "", "hvd.allreduce(torch.ones(3), name='after')")
    out = capsys.readouterr().out
    assert "1 tensors, 1 collective ops" in out
    assert [p.name for p in tmp_path.iterdir()] == ["metric.json"]
    names = {
        e["args"]["name"] for e in json.loads((tmp_path / "metric.json").read_text()) if "name" in e.get("args", {})
    }
    assert names == {"allreduce.during"}


def test_failed_cell_still_stops_the_timeline(ip, pool, tmp_path, capsys):
    from jupyter_hvd.kernel.errors import CellFailed

    try:
        ip.run_cell_magic(
            "hvd", f"--timeline {tmp_path}", "hvd.allreduce(torch.ones(3), name='x')\nraise ValueError('bad')"
        )
    except CellFailed as exc:
        assert "ValueError: bad" in str(exc)
    else:
        raise AssertionError("the cell should have failed")
    out = capsys.readouterr().out
    path = trace_file(out)
    assert json.loads(path.read_text())
    # The next timeline starts cleanly: recording had been stopped.
    ip.run_cell_magic("hvd", f"--timeline {tmp_path}", "hvd.allreduce(torch.ones(3), name='y')")
    assert "allreduce.y" in capsys.readouterr().out


def test_summary_of_an_unterminated_trace():
    # The format Horovod writes; a file cut before its closing bracket still parses.
    text = """[
{"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "allreduce.fc.weight"}},
{"ph": "B", "name": "NEGOTIATE_ALLREDUCE", "ts": 100, "pid": 1},{"ph": "E", "ts": 400, "pid": 1},
{"ph": "B", "name": "ALLREDUCE", "ts": 500, "pid": 1},{"ph": "B", "name": "MPI_ALLREDUCE", "ts": 510, "pid": 1},
{"ph": "E", "ts": 700, "pid": 1},{"ph": "E", "ts": 720, "pid": 1},"""
    s = summarize(load_trace(text))
    t = s.tensors["allreduce.fc.weight"]
    assert (t.ops, t.negotiate_us, t.op_us) == (1, 300, 220)
    assert s.phases[(1, "ALLREDUCE", "MPI_ALLREDUCE")].total_us == 190
    text = format_summary(s, "/x/t.json", 2)
    assert "allreduce.fc.weight" in text and "/x/t.json" in text


CHECK_OFF = """
import os, tempfile
from jupyter_hvd.engine.horovod import rest
probe = os.path.join(tempfile.mkdtemp(), "probe.json")
try:
    hvd.start_timeline(probe)  # works only where Horovod was started with HOROVOD_TIMELINE=DYNAMIC
    hvd.stop_timeline()
    enabled = True
except ValueError:
    enabled = False
off = {"env": os.environ.get("HOROVOD_TIMELINE"), "started_with": rest.horovod_env("HOROVOD_TIMELINE"),
       "enabled": enabled}
"""


def _off_on_every_rank(pool):
    return [pool.client[r.engine_id].pull("off", block=True) for r in pool.ranks]


def test_timeline_is_off_again_in_the_next_cell(ip, pool, tmp_path, capsys):
    # The next cell comes at once (no idle rest between): it starts Horovod again without the timeline itself.
    trace = tmp_path / "t.json"
    ip.run_cell_magic("hvd", f"--timeline {trace}", "hvd.allreduce(torch.ones(3), name='during')")
    size = trace.stat().st_size
    ip.run_cell_magic("hvd", "", CHECK_OFF + "for i in range(20): hvd.allreduce(torch.ones(3), name='later')")
    assert _off_on_every_rank(pool) == [{"env": None, "started_with": None, "enabled": False}] * 2
    assert trace.stat().st_size == size  # nothing more was recorded
    assert "allreduce.later" not in trace.read_text()
    capsys.readouterr()


def test_timeline_is_off_after_an_idle_rest(ip, pool, tmp_path, capsys):
    import time

    ip.run_cell_magic("hvd", f"--timeline {tmp_path}", "hvd.allreduce(torch.ones(3), name='during')")
    deadline = time.monotonic() + 10
    while not pool.resting and time.monotonic() < deadline:
        time.sleep(0.1)
    assert pool.resting
    ip.run_cell_magic("hvd", "", CHECK_OFF)
    assert _off_on_every_rank(pool) == [{"env": None, "started_with": None, "enabled": False}] * 2
    # And a second timeline cell switches it on again.
    ip.run_cell_magic("hvd", f"--timeline {tmp_path / 'again.json'}", "hvd.allreduce(torch.ones(3), name='again')")
    assert "allreduce.again" in capsys.readouterr().out


def test_a_fixed_tuning_pool_refuses_the_timeline_and_keeps_horovod_awake(ip, pool, capsys):
    import time

    from IPython.core.error import UsageError

    from jupyter_hvd.kernel import owner as pools

    ip.run_line_magic("hvd_stop", "")
    ip.run_line_magic("hvd_start", "-np 2 --env JUPYTER_HVD_TEST=yes --cycle-time 2.5 --fusion-mb 8")
    try:
        ip.run_cell_magic("hvd", "--timeline", "print('never runs')")
    except UsageError as exc:
        text = str(exc)
    else:
        raise AssertionError("a pool with fixed tuning cannot switch the timeline on")
    assert "--cycle-time and --fusion-mb" in text and "%hvd_start" in text and "--timeline" in text, text
    assert "never runs" not in capsys.readouterr().out

    # The tuning flags reach the engines.
    fixed = pools.current()
    ip.run_cell_magic(
        "hvd",
        "",
        "import os\nkeys = ('HOROVOD_CYCLE_TIME', 'HOROVOD_FUSION_THRESHOLD', 'HOROVOD_TIMELINE')\n"
        "seen = {k: os.environ.get(k) for k in keys}",
    )
    seen = fixed.client[fixed.ranks[1].engine_id].pull("seen", block=True)
    assert seen == {
        "HOROVOD_CYCLE_TIME": "2.5",
        "HOROVOD_FUSION_THRESHOLD": str(8 * 1024 * 1024),
        "HOROVOD_TIMELINE": None,
    }
    # Horovod 0.28.1 crashes when started again with fixed tuning: this pool never rests, and says why.
    time.sleep(3.5)  # longer than the 2 s after which a plain pool of CPU ranks rests
    assert not fixed.resting
    ip.run_line_magic("hvd_status", "")
    assert "Horovod stays awake" in capsys.readouterr().out


def test_fixed_tuning_pool_started_with_timeline_records(ip, pool, tmp_path, capsys):
    ip.run_line_magic("hvd_stop", "")
    ip.run_line_magic("hvd_start", "-np 2 --env JUPYTER_HVD_TEST=yes --cycle-time 2.5 --fusion-mb 8 --timeline")
    ip.run_cell_magic("hvd", f"--timeline {tmp_path}", "hvd.allreduce(torch.ones(3), name='fixed')")
    assert "allreduce.fixed" in capsys.readouterr().out


def test_timeline_flag_is_not_needed_on_a_plain_pool(ip, pool, capsys):
    ip.run_line_magic("hvd_stop", "")
    ip.run_line_magic("hvd_start", "-np 2 --env JUPYTER_HVD_TEST=yes --timeline")
    assert "--timeline is not needed" in capsys.readouterr().out
    ip.run_cell_magic("hvd", "", "import os\nenv = os.environ.get('HOROVOD_TIMELINE')")
    from jupyter_hvd.kernel import owner as pools

    p = pools.current()
    assert p.client[p.ranks[0].engine_id].pull("env", block=True) is None
