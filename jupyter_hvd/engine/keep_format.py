"""How a kept object becomes bytes, and comes back linked to the live objects around it.

A kept object is pickled with cloudpickle (notebook functions and classes travel with their code), with two kinds
of persistent references instead of copies:
- a dense tensor becomes a numbered reference; its data goes to a file of its own when it is big (shared by every
  rank and snapshot holding the same bytes: engine/keep_files.py), inside the snapshot when it is small;
- an object that a top-level name of the rank's namespace holds (a dataset, a model, an optimizer: live machinery,
  not plain data) becomes a reference to that name, so that after a restore the kept value refers to the object the
  setup cells rebuilt, not to a copy of it (a sampler keeps sampling the live dataset).
A DTensor in a state_dict (FSDP2's sharded state) becomes a reference to this rank's shard, which is kept with
torch.distributed.checkpoint (engine/keep_dcp.py) and comes back laid out like the live object's.

`signature` walks an object the same way without copying any tensor data (a tensor is its storage address and
torch's in-place version counter), so the end of a cell can tell cheaply whether anything kept changed.

Imported on the engines only.
"""

from __future__ import annotations

import hashlib
import io
import pickle
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import cloudpickle

from . import keep_dcp

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
    """How one tensor of a kept object is stored: its type, shape and place, and its data (a copy taken now)."""

    dtype: str  # "float32"
    shape: tuple[int, ...]
    device: str  # "cpu" | "cuda": a CUDA tensor comes back on the restoring rank's own GPU
    requires_grad: bool
    parameter: bool
    inline: bytes | None = None  # a small tensor's bytes, kept in the snapshot itself
    data: Any = None  # a big tensor's CPU copy, until the snapshot writer has put it in a data file
    digest: str = ""  # of that data file


@dataclass
class Encoded:
    """A kept object as bytes: the pickle, the tensors it refers to by number, and the DTensor shards it refers to
    by key."""

    pickle: bytes
    tensors: list[TensorRef] = field(default_factory=list)
    links: list[tuple[str, str]] = field(default_factory=list)  # the namespace names it refers to, with their class
    # key -> a CPU copy of this rank's shard, until the snapshot writer has saved it with DCP (then None)
    shards: dict[str, Any] = field(default_factory=dict)
    shards_file: str = ""  # names the saved shards in %hvd_snapshots' sizes (engine/keep_files.py)
    shards_bytes: int = 0

    def __getstate__(self) -> dict[str, Any]:
        # A snapshot's manifest holds the shards' keys only: their data is in the DCP checkpoint beside it.
        return {**self.__dict__, "shards": dict.fromkeys(self.shards)}


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
    like the live one (engine/keep_restore.py)."""

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
        self.shards: dict[str, Any] = {}
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
        if keep_dcp.is_shard(obj):
            if not self.state:
                raise ShardOutsideState()
            if key not in self._keys:
                self._keys[key] = str(len(self.shards))
                self.shards[self._keys[key]] = keep_dcp.stage(obj)
            return ("dcp", (self._keys[key], keep_dcp.placements(obj)))
        if not _dense(obj):
            return None
        if key not in self._numbered:  # the same tensor twice in one object comes back as one tensor
            self._numbered[key] = len(self.tensors)
            self.tensors.append(_copy(obj))
        return ("tensor", self._numbered[key])


def _copy(tensor: Any) -> TensorRef:
    """A CPU copy of `tensor`'s data (training may change the tensor in place as soon as the copy is taken)."""
    import torch

    detached = tensor.detach()
    ref = TensorRef(
        dtype=str(detached.dtype).removeprefix("torch."),
        shape=tuple(detached.shape),
        device=detached.device.type,
        requires_grad=bool(tensor.requires_grad),
        parameter=isinstance(tensor, torch.nn.Parameter),
    )
    data = detached.to("cpu", copy=True).contiguous()
    if data.nbytes >= BLOB_BYTES:
        ref.data = data
    else:
        ref.inline = bytes(as_bytes(data))
    return ref


def as_bytes(tensor: Any) -> memoryview:
    """The bytes of a contiguous CPU tensor, without a copy (any dtype, bfloat16 included)."""
    import torch

    if tensor.numel() == 0:
        return memoryview(b"")
    return memoryview(tensor.reshape(-1).view(torch.uint8).numpy())


def encode(obj: Any, links: dict[int, str], kept: Any = None, state: bool = False) -> Encoded:
    """`obj` (a kept object, or with `state` the state_dict of `kept`) as bytes, its tensors and shards copied;
    raises what pickling raises (an object that cannot be kept)."""
    out = io.BytesIO()
    encoder = _Encoder(out, links, obj, kept, state)
    encoder.dump(obj)
    return Encoded(out.getvalue(), encoder.tensors, encoder.used, encoder.shards)


class _Hashing:
    """A file-like sink that only hashes what is written to it."""

    def __init__(self) -> None:
        self.digest = hashlib.blake2b(digest_size=16)

    def write(self, data: Any) -> int:
        self.digest.update(data)
        return len(data)


class _Signer(_Encoder):
    def persistent_id(self, obj: Any) -> Any:
        if isinstance(obj, _PLAIN):
            return None
        key = id(obj)
        if key in self.links and key != self.root and key != self.kept:
            return ("name", self.links[key])
        if keep_dcp.is_shard(obj):  # FSDP2 writes its shards without torch's in-place count: their bytes are read
            if not self.state:
                raise ShardOutsideState()
            local = obj.to_local().detach()
            data = local.to("cpu") if local.device.type != "cpu" else local.contiguous()
            return ("shard", hashlib.blake2b(as_bytes(data), digest_size=16).hexdigest())
        if _dense(obj):  # no data read: where it lives and torch's count of its in-place changes
            return ("tensor", obj.data_ptr(), obj._version, tuple(obj.shape), str(obj.dtype), str(obj.device))
        return None


def signature(obj: Any, links: dict[int, str], kept: Any = None, state: bool = False) -> bytes:
    """What changes when `obj` (or with `state` `kept`, whose state_dict it is) changes, without copying tensor data;
    raises what pickling raises."""
    sink = _Hashing()
    _Signer(sink, links, obj, kept, state).dump(obj)
    return sink.digest.digest()


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
