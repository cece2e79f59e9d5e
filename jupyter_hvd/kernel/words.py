"""How messages say sizes and ages: `412 MB`, `12 s`."""

from __future__ import annotations

import time


def size_text(n: int) -> str:
    """`n` bytes for people: 412 MB, 3.1 GB, 12 KB."""
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}" if n < 10 * scale else f"{n / scale:.0f} {unit}"
    return f"{n} bytes"


def age_text(at: float) -> str:
    """How long ago epoch time `at` was: '12 s', '3 min', '2.5 h'."""
    s = max(0.0, time.time() - at)
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.1f} h"
