"""Another local user's attacks on a pool, as tests/test_attacks.py runs them: the standard library only, so it runs
with the system's python3 as a user who cannot read the project's virtual environment.

Reads one JSON object on stdin: {"attack": "junk" | "squat", "targets": [...], ...}; prints one JSON line with what
each target took (bytes sent, connections made, the error that ended it).

Targets are "tcp:HOST:PORT", "ipc:/path/of/a/unix/socket" (also zmq's "tcp://" and "ipc://" forms) or "abstract:NAME".
ZeroMQ is spoken by hand (ZMTP 3.0, NULL mechanism): greeting, READY with a socket type and an identity, frames.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import sys
import time


def connect(target: str, timeout: float = 5.0) -> socket.socket:
    kind, _, where = target.replace("://", ":", 1).partition(":")
    if kind == "tcp":
        host, _, port = where.rpartition(":")
        s = socket.create_connection((host.strip("[]"), int(port)), timeout=timeout)
    elif kind in ("ipc", "abstract"):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(timeout)
        s.connect(where if kind == "ipc" else "\0" + where)
    else:
        raise ValueError(f"unknown target {target}")
    return s


def greeting() -> bytes:
    """ZMTP 3.0 greeting, NULL mechanism, as a client."""
    return b"\xff" + b"\0" * 8 + b"\x7f" + b"\x03\x00" + b"NULL".ljust(20, b"\0") + b"\x00" + b"\0" * 31


def command(name: bytes, properties: dict[bytes, bytes]) -> bytes:
    body = bytes([len(name)]) + name
    for key, value in properties.items():
        body += bytes([len(key)]) + key + struct.pack(">I", len(value)) + value
    return (b"\x04" + bytes([len(body)]) if len(body) < 256 else b"\x06" + struct.pack(">Q", len(body))) + body


def frame(data: bytes, more: bool = False) -> bytes:
    flags = 0x01 if more else 0x00
    if len(data) < 256:
        return bytes([flags]) + bytes([len(data)]) + data
    return bytes([flags | 0x02]) + struct.pack(">Q", len(data)) + data


def zmtp_session(target: str, socket_type: bytes, identity: bytes = b"") -> socket.socket:
    s = connect(target)
    s.sendall(greeting())
    s.sendall(command(b"READY", {b"Socket-Type": socket_type, b"Identity": identity}))
    return s


def junk(targets: list[str], nbytes: int, seconds: float, zmtp: bool, frame_bytes: int) -> dict:
    """Send `nbytes` to every target: random bytes, or ZeroMQ frames of junk (with a huge one first) when `zmtp`.
    A connection the target closes is opened again, until the bytes are sent or `seconds` have passed."""
    chunk = os.urandom(min(frame_bytes, 1 << 20))
    results = {}
    for target in targets:
        sent, connections, error = 0, 0, ""
        deadline = time.monotonic() + seconds
        while sent < nbytes and time.monotonic() < deadline:
            try:
                if zmtp:  # as each kind of peer in turn: a ROUTER takes DEALERs, a PULL takes PUSHes
                    kind = (b"DEALER", b"PUSH")[connections % 2]
                    s = zmtp_session(target, kind, os.urandom(8).hex().encode())
                else:
                    s = connect(target)
                connections += 1
                if zmtp and connections == 1:
                    s.sendall(frame(b"x" * 10, more=True) + struct.pack(">BQ", 0x02, 1 << 30))  # a 1 GB frame header
                    s.sendall(chunk)
                    sent += len(chunk)
                while sent < nbytes:
                    data = chunk if not zmtp else frame(chunk[:frame_bytes] * (frame_bytes // len(chunk) or 1))
                    s.sendall(data)
                    sent += len(data)
                s.close()
            except OSError as exc:
                error = f"{type(exc).__name__}: {exc}"
                if isinstance(exc, PermissionError) or (connections == 0 and "refused" in str(exc).lower()):
                    break
                time.sleep(0.01)
        results[target] = {"sent": sent, "connections": connections, "error": error}
    return results


def squat(targets: list[str], identities: list[str], hold: float) -> dict:
    """Connect a ZeroMQ DEALER under each identity to every target and keep the connections open for `hold`
    seconds (before a restart, when the new engines would connect under those identities)."""
    held, results = [], {}
    for target in targets:
        made, error = 0, ""
        for identity in identities:
            try:
                held.append(zmtp_session(target, b"DEALER", identity.encode()))
                made += 1
            except OSError as exc:
                error = f"{type(exc).__name__}: {exc}"
                break
        results[target] = {"connections": made, "error": error}
    print(json.dumps(results), flush=True)  # the test goes on (the restart) while the connections are held
    time.sleep(hold)
    for s in held:
        s.close()
    return results


def main() -> None:
    order = json.loads(sys.stdin.read())
    if order["attack"] == "junk":
        out = junk(order["targets"], order["bytes"], order["seconds"], order["zmtp"], order.get("frame", 1 << 20))
        print(json.dumps(out), flush=True)
    elif order["attack"] == "squat":
        squat(order["targets"], order["identities"], order["hold"])
    elif order["attack"] == "write":
        try:
            with open(order["path"], "w") as f:
                f.write(order["text"])
            print(json.dumps({"written": True}))
        except OSError as exc:
            print(json.dumps({"written": False, "error": f"{type(exc).__name__}: {exc}"}))


if __name__ == "__main__":
    main()
