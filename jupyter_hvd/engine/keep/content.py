"""What a kept tensor holds, in 16 bytes: equal digests mean equal bytes, so a snapshot can skip what did not change.

The end of a cell cannot trust torch's in-place counter: BatchNorm's running statistics, Horovod's broadcasts (written
through the raw pointer), `.data`, numpy and DLPack views, C++ extensions and DCP loads all write without it, and a
new tensor can land at a freed tensor's address. So every kept tensor's bytes are read once per snapshot: xxh3-128 on
the CPU (about 12 GB/s here: 286 MB in 25 ms), and on a GPU a digest computed on the device (torch.hash_tensor over
rows and columns, so a swap of two values changes it too) of which only a few MB cross to the host.

Imported on the engines only.
"""

from __future__ import annotations

from typing import Any

import xxhash

ROW = 4096  # elements per row of the device digest's 2-D view
_WORDS = {1: "int8", 2: "int16", 4: "int32", 8: "int64"}  # the integer type of each element size: bits, not values


def as_bytes(tensor: Any) -> memoryview:
    """The bytes of a contiguous CPU tensor, without a copy (any dtype, bfloat16 included)."""
    import torch

    if tensor.numel() == 0:
        return memoryview(b"")
    return memoryview(tensor.reshape(-1).view(torch.uint8).numpy())


def of_bytes(data: Any) -> bytes:
    """The digest of a buffer's bytes."""
    return xxhash.xxh3_128_digest(data)


def of_tensor(tensor: Any) -> bytes:
    """The digest of a dense tensor's bytes (its dtype and shape are the caller's to add)."""
    detached = tensor.detach()
    if detached.device.type == "cpu":
        return of_bytes(as_bytes(detached if detached.is_contiguous() else detached.contiguous()))
    return on_device(detached)


def on_device(tensor: Any) -> bytes:
    """A digest computed where the tensor lives (a GPU): the xor of each row's and each column's elements, read as
    integers of their size, digested on the host. Runs on the CPU too (the tests check it there)."""
    import torch

    flat = tensor.detach().reshape(-1)
    if flat.numel() == 0:
        return of_bytes(b"")
    size = flat.element_size()
    if size not in _WORDS or not hasattr(torch, "hash_tensor"):  # an odd dtype, or a torch without it: on the host
        return of_bytes(as_bytes(flat.to("cpu").contiguous()))
    words = flat.contiguous().view(getattr(torch, _WORDS[size]))
    rows = words.numel() // ROW
    parts = []
    if rows:
        grid = words[: rows * ROW].view(rows, ROW)
        parts += [torch.hash_tensor(grid, dim=1), torch.hash_tensor(grid, dim=0)]
    if words.numel() > rows * ROW:
        parts.append(torch.hash_tensor(words[rows * ROW :]).reshape(1))
    host = torch.cat([p.reshape(-1) for p in parts]).to("cpu")
    return of_bytes(as_bytes(host.view(torch.int64)))
