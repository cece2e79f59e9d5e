"""FSDP2's sharded state kept with torch.distributed.checkpoint (DCP): each rank saves and loads its own shards.

The DTensors of a kept object's state_dict (an FSDP2 module's parameters, its optimizer's moments) are copied at the
snapshot and saved by DCP into a folder of the rank's part of the generation (engine/keep/files.py); the rest of the
state stays in the pool's own format. DCP's metadata records where each shard lies in the whole tensor, and a restore
checks that against the live object's layout, naming a difference instead of loading part of a shard.

Without collectives: `save(..., no_dist=True)` and `load(..., no_dist=True)` build DCP's `_DistWrapper` with
use_dist=False, whose gathers, scatters and barriers then run locally (torch 2.13, checkpoint/utils.py), and a
DTensor's chunk comes from its spec and this rank's mesh coordinate; so a rank that commits or restores alone never
waits for another (the rule of engine/keep/snapshot.py).

Imported on the engines only.
"""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path
from typing import Any

# DCP says it assumes one process whenever no_dist is set: that is the intent here, on every snapshot and restore.
warnings.filterwarnings("ignore", message="torch.distributed is disabled, unavailable or uninitialized")


def is_shard(obj: Any) -> bool:
    """Whether `obj` is a DTensor (FSDP2's parameters and their optimizer state): kept as this rank's shard."""
    # The warm-up thread may still be importing torch.distributed.tensor: no DTensor exists before its class does.
    dtensor = getattr(sys.modules.get("torch.distributed.tensor"), "DTensor", None)
    return dtensor is not None and isinstance(obj, dtensor)


def stage(shard: Any) -> Any:
    """A CPU copy of DTensor `shard`, its layout kept (training may change the shard as soon as this returns)."""
    import torch

    with torch.no_grad():
        return shard.detach().to("cpu", copy=True)  # DCP's own staging copies DTensors this way: local, no collective


def save(shards: dict[str, Any], folder: Path) -> int:
    """Save `shards` (key -> staged DTensor) as a DCP checkpoint of this rank alone in `folder`; the bytes written."""
    import torch.distributed.checkpoint as dcp

    # No fsync: the pool's own files are not synced either; a crashed process loses nothing the kernel wrote out.
    writer = dcp.FileSystemWriter(folder, sync_files=False, thread_count=1)
    dcp.save(shards, storage_writer=writer, no_dist=True)
    return sum(entry.stat().st_size for entry in os.scandir(folder) if entry.is_file(follow_symlinks=False))


