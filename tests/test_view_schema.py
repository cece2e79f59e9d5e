"""The live update and the saved view are defined once (jupyter_hvd/widgets/schema.py) and the front end's types of
them (widgets-js/src/messages.d.ts) are held to it, as the pool file's are (tests/test_state_schema.py); what the
producers build is typed by the schema and checked by mypy. Each test names the fields that differ."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from jupyter_hvd.widgets import schema
from jupyter_hvd.widgets.curves import Curve
from jupyter_hvd.widgets.static_plot import view_data

ROOT = Path(__file__).resolve().parents[1]
MESSAGES_TS = ROOT / "widgets-js" / "src" / "messages.d.ts"
RECORDS = [
    schema.LogMessage,
    schema.Status,
    schema.SavedStatus,
    schema.CurveUpdate,
    schema.LiveUpdate,
    schema.SavedCurve,
    schema.SavedView,
]


def ts_interface(name: str, source: str) -> set[str]:
    """The field names of `export interface name` in `source`, with those of the interface it extends."""
    m = re.search(rf"export interface {name}(?: extends (\w+))? \{{\n(.*?)\n\}}", source, re.S)
    assert m, f"no `export interface {name} {{ ... }}` in {MESSAGES_TS}"
    body = re.sub(r"/\*.*?\*/|//[^\n]*", "", m.group(2), flags=re.S)
    names = set(re.findall(r"^\s*([A-Za-z_]\w*)\??\s*:", body, re.M))
    return names | (ts_interface(m.group(1), source) if m.group(1) else set())


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: r.__name__)
def test_the_front_ends_types_have_the_schemas_fields(record: type) -> None:
    ts = ts_interface(record.__name__, MESSAGES_TS.read_text())
    py = schema.fields(record)
    assert ts == py, f"only in messages.d.ts: {sorted(ts - py)}; only in schema.py: {sorted(py - ts)}"


def test_the_comparison_sees_a_missing_field() -> None:
    source = MESSAGES_TS.read_text().replace("  view_id: string | null;\n", "")
    assert schema.fields(schema.SavedView) - ts_interface("SavedView", source) == {"view_id"}


def test_a_saved_view_has_exactly_the_schemas_fields() -> None:
    curve = Curve("loss", "report", 0, "step")
    curve.xs, curve.ys = [1.0, 2.0], [0.5, float("nan")]
    status: schema.Status = {
        "state": "done", "ranks": 2, "step": 2.0, "epoch": None, "steps": None, "total": None, "desc": None,
        "samples_per_s": None, "steps_per_s": None, "elapsed": 1.0, "eta": None, "latest": {"loss": 0.5},
        "warning": None, "straggler": None, "activity": None,
    }  # fmt: skip
    log: schema.LogMessage = {"append": [("loss=0.5", "stdout", 0)], "partials": [], "total": 1}
    view = view_data([curve], ["all"], status, "finished", log, [0])
    assert set(view) == schema.fields(schema.SavedView)
    assert set(view["status"]) == schema.fields(schema.SavedStatus)
    assert set(view["curves"][0]) == schema.fields(schema.SavedCurve)
    assert view["curves"][0]["y"] == [0.5, None]  # JSON has no NaN
