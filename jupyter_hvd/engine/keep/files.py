"""Where snapshots live: generations of per-rank manifests over tensor data files shared by content.

    kept/
      data/<digest>                  tensor data, named by its digest: written once per host, whichever rank and
                                     snapshot holds the same bytes (data-parallel ranks hold the same weights)
      rank-<r>/<cell>-<k>/manifest   rank r's part of generation (cell, k): its kept names, its random generators
      rank-<r>/<cell>-<k>/<digest>   hard links to the data the manifest refers to
      rank-<r>/<cell>-<k>/dcp/<name>/  the DTensor shards (FSDP2) of kept name <name>: rank r's own
                                     torch.distributed.checkpoint (engine/keep/shards.py), hard links where unchanged
      .tmp-<host>-<pid>-*            being written

A generation directory holds links to all of its data, so deleting one (rmtree) never takes data another still uses,
and a data file whose only name left is data/<digest> is no longer used by any generation (`collect`). A manifest
is renamed into place last: a rank's part of a generation exists whole or not at all; a crash while writing leaves
only .tmp- files, removed once their writer is gone. Restores map the data files copy-on-write (`open_data`), so the
ranks of one host share the pages of one snapshot instead of each reading its own copy.

Imported on the engines only.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import pickle
import secrets
import shutil
import socket
from pathlib import Path
from typing import Any

from ... import state
from ...wire import GenId
from . import shards
from .content import as_bytes, of_bytes
from .encoding import Encoded, TensorRef

DATA = "data"
MANIFEST = "manifest"
DCP = "dcp"
_HOST = socket.gethostname().replace("-", "_")


def gen_name(gen: GenId) -> str:
    return f"{gen[0]:08d}-{gen[1]:04d}"


def rank_dir(directory: Path, rank: int) -> Path:
    return directory / f"rank-{rank}"


def gen_dir(directory: Path, rank: int, gen: GenId) -> Path:
    return rank_dir(directory, rank) / gen_name(gen)


def shards_dir(directory: Path, rank: int, gen: GenId, name: str) -> Path:
    """Where rank `rank`'s part of generation `gen` keeps the shards of kept name `name`."""
    return gen_dir(directory, rank, gen) / DCP / name


def _tmp(directory: Path) -> Path:
    # The host and pid tell a writer that is gone from one still writing (the directory may be shared between hosts).
    return directory / f".tmp-{_HOST}-{os.getpid()}-{secrets.token_hex(6)}"


def _write_new(path: Path, chunks: list[Any]) -> None:
    """A file of the user's own, created (never followed through a link) and written whole."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as f:
        for chunk in chunks:
            f.write(chunk)


def prepare(directory: Path) -> None:
    """Make the pool's directory and its snapshots' (`directory`) where they are missing (another host without a
    shared file system), private to this user, and check them as the state directory is checked:
    state.UnsafeStateDir where someone else could read or replace them."""
    pool = directory.parent
    if not pool.exists():
        pool.mkdir(mode=0o700, parents=True)
    state.check_private(pool)
    directory.mkdir(mode=0o700, exist_ok=True)
    state.check_private(directory)


def write_generation(
    directory: Path,
    rank: int,
    gen: GenId,
    manifest: dict[str, Any],
    tensors: list[TensorRef],
    previous: GenId | None,
    sharded: dict[str, Encoded],
) -> tuple[int, int]:
    """Write rank `rank`'s part of generation `gen`: the data of `tensors` that has no file yet (each tensor's digest
    is filled in; a tensor without data is one of generation `previous`), the shards of the `sharded` names (saved,
    or linked from generation `previous` where their copies were saved already), links to all of it, then the
    manifest; the bytes written, and the manifest's."""
    data_dir = directory / DATA
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    rank_dir(directory, rank).mkdir(mode=0o700, exist_ok=True)
    building = _tmp(rank_dir(directory, rank))
    building.mkdir(mode=0o700)
    written = 0
    try:
        for ref in tensors:
            if ref.inline is not None:
                continue
            if not ref.digest:
                if ref.data is None:  # its copy went back unwritten (an earlier write failed): copy again
                    raise FileNotFoundError("the data of a kept tensor was never written")
                ref.digest = of_bytes(as_bytes(ref.data)).hex()
            earlier = gen_dir(directory, rank, previous) / ref.digest if previous else None
            written += _link_data(data_dir, building / ref.digest, ref, earlier)
            ref.data = None  # the copy is on disk: its memory can go
        for name, encoded in sharded.items():
            earlier = shards_dir(directory, rank, previous, name) if previous else None
            written += _save_shards(building / DCP / name, encoded, earlier, f"{rank}/{gen_name(gen)}/{name}")
        body = pickle.dumps(manifest, protocol=pickle.HIGHEST_PROTOCOL)
        _write_new(building / MANIFEST, [body])
        written += len(body)
        target = gen_dir(directory, rank, gen)
        shutil.rmtree(target, ignore_errors=True)  # a part of the same generation from engines before a restart
        os.rename(building, target)
        for encoded in sharded.values():  # saved: the copies' memory can go, later generations link the files
            encoded.shards = dict.fromkeys(encoded.shards)
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise
    return written, len(body)


