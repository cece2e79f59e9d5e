"""Horovod's negotiation waited for with naps, so that an awake Horovod leaves the cores alone (negotiation.c).

Horovod's background thread agrees with the other ranks every 1 ms cycle in an MPI allreduce where Open MPI
busy-waits: the rank that arrives first spins until the last one does, a whole core per pool while Horovod is awake
but nearly idle (bench/awake_cpu.py: the busier rank 100% against 16% with naps; training as fast, bench/RESULTS.md).

Horovod's library binds its MPI calls when it is loaded, so the wrapper must be loaded before it: the warm template
loads it (switched off) before its imports, and a rank started cold loads it before its own. Every rank of a pool
must wait the same way, so the kernel decides for the whole pool (wire.NEGOTIATION_NAPS_ENV), and only where every
rank runs on its host, from the same build, and the template that forks them has the wrapper: each rank then only
switches it on before Horovod starts.

Imported on the engines (and the template) only; ctypes only, so that loading it costs no import time.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Mapping
from pathlib import Path

from ... import wire

# Built by scripts/setup.sh from negotiation.c ("negotiation.so" would be imported in place of this module).
LIBRARY = Path(__file__).with_name("libnegotiation.so")

_library: ctypes.CDLL | None = None


def load() -> bool:
    """Load the wrapper, switched off, where it was built; whether it is loaded. Must come before Horovod's import."""
    global _library
    if _library is None and LIBRARY.is_file():
        try:
            # RTLD_GLOBAL: Horovod's library, loaded after it, finds its MPI_Allreduce before Open MPI's.
            _library = ctypes.CDLL(str(LIBRARY), mode=ctypes.RTLD_GLOBAL)
        except OSError:
            return False
        _library.jupyter_hvd_negotiation_waits.restype = ctypes.c_long
    return _library is not None


def start(env: Mapping[str, str] = os.environ) -> None:
    """Switch the naps on if the pool says so; called before Horovod starts on this rank. A rank that cannot raises:
    its peers would wait for it in an allreduce it never joins."""
    if env.get(wire.NEGOTIATION_NAPS_ENV) != "1":
        return
    if not load() or _library is None:  # (the second for the type checker)
        raise RuntimeError(
            f"this rank cannot load {LIBRARY}, which the pool's other ranks wait with in Horovod's negotiation: "
            "`bash scripts/setup.sh` builds it again"
        )
    _library.jupyter_hvd_negotiation_naps(1)


def waits() -> int:
    """How many negotiations this rank waited for with naps (0 where the wrapper is off or not loaded)."""
    return 0 if _library is None else int(_library.jupyter_hvd_negotiation_waits())
