"""The one contract between a kernel and its engines on the cell channel: how a message is signed and packed.

A message is two frames: an HMAC-SHA256 of the payload under the pool's key, then the pickled payload. Either side
drops a message whose signature does not match before unpickling it, as ipyparallel does with its own session key,
so a process that can reach the channel's port but does not hold the key can neither run code nor fake results.
"""

from __future__ import annotations

import hmac
import os
import pickle
from typing import Any

KEY_BYTES = 32


def new_key() -> bytes:
    """A fresh random key for one pool."""
    return os.urandom(KEY_BYTES)


def pack(key: bytes, message: Any) -> list[bytes]:
    """The frames that carry `message`, signed with `key`."""
    payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return [hmac.digest(key, payload, "sha256"), payload]


def unpack(key: bytes, frames: list[Any]) -> Any | None:
    """The message the frames carry, or None when they are not signed with `key` (or not a message at all)."""
    if len(frames) != 2:
        return None
    signature, payload = (bytes(f) for f in frames)
    if not hmac.compare_digest(signature, hmac.digest(key, payload, "sha256")):
        return None
    return pickle.loads(payload)
