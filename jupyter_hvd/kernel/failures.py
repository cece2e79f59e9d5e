"""What can go wrong while the ranks work, one class per kind: each detects itself from what the ranks reported or
what their processes show, says what happened on which ranks, what to do next, and whether only a restart of the
pool mends it.

The cell's wait (kernel/cell/run.py), push and pull (kernel/transfer.py), where (kernel/diagnose/where.py) and the
debugger (kernel/diagnose/debugger.py) all ask the same detectors. A failure that needs a restart travels as
`PoolLost` to the owner of the pool's life (kernel/owner.py), which restarts the pool and says what came back.
A rank's own exception is not here: the rank reports it, and errors.py groups it for the notebook.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from .ranks import Rank, format_ranks

# Collectives that cannot match: every rank still running waits in one, while another rank has finished the cell
# (this long after both), or while they wait on different tensors (this long). Shorter waits are normal.
UNEVEN_S = 2.0
MISMATCH_S = 3.0
# torch.distributed cannot cancel a collective whose peer failed (Gloo and NCCL end it only when the peer's
# connection closes): ranks still in one this long after their SIGINT (or after their peers' Decline, which releases
# those in the check before one) are released by restarting the pool.
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
RESTART = "Restart the pool with %hvd_restart (kept names come back)."


@dataclass(frozen=True)
class Failure:
    """One thing that went wrong, in the user's words: `message` says what happened, naming the ranks; `remedy` what
    to do next; a kind whose `restarts` is True is mended only by a restart of the pool."""

    ranks: tuple[int, ...]
    message: str
    remedy: str = ""
    restarts: ClassVar[bool] = False

    def __str__(self) -> str:
        return f"{self.message}. {self.remedy}" if self.remedy else self.message


class PoolLost(Exception):
    """A failure only a restart of the pool mends (kernel/owner.py restarts it)."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.message)
        self.failure = failure


class Processes(Protocol):
    """What the detectors read of a pool's processes (kernel/launch/pool.py)."""

    ranks: list[Rank]

    def dead_ranks(self) -> list[int]: ...

    def frozen_ranks(self) -> list[int]: ...

    def death_report(self) -> str: ...


# ---- the cell's collectives ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Wait:
    """A running rank's wait in a collective, as the kernel learnt it (engine/collectives.py)."""

    rank: int
    name: str
    number: int | None
    since: float  # kernel clock (monotonic)
    # What peers whose cell ended can release with a Decline (wire.Decline): a wait in the ranks' check before a
    # torch.distributed collective at this sequence number of the group, or for these allreduces (DDP's buckets).
    agreeing_at: int | None = None
    owed: tuple[tuple[int, int, str], ...] = ()

    @classmethod
    def reported(cls, rank: int, wait: Mapping[str, Any], now: float) -> Wait:
        """A wait as a rank reported it (wire.Waiting)."""
        owed = tuple((int(q), int(n), str(d)) for q, n, d in wait.get("owed", ()))
        agreeing_at = wait.get("agreeing_at")
        return cls(rank, str(wait.get("name")), wait.get("number"), now - wait["waited"], agreeing_at, owed)

    def releasable(self) -> bool:
        return self.agreeing_at is not None or bool(self.owed)

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


@dataclass(frozen=True)
class Uneven(Failure):
    """A rank finished the cell while the others wait in one more collective: a join releases them, state kept."""


@dataclass(frozen=True)
class Mismatch(Failure):
    """Ranks wait on different tensors: only a restart releases them (Horovod crashed when they joined)."""

    restarts: ClassVar[bool] = True


