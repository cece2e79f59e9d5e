"""The state directory, which only its user can change, and safe reads and writes in it.

Only the user gets in: the directory is used only when it is the user's own and nobody else can write to it or to
the directory it is in (as ssh's StrictModes); files are read only when they are the user's own regular files, and
written under random temporary names (O_EXCL | O_NOFOLLOW: a planted symlink is never followed), then renamed into
place. A pool's id comes from its file's name, which must look like a pool id. Every number written is finite: NaN
and Inf become null, so a file is always valid JSON.
"""

from __future__ import annotations

import json
import math
import os
import pwd
import re
import secrets
import stat
import warnings
from pathlib import Path
from typing import Any

LEGACY_DIR_ENV = "JUPYTER_HVD_STATE_DIR"  # read for one more release, with a warning
POOL_ID = re.compile(r"^hvd-\d{1,10}-\d{1,10}$")  # what pool ids look like (kernel/launch/pool.py makes them)
POOL_FILE = re.compile(r"^pool-(hvd-\d{1,10}-\d{1,10})\.json$")
MAX_FILE_BYTES = 8 * 2**20  # a pool file is a few KB: anything bigger is not one


class UnsafeStateDir(Exception):
    """The state directory could be changed by someone else: nothing is read from it or written to it."""


def state_dir() -> Path:
    """Where pool files live: `jupyter-hvd/` in the Jupyter runtime directory (`jupyter --runtime-dir`; moved with
    JUPYTER_RUNTIME_DIR), shared by kernels and the server. Created 0700; raises UnsafeStateDir when it (or the
    directory it is in) can be written by another user."""
    from jupyter_core.paths import jupyter_runtime_dir

    legacy = os.environ.get(LEGACY_DIR_ENV)
    if legacy:
        warnings.warn(
            f"{LEGACY_DIR_ENV} is deprecated and will be ignored from the next release: pool files go to "
            "jupyter-hvd/ in the Jupyter runtime directory, which JUPYTER_RUNTIME_DIR moves.",
            FutureWarning,
            stacklevel=2,
        )
    d = Path(legacy) if legacy else Path(jupyter_runtime_dir()) / "jupyter-hvd"
    try:
        d.mkdir(parents=True, exist_ok=True, mode=0o700)
    except FileExistsError:
        pass  # a file or a dangling symlink in its place: check_private says what it is
    check_private(d)
    return d


def check_private(d: Path) -> None:
    """Raise UnsafeStateDir, with what is wrong and the fix in one line, unless `d` is a directory of this user that
    no one else can write to, in a directory no one else can change (or a sticky one, like /tmp)."""
    me = os.geteuid()
    try:
        st = os.lstat(d)
    except OSError as exc:
        raise UnsafeStateDir(f"{d} cannot be used for pool files ({exc.strerror}).") from None
    fix = "point JUPYTER_RUNTIME_DIR at a directory of your own"
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        what = "a symlink" if stat.S_ISLNK(st.st_mode) else "not a directory"
        raise UnsafeStateDir(f"{d} is {what}, so it cannot hold pool files safely: remove it, or {fix}.")
    if st.st_uid != me:
        raise UnsafeStateDir(
            f"{d} belongs to {_user(st.st_uid)}, not to you ({_user(me)}), who could fake or stop your pools: "
            f"remove it (it is made again), or {fix}."
        )
    if st.st_mode & 0o022:
        raise UnsafeStateDir(
            f"{d} can be written by others (mode {stat.S_IMODE(st.st_mode):o}), who could fake or stop your pools: "
            f"run `chmod 700 {d}`, or {fix}."
        )
    parent = d.parent.resolve()
    pst = os.stat(parent)
    if pst.st_uid not in (0, me):
        raise UnsafeStateDir(
            f"{d} is inside {parent}, which belongs to {_user(pst.st_uid)}, who could replace your pools' directory: "
            f"{fix}."
        )
    if pst.st_mode & 0o022 and not pst.st_mode & stat.S_ISVTX:
        raise UnsafeStateDir(
            f"{d} is inside {parent}, which others can write to (mode {stat.S_IMODE(pst.st_mode):o}), so they could "
            f"replace your pools' directory: run `chmod go-w {parent}`, or {fix}."
        )


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def valid_pool_id(pool_id: str) -> bool:
    """Whether `pool_id` looks like a pool id (so it names a file in the state directory, nothing else)."""
    return bool(POOL_ID.match(pool_id))


def checked_pool_id(pool_id: str) -> str:
    """`pool_id`, once it looks like a pool id; else ValueError."""
    if not valid_pool_id(pool_id):
        raise ValueError(f"{pool_id!r} is not a jupyter-hvd pool id (hvd-<pid>-<n>)")
    return pool_id


def pool_file(pool_id: str) -> Path:
    """The state file of pool `pool_id`."""
    return state_dir() / f"pool-{checked_pool_id(pool_id)}.json"


def pool_directory(pool_id: str) -> Path:
    """The private directory of pool `pool_id` (mode 0700): what only the pool's kernel and engines may read or
    write (its cell channel's sockets, snapshots of kept names). Created here; the pool removes it when it stops."""
    d = state_dir() / checked_pool_id(pool_id)
    d.mkdir(mode=0o700, exist_ok=True)
    check_private(d)
    return d


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write `data` to `path` atomically, mode 0600 (write_private)."""
    write_private(path, json.dumps(finite(data), allow_nan=False))  # a bare NaN is not JSON: readers would fail


def write_private(path: Path, text: str) -> None:
    """Write `text` to `path` atomically, mode 0600: under a random temporary name, created exclusively and never
    through a symlink, then renamed over `path` (a symlink at `path` is replaced, not followed)."""
    for _ in range(5):
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except FileExistsError:
            continue  # someone put something at that name: draw another
        try:
            with os.fdopen(fd, "w") as f:
                f.write(text)
            os.replace(tmp, path)
        except BaseException:
            remove(tmp)
            raise
        return
    raise FileExistsError(f"no free temporary name for {path} after 5 tries: something is creating files there")


def finite(value: Any) -> Any:
    """`value` with every NaN and Inf (in nested dicts, lists and tuples) replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def read_pool(path: Path) -> dict[str, Any] | None:
    """A pool's state, or None if the file is gone, unreadable, not a regular file of this user (a symlink, or
    another user's file), or not JSON."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_size > MAX_FILE_BYTES:
            return None
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = json.loads(f.read(MAX_FILE_BYTES))
        return data if isinstance(data, dict) else None
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)


def remove(path: Path) -> None:
    """Remove a pool's state file (the pool has stopped)."""
    try:
        path.unlink()
    except FileNotFoundError:
        pass