def load(wanted: dict[str, tuple[Any, str, str]], folder: Path) -> dict[str, Any]:
    """key -> a DTensor laid out like the live DTensor `wanted[key][0]`, holding this rank's shard saved in `folder`
    (in the dtype it was kept in). ValueError naming the shards (`wanted[key][1]`, kept laid out as `wanted[key][2]`)
    whose place in the whole tensor differs from the live one's."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata
    from torch.distributed.tensor import DTensor

    reader = dcp.FileSystemReader(folder)
    kept = reader.read_metadata().state_dict_metadata
    problems: dict[str, str] = {}  # what -> how it differs
    out: dict[str, Any] = {}
    for key, (like, what, placed) in wanted.items():
        meta = kept.get(key)
        if not isinstance(meta, TensorStorageMetadata):
            problems[what] = "this rank's shard is not in its checkpoint"
            continue
        was = _place(meta.chunks, meta.size)
        if not isinstance(like, DTensor):
            problems[what] = f"this rank's shard was {was} ({placed}) when kept, and it is not sharded now"
            continue
        now = _place(like.__create_chunk_list__(), like.shape)
        if now != was:
            problems[what] = f"this rank's shard was {was} ({placed}) when kept, {now} ({placements(like)}) now"
            continue
        out[key] = _empty_like(like, meta.properties.dtype)
    _refuse(problems)
    dcp.load(out, storage_reader=reader, no_dist=True)
    return out


def _empty_like(like: Any, dtype: Any) -> Any:
    """A DTensor laid out as the live `like`, of the kept `dtype`, for DCP to load into."""
    import torch
    from torch.distributed.tensor import DTensor

    local = torch.empty(like.to_local().shape, dtype=dtype, device=like.to_local().device)
    return DTensor.from_local(local, like.device_mesh, like.placements, shape=like.shape, stride=like.stride())


def _refuse(problems: dict[str, str]) -> None:
    """ValueError naming the first kept value that cannot be loaded, and up to three more."""
    if problems:
        (first, why), *others = problems.items()
        also = f"; also {', '.join(w for w, _ in others[:3])}" + (" and more" if len(others) > 3 else "")
        raise ValueError(f"{first}: {why}{also if others else ''}")


def load_anew(wanted: dict[str, tuple[Any, str, str]], folders: list[Path]) -> dict[str, Any]:
    """As `load`, for a pool of another size: each live DTensor `wanted[key][0]` is filled from whichever shards of
    the old ranks' checkpoints (`folders`, one per old rank) hold its part of the whole tensor. DCP reads across
    layouts: its planner intersects the live chunk with the kept chunks; only the checkpoints' metadata is merged
    here. ValueError naming the tensors whose whole shape differs."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata
    from torch.distributed.tensor import DTensor

    reader = _merged_reader(folders)
    kept = reader.read_metadata().state_dict_metadata
    problems: dict[str, str] = {}
    out: dict[str, Any] = {}
    for key, (like, what, _placed) in wanted.items():
        meta = kept.get(key)
        if not isinstance(meta, TensorStorageMetadata):
            problems[what] = "it is not in the old ranks' checkpoints"
        elif not isinstance(like, DTensor):
            problems[what] = "it was sharded when kept, and it is not sharded now"
        elif tuple(meta.size) != tuple(like.shape):
            problems[what] = f"it was {tuple(meta.size)} when kept, {tuple(like.shape)} now"
        else:
            out[key] = _empty_like(like, meta.properties.dtype)
    _refuse(problems)
    dcp.load(out, storage_reader=reader, no_dist=True)
    return out


def _merged_reader_class() -> Any:
    from torch.distributed.checkpoint import FileSystemReader

    class Merged(FileSystemReader):
        """The checkpoints of several ranks read as one: their chunks and where each is stored, in one metadata."""

        def __init__(self, folders: list[Path]) -> None:
            super().__init__(folders[0])
            self._folders = folders

        def read_metadata(self, *args: Any, **kwargs: Any) -> Any:
            import dataclasses

            from torch.distributed.checkpoint.metadata import TensorStorageMetadata

            merged: Any = None
            for folder in self._folders:
                meta = FileSystemReader(folder).read_metadata()
                up = os.path.relpath(folder, self._folders[0])
                stored = {
                    index: dataclasses.replace(info, relative_path=os.path.join(up, info.relative_path))
                    for index, info in meta.storage_data.items()
                }
                if merged is None:
                    merged, meta.storage_data = meta, stored
                    continue
                for key, kept in meta.state_dict_metadata.items():
                    mine = merged.state_dict_metadata.get(key)
                    if isinstance(mine, TensorStorageMetadata) and isinstance(kept, TensorStorageMetadata):
                        have = {tuple(c.offsets) for c in mine.chunks}
                        mine.chunks.extend(c for c in kept.chunks if tuple(c.offsets) not in have)
                    elif mine is None:
                        merged.state_dict_metadata[key] = kept
                for index, info in stored.items():
                    merged.storage_data.setdefault(index, info)
            merged.storage_meta.load_id = self.load_id
            return merged

    return Merged


def _merged_reader(folders: list[Path]) -> Any:
    # The class is made at first use: torch.distributed.checkpoint is imported late on the engines.
    return _merged_reader_class()(folders)


def placements(shard: Any) -> str:
    """'Shard(dim=0)': how a DTensor is laid out over its mesh."""
    return ", ".join(repr(p) for p in shard.placements)


def _place(chunks: Any, size: Any) -> str:
    """'(32, 8) at (32, 0) of (64, 8)': where this rank's chunks lie in the whole tensor."""
    parts = [f"{tuple(c.sizes)} at {tuple(c.offsets)}" for c in chunks] or ["nothing"]
    return f"{' + '.join(parts)} of {tuple(size)}"