def unmatched(running: list[int], waits: list[Wait], finished: list[Done], now: float) -> Uneven | Mismatch | None:
    """Collectives that cannot match, or None while they still may: every running rank waits in one, and a rank
    finished the cell, or they wait on different tensors."""
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
        return Uneven(tuple(running), message)
    if len(waits) > 1 and len({w.name for w in waits}) > 1 and waiting_for >= MISMATCH_S:
        message = (
            f"Collectives did not match: {said}, for {waiting_for:.0f} s. {advice(waits)} Ranks that wait on different "
            "tensors can only be released by restarting the pool"
        )
        return Mismatch(tuple(running), message)
    return None


@dataclass(frozen=True)
class Unreleasable(Failure):
    """torch.distributed ranks still in a collective after their interrupt: Gloo and NCCL cannot cancel one whose
    peer failed or left it."""

    restarts: ClassVar[bool] = True

    @classmethod
    def detect(cls, signaled: Mapping[int, tuple[float, Wait | None]], now: float) -> Unreleasable | None:
        """`signaled`: each such rank's interrupt time and wait; a failure once TORCH_RELEASE_S passed for all."""
        if not signaled or any(now - at <= TORCH_RELEASE_S for at, _ in signaled.values()):
            return None
        said = "; ".join(w.words() if w else f"rank {r} did not stop" for r, (_, w) in sorted(signaled.items()))
        message = (
            f"{said}: a torch.distributed collective cannot be released once a peer failed or left it (Gloo and "
            "NCCL cannot cancel one)"
        )
        return cls(tuple(sorted(signaled)), message)


@dataclass(frozen=True)
class UncleanJoin(Failure):
    """A rank whose join left Horovod unfit for the next cell: operations still in flight, or a join that failed."""

    restarts: ClassVar[bool] = True

    @classmethod
    def detect(cls, rank: int, ok: bool, in_flight: int, error_name: str | None) -> UncleanJoin | None:
        if ok and not in_flight:
            return None
        message = (
            f"rank {rank} still had {in_flight} Horovod operations in flight after the failure (e.g. gradients of a "
            "backward() without step()), which would clash with the next cell"
            if ok
            else f"rank {rank} could not leave Horovod's collectives ({error_name})"
        )
        return cls((rank,), message)


@dataclass(frozen=True)
class OutOfStep(Failure):
    """After a failed or stopped cell, ranks that entered different numbers of torch.distributed collectives: one
    was left running in a rank's library that its peers never entered, so every next collective would pair with the
    wrong one (garbage, or a wait with no end). torch cannot withdraw an entered collective."""

    restarts: ClassVar[bool] = True

    @classmethod
    def detect(cls, entered: Mapping[int, int]) -> OutOfStep | None:
        counts = {rank: n for rank, n in entered.items() if n >= 0}
        if len(set(counts.values())) <= 1:
            return None
        by_count: dict[int, list[int]] = {}
        for rank, n in sorted(counts.items()):
            by_count.setdefault(n, []).append(rank)
        groups = sorted(by_count.items(), key=lambda item: item[1][0])
        said = ", ".join(f"{format_ranks(rs)} entered {n}" for n, rs in groups)
        message = (
            f"The process group of torch.distributed is out of step: {said} collectives. A collective was left "
            "running when the cell ended that its peers never entered, and every next one would pair with the wrong one"
        )
        return cls(tuple(sorted(counts)), message)


@dataclass(frozen=True)
class OverTime(Failure):
    """A cell with a time limit (a replay after a restart) that ran past it: ended as if interrupted."""

    @classmethod
    def of(cls, limit: float) -> OverTime:
        return cls((), f"It ran longer than {limit:g} s, the limit of such a cell, and was ended.")


@dataclass(frozen=True)
class Overdue(Failure):
    """Ranks that did not stop within --fail-timeout of the failure (or the user interrupted twice)."""

    restarts: ClassVar[bool] = True

    @classmethod
    def of(cls, stuck: list[int], fail_timeout: float) -> Overdue:
        return cls(
            tuple(stuck),
            f"{format_ranks(stuck)} did not stop within {fail_timeout:g} s (blocked in a collective or in native code)",
        )


