"""How a kept object becomes bytes, and comes back linked to the live objects around it.

A kept object is pickled with cloudpickle (notebook functions and classes travel with their code), with two kinds
of persistent references instead of copies:
- a dense tensor becomes a numbered reference; its data goes to a file of its own when it is big (shared by every
  rank and snapshot holding the same bytes: engine/keep/files.py), inside the snapshot when it is small;
- an object that a top-level name of the rank's namespace holds (a dataset, a model, an optimizer: live machinery,
  not plain data) becomes a reference to that name, so that after a restore the kept value refers to the object the
  setup cells rebuilt, not to a copy of it (a sampler keeps sampling the live dataset).
A DTensor in a state_dict (FSDP2's sharded state) becomes a reference to this rank's shard, which is kept with
torch.distributed.checkpoint (engine/keep/shards.py) and comes back laid out like the live object's.

`encode` walks an object once and copies nothing yet: each tensor and shard is read once for a digest of its bytes
(engine/keep/content.py), and the object's `signature` is the digest of the pickle and of those digests, so the end of
a cell knows for certain whether anything kept changed, whoever wrote it (torch's in-place counter misses writes:
BatchNorm's running statistics, Horovod's broadcasts, `.data`, numpy views). `stage` then copies what changed since
the object's last snapshot into buffers that are used again snapshot after snapshot (a fresh 286 MB allocation cost
0.3 s of page faults here, a copy into a used buffer 0.03 s).

Imported on the engines only.
"""

from __future__ import annotations

import io
import pickle
import threading
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import cloudpickle
import xxhash

from . import content, shards

BLOB_BYTES = 64 * 1024  # tensors at least this big get a data file of their own; smaller ones stay in the pickle
# Plain data is copied, never linked by name: a kept dict holding the number 5 must not come back holding whatever
# a name that also held 5 holds after the restore.
_PLAIN = (
    type(None),
    bool,
    int,
    float,
    complex,
    str,
    bytes,
    bytearray,
    tuple,
    list,
    dict,
    set,
    frozenset,
    range,
    slice,
    type,
    types.ModuleType,
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodType,
)
_NOT_LINKED = {"In", "Out", "exit", "quit", "get_ipython"}  # IPython's own names


@dataclass
class TensorRef:
    """How one tensor of a kept object is stored: its type, shape and place, what its bytes were, and its data."""

    dtype: str  # "float32"
    shape: tuple[int, ...]
    device: str  # "cpu" | "cuda": a CUDA tensor comes back on the restoring rank's own GPU
    requires_grad: bool
    parameter: bool
    content: bytes = b""  # the digest of the live tensor's bytes when it was kept (engine/keep/content.py)
    inline: bytes | None = None  # a small tensor's bytes, kept in the snapshot itself
    data: Any = None  # a big tensor's CPU copy (a staging buffer), until the snapshot writer has put it in a file
    digest: str = ""  # the name of that data file: the digest of the copy's bytes, taken by the writer

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "data": None}  # the manifest describes the data; the data is in its file


@dataclass
class Encoded:
    """A kept object as bytes: the pickle, the tensors it refers to by number, and the DTensor shards it refers to
    by key. Fresh from `encode`, nothing is copied yet (`live` holds the objects); `stage` copies what changed."""

    pickle: bytes
    tensors: list[TensorRef] = field(default_factory=list)
    links: list[tuple[str, str]] = field(default_factory=list)  # the namespace names it refers to, with their class
    # key -> a CPU copy of this rank's shard, until the snapshot writer has saved it with DCP (then None)
    shards: dict[str, Any] = field(default_factory=dict)
    shards_file: str = ""  # names the saved shards in %hvd_snapshots' sizes (engine/keep/files.py)
    shards_bytes: int = 0
    contents: dict[str, bytes] = field(default_factory=dict)  # shard key -> the digest of the live shard's bytes
    signature: bytes = b""  # the digest of all of it: equal when nothing kept in it changed
    # the same without the shards: equal on ranks that hold the same state (FSDP2's shards differ by design)
    replica: str = ""
    live: list[Any] = field(default_factory=list)  # tensors, by number, until staged
    live_shards: dict[str, Any] = field(default_factory=dict)  # shards, by key, until staged

    def __getstate__(self) -> dict[str, Any]:
        # A snapshot's manifest holds the shards' keys only: their data is in the DCP checkpoint beside it.
        return {**self.__dict__, "shards": dict.fromkeys(self.shards), "live": [], "live_shards": {}}


