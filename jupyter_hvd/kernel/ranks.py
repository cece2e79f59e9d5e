"""Rank sets as users write them (`all`, `0,2`, `1-3`) and as messages name them (`ranks 0-3`)."""

from __future__ import annotations

from collections.abc import Iterable


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
