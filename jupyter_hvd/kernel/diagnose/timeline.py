"""`%%hvd --timeline`: record Horovod's timeline for one cell and show where the time went, under the cell.

Runs in the user's kernel. The engines record (jupyter_hvd.engine.horovod.timeline); this module reads rank 0's
Chrome-trace file and prints a compact summary: time per phase (negotiation, allreduce, memcpy...) and per tensor.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import ipyparallel as ipp
from IPython.core.error import UsageError

from ... import wire
from ..launch.pool import Pool

TIMELINE_DIR = "hvd_timelines"  # beside the notebook (the kernel's working directory)
TOP_TENSORS = 10
# A trace's JSON takes about ten times its size in Python objects: bigger traces are left to a trace viewer.
READ_MAX_BYTES = 64 * 2**20


@dataclass
class PhaseTime:
    """Total time and count of one timeline activity (e.g. MPI_ALLREDUCE) across tensors."""

    name: str
    depth: int
    parent: str
    total_us: float = 0.0
    count: int = 0


@dataclass
class TensorTime:
    """Where one tensor's time went: waiting for all ranks (negotiation) and the collective itself."""

    name: str
    ops: int = 0
    negotiate_us: float = 0.0
    op_us: float = 0.0

    @property
    def total_us(self) -> float:
        return self.negotiate_us + self.op_us


@dataclass
class TimelineSummary:
    """Aggregates of one trace: per tensor and per phase, plus the time from first to last event."""

    tensors: dict[str, TensorTime] = field(default_factory=dict)
    phases: dict[tuple[int, str, str], PhaseTime] = field(default_factory=dict)
    span_us: float = 0.0


def load_trace(text: str) -> list[dict[str, Any]]:
    """Parse Horovod's Chrome-trace JSON, also when the writer had not closed the array yet."""
    text = text.strip()
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return json.loads(text.rstrip(",") + "]")


def summarize(events: list[dict[str, Any]]) -> TimelineSummary:
    """Pair each tensor's begin/end events and add up durations per tensor and per (nested) phase."""
    names: dict[Any, str] = {}
    for ev in events:
        if ev.get("ph") == "M" and ev.get("name") == "process_name" and "name" in ev.get("args", {}):
            names[ev["pid"]] = ev["args"]["name"]
    summary = TimelineSummary()
    open_: dict[Any, list[tuple[str, float]]] = {}
    stamps = [ev["ts"] for ev in events if ev.get("ph") in ("B", "E") and "ts" in ev]
    if stamps:
        summary.span_us = max(stamps) - min(stamps)
    for ev in events:
        ph, pid = ev.get("ph"), ev.get("pid")
        if ph == "B":
            open_.setdefault(pid, []).append((ev["name"], ev["ts"]))
        elif ph == "E" and open_.get(pid):
            stack = open_[pid]
            name, t0 = stack.pop()
            dur = ev["ts"] - t0
            depth = len(stack)
            parent = stack[-1][0] if stack else ""
            if depth <= 1:
                phase = summary.phases.setdefault((depth, parent, name), PhaseTime(name, depth, parent))
                phase.total_us += dur
                phase.count += 1
            if depth == 0 and pid in names:
                tensor = summary.tensors.setdefault(names[pid], TensorTime(names[pid]))
                if name.startswith("NEGOTIATE"):
                    tensor.negotiate_us += dur
                else:
                    tensor.op_us += dur
                    tensor.ops += 1
    return summary


def format_summary(summary: TimelineSummary, path: str, size: int, top: int = TOP_TENSORS) -> str:
    """A compact text report: phases (nested ones indented under their parent), then the busiest tensors."""
    ops = sum(t.ops for t in summary.tensors.values())
    lines = [
        f"Horovod timeline (rank 0's view of {size} ranks): {len(summary.tensors)} tensors, {ops} collective ops, "
        f"{summary.span_us / 1e6:.2f} s from first to last event."
    ]
    if not summary.tensors:
        lines.append("No collective ran during this cell.")
    else:
        width = max(28, *(len(p.name) + 2 * p.depth for p in summary.phases.values()))
        # Fused tensors are reduced together, so per-tensor times overlap and their sum can exceed the span.
        lines += ["", f"{'phase (summed over tensors)':<{width}}  {'total ms':>10}  {'count':>7}"]
        tops = sorted((p for p in summary.phases.values() if p.depth == 0), key=lambda p: -p.total_us)
        for phase in tops:
            lines.append(f"{phase.name:<{width}}  {phase.total_us / 1e3:>10.1f}  {phase.count:>7}")
            kids = [p for p in summary.phases.values() if p.depth == 1 and p.parent == phase.name]
            for kid in sorted(kids, key=lambda p: -p.total_us):
                label = "  " + kid.name
                lines.append(f"{label:<{width}}  {kid.total_us / 1e3:>10.1f}  {kid.count:>7}")
        tensors = sorted(summary.tensors.values(), key=lambda t: -t.total_us)
        tw = max(24, *(len(t.name) for t in tensors[:top]))
        lines += ["", f"{'tensor':<{tw}}  {'ops':>5}  {'negotiate ms':>12}  {'op ms':>9}  {'total ms':>9}"]
        for t in tensors[:top]:
            lines.append(
                f"{t.name:<{tw}}  {t.ops:>5}  {t.negotiate_us / 1e3:>12.1f}  {t.op_us / 1e3:>9.1f}  "
                f"{t.total_us / 1e3:>9.1f}"
            )
        if len(tensors) > top:
            rest = sum(t.total_us for t in tensors[top:])
            lines.append(f"... {len(tensors) - top} more tensors ({rest / 1e3:.1f} ms in all)")
        lines += [
            "",
            "negotiate = waiting until every rank has submitted the tensor (long: ranks out of step or a slow rank); "
            "op = the collective itself, with its memcpy into and out of the fusion buffer.",
        ]
    lines.append(f"Full trace (open it in https://ui.perfetto.dev or chrome://tracing): {path}")
    return "\n".join(lines)


