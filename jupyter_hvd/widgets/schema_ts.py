"""The front end's types of the live update and the saved view (widgets-js/src/messages.d.ts), written from
jupyter_hvd/widgets/schema.py so the records are defined once: `python -m jupyter_hvd.widgets.schema_ts` writes the
file; tests/test_view_schema.py fails while the file differs from what this writes.
"""

from __future__ import annotations

import inspect
import sys
import types
import typing
from pathlib import Path
from typing import Any, Literal, get_args, get_origin, get_type_hints

from . import schema

RECORDS: list[Any] = [
    schema.LogMessage,
    schema.Status,
    schema.SavedStatus,
    schema.CurveUpdate,
    schema.LiveUpdate,
    schema.SavedCurve,
    schema.SavedView,
]
ALIASES: dict[Any, str] = {schema.LogLine: "LogLine"}
HEADER = """// Written by `python -m jupyter_hvd.widgets.schema_ts` from jupyter_hvd/widgets/schema.py, where these
// records are defined: change them there and write this file again (tests/test_view_schema.py fails until then).

/** A log line: text, stream ("stdout" | "stderr"), rank (-1: jupyter-hvd's own). */
export type LogLine = [string, string, number];
"""


def ts_type(hint: Any) -> str:
    """The TypeScript of one field's Python type."""
    if hint in ALIASES:
        return ALIASES[hint]
    if hint is type(None):
        return "null"
    if hint is bool:
        return "boolean"
    if hint in (int, float):
        return "number"
    if hint is str:
        return "string"
    if hint in RECORDS:
        return str(hint.__name__)
    origin, args = get_origin(hint), get_args(hint)
    if origin in (types.UnionType, typing.Union):
        return " | ".join(ts_type(a) for a in args)
    if origin is Literal:
        return " | ".join(f"'{a}'" for a in args)
    if origin is list:
        item = ts_type(args[0])
        return f"({item})[]" if " | " in item else f"{item}[]"
    if origin is dict and args[0] is str:
        return f"Record<string, {ts_type(args[1])}>"
    raise TypeError(f"no TypeScript for {hint!r}: add it to jupyter_hvd/widgets/schema_ts.py")


def interface(record: Any) -> str:
    """`export interface` of one record, with its docstring's first paragraph and only its own fields."""
    # A TypedDict keeps no record of the TypedDict it extends (before Python 3.12): the largest record whose fields
    # lead this one's is taken as it.
    names = list(record.__annotations__)
    bases = [r for r in RECORDS if r is not record and names[: len(r.__annotations__)] == list(r.__annotations__)]
    base = max(bases, key=lambda r: len(r.__annotations__), default=None)
    own = names[len(base.__annotations__) :] if base else names
    hints = get_type_hints(record)
    lines = []
    doc = inspect.getdoc(record) if record.__doc__ else None
    if doc:
        lines.append("/** " + " ".join(doc.split("\n\n")[0].split()) + " */")
    lines.append(f"export interface {record.__name__}" + (f" extends {base.__name__}" if base else "") + " {")
    lines += [f"  {name}: {ts_type(hints[name])};" for name in own]
    lines.append("}")
    return "\n".join(lines)


def typescript() -> str:
    """The whole of widgets-js/src/messages.d.ts."""
    return HEADER + "".join("\n" + interface(r) + "\n" for r in RECORDS)


def main() -> None:
    path = Path(__file__).resolve().parents[2] / "widgets-js" / "src" / "messages.d.ts"
    path.write_text(typescript())
    sys.stdout.write(f"wrote {path}\n")


if __name__ == "__main__":
    main()