def _link_data(data_dir: Path, link: Path, ref: TensorRef, earlier: Path | None) -> int:
    """Give the generation a link to the data of `ref`: to the file another rank or snapshot wrote already, or to a
    new one; the bytes written."""
    shared = data_dir / ref.digest
    for source in (shared, earlier):
        if source is None or link.exists():
            continue
        with contextlib.suppress(FileNotFoundError):
            os.link(source, link)
    if link.exists():
        return 0
    if ref.data is None:
        raise FileNotFoundError(f"the data of a kept tensor ({ref.digest}) is no longer on disk")
    tmp = _tmp(data_dir)
    try:
        _write_new(tmp, [as_bytes(ref.data)])
        os.link(tmp, link)
        with contextlib.suppress(FileExistsError):  # another rank wrote the same bytes meanwhile: both are whole
            os.link(tmp, shared)
    finally:
        tmp.unlink(missing_ok=True)
    return ref.data.nbytes


def _save_shards(folder: Path, encoded: Encoded, earlier: Path | None, file: str) -> int:
    """Save the shards of one kept name into `folder`, or link the files `earlier` holds where they were saved
    already; the bytes written."""
    if any(shard is not None for shard in encoded.shards.values()):
        encoded.shards_bytes = shards.save(encoded.shards, folder)
        encoded.shards_file = file
        return encoded.shards_bytes
    if earlier is None or not (earlier / ".metadata").is_file():
        raise FileNotFoundError(f"the kept shards of {folder.name} are no longer on disk")
    folder.mkdir(mode=0o700, parents=True)
    for entry in os.scandir(earlier):
        os.link(entry.path, folder / entry.name, follow_symlinks=False)
    return 0


def read_manifest(directory: Path, rank: int, gen: GenId) -> dict[str, Any]:
    """Rank `rank`'s part of generation `gen`; FileNotFoundError where this host has none."""
    path = gen_dir(directory, rank, gen) / MANIFEST
    if path.is_symlink() or not path.is_file():
        raise FileNotFoundError(f"no snapshot {gen_name(gen)} of rank {rank} in {directory} on this host")
    with open(path, "rb") as f:
        return pickle.load(f)


def open_data(directory: Path, rank: int, gen: GenId, digest: str) -> Any:
    """A writable, copy-on-write view of a data file: the pages are the page cache's, shared by every rank of the
    host that restores the same data, until one writes to them."""
    with open(gen_dir(directory, rank, gen) / digest, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            return bytearray()
        return mmap.mmap(f.fileno(), size, access=mmap.ACCESS_COPY)


def delete_generations(directory: Path, rank: int, gens: list[GenId]) -> None:
    """Delete rank `rank`'s parts of `gens`, then the data no generation of this host uses any more."""
    for gen in gens:
        shutil.rmtree(gen_dir(directory, rank, gen), ignore_errors=True)
    collect(directory)


def collect(directory: Path) -> None:
    """Delete data files that only data/ names: no generation links them. A writer that links one meanwhile either
    got its link first (then the file stays) or finds it gone and writes the data again."""
    data_dir = directory / DATA
    with contextlib.suppress(FileNotFoundError):
        for entry in os.scandir(data_dir):
            with contextlib.suppress(FileNotFoundError):
                if entry.name.startswith(".tmp-"):
                    continue
                if entry.stat(follow_symlinks=False).st_nlink <= 1:
                    os.unlink(entry.path)


def remove_abandoned(directory: Path) -> None:
    """Remove what writers that are gone left half written (a crash while a snapshot was written)."""
    for folder in (directory, directory / DATA, *directory.glob("rank-*")):
        with contextlib.suppress(FileNotFoundError):
            for entry in os.scandir(folder):
                parts = entry.name.split("-")
                if not entry.name.startswith(".tmp-") or len(parts) < 4 or parts[1] != _HOST or not parts[2].isdigit():
                    continue
                if _alive(int(parts[2])):
                    continue
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path, ignore_errors=True)
                else:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(entry.path)


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
