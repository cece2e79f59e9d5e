"""The one contract between a kernel's pool and everything outside the kernel (server, reaper): the pool file.

Each pool writes one JSON file, atomically and readable by its owner only, under
`<jupyter runtime dir>/jupyter-hvd/pool-<id>.json`; the sidebar asks the kernel for actions the other way, with
`pool-<id>.action.json`. One module per job:

- `schema`: what a pool file holds (PoolRecord, RankRecord, Straggler, Nonfinite, WhereReport, ProcessEntry);
- `private`: the state directory only its user can change, and safe reads and writes in it;
- `processes`: the processes of a pool recognised again (pid, start time, boot) and ended when its kernel died;
- `pool_files`: a kernel writes its pool's file, the server lists them;
- `actions`: what the sidebar asks a kernel to do (interrupt, restart, stop, where).

This package is the one import point: `from jupyter_hvd import state`, then `state.write_pool(...)`,
`state.PoolRecord`, ...; every public name of those modules is re-exported here, and callers use these, not the
modules.
"""

from __future__ import annotations

from .actions import ACTIONS, MAX_RANKS, Action, Ask, action_file, request_action, take_action
from .pool_files import list_pools, write_pool
from .private import (
    LEGACY_DIR_ENV,
    MAX_FILE_BYTES,
    POOL_FILE,
    POOL_ID,
    UnsafeStateDir,
    check_private,
    checked_pool_id,
    finite,
    pool_directory,
    pool_file,
    read_pool,
    remove,
    state_dir,
    valid_pool_id,
    write_json,
    write_private,
)
from .processes import (
    POOL_ENV,
    SLURM_JOB,
    boot_id,
    clean_up,
    kernel_alive,
    kernel_identity,
    kill_processes,
    recorded_processes,
    started,
)
from .schema import (
    VERSION,
    Nonfinite,
    PoolRecord,
    ProcessEntry,
    RankRecord,
    Straggler,
    WhereReport,
    field_names,
)

__all__ = [
    "ACTIONS",
    "LEGACY_DIR_ENV",
    "MAX_FILE_BYTES",
    "MAX_RANKS",
    "POOL_ENV",
    "POOL_FILE",
    "POOL_ID",
    "SLURM_JOB",
    "VERSION",
    "Action",
    "Ask",
    "Nonfinite",
    "PoolRecord",
    "ProcessEntry",
    "RankRecord",
    "Straggler",
    "UnsafeStateDir",
    "WhereReport",
    "action_file",
    "boot_id",
    "check_private",
    "checked_pool_id",
    "clean_up",
    "field_names",
    "finite",
    "kernel_alive",
    "kernel_identity",
    "kill_processes",
    "list_pools",
    "pool_directory",
    "pool_file",
    "read_pool",
    "recorded_processes",
    "remove",
    "request_action",
    "started",
    "state_dir",
    "take_action",
    "valid_pool_id",
    "write_json",
    "write_pool",
    "write_private",
]
