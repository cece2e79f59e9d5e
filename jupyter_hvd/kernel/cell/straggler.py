"""Which rank sets the pace: a rank that computes much longer per step than the others, for a while.

Pure logic, in the user's kernel. Each rank sends its recent mean compute and wait per training step
(engine/cell/pace.py); a rank whose compute per step is at least `RATIO` times the median of the other ranks' for
`HOLD_S` seconds is named the straggler (the others wait for it at every gradient allreduce). It stays named until
no rank has been that slow for `HOLD_S`.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from ... import state

RATIO = 1.3  # compute per step, against the median of the other ranks
HOLD_S = 10.0  # how long a rank must stay that slow to be named (and the others even, to clear it)
STALE_S = 3.0  # a rank that sent nothing for this long (its cell ended) is left out
MIN_GAP_MS = 1.0  # below this difference per step, a ratio is noise (tiny steps)


@dataclass
class _Pace:
    compute_ms: float
    wait_ms: float
    at: float


@dataclass
class StragglerDetector:
    """Feed it each rank's pace with `add()`; `straggler` is the rank named, or None."""

    ratio: float = RATIO
    hold_s: float = HOLD_S
    paces: dict[int, _Pace] = field(default_factory=dict)
    straggler: state.Straggler | None = None
    _candidate: int | None = None
    _since: float | None = None  # when the current candidate (or, once named, the evenness) began

    def add(self, rank: int, compute_ms: float, wait_ms: float, now: float) -> bool:
        """A rank's recent means per step; returns True when who is named changed (named or cleared)."""
        self.paces[rank] = _Pace(float(compute_ms), float(wait_ms), now)
        return self.check(now)

    def slowest(self, now: float) -> tuple[int, float] | None:
        """The rank whose compute per step exceeds the others' median by RATIO now, with that ratio; else None."""
        fresh = {r: p for r, p in self.paces.items() if now - p.at <= STALE_S}
        if len(fresh) < 2:
            return None
        rank = max(fresh, key=lambda r: fresh[r].compute_ms)
        others = statistics.median(p.compute_ms for r, p in fresh.items() if r != rank)
        mine = fresh[rank].compute_ms
        if mine - others < MIN_GAP_MS or mine < self.ratio * others:
            return None
        return rank, (mine / others if others > 0 else float("inf"))

    def check(self, now: float) -> bool:
        """Re-decide at `now`; True when the named straggler changed."""
        found = self.slowest(now)
        rank = found[0] if found else None
        if rank != self._candidate:
            self._candidate, self._since = rank, now
        held = self._since is not None and now - self._since >= self.hold_s
        named = self.straggler.rank if self.straggler else None
        if rank is not None and held and rank != named:
            self.straggler = _named(rank, found[1] if found else 0.0)
            return True
        if rank is not None and rank == named and found:
            self.straggler = _named(rank, found[1])  # the ratio follows the latest means
        if rank is None and named is not None and held:
            self.straggler = None
            return True
        return False

    def stats(self) -> dict[int, dict[str, float]]:
        """Per rank: compute_ms and wait_ms, the latest means (for the pool file)."""
        return {r: {"compute_ms": p.compute_ms, "wait_ms": p.wait_ms} for r, p in self.paces.items()}


def _named(rank: int, ratio: float) -> state.Straggler:
    shown = f"{ratio:.1f}x" if ratio != float("inf") else "far more than"
    return state.Straggler(rank, ratio, f"rank {rank} is the straggler: {shown} the others' compute per step")
