"""`%hvd_push` and `%hvd_pull`, engine side: a rank's variable staged and handed out, pushed values bound.

How a value becomes bytes is the contract's (jupyter_hvd/wire.py `dumps`/`loads`). Imported on the engines only.
"""

from __future__ import annotations

from typing import Any

from ..wire import dumps, loads, nbytes

_staged: tuple[bytes, list[memoryview]] | None = None  # what `stage` serialised and `take` hands out


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
