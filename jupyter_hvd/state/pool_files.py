"""Pool files: each kernel writes its pool's as a `PoolRecord`; the server lists them, each marked stale when its
kernel is gone."""

from __future__ import annotations

import os
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from .private import POOL_FILE, read_pool, state_dir, write_json
from .processes import kernel_alive
from .schema import PoolRecord


def write_pool(path: Path, record: PoolRecord) -> None:
    """Write a pool's state atomically (readers never see half a file), mode 0600."""
    record.updated = time.time()
    write_json(path, asdict(record))


def list_pools(kernel_ids: set[str] | None = None) -> list[dict[str, Any]]:
    """Every pool file in the state directory (of the kernels `kernel_ids`, when given), each with its `id` taken
    from the file's name and `stale` set when its kernel is gone."""
    pools = []
    directory = state_dir()
    for name in sorted(os.listdir(directory)):
        m = POOL_FILE.match(name)
        if not m:
            continue
        data = read_pool(directory / name)
        if data is None or data.get("id") != m.group(1):
            continue  # a file that names another pool than its own is not a pool's
        if kernel_ids is not None and str(data.get("kernel_id") or "") not in kernel_ids:
            continue
        data["stale"] = not kernel_alive(data)
        pools.append(data)
    return pools
