"""Moving notebook values between the kernel and the ranks (`%hvd_push`, `%hvd_pull`): how a value becomes bytes.

Values go by value with cloudpickle (as ipyparallel's own `use_cloudpickle` does): functions, lambdas, closures and
classes defined in notebook cells or `%%hvd` cells live in a `__main__` namespace that the other side cannot import,
so their code travels with them. Pickle protocol 5 keeps the data of numpy arrays and CPU tensors out of band: their
memory is handed to ipyparallel as buffers (sent as zmq frames without a copy) and rebuilt on the other side on the
received frames, so a 100 MB tensor is never copied in Python on either side.

Runs on the engines (`stage`, `take`, `receive`) and in the kernel (`dumps`, `loads`); no IPython.display here.
"""

from __future__ import annotations

import io
import pickle
import sys
from typing import Any

import cloudpickle

PROTOCOL = 5
_staged: tuple[bytes, list[memoryview]] | None = None  # what `stage` serialised and `take` hands out


def _rebuild_tensor(array: Any, parameter: bool, requires_grad: bool) -> Any:
    """A CPU tensor on the memory of `array` (no copy); an nn.Parameter where one was sent."""
    import torch

    if not array.flags.writeable:  # small buffers come inside the pickle (ipyparallel inlines them): copy those
        array = array.copy()
    tensor = torch.from_numpy(array)
    if parameter:
        return torch.nn.Parameter(tensor, requires_grad=requires_grad)
    return tensor.requires_grad_(requires_grad) if requires_grad else tensor


def _tensor_reduce(obj: Any) -> Any:
    """Out-of-band reduction of a plain dense CPU tensor that owns all of its storage; NotImplemented otherwise."""
    torch = sys.modules["torch"]
    kind = type(obj)
    if kind is not torch.Tensor and kind is not torch.nn.Parameter:
        return NotImplemented
    if obj.device.type != "cpu" or obj.layout != torch.strided or obj.is_quantized or obj.grad_fn is not None:
        return NotImplemented
    # A view of a larger storage keeps torch's own pickling, which keeps views sharing their storage.
    if not obj.is_contiguous() or obj.storage_offset() or obj.untyped_storage().nbytes() != obj.nbytes:
        return NotImplemented
    try:
        array = obj.detach().numpy()  # shares the tensor's memory
    except (TypeError, RuntimeError):  # dtypes numpy lacks (bfloat16...)
        return NotImplemented
    return _rebuild_tensor, (array, kind is torch.nn.Parameter, obj.requires_grad)


class _Pickler(cloudpickle.Pickler):
    """cloudpickle, with torch CPU tensors out of band (torch's own pickling copies them twice through torch.save)."""

    def reducer_override(self, obj: Any) -> Any:
        if "torch" in sys.modules and type(obj).__module__.startswith("torch"):
            reduced = _tensor_reduce(obj)
            if reduced is not NotImplemented:
                return reduced
        return super().reducer_override(obj)


def dumps(value: Any) -> tuple[bytes, list[memoryview]]:
    """`value` as a pickle (protocol 5) and the out-of-band buffers it refers to (views of its memory, not copies)."""
    buffers: list[pickle.PickleBuffer] = []
    out = io.BytesIO()
    _Pickler(out, protocol=PROTOCOL, buffer_callback=buffers.append).dump(value)
    return out.getvalue(), [b.raw() for b in buffers]


def loads(header: bytes, buffers: list[Any]) -> Any:
    """The value `dumps` made, rebuilt on `buffers` (received frames are used in place)."""
    return pickle.loads(header, buffers=buffers)


def nbytes(header: bytes, buffers: list[memoryview]) -> int:
    """Bytes that cross the wire for one value."""
    return len(header) + sum(b.nbytes for b in buffers)


def _describe(exc: BaseException) -> dict[str, str]:
    return {"ename": type(exc).__name__, "evalue": str(exc)}


def _user_ns() -> dict[str, Any]:
    from IPython import get_ipython

    return get_ipython().user_ns


def stage(name: str) -> dict[str, Any]:
    """Serialise the rank's variable `name` and keep it for `take`; say how big it is, or why it cannot go.

    Never raises: the kernel reads the outcome from the returned record.
    """
    global _staged
    _staged = None
    ns = _user_ns()
    if name not in ns:
        return {"ok": False, "ename": "NameError", "evalue": f"name {name!r} is not defined"}
    try:
        header, buffers = dumps(ns[name])
    except Exception as exc:
        return {"ok": False, **_describe(exc)}
    _staged = (header, buffers)
    return {"ok": True, "nbytes": nbytes(header, buffers), "type": type(ns[name]).__name__}


def take() -> tuple[Any, ...]:
    """Hand out (and forget) what `stage` serialised: the pickle, then its buffers (a flat tuple: ipyparallel sends
    each memoryview of it as a zmq frame, without a copy)."""
    global _staged
    staged, _staged = _staged, None
    if staged is None:
        raise RuntimeError("nothing staged: the pull was interrupted or another pull replaced it")
    return (staged[0], *staged[1])


def receive(names: list[str], headers: list[bytes], counts: list[int], *buffers: Any) -> dict[str, Any]:
    """Rebuild pushed values and bind them in the rank's namespace: all of them, or none when one fails.

    `counts[i]` out-of-band buffers of `buffers` belong to `names[i]`, in order. Never raises.
    """
    values = {}
    at = 0
    for name, header, count in zip(names, headers, counts, strict=True):
        try:
            values[name] = loads(header, list(buffers[at : at + count]))
        except Exception as exc:
            return {"ok": False, "name": name, **_describe(exc)}
        at += count
    _user_ns().update(values)
    return {"ok": True}
