"""What can go wrong while a cell runs, as types: each kind is detected here from what the ranks reported, and
knows the ranks it names, what to do next, and whether only a restart of the pool mends it.

The cell's wait (kernel/cell/run.py) feeds the detectors and acts on what they find: it winds the cell down, or raises
`PoolLost` for a failure that needs a restart, which kernel/lifecycle.py carries out. A rank's own exception is not
here: the rank reports it, and errors.py groups it for the notebook.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from .ranks import format_ranks

Kind = Literal["uneven", "mismatch", "dead", "frozen", "overdue", "unreleasable", "unclean_join", "over_time", "unsent"]

# Collectives that cannot match: every rank still running waits in one, while another rank has finished the cell
# (this long after both), or while they wait on different tensors (this long). Shorter waits are normal.
UNEVEN_S = 2.0
MISMATCH_S = 3.0
# torch.distributed cannot cancel a collective whose peer failed (Gloo and NCCL end it only when the peer's
# connection closes): ranks still in one this long after their SIGINT are released by restarting the pool.
TORCH_RELEASE_S = 2.0

HOROVOD_ADVICE = (
    "Every rank must run the same collectives in the same order: use hvd.join() for uneven last batches, or give "
    "every rank the same number of batches (DistributedSampler(..., drop_last=True))."
)
TORCH_ADVICE = (
    "Every rank must run the same collectives in the same order: wrap a DDP loop over uneven inputs in DDP's Join "
    "context manager (torch.distributed.algorithms.Join([model])), or give every rank the same number of batches "
    "(DistributedSampler(..., drop_last=True))."
)


@dataclass(frozen=True)
class Failure:
    """One thing that went wrong in a cell, in the user's words."""

    kind: Kind
    ranks: tuple[int, ...]
    message: str  # what happened, naming the ranks
    restarts: bool = False  # only a restart of the pool mends it (the engines are gone or cannot be released)


class PoolLost(Exception):
    """A failure only a restart of the pool mends (kernel/lifecycle.py restarts it)."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.message)
        self.failure = failure


@dataclass(frozen=True)
class Wait:
    """A running rank's wait in a collective, as the kernel learnt it (engine/collectives.py)."""

    rank: int
    name: str
    number: int | None
    since: float  # kernel clock (monotonic)

    def words(self) -> str:
        return f"rank {self.rank} waits in '{self.name}' (its collective #{self.number})"


@dataclass(frozen=True)
class Done:
    """A rank that finished the cell normally."""

    rank: int
    at: float  # kernel clock (monotonic)
    collectives: int | None  # how many it ran


def advice(waits: list[Wait]) -> str:
    """The remedy for collectives that do not match, in the words of the library the waiting ranks use."""
    return TORCH_ADVICE if any(w.name.startswith(("dist.", "DDP")) for w in waits) else HOROVOD_ADVICE


def unmatched(running: list[int], waits: list[Wait], finished: list[Done], now: float) -> Failure | None:
    """Collectives that cannot match, or None while they still may: every running rank waits in one, and a rank
    finished the cell (uneven collectives: a join releases them, state kept) or they wait on different tensors (only
    a restart releases those: Horovod crashed when they joined)."""
    if not running or {w.rank for w in waits} != set(running):
        return None
    waiting_for = now - max(w.since for w in waits)
    said = "; ".join(w.words() for w in sorted(waits, key=lambda w: w.rank))
    if finished:
        if now - max(min(d.at for d in finished), now - waiting_for) < UNEVEN_S:
            return None
        done = ", ".join(
            f"rank {d.rank} after {'?' if d.collectives is None else d.collectives} collectives" for d in finished
        )
        message = f"Collectives did not match: the cell finished on {done}, while {said}.\n{advice(waits)}"
        return Failure("uneven", tuple(running), message)
    if len(waits) > 1 and len({w.name for w in waits}) > 1 and waiting_for >= MISMATCH_S:
        message = (
            f"Collectives did not match: {said}, for {waiting_for:.0f} s. {advice(waits)} Ranks that wait on different "
            "tensors can only be released by restarting the pool"
        )
        return Failure("mismatch", tuple(running), message, restarts=True)
    return None