def trace_path(requested: str) -> str:
    """Absolute path of the trace file: the one asked for (a .json file or a folder), else one under hvd_timelines/."""
    name = f"timeline-{time.strftime('%Y%m%d-%H%M%S')}-{int(time.time() * 1000) % 1000:03d}.json"
    if requested.endswith(".json"):
        return os.path.abspath(requested)
    return os.path.abspath(os.path.join(requested or TIMELINE_DIR, name))


def _on_ranks(pool: Pool, task: wire.Task) -> list[Any]:
    assert pool.view is not None
    return pool.view.apply_async(wire.perform, task).get(timeout=60)


# What keeps a pool from starting Horovod again (engine/horovod/rest.py), in the words of %hvd_start.
_FIXED = {
    "HOROVOD_CYCLE_TIME": "--cycle-time",
    "HOROVOD_FUSION_THRESHOLD": "--fusion-mb",
    "HOROVOD_AUTOTUNE": "autotuning",
}


def refusal(pool: Pool) -> str | None:
    """Why `%%hvd --timeline` cannot run on this pool, with what to type instead; None when it can."""
    env = {**os.environ, **pool.options.horovod_env()}
    if env.get("HOROVOD_TIMELINE") == "DYNAMIC" or pool.can_rest():
        return None
    why = " and ".join(flag for key, flag in _FIXED.items() if env.get(key)) or "its settings"
    return (
        f"%%hvd --timeline needs Horovod started again with its timeline on, and this pool cannot do that: it uses "
        f"{why} (Horovod 0.28.1 crashes when initialised again after those). Start the pool with the timeline on "
        f"(it then costs about a quarter of training throughput while the pool lives): %hvd_stop, then %hvd_start "
        f"with the same options plus --timeline."
    )


def _start(pool: Pool, path: str) -> None:
    try:
        _on_ranks(pool, wire.TimelineStart(path))
    except ipp.error.CompositeError as exc:
        ename, evalue = exc.elist[0][0], exc.elist[0][1]
        raise UsageError(f"Could not start Horovod's timeline on the ranks: {ename}: {evalue}") from None


def _read(pool: Pool, where: dict[str, Any]) -> str:
    path = where["path"]
    if where.get("host") == socket.gethostname() and os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            return f.read(READ_MAX_BYTES + 1)  # the file may have grown since its size was checked
    # Rank 0 runs on another host: fetch its file and keep a copy at the same path here.
    assert pool.client is not None
    text = pool.client[pool.ranks[0].engine_id].apply_async(wire.perform, wire.TimelineRead(path)).get(timeout=60)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return text


def _stop_and_show(pool: Pool, path: str, engines: list[int]) -> None:
    if pool.view is None or pool.engine_ids() != engines:
        print(f"The pool was restarted during the cell, so its timeline was lost (partial trace: {path}).")
        return
    try:
        rows = _on_ranks(pool, wire.TimelineStop(path))
    except Exception as exc:
        print(f"Could not stop Horovod's timeline ({type(exc).__name__}: {exc}); partial trace: {path}")
        return
    where = next(r for r in rows if r.get("rank") == 0)
    if not where.get("bytes"):
        print(f"Horovod wrote no timeline to {path}.")
        return
    if where["bytes"] > READ_MAX_BYTES:
        print(
            f"Horovod's timeline of this cell is {where['bytes'] / 2**20:.0f} MB, more than the "
            f"{READ_MAX_BYTES // 2**20} MB the notebook summarises: open {path} in https://ui.perfetto.dev, or record "
            "a shorter cell."
        )
        return
    summary = summarize(load_trace(_read(pool, where)))
    print(format_summary(summary, path, len(pool.ranks)), flush=True)


def record(pool: Pool, requested_path: str, run: Callable[[], Any]) -> Any:
    """Run `run()` (the cell) with Horovod's timeline recording, then print the summary under the cell."""
    why_not = refusal(pool)
    if why_not:
        raise UsageError(why_not)
    path = trace_path(requested_path)
    engines = pool.engine_ids()
    with pool.lock:  # no rest request (engine/horovod/rest.py) may come between the start and the cell
        if pool.channel is not None:
            pool.channel.settle(len(pool.ranks))  # a rest sent on the channel is done before the start wakes Horovod
        pool.resting = False  # the start wakes Horovod where it rests
        _start(pool, path)
        try:
            return run()
        finally:
            _stop_and_show(pool, path, engines)
