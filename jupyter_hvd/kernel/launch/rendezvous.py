"""The rendezvous of a torch.distributed process group whose ranks run on several hosts, served by the kernel: the
key-value store where Gloo and NCCL find each other (engine/distributed/rendezvous.py is the ranks' end).

Only this start's ranks get in. torch's own TCPStore cannot do that: it has no authentication, any client that
reaches its port lists every key (`list_keys`), reads them and writes its own, and a random key prefix does not hide
what `list_keys` shows. Binding it to the pool's address alone (`master_listen_fd`, a socket we bind ourselves)
still lets in everyone who reaches that address: another user of a rank's host, any process on the network. So the
store is served here over ZeroMQ with CURVE, as the cell channel is between hosts: the socket listens on the pool's
address only, traffic is encrypted, and a ZAP handler admits only the client key made for this start, which reaches
the engines with the server's key through ipyparallel's bootstrap (signed, and encrypted between hosts). Each start
of the engines gets a new server, new keys and an empty store.

A request is the frames [number, op, *args] and its answer [number, status, *values]; status is b"ok",
b"missing" (the key is not there yet: the rank asks again, so nothing waits here) or b"error".
"""

from __future__ import annotations

import threading
from typing import Any

import zmq

# The largest request taken: Gloo's and NCCL's values are addresses and ids (bytes to a few KB).
MAX_REQUEST_BYTES = 16 * 2**20


class _OnlyThisKey:
    """A ZAP credentials provider that admits one CURVE client key: the one made for this start's ranks."""

    def __init__(self, public_key: bytes) -> None:
        self.public_key = public_key

    def callback(self, domain: str, key: bytes) -> bool:
        return key == self.public_key


class Rendezvous:
    """The store of one start of a multi-host pool's process group, served on `ip` (the pool's address) until
    `close()`."""

    def __init__(self, ip: str) -> None:
        from zmq.auth.thread import ThreadAuthenticator

        self._data: dict[str, bytes] = {}
        self._ctx = zmq.Context()  # a context of its own: its ZAP handler judges this socket's connections only
        server_public, server_secret = zmq.curve_keypair()
        client_public, client_secret = zmq.curve_keypair()
        self._auth = ThreadAuthenticator(self._ctx)
        self._auth.start()
        self._auth.configure_curve_callback("*", _OnlyThisKey(client_public))
        self._socket = self._ctx.socket(zmq.ROUTER)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.setsockopt(zmq.MAXMSGSIZE, MAX_REQUEST_BYTES)
        self._socket.curve_server = True
        self._socket.curve_secretkey = server_secret
        self._socket.bind(f"tcp://{f'[{ip}]' if ':' in ip else ip}:0")
        self.server_public = server_public.decode()
        self._client = {"public": client_public.decode(), "secret": client_secret.decode()}
        # close() wakes the serving thread through this pair of sockets (it must not wait for a poll to time out).
        self._wake = self._ctx.socket(zmq.PAIR)
        self._wake.bind("inproc://rendezvous-wake")
        self._waker = self._ctx.socket(zmq.PAIR)
        self._waker.connect("inproc://rendezvous-wake")
        self._thread = threading.Thread(target=self._serve, name="jupyter-hvd rendezvous", daemon=True)
        self._thread.start()

    def info(self) -> dict[str, Any]:
        """What the ranks need to use the store (sent to them through ipyparallel's authenticated bootstrap)."""
        endpoint = self._socket.getsockopt_string(zmq.LAST_ENDPOINT)
        return {"endpoint": endpoint, "curve": {"server": self.server_public, **self._client}}

    def close(self) -> None:
        """Stop serving: the socket closes and the store's keys are gone."""
        self._waker.send(b"")
        self._thread.join(timeout=5)
        self._auth.stop()
        self._ctx.destroy(linger=0)

    def _serve(self) -> None:
        # The socket is used by this thread alone (ZeroMQ sockets are not thread-safe).
        poller = zmq.Poller()
        poller.register(self._socket, zmq.POLLIN)
        poller.register(self._wake, zmq.POLLIN)
        while True:
            ready = dict(poller.poll())
            if self._wake in ready:
                return
            frames = self._socket.recv_multipart()
            if len(frames) < 3:
                continue  # not a request of ours (only the pool's ranks get this far)
            sender, number, op, args = frames[0], frames[1], frames[2], frames[3:]
            try:
                answer = self.handle(op, args)
            except Exception as exc:  # a malformed request: the rank that sent it says so
                answer = [b"error", f"{type(exc).__name__}: {exc}".encode()]
            self._socket.send_multipart([sender, number, *answer])

    def handle(self, op: bytes, args: list[bytes]) -> list[bytes]:
        """Apply one request to the store, with TCPStore's meaning for each op; the answer's frames."""
        data = self._data
        if op == b"check":  # every argument a key
            return [b"ok", b"1" if all(k.decode() in data for k in args) else b"0"]
        if op == b"num_keys":
            return [b"ok", str(len(data)).encode()]
        key = args[0].decode()  # the others take a key first, then values (bytes, as the ranks sent them)
        if op == b"set":
            data[key] = args[1]
            return [b"ok"]
        if op == b"get":
            return [b"ok", data[key]] if key in data else [b"missing"]
        if op == b"add":
            data[key] = str(int(data.get(key, b"0")) + int(args[1])).encode()
            return [b"ok", data[key]]
        if op == b"compare_set":
            expected, desired = args[1], args[2]
            if key not in data:
                if expected:  # TCPStore answers the expected value when the key is missing, and sets nothing
                    return [b"ok", expected]
                data[key] = desired
            elif data[key] == expected:
                data[key] = desired
            return [b"ok", data[key]]
        if op == b"delete_key":
            return [b"ok", b"1" if data.pop(key, None) is not None else b"0"]
        raise ValueError(f"unknown store operation {op[:40]!r}")
