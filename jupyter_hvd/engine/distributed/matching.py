"""Before a blocking torch.distributed collective on a Gloo group, the ranks agree on what they call.

Gloo aborts the process when ranks pass tensors of different sizes to one collective (GLOO_ENFORCE: SIGABRT, its raw
"GLHF" text), and every rank's namespace went with the restart that followed. Horovod's coordinator checks this before
it moves a byte; here one small all_gather of each rank's call (which collective, how many elements, which dtype, the
root) does the same, so a mismatch is an exception on every rank, named, with nothing sent and nothing lost. Calls
with a group other than the default, asynchronous ones (FSDP2's, DDP's from C++) and NCCL's are not checked: NCCL
does not abort on a mismatch, and a check there would make the host wait for the GPU at each call.

Imported on the engines only.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

# What each checked collective's ranks must agree on: the tensor whose size must match, and a second size (a list's
# length or an output's elements) where there is one. all_to_all's sizes may differ by rank, so it is not checked.
CHECKED = {
    "all_reduce": ("tensor", None),
    "broadcast": ("tensor", None),
    "reduce": ("tensor", None),
    "all_gather": ("tensor", "tensor_list"),
    "all_gather_into_tensor": ("input_tensor", "output_tensor"),
    "reduce_scatter": ("output", "input_list"),
    "reduce_scatter_tensor": ("input", "output"),
    "gather": ("tensor", None),
    "scatter": ("tensor", None),
    "barrier": (None, None),
}
KINDS = list(CHECKED)
ROOTS = ("src", "dst")
DTYPES = ("float32", "float64", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool")


DECLINED = -2  # a rank whose cell ended takes part in its peers' check only to say it calls nothing (decline())


class CollectiveMismatch(RuntimeError):
    """Ranks called different torch.distributed collectives, or one with different sizes: nothing was sent."""


class PeerCellEnded(CollectiveMismatch):
    """A rank's cell ended (it failed, was stopped, or finished with fewer collectives) while this one waited to
    agree on a collective: nothing was sent, and the kernel says why the cell ended (wire.Decline)."""


_signatures: dict[str, inspect.Signature] = {}


def check(name: str, real: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], gather: Any) -> None:
    """Raise CollectiveMismatch on every rank where the ranks' calls of `name` (the real `real`) differ; `gather` is
    torch.distributed's own all_gather (not the watched one)."""
    import torch.distributed as dist

    if name not in CHECKED:
        return
    signature = _signatures.get(name)
    if signature is None:
        signature = _signatures[name] = inspect.signature(real)
    try:
        bound = signature.bind(*args, **kwargs).arguments
    except TypeError:
        return  # the call itself is wrong: torch says how
    group = bound.get("group")
    if group is not None and group is not dist.group.WORLD:
        return
    if dist.get_backend() != "gloo" or dist.get_world_size() < 2:
        return
    calls = _agree(_describe(name, bound), gather)
    if len(set(calls)) > 1:
        said = "; ".join(f"rank {rank}: {_words(call)}" for rank, call in enumerate(calls))
        if any(call[0] == DECLINED for call in calls):
            raise PeerCellEnded(f"a rank's cell ended before this collective ({said}). Nothing was sent.")
        raise CollectiveMismatch(
            f"the ranks' collectives do not match ({said}). Nothing was sent: every rank is as before the call. "
            "Make every rank call the same collective with tensors of the same size (all_gather of different sizes: "
            "pad to the largest, or all_gather_object)."
        )


def decline(gather: Any) -> None:
    """This rank's cell ended while its peers wait in the check before a collective (the kernel knows): take part in
    that check saying this rank calls nothing, so they raise CollectiveMismatch instead of waiting for ever; the
    group stays in step (every rank ran the check's one all_gather). Horovod's join does the same for its ops."""
    _agree([DECLINED, -1, -1, -1, -1], gather)


def _agree(mine: list[int], gather: Any) -> list[tuple[int, ...]]:
    """Every rank's call, by one all_gather of the ranks' descriptions."""
    import torch
    import torch.distributed as dist

    everyone = [torch.zeros(len(mine), dtype=torch.int64) for _ in range(dist.get_world_size())]
    gather(everyone, torch.tensor(mine, dtype=torch.int64))
    return [tuple(int(v) for v in t.tolist()) for t in everyone]


def _describe(name: str, bound: dict[str, Any]) -> list[int]:
    main, second = CHECKED[name]
    tensor: Any = bound.get(main) if main else None
    other: Any = bound.get(second) if second else None
    root = next((bound[r] for r in ROOTS if bound.get(r) is not None), -1)
    dtype = str(getattr(tensor, "dtype", "")).removeprefix("torch.")
    if isinstance(other, (list, tuple)):
        other_size = len(other)
    else:
        other_size = int(other.numel()) if hasattr(other, "numel") else -1
    return [
        KINDS.index(name),
        int(tensor.numel()) if hasattr(tensor, "numel") else -1,
        DTYPES.index(dtype) if dtype in DTYPES else -1,
        other_size,
        int(root),
    ]


def _words(call: tuple[int, ...]) -> str:
    kind, elements, dtype, second, root = call
    if kind == DECLINED:
        return "none, its cell had ended"
    words = KINDS[kind] if 0 <= kind < len(KINDS) else "another collective"
    if elements >= 0:
        words += f" of {elements} {DTYPES[dtype] + ' ' if dtype >= 0 else ''}element{'s' if elements != 1 else ''}"
    if second >= 0:
        words += f" (its other side: {second})"
    if root >= 0:
        words += f" at root {root}"
    return words
