"""Which of Horovod's start-time settings a cell can change on a running pool, and how.

Horovod 0.28.1 reads its HOROVOD_* variables when it starts (`hvd.init()`), so a script sets them before its
`hvd.init()`. In a pool Horovod is already running: a cell's `hvd.init()` starts it again with what the cell set
(engine/horovod/guards.py), except where Horovod 0.28.1 cannot honour a second start (read in its operations.cc,
parameter_manager.cc and logging.cc, and tried under mpirun): those settings are named with what to type instead.

Pure logic, no Horovod import: unit-tested on its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

# Horovod 0.28.1 cannot start again once one of these fixed a tuning parameter: the first start drops it from its
# tuning vector, the next writes to the old index (a segfault in 3 of 4 tries): the %hvd_start option that sets it.
FIXED = {
    "HOROVOD_CYCLE_TIME": "--cycle-time MS",
    "HOROVOD_FUSION_THRESHOLD": "--fusion-mb MB",
    "HOROVOD_AUTOTUNE": "--env HOROVOD_AUTOTUNE=1",
}
# Read once per process, at Horovod's first log line (the pool's first start).
ONCE = ("HOROVOD_LOG_LEVEL", "HOROVOD_LOG_HIDE_TIME")
# Switched on by a value above 0 and never back off by a later start.
ONE_WAY_ON = ("HOROVOD_DISABLE_GROUP_FUSION", "HOROVOD_ENABLE_ASYNC_COMPLETION", "HOROVOD_ELASTIC")
# Switched off by "0" and never back on.
ONE_WAY_OFF = ("HOROVOD_BATCH_D2D_MEMCOPIES",)
# Kept from the start before when unset: a start without them gives Horovod's default explicitly.
DEFAULTS = {
    "HOROVOD_CACHE_CAPACITY": "1024",
    "HOROVOD_HIERARCHICAL_ALLREDUCE": "0",
    "HOROVOD_HIERARCHICAL_ALLGATHER": "0",
    "HOROVOD_TORUS_ALLREDUCE": "0",
    "HOROVOD_ADASUM_MPI_CHUNK_SIZE": str(1 << 30),
}
# Values that end the MPI job a pool runs in (as under mpirun): why.
REFUSED = {
    ("HOROVOD_CONTROLLER", "gloo"): "the Gloo controller needs horovodrun --gloo's rendezvous, and aborts under MPI",
    ("HOROVOD_CPU_OPERATIONS", "gloo"): "Gloo collectives crash (segfault) under the MPI controller",
    ("HOROVOD_CPU_OPERATIONS", "ccl"): "this Horovod was built without oneCCL",
}


def _on(value: str | None) -> bool:
    try:
        return value is not None and int(value) > 0
    except ValueError:
        return False


@dataclass
class Plan:
    """What a cell's `hvd.init()` does with the HOROVOD_* variables it set."""

    start_with: dict[str, str]  # the HOROVOD_* variables Horovod starts with (as the cell sees them)
    applied: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)  # name -> (before, now)
    named: list[str] = field(default_factory=list)  # one sentence per setting that cannot take effect


def plan(started: Mapping[str, str], now: Mapping[str, str]) -> Plan:
    """How Horovod, last started with the HOROVOD_* variables `started`, starts again for a cell that set `now`."""
    result = Plan(start_with=dict(started))
    fixed: list[str] = []
    for key in sorted(set(started) | set(now)):
        before, after = started.get(key), now.get(key)
        if before == after:
            continue
        refused = REFUSED.get((key, (after or "").lower()))
        if key in FIXED:
            fixed.append(key)
        elif key in ONCE:
            result.named.append(
                f"{key} is read once per process by Horovod 0.28.1, so a cell cannot change it: "
                f"%hvd_start --env {key}=... sets it"
            )
        elif refused:
            result.named.append(f"{key}={after} is not used: {refused} (under mpirun too)")
        elif (key in ONE_WAY_ON and _on(before) and not _on(after)) or (
            key in ONE_WAY_OFF and before == "0" and after != "0"
        ):
            result.named.append(
                f"{key} stays {before} until %hvd_restart: Horovod 0.28.1 does not switch it back when it starts again"
            )
        else:
            result.applied[key] = (before, after)
            if after is None:
                result.start_with.pop(key, None)
            else:
                result.start_with[key] = after
    if fixed:
        flags = ", ".join(FIXED[k] for k in fixed)
        result.named.insert(
            0,
            f"{', '.join(fixed)} set in a cell cannot take effect on a running pool: Horovod 0.28.1 crashes when it "
            f"starts again with {'it' if len(fixed) == 1 else 'them'} (a segfault); to change "
            f"{'it' if len(fixed) == 1 else 'them'}: %hvd_stop, then %hvd_start with {flags}",
        )
    return result


def start_env(variables: Mapping[str, str]) -> dict[str, str]:
    """The environment a second start of Horovod needs to honour `variables`: Horovod's defaults made explicit where
    a start before may have set them (a start without them would keep the earlier value)."""
    env = {key: value for key, value in DEFAULTS.items() if key not in variables}
    env.update(variables)
    return env
