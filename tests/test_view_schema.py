"""The live update and the saved view are defined once (jupyter_hvd/widgets/schema.py); the front end's types of them
(widgets-js/src/messages.d.ts) are written from it, and what the producers build is typed by the schema and checked by
mypy."""

from __future__ import annotations

from pathlib import Path

import pytest

from jupyter_hvd.widgets import schema, schema_ts
from jupyter_hvd.widgets.curves import Curve
from jupyter_hvd.widgets.static_plot import view_data

MESSAGES_TS = Path(__file__).resolve().parents[1] / "widgets-js" / "src" / "messages.d.ts"


def test_the_front_ends_types_are_the_ones_written_from_the_schema() -> None:
    written = schema_ts.typescript()
    assert MESSAGES_TS.read_text() == written, "run `python -m jupyter_hvd.widgets.schema_ts` and commit the file"
    # Each record, each field with its type, and the one a record extends.
    for line in (
        "export interface SavedStatus extends Status {\n  text: string;\n}",
        "  y: (number | null)[];",
        "  latest: Record<string, number>;",
        "  type: 'update';",
        "  log: LogMessage | null;",
        "  append: LogLine[];",
    ):
        assert line in written, line


def test_a_type_the_front_end_cannot_hold_is_refused_by_name() -> None:
    with pytest.raises(TypeError, match="no TypeScript for <class 'bytes'>"):
        schema_ts.ts_type(bytes)


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
