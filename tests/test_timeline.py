"""`%%hvd --timeline` on 2 real ranks: Horovod's timeline of one cell, summarised under it."""

from __future__ import annotations

import json
import re
from pathlib import Path

from jupyter_hvd.kernel.timeline import format_summary, load_trace, summarize

# `%%hvd --timeline` needs a pool started with --timeline; this pool also checks Horovod's tuning flags.
POOL_FLAGS = "--timeline --cycle-time 2.5 --fusion-mb 8"

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


def test_tuning_flags_reach_the_engines_and_keep_horovod_awake(ip, pool, capsys):
    import time

    ip.run_cell_magic(
        "hvd",
        "",
        "import os\nkeys = ('HOROVOD_CYCLE_TIME', 'HOROVOD_FUSION_THRESHOLD', 'HOROVOD_TIMELINE')\n"
        "seen = {k: os.environ.get(k) for k in keys}",
    )
    seen = pool.client[pool.ranks[1].engine_id].pull("seen", block=True)
    assert seen == {
        "HOROVOD_CYCLE_TIME": "2.5",
        "HOROVOD_FUSION_THRESHOLD": str(8 * 1024 * 1024),
        "HOROVOD_TIMELINE": "DYNAMIC",
    }
    # Horovod 0.28.1 crashes when started again with fixed tuning: this pool never rests, and says why.
    time.sleep(3.5)
    assert not pool.resting
    ip.run_line_magic("hvd_status", "")
    assert "Horovod stays awake" in capsys.readouterr().out