def frozen(
    frozen_since: dict[int, float], pids: dict[int, int], timeout: float, ending: bool, now: float
) -> Failure | None:
    """Ranks stopped by SIGSTOP or Ctrl-Z for the pool's timeout (they may be resumed), or at all while the cell ends
    (a frozen rank can never take part in the wind-down)."""
    overdue = sorted(r for r, since in frozen_since.items() if ending or now - since >= timeout)
    if not overdue:
        return None
    named = ", ".join(f"rank {r} (pid {pids.get(r, '?')})" for r in overdue)
    when = "during the wind-down" if ending else f"for {timeout:g} s"
    verb = "is" if len(overdue) == 1 else "are"
    return Failure("frozen", tuple(overdue), f"{named} {verb} frozen (stopped by SIGSTOP or Ctrl-Z) {when}", True)


def dead(report: str, ranks: list[int]) -> Failure:
    """An engine died (mpiexec's words say which and how: MPI ends the whole job when one rank dies)."""
    return Failure("dead", tuple(ranks), report, restarts=True)


def unsent(rank: int, what: str, error: Exception) -> Failure:
    """A request could not reach a rank (its engine is gone)."""
    return Failure("unsent", (rank,), f"rank {rank} could not be {what}: {error}", restarts=True)


def overdue(stuck: list[int], fail_timeout: float) -> Failure:
    """Ranks that did not stop within --fail-timeout of the failure."""
    return Failure(
        "overdue",
        tuple(stuck),
        f"{format_ranks(stuck)} did not stop within {fail_timeout:g} s (blocked in a collective or in native code)",
        restarts=True,
    )


def unreleasable(signaled: Mapping[int, tuple[float, Wait | None]], now: float) -> Failure | None:
    """torch.distributed ranks still in a collective TORCH_RELEASE_S after their SIGINT: Gloo and NCCL cannot cancel
    one whose peer failed or left it. `signaled`: each such rank's SIGINT time and wait."""
    if not signaled or any(now - at <= TORCH_RELEASE_S for at, _ in signaled.values()):
        return None
    said = "; ".join(w.words() if w else f"rank {r} did not stop" for r, (_, w) in sorted(signaled.items()))
    message = (
        f"{said}: a torch.distributed collective cannot be released once a peer failed or left it (Gloo and NCCL "
        "cannot cancel one)"
    )
    return Failure("unreleasable", tuple(sorted(signaled)), message, restarts=True)


def unclean_join(rank: int, ok: bool, in_flight: int, error_name: str | None) -> Failure | None:
    """A rank whose join left Horovod unfit for the next cell: operations still in flight, or a join that failed."""
    if ok and not in_flight:
        return None
    message = (
        f"rank {rank} still had {in_flight} Horovod operations in flight after the failure (e.g. gradients of a "
        "backward() without step()), which would clash with the next cell"
        if ok
        else f"rank {rank} could not leave Horovod's collectives ({error_name})"
    )
    return Failure("unclean_join", (rank,), message, restarts=True)


def over_time(limit: float) -> Failure:
    """A cell with a time limit (a replay after a restart) that ran past it: ended as if interrupted."""
    return Failure("over_time", (), f"It ran longer than {limit:g} s, the limit of such a cell, and was ended.")


def is_consequence(ename: str, evalue: str) -> bool:
    """An error that follows from the wind-down rather than from the user's code: the interrupt itself, pdb's quit,
    or a collective that a peer's join broke."""
    return ename in ("KeyboardInterrupt", "BdbQuit") or (ename == "HorovodInternalError" and "Join" in evalue)


def stalled(report: str, running: list[int]) -> dict[int, str]:
    """From Horovod's stall report (rank 0's stderr: per rank, the tensors it has not submitted): every running rank
    that submitted one of those waits for it, by rank, with the tensors' names."""
    missing = {
        int(m[1]): m[2] for m in re.finditer(r"^\s*(\d+): \[([^\]]*)\]", report.rsplit("Missing ranks:", 1)[-1], re.M)
    }
    out = {}
    for rank in running:
        tensors = sorted({t.strip() for q, names in missing.items() if q != rank for t in names.split(",")} - {""})
        if tensors:
            out[rank] = ", ".join(tensors)[:200]
    return out