def linkable(namespace: Mapping[str, Any]) -> dict[int, str]:
    """id -> name of the objects a kept object may refer to by name: what top-level names hold that is not plain
    data (and not tensors, which are kept by value)."""
    import torch

    links: dict[int, str] = {}
    for name, obj in namespace.items():
        if name.startswith("_") or name in _NOT_LINKED:
            continue
        if isinstance(obj, _PLAIN) or isinstance(obj, (torch.Tensor, torch.device, torch.dtype)):
            continue
        links.setdefault(id(obj), name)
    return links


@dataclass
class KeptShard:
    """Where a restored state holds a DTensor: its key in the DCP checkpoint, to be loaded into a DTensor laid out
    like the live one (engine/keep/restore.py)."""

    key: str
    placements: str  # as kept, to name a difference


class ShardOutsideState(TypeError):
    """A value kept by value holds a DTensor: only a state_dict has a live object to lay its shards out like."""

    def __init__(self) -> None:
        super().__init__(
            "it holds a DTensor (FSDP2's sharded state), which comes back only through the module or optimizer it "
            "belongs to: keep that instead"
        )


def _dense(obj: Any) -> bool:
    import torch

    return (
        type(obj) in (torch.Tensor, torch.nn.Parameter)
        and obj.layout == torch.strided
        and not obj.is_quantized
        and obj.device.type in ("cpu", "cuda")
    )


class _Encoder(cloudpickle.Pickler):
    def __init__(self, out: Any, links: dict[int, str], root: Any, kept: Any = None, state: bool = False) -> None:
        super().__init__(out, protocol=5)
        self.links = links
        self.root = id(root)
        self.kept = id(kept)  # the kept object itself is never a link of its own (its state_dict may be the root)
        self.state = state  # `root` is a state_dict: DTensors in it are kept as shards
        self.tensors: list[TensorRef] = []
        self.live: list[Any] = []
        self.shards: dict[str, Any] = {}
        self.contents: dict[str, bytes] = {}
        self.used: list[tuple[str, str]] = []
        self._numbered: dict[int, int] = {}
        self._keys: dict[int, str] = {}

    def persistent_id(self, obj: Any) -> Any:
        if isinstance(obj, _PLAIN):
            return None
        key = id(obj)
        if key in self.links and key != self.root and key != self.kept:
            link = (self.links[key], type(obj).__qualname__)
            if link not in self.used:
                self.used.append(link)
            return ("name", link)
        if shards.is_shard(obj):
            if not self.state:
                raise ShardOutsideState()
            if key not in self._keys:
                shard = self._keys[key] = str(len(self.shards))
                self.shards[shard] = obj
                self.contents[shard] = content.of_tensor(obj.to_local())
            return ("dcp", (self._keys[key], shards.placements(obj)))
        if not _dense(obj):
            return None
        if key not in self._numbered:  # the same tensor twice in one object comes back as one tensor
            self._numbered[key] = len(self.tensors)
            self.tensors.append(_described(obj))
            self.live.append(obj)
        return ("tensor", self._numbered[key])


def _described(tensor: Any) -> TensorRef:
    """What `tensor` is and what its bytes are now; no copy yet."""
    import torch

    detached = tensor.detach()
    return TensorRef(
        dtype=str(detached.dtype).removeprefix("torch."),
        shape=tuple(detached.shape),
        device=detached.device.type,
        requires_grad=bool(tensor.requires_grad),
        parameter=isinstance(tensor, torch.nn.Parameter),
        content=content.of_tensor(detached),
    )


def encode(obj: Any, links: dict[int, str], kept: Any = None, state: bool = False) -> Encoded:
    """`obj` (a kept object, or with `state` the state_dict of `kept`) described: its pickle, its tensors' and
    shards' digests, and its signature; nothing copied yet (`stage`). Raises what pickling raises (an object that
    cannot be kept)."""
    out = io.BytesIO()
    encoder = _Encoder(out, links, obj, kept, state)
    encoder.dump(obj)
    encoded = Encoded(out.getvalue(), encoder.tensors, encoder.used, encoder.shards, contents=encoder.contents)
    encoded.live = encoder.live
    encoded.live_shards = dict(encoder.shards)
    replica = xxhash.xxh3_128(encoded.pickle)
    for ref in encoded.tensors:
        replica.update(f"{ref.dtype}{ref.shape}{ref.device}{ref.requires_grad}{ref.parameter}".encode())
        replica.update(ref.content)
    replica.update(repr(encoded.links).encode())
    encoded.replica = replica.hexdigest()
    digest = xxhash.xxh3_128(replica.digest())
    for shard, shard_digest in sorted(encoded.contents.items()):
        digest.update(shard.encode())
        digest.update(shard_digest)
    encoded.signature = digest.digest()
    return encoded


