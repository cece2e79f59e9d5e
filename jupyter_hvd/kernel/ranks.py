"""The pool's ranks: what the kernel knows of each, rank sets as users write them (`all`, `0,2`, `1-3`), and as
messages and tables show them."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass
class Rank:
    """One worker of the pool, as `%hvd_start` reports it."""

    rank: int
    engine_id: int
    host: str
    pid: int
    device: str
    controller: str
    tensor_ops: str
    local_rank: int = 0
    cross_rank: int = 0
    state: str = "idle"


def rank_table(ranks: list[Rank]) -> str:
    """The ranks as a fixed-width text table."""
    head = ("rank", "host", "pid", "device", "controller", "ops", "state")
    rows = [(str(r.rank), r.host, str(r.pid), r.device, r.controller, r.tensor_ops, r.state) for r in ranks]
    widths = [max(len(x) for x in col) for col in zip(head, *rows, strict=True)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return "\n".join([fmt.format(*head), *(fmt.format(*row) for row in rows)])


def parse_ranks(spec: str, size: int) -> list[int]:
    """Parse `all`, `0`, `0,2` or `1-3` into a sorted list of ranks of a pool of `size`."""
    spec = spec.strip().lower()
    if spec in ("all", "*"):
        return list(range(size))
    ranks: set[int] = set()
    for part in filter(None, (p.strip() for p in spec.split(","))):
        lo, sep, hi = part.partition("-")
        try:
            first, last = int(lo), int(hi if sep else lo)
        except ValueError:
            raise ValueError(
                f"--ranks {spec!r}: write 'all', a rank like 0, a list like 0,2 or a range like 1-3"
            ) from None
        if first > last or first < 0 or last >= size:
            raise ValueError(f"--ranks {spec!r}: the pool has ranks 0-{size - 1}")
        ranks.update(range(first, last + 1))
    if not ranks:
        raise ValueError("--ranks needs at least one rank, or 'all'")
    return sorted(ranks)


def format_ranks(ranks: Iterable[int]) -> str:
    """`rank 2`, `ranks 0-3` or `ranks 0,2,5-7`."""
    rs = sorted(set(ranks))
    runs: list[str] = []
    i = 0
    while i < len(rs):
        j = i
        while j + 1 < len(rs) and rs[j + 1] == rs[j] + 1:
            j += 1
        runs.append(str(rs[i]) if i == j else f"{rs[i]}-{rs[j]}")
        i = j + 1
    return ("rank " if len(rs) == 1 else "ranks ") + ",".join(runs)
