"""A process outside the pool (tests/test_multihost.py runs it on hostB) attacks a live pool's torch.distributed
rendezvous: on every port the notebook's kernel listens on, it asks as a TCPStore client would (list the keys, read
them, write its own) and as a ZeroMQ client would (the rendezvous' own requests, without CURVE and with a CURVE key of
its own, given the server's public key).

Reads one JSON object from argv[1]: {"host", "ports", "server" (the rendezvous' public key, or null), "read" (keys
to read), "plant" (keys to write)}; prints one JSON line: what it read, what it wrote, and why each try ended.
"""

from __future__ import annotations

import datetime
import json
import sys

TIMEOUT_S = 2.0


def as_tcpstore_client(host: str, port: int, read: list[str], plant: list[str], found: dict) -> None:
    import torch.distributed as dist

    try:
        store = dist.TCPStore(host, port, is_master=False, timeout=datetime.timedelta(seconds=TIMEOUT_S))
    except Exception as exc:
        found["tries"].append(f"tcpstore {port}: no connection ({type(exc).__name__})")
        return
    try:
        keys = list(store.list_keys())
        found["listed"] += keys
    except Exception as exc:
        keys = []
        found["tries"].append(f"tcpstore {port}: list_keys {type(exc).__name__}")
    for key in keys + read:
        try:
            found["read"].append([key, store.get(key).decode(errors="replace")])
        except Exception as exc:
            found["tries"].append(f"tcpstore {port}: get {key!r} {type(exc).__name__}")
    for key in plant:
        try:
            store.set(key, b"planted by the attacker")
            found["planted"].append(key)
        except Exception as exc:
            found["tries"].append(f"tcpstore {port}: set {key!r} {type(exc).__name__}")


def as_zmq_client(host: str, port: int, server: str | None, read: list[str], plant: list[str], found: dict) -> None:
    import zmq

    for curve in (False, True) if server else (False,):
        sock = zmq.Context.instance().socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        if curve:  # a key pair of its own, with the server's public key (which it may have seen)
            public, secret = zmq.curve_keypair()
            sock.curve_serverkey, sock.curve_publickey, sock.curve_secretkey = server.encode(), public, secret
        sock.connect(f"tcp://{host}:{port}")
        requests = [[b"num_keys"]] + [[b"get", k.encode()] for k in read]
        requests += [[b"set", k.encode(), b"planted by the attacker"] for k in plant]
        for number, request in enumerate(requests, 1):
            sock.send_multipart([str(number).encode(), *request])
        while sock.poll(int(TIMEOUT_S * 1000)):
            found["answers"].append([f.decode(errors="replace") for f in sock.recv_multipart()])
        found["tries"].append(f"zmq {'curve' if curve else 'plain'} {port}: {len(requests)} requests sent")
        sock.close()


def main() -> None:
    plan = json.loads(sys.argv[1])
    found: dict = {"listed": [], "read": [], "planted": [], "answers": [], "tries": []}
    for port in plan["ports"]:
        as_tcpstore_client(plan["host"], port, plan["read"], plan["plant"], found)
        as_zmq_client(plan["host"], port, plan["server"], plan["read"], plan["plant"], found)
    print(json.dumps(found), flush=True)


if __name__ == "__main__":
    main()