def stage(encoded: Encoded, previous: Encoded | None, staging: Staging) -> None:
    """Copy what `encoded` holds that its `previous` snapshot did not: a tensor whose bytes are the same stays that
    snapshot's (its data file is linked, not written again); a big changed one is copied into a staging buffer, a
    small one into the snapshot itself; the shards of a kept name are copied when any of them changed."""
    before = previous.tensors if previous is not None else []
    for i, (ref, tensor) in enumerate(zip(encoded.tensors, encoded.live, strict=True)):
        old = before[i] if i < len(before) else None
        if old is not None and old.inline is None and (old.digest or old.data is not None) and _same(old, ref):
            encoded.tensors[i] = old  # the same object: it gets its file's name from the writer, whichever job
            continue
        if tensor.numel() * tensor.element_size() >= BLOB_BYTES:
            ref.data = staging.copy(tensor)
        else:
            ref.inline = bytes(content.as_bytes(tensor.detach().to("cpu", copy=True).contiguous()))
    unchanged = previous is not None and bool(previous.contents) and previous.contents == encoded.contents
    for key, shard in encoded.live_shards.items():
        encoded.shards[key] = None if unchanged else shards.stage(shard)
    encoded.live = []
    encoded.live_shards = {}


def _same(a: TensorRef, b: TensorRef) -> bool:
    return (a.content, a.dtype, a.shape, a.device) == (b.content, b.dtype, b.shape, b.device)


class Staging:
    """CPU buffers that hold the copies of kept tensors until the writer has written them, then take the next
    snapshot's copies: a copy into a used buffer costs a tenth of one into fresh memory (page faults). The buffers of
    the last written snapshot are kept, no more; pinned where the tensors are on a GPU."""

    def __init__(self) -> None:
        self._free: dict[tuple[str, tuple[int, ...], bool], list[Any]] = {}
        self._lock = threading.Lock()

    def copy(self, tensor: Any) -> Any:
        """A CPU copy of `tensor`'s data, contiguous, in a buffer of this pool."""
        import torch

        detached = tensor.detach()
        pinned = detached.device.type == "cuda"
        key = (str(detached.dtype), tuple(detached.shape), pinned)
        with self._lock:
            free = self._free.get(key)
            buffer = free.pop() if free else None
        if buffer is None:
            buffer = torch.empty(key[1], dtype=detached.dtype, pin_memory=pinned and torch.cuda.is_available())
        buffer.copy_(detached)
        return buffer

    def give_back(self, buffers: list[Any]) -> None:
        """The writer is done with `buffers`: they serve the next copies, in place of the ones kept before."""
        free: dict[tuple[str, tuple[int, ...], bool], list[Any]] = {}
        for buffer in buffers:
            free.setdefault((str(buffer.dtype), tuple(buffer.shape), buffer.is_pinned()), []).append(buffer)
        with self._lock:
            self._free = free

    def nbytes(self) -> int:
        """Bytes the free buffers hold."""
        with self._lock:
            return sum(b.numel() * b.element_size() for bs in self._free.values() for b in bs)


class MissingLink(LookupError):
    """A kept object refers to a name the namespace no longer holds."""


class _Decoder(pickle.Unpickler):
    def __init__(self, data: bytes, tensor: Callable[[int], Any], resolve: Callable[[Any], Any]) -> None:
        super().__init__(io.BytesIO(data))
        self.tensor = tensor
        self.resolve = resolve

    def persistent_load(self, pid: Any) -> Any:
        kind, value = pid
        if kind == "tensor":
            return self.tensor(value)
        if kind == "dcp":
            return KeptShard(*value)
        if kind == "name":
            return self.resolve(value)
        raise pickle.UnpicklingError(f"unknown reference {kind!r}")


def decode(data: bytes, tensor: Callable[[int], Any], resolve: Callable[[Any], Any]) -> Any:
    """The object `encode` made: tensor number i is `tensor(i)`, a reference to a name is `resolve((name, class))`."""
    return _Decoder(data, tensor, resolve).load()


def rebuild(ref: TensorRef, buffer: Any, device: Any) -> Any:
    """The tensor `ref` describes, on `buffer` (a writable buffer of its bytes, used in place), on `device` when it
    was a CUDA tensor."""
    import torch

    dtype = getattr(torch, ref.dtype)
    if len(buffer) == 0:
        tensor = torch.empty(ref.shape, dtype=dtype)
    else:
        tensor = torch.frombuffer(buffer, dtype=dtype).reshape(ref.shape)
    if ref.device == "cuda" and torch.cuda.is_available():
        tensor = tensor.to(device)
    if ref.parameter:
        return torch.nn.Parameter(tensor, requires_grad=ref.requires_grad)
    return tensor.requires_grad_(ref.requires_grad) if ref.requires_grad else tensor