# ---- the ranks' processes ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Dead(Failure):
    """An engine died (mpiexec's words say which and how: MPI ends the whole job when one rank dies)."""

    restarts: ClassVar[bool] = True

    @classmethod
    def among(cls, pool: Processes, ranks: list[int] | None = None) -> Dead | None:
        """The ranks of `ranks` (default: all) whose engine is gone, or None."""
        dead = sorted(set(pool.dead_ranks()) & set(ranks if ranks is not None else [r.rank for r in pool.ranks]))
        return cls(tuple(dead), f"{format_ranks(dead)} died ({pool.death_report()})", RESTART) if dead else None

    @classmethod
    def of(cls, report: str, ranks: list[int]) -> Dead:
        """From mpiexec's own report, once it exited (the owner restarts the pool: no remedy to type)."""
        return cls(tuple(ranks), report)


@dataclass(frozen=True)
class Frozen(Failure):
    """Ranks stopped by SIGSTOP or Ctrl-Z: alive, but running nothing."""

    restarts: ClassVar[bool] = True

    @classmethod
    def among(cls, pool: Processes, ranks: list[int] | None = None) -> Frozen | None:
        """The ranks of `ranks` (default: all) whose engine is stopped now, or None."""
        frozen = sorted(set(pool.frozen_ranks()) & set(ranks if ranks is not None else [r.rank for r in pool.ranks]))
        if not frozen:
            return None
        pids = " ".join(str(r.pid) for r in pool.ranks if r.rank in frozen)
        verb = "is" if len(frozen) == 1 else "are"
        return cls(
            tuple(frozen),
            f"{format_ranks(frozen)} {verb} stopped (SIGSTOP or Ctrl-Z) and run{'s' if len(frozen) == 1 else ''} "
            "nothing",
            f"Resume {'it' if len(frozen) == 1 else 'them'} with `kill -CONT {pids}`, or %hvd_restart.",
        )

    @classmethod
    def for_long(
        cls, frozen_since: dict[int, float], pids: dict[int, int], timeout: float, ending: bool, now: float
    ) -> Frozen | None:
        """Ranks frozen for the pool's timeout (they may be resumed), or at all while the cell ends (a frozen rank
        can never take part in the wind-down)."""
        overdue = sorted(r for r, since in frozen_since.items() if ending or now - since >= timeout)
        if not overdue:
            return None
        named = ", ".join(f"rank {r} (pid {pids.get(r, '?')})" for r in overdue)
        when = "during the wind-down" if ending else f"for {timeout:g} s"
        verb = "is" if len(overdue) == 1 else "are"
        return cls(tuple(overdue), f"{named} {verb} frozen (stopped by SIGSTOP or Ctrl-Z) {when}")


@dataclass(frozen=True)
class Unsent(Failure):
    """A request could not reach a rank (its engine is gone)."""

    restarts: ClassVar[bool] = True

    @classmethod
    def of(cls, rank: int | None, what: str, error: Exception) -> Unsent:
        who = f"rank {rank}" if rank is not None else "the ranks"
        return cls((rank,) if rank is not None else (), f"{who} could not be {what}: {error}")


def lost(pool: Processes, ranks: list[int] | None = None) -> Dead | Frozen | None:
    """Whether some of `ranks` (default: all) died or are frozen now: what push, pull, where and the debugger check
    while they wait."""
    return Dead.among(pool, ranks) or Frozen.among(pool, ranks)


# ---- what the ranks said -----------------------------------------------------------------------------------------


def is_consequence(ename: str, evalue: str) -> bool:
    """An error that follows from the wind-down rather than from the user's code: the interrupt itself, pdb's quit,
    a collective that a peer's join broke, or a torch.distributed one its peers declined (wire.Decline)."""
    return ename in ("KeyboardInterrupt", "BdbQuit", "PeerCellEnded") or (
        ename == "HorovodInternalError" and "Join" in evalue
    )


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
