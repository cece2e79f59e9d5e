"""The pool file's schema is defined once and the other places are held to it.

jupyter_hvd/state/schema.py defines the pool file as dataclasses (PoolRecord, RankRecord, Straggler, Nonfinite); the
kernel writes exactly those (kernel/launch/pool_file.py); the server (jupyter_hvd/server/registry.py `describe`) turns a
file into what the sidebar gets; the sidebar's TypeScript model (labextension/src/model.ts `IPool`, `IRank`,
`IStraggler`, `INonfinite`) types what it gets. Each test fails with the names that differ and where to add them.
"""

from __future__ import annotations

import re
from dataclasses import asdict
from pathlib import Path

from jupyter_hvd import state
from jupyter_hvd.server.registry import describe

ROOT = Path(__file__).resolve().parents[1]
MODEL_TS = ROOT / "labextension" / "src" / "model.ts"

# Pool fields the server keeps to itself: the sidebar never needs them (options, processes to reap, the SLURM job to
# cancel, the boot their start times count from) or gets them as ages (kernel_started, updated). A new pool field
# must be sent to the sidebar or added here.
NOT_FOR_THE_SIDEBAR = {"options", "kernel_started", "processes", "slurm_job", "boot_id", "updated", "version"}


def ts_interface(name: str, source: str | None = None) -> set[str]:
    """The field names of TypeScript interface `name` in model.ts (one `field?: type;` per line)."""
    text = MODEL_TS.read_text() if source is None else source
    m = re.search(rf"export interface {name} \{{\n(.*?)\n\}}", text, re.S)
    assert m, f"no `export interface {name} {{ ... }}` in {MODEL_TS}"
    body = re.sub(r"/\*.*?\*/|//[^\n]*", "", m.group(1), flags=re.S)  # comments may mention other names
    return set(re.findall(r"^\s*([A-Za-z_]\w*)\??\s*:", body, re.M))


def differ(a: set[str], a_name: str, b: set[str], b_name: str) -> str:
    """'x, y in A but not in B; z in B but not in A', or '' when equal."""
    bits = []
    if a - b:
        bits.append(f"{', '.join(sorted(a - b))} in {a_name} but not in {b_name}")
    if b - a:
        bits.append(f"{', '.join(sorted(b - a))} in {b_name} but not in {a_name}")
    return "; ".join(bits)


def full_pool_file() -> dict:
    """A pool file as the kernel writes it, with every optional part present."""
    rank = state.RankRecord(rank=0, engine_id=0, host="h", pid=1, device="cpu", controller="MPI", tensor_ops="MPI")
    record = state.PoolRecord(
        id="hvd-1-1",
        state="idle",
        np=1,
        options={},
        started=1.0,
        kernel_pid=1,
        kernel_started=1.0,
        kernel_id="k",
        notebook="n.ipynb",
        ranks=[rank],
        straggler=state.Straggler(0, 1.5, "rank 0 is the straggler"),
        nonfinite=state.Nonfinite(0, 3.0, "loss", "loss became nan"),
        where=state.WhereReport(1.0, "the sidebar asked", False, "rank 0: idle", ["idle"]),
        processes=[state.ProcessEntry(1, 1.0, "controller")],
    )
    return asdict(record)


def test_the_typescript_rank_has_every_field_the_server_sends() -> None:
    sent = set(describe(full_pool_file(), 3.0, {}, {})["ranks"][0])
    problem = differ(
        ts_interface("IRank"),
        "labextension/src/model.ts IRank",
        sent,
        "what jupyter_hvd/server/registry.py describe() sends per rank",
    )
    assert not problem, problem


def test_the_server_sends_every_rank_field_of_the_schema() -> None:
    sent = set(describe(full_pool_file(), 3.0, {}, {})["ranks"][0])
    lost = set(state.field_names(state.RankRecord)) - sent
    assert not lost, f"{', '.join(sorted(lost))}: in state.RankRecord but not sent by describe()"


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
    lost = set(state.field_names(state.PoolRecord)) - sent - NOT_FOR_THE_SIDEBAR
    assert not lost, (
        f"{', '.join(sorted(lost))}: in state.PoolRecord but not sent to the sidebar by jupyter_hvd/server/registry.py "
        "describe() (send them, or add them to NOT_FOR_THE_SIDEBAR in this test)"
    )


def test_the_typescript_objects_match_the_schema() -> None:
    pairs = ((state.Straggler, "IStraggler"), (state.Nonfinite, "INonfinite"), (state.WhereReport, "IWhereReport"))
    for record, interface in pairs:
        problem = differ(
            ts_interface(interface), f"model.ts {interface}", set(state.field_names(record)), f"state.{record.__name__}"
        )
        assert not problem, problem


def test_the_checks_see_a_difference() -> None:
    """The parser is not blind: a field missing from a TypeScript interface is found."""
    source = MODEL_TS.read_text()
    m = re.search(r"export interface IRank \{\n.*?\n\}", source, re.S)
    assert m
    broken = source.replace(m.group(0), re.sub(r"\n\s*wait_ms\?:[^\n]*", "", m.group(0)))
    assert ts_interface("IRank") - ts_interface("IRank", broken) == {"wait_ms"}


def test_a_pool_file_with_nan_is_still_json(tmp_path: Path) -> None:
    record = state.PoolRecord(**{**full_pool_file(), "ranks": [], "straggler": None, "nonfinite": None})
    record.ranks = [state.RankRecord(0, 0, "h", 1, "cpu", "MPI", "MPI", loss=float("nan"), cpu_percent=float("inf"))]
    path = tmp_path / "pool-hvd-1-1.json"
    state.write_pool(path, record)
    text = path.read_text()
    assert "NaN" not in text and "Infinity" not in text
    assert state.read_pool(path)["ranks"][0]["loss"] is None
