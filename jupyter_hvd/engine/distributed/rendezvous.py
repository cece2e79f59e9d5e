"""The ranks' end of a multi-host pool's torch.distributed rendezvous: a torch.distributed Store whose keys live in
the kernel (kernel/launch/rendezvous.py says why it is not a TCPStore), reached over ZeroMQ with CURVE and the keys this
start of the pool's engines got through ipyparallel's bootstrap.

A request is the frames [number, op, *args] and its answer [number, status, *values]. A key that is not there yet
is asked for again, a little later each time (up to POLL_MAX_S), until the store's timeout.

Imported on the engines only (jupyter_hvd/prelude.py, for a pool's process group).
"""

from __future__ import annotations

import datetime
import itertools
import os
import threading
import time
from typing import Any

import torch.distributed as dist
import zmq

ANSWER_TIMEOUT_S = 60.0  # the kernel answers at once; this long without an answer means it is gone
POLL_MAX_S = 0.05  # the longest pause between two asks for a key not there yet: 20 asks a second per waiting rank
# Every store made in this process, for its life: torch holds only the C++ half of a Python store, which answers
# "Not implemented" once the Python half is collected (after prelude() returns, at the process group's next use).
_KEPT: list[PoolStore] = []


class PoolStore(dist.Store):
    """A torch.distributed Store served by the notebook's kernel to this start's ranks only. Safe to use from
    several threads (Gloo's and NCCL's own threads use it too)."""

    def __init__(self, info: dict[str, Any], timeout: datetime.timedelta) -> None:
        super().__init__()
        self.set_timeout(timeout)
        self._info = info
        self._lock = threading.Lock()  # one request at a time on the socket
        self._numbers = itertools.count(1)
        self._socket: zmq.Socket | None = None
        self._pid = 0
        _KEPT.append(self)

    def _connect(self) -> zmq.Socket:
        if self._socket is None or self._pid != os.getpid():
            sock: zmq.Socket = zmq.Context.instance().socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            curve = self._info["curve"]
            sock.curve_serverkey = curve["server"].encode()
            sock.curve_publickey = curve["public"].encode()
            sock.curve_secretkey = curve["secret"].encode()
            sock.connect(self._info["endpoint"])
            self._socket, self._pid = sock, os.getpid()
        return self._socket

    def _ask(self, op: bytes, *args: bytes) -> tuple[bytes, list[bytes]]:
        """Send one request and wait for its answer: (status, values)."""
        with self._lock:
            sock = self._connect()
            number = str(next(self._numbers)).encode()
            sock.send_multipart([number, op, *args])
            deadline = time.monotonic() + ANSWER_TIMEOUT_S
            while (left := deadline - time.monotonic()) > 0:
                if not sock.poll(int(left * 1000) + 1):
                    break
                frames = sock.recv_multipart()
                if frames[:1] == [number] and len(frames) >= 2:  # an answer to an older, given-up request is skipped
                    status, values = frames[1], frames[2:]
                    if status == b"error":
                        raise dist.DistStoreError(f"the pool's rendezvous refused {op.decode()}: {values[0].decode()}")
                    return status, values
        raise dist.DistStoreError(
            f"the pool's rendezvous in the notebook's kernel ({self._info['endpoint']}) did not answer within "
            f"{ANSWER_TIMEOUT_S:g} s; if the kernel is gone, start the pool again with %hvd_restart"
        )

    def _until(self, ready: Any, what: str, timeout: datetime.timedelta | None = None) -> Any:
        """Ask `ready()` again (a little later each time) until it gives something other than None."""
        # dist.Store's own timeout (set_timeout above), a property its stubs do not declare.
        limit = (timeout or self.timeout).total_seconds()  # type: ignore[attr-defined]
        deadline, pause = time.monotonic() + limit, 0.0005
        while (found := ready()) is None:
            if time.monotonic() > deadline:
                raise dist.DistStoreError(
                    f"{what} did not appear in the pool's rendezvous within {limit:g} s: not every rank reached the "
                    "same init_process_group or new_group call"
                )
            time.sleep(pause)
            pause = min(pause * 2, POLL_MAX_S)
        return found

    # ---- what torch.distributed calls ----------------------------------------------------------------------

    def set(self, key: str, value: bytes | str) -> None:
        self._ask(b"set", key.encode(), _bytes(value))

    def get(self, key: str) -> bytes:
        def ready() -> bytes | None:
            status, values = self._ask(b"get", key.encode())
            return values[0] if status == b"ok" else None

        return self._until(ready, f"key {key!r}")

    def add(self, key: str, amount: int) -> int:
        return int(self._ask(b"add", key.encode(), str(int(amount)).encode())[1][0])

    def compare_set(self, key: str, expected: bytes | str, desired: bytes | str) -> bytes:
        return self._ask(b"compare_set", key.encode(), _bytes(expected), _bytes(desired))[1][0]

    def check(self, keys: list[str]) -> bool:
        return self._ask(b"check", *(k.encode() for k in keys))[1][0] == b"1"

    def wait(self, keys: list[str], timeout: datetime.timedelta | None = None) -> None:
        self._until(lambda: True if self.check(keys) else None, f"keys {keys!r}", timeout)

    def delete_key(self, key: str) -> bool:
        return self._ask(b"delete_key", key.encode())[1][0] == b"1"

    def num_keys(self) -> int:
        return int(self._ask(b"num_keys")[1][0])

    def clone(self) -> PoolStore:
        """The store for another thread of torch's: this one, which any thread may use."""
        return self

    # C++ callers reach these two by their C++ names (torch's trampoline looks them up so).
    getNumKeys = num_keys
    deleteKey = delete_key


def _bytes(value: bytes | str) -> bytes:
    return value.encode() if isinstance(value, str) else bytes(value)
