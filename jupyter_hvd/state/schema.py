"""What a pool file holds: one `PoolRecord` with its `RankRecord`s, `Straggler`, `Nonfinite`, `WhereReport` and
`ProcessEntry`s. Their fields are the schema; the sidebar's TypeScript model (labextension/src/model.ts) is held to
them by tests/test_state_schema.py."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

VERSION = 1


@dataclass
class RankRecord:
    """One rank of a pool, as the sidebar shows it."""

    rank: int
    engine_id: int
    host: str
    pid: int
    device: str
    controller: str  # Horovod's controller: MPI or Gloo
    tensor_ops: str  # NCCL, MPI or Gloo
    local_rank: int = 0
    cross_rank: int = 0
    state: str = "idle"  # idle | busy | stalled | debugger (a breakpoint() holds it in pdb) | dead
    step: float | None = None
    loss: float | None = None
    last_line: str | None = None
    cpu_percent: float | None = None
    rss_mb: float | None = None
    gpu_mem_mb: float | None = None
    gpu_mem_total_mb: float | None = None
    gpu_util: float | None = None
    heartbeat: float | None = None  # epoch s of the last sample
    stalled_on: str | None = None  # tensor names, while stalled
    compute_ms: float | None = None  # per step, recent mean
    wait_ms: float | None = None  # in collectives per step, recent mean


@dataclass
class Straggler:
    """A rank at least 1.3x slower than the others for 10 s."""

    rank: int
    ratio: float
    message: str


@dataclass
class Nonfinite:
    """The first NaN/Inf metric of the running or last cell."""

    rank: int
    step: float | None
    metric: str
    message: str


@dataclass
class WhereReport:
    """Where every rank was when last asked (the sidebar's Where, the stop button, a stall, %hvd_where)."""

    asked: float  # epoch s
    why: str  # what asked, in words: "the sidebar's Where", "the stop button", "a stall Horovod reported", ...
    full: bool  # with library frames
    text: str  # identical places grouped, one line each, as the notebook shows it
    places: list[str]  # each rank's place, by rank


@dataclass
class ProcessEntry:
    """A process of the pool, recognised again by pid and its start time in seconds since boot (`started`)."""

    pid: int
    create_time: float
    role: str


@dataclass
class PoolRecord:
    """A pool file."""

    id: str
    state: str  # starting | idle | running | restarting | failed | stopping
    np: int
    options: dict[str, Any]
    started: float  # epoch s
    kernel_pid: int
    kernel_started: float  # seconds since boot (`started`)
    kernel_id: str  # the Jupyter server's id of the kernel: a server lists only its own kernels' pools
    notebook: str
    backend: str = ""
    hosts: list[str] = field(default_factory=list)
    cell: str | None = None  # the first line of the running cell, or what jupyter-hvd's own work does (cell_own)
    cell_own: bool = False  # the running "cell" is jupyter-hvd's own work on the ranks (a restore), said in words
    ranks: list[RankRecord] = field(default_factory=list)
    straggler: Straggler | None = None
    nonfinite: Nonfinite | None = None
    where: WhereReport | None = None  # the latest picture of where the ranks are
    problems: list[str] = field(default_factory=list)  # jupyter-hvd's own threads (and users' threads) that failed
    kept: list[str] = field(default_factory=list)  # the names %hvd_keep keeps
    snapshots: int = 0  # snapshots of them on disk
    kept_bytes: int = 0  # disk those and pushed values take on the kernel's host
    processes: list[ProcessEntry] = field(default_factory=list)
    slurm_job: str = ""  # the SLURM job running the engines (--slurm): cancelled if the kernel dies
    boot_id: str = ""  # the boot the start times count from
    updated: float = 0.0  # epoch s; set when written
    engines_started: float = 0.0  # epoch s: when the running engines started (a restart starts new ones)
    # For the sidebar: what a Restart brings back, and which figures and Where are the running (or last) cell's.
    journal_entries: int = 0  # entries of the setup journal (%%hvd --setup cells, %hvd_push), replayed by a restart
    cell_started: float = 0.0  # epoch s: when the running (or last) %%hvd cell started; 0 before the first
    version: int = VERSION


def field_names(record: type) -> list[str]:
    """The field names of one of the records above, in order."""
    return [f.name for f in fields(record)]
