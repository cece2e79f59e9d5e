"""The pool file's schema is written once and held equal in three places (issue 19).

jupyter_hvd/state.py documents the pool file and lists its fields in `FIELDS` and `RANK_FIELDS`; the server
(jupyter_hvd/server/registry.py `describe`) turns a file into what the sidebar gets; the sidebar's TypeScript
model (labextension/src/model.ts `IPool`, `IRank`, `IStraggler`, `INonfinite`) types what it gets. Each test
fails with the names that differ and where to add them.
"""

from __future__ import annotations

import re
from pathlib import Path

from jupyter_hvd import state
from jupyter_hvd.server.registry import describe

ROOT = Path(__file__).resolve().parents[1]
MODEL_TS = ROOT / "labextension" / "src" / "model.ts"

# Pool fields the server keeps to itself: the sidebar never needs them (options, processes to reap) or gets
# them as ages (kernel_started, updated). A new pool field must be sent to the sidebar or added here.
NOT_FOR_THE_SIDEBAR = {"options", "kernel_started", "processes", "updated", "version"}


def ts_interface(name: str, source: str | None = None) -> set[str]:
    """The field names of TypeScript interface `name` in model.ts (one `field?: type;` per line)."""
    text = MODEL_TS.read_text() if source is None else source
    m = re.search(rf"export interface {name} \{{\n(.*?)\n\}}", text, re.S)
    assert m, f"no `export interface {name} {{ ... }}` in {MODEL_TS}"
    body = re.sub(r"/\*.*?\*/|//[^\n]*", "", m.group(1), flags=re.S)  # comments may mention other names
    return set(re.findall(r"^\s*([A-Za-z_]\w*)\??\s*:", body, re.M))


def documented_fields() -> tuple[set[str], set[str], dict[str, set[str]]]:
    """Pool fields, rank fields and the fields of pool-level objects ({rank, ratio, message}) in state's docstring."""
    doc = state.__doc__ or ""
    text = doc[doc.index("Fields:") + len("Fields:") : doc.index("Every number")]
    while re.search(r"\([^()]*\)", text):  # descriptions in parentheses, nested ones included
        text = re.sub(r"\([^()]*\)", "", text)
    ranks = re.search(r"ranks: \[\{(.*?)\}\]", text, re.S)
    assert ranks, "state.py's docstring should list the rank fields as `ranks: [{...}]`"
    rank_fields = {f.strip() for f in ranks.group(1).split(",")}
    text = text.replace(ranks.group(0), "ranks")
    objects = {
        m.group(1): {f.strip() for f in m.group(2).split(",")} for m in re.finditer(r"(\w+): null \| \{(.*?)\}", text)
    }
    text = re.sub(r"\{.*?\}", "", text, flags=re.S)
    pool_fields = set()
    for piece in re.split(r"[,\n]", text):
        m = re.match(r"\s*([a-z_][a-z0-9_]*)", piece)
        if m:
            pool_fields.add(m.group(1))
    return pool_fields, rank_fields, objects


def differ(a: set[str], a_name: str, b: set[str], b_name: str) -> str:
    """'x, y in A but not in B; z in B but not in A', or '' when equal."""
    bits = []
    if a - b:
        bits.append(f"{', '.join(sorted(a - b))} in {a_name} but not in {b_name}")
    if b - a:
        bits.append(f"{', '.join(sorted(b - a))} in {b_name} but not in {a_name}")
    return "; ".join(bits)


def full_pool_file() -> dict:
    """A pool file with every documented field set."""
    data: dict = {f: None for f in state.FIELDS}
    data.update(id="hvd-1-1", started=1.0, updated=2.0, hosts=["h"], problems=[], processes=[])
    data["ranks"] = [{f: None for f in state.RANK_FIELDS} | {"rank": 0, "heartbeat": 1.5}]
    return data


def test_the_docstring_and_the_field_lists_agree() -> None:
    pool_fields, rank_fields, _ = documented_fields()
    problem = differ(pool_fields, "state.py's docstring", set(state.FIELDS), "state.FIELDS")
    assert not problem, problem
    problem = differ(rank_fields, "state.py's docstring (ranks)", set(state.RANK_FIELDS), "state.RANK_FIELDS")
    assert not problem, problem
    assert len(state.FIELDS) == len(set(state.FIELDS)) and len(state.RANK_FIELDS) == len(set(state.RANK_FIELDS))


def test_the_typescript_rank_has_every_field_the_server_sends() -> None:
    sent = set(describe(full_pool_file(), 3.0, {}, {})["ranks"][0])
    problem = differ(
        ts_interface("IRank"),
        "labextension/src/model.ts IRank",
        sent,
        "what jupyter_hvd/server/registry.py describe() sends per rank",
    )
    assert not problem, problem


def test_the_typescript_pool_has_every_field_the_server_sends() -> None:
    sent = set(describe(full_pool_file(), 3.0, {}, {}))
    problem = differ(
        ts_interface("IPool"),
        "labextension/src/model.ts IPool",
        sent,
        "what jupyter_hvd/server/registry.py describe() sends per pool",
    )
    assert not problem, problem


def test_every_pool_field_reaches_the_sidebar_or_is_kept_back_on_purpose() -> None:
    sent = set(describe(full_pool_file(), 3.0, {}, {}))
    lost = set(state.FIELDS) - sent - NOT_FOR_THE_SIDEBAR
    assert not lost, (
        f"{', '.join(sorted(lost))}: in state.FIELDS but not sent to the sidebar by jupyter_hvd/server/registry.py "
        "describe() (send them, or add them to NOT_FOR_THE_SIDEBAR in this test)"
    )


def test_the_typescript_objects_match_the_documented_ones() -> None:
    _, _, objects = documented_fields()
    assert set(objects) == {"straggler", "nonfinite"}, objects
    for field, interface in (("straggler", "IStraggler"), ("nonfinite", "INonfinite")):
        problem = differ(ts_interface(interface), f"model.ts {interface}", objects[field], f"state.py's {field}")
        assert not problem, problem


def test_the_checks_see_a_difference() -> None:
    """The parser is not blind: a field missing from a TypeScript interface is found."""
    source = MODEL_TS.read_text()
    m = re.search(r"export interface IRank \{\n.*?\n\}", source, re.S)
    assert m
    broken = source.replace(m.group(0), re.sub(r"\n\s*wait_ms\?:[^\n]*", "", m.group(0)))
    assert ts_interface("IRank") - ts_interface("IRank", broken) == {"wait_ms"}
