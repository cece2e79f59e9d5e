"""A closed cell channel leaves the kernel's ZeroMQ context working: real sockets, ranks that leave as it closes.

Found with two notebooks' pools starting and stopping at once: a rank's disconnection reported to a monitor whose
reader had closed stopped libzmq's I/O thread, and every later pool of that kernel failed with "ranks 0-1 did not
connect to the kernel's cell channel".
"""

from __future__ import annotations

import threading
from pathlib import Path

import zmq

from jupyter_hvd.kernel.channel import CellChannel


def context_still_works(tmp_path: Path) -> bool:
    """Whether a new socket of the kernel's context takes a connection and a message within 5 s."""
    pull, push = zmq.Context.instance().socket(zmq.PULL), zmq.Context().socket(zmq.PUSH)
    try:
        pull.bind(f"ipc://{tmp_path}/probe")
        push.connect(f"ipc://{tmp_path}/probe")
        push.send(b"x")
        return pull.poll(5000) != 0
    finally:
        pull.close(0)
        push.close(0)


def ranks_connected(info: dict, ranks: int, ctx: zmq.Context) -> list[zmq.Socket]:
    """Both sockets of `ranks` engines, connected to the channel of `info` (a message sent on the events one)."""
    socks = []
    for _ in range(ranks):
        requests, events = ctx.socket(zmq.DEALER), ctx.socket(zmq.PUSH)
        for sock, address in ((requests, info["requests"]), (events, info["events"])):
            sock.setsockopt(zmq.LINGER, 0)
            sock.connect(address)
        events.send(b"")
        socks += [requests, events]
    return socks


def test_ranks_leaving_while_the_channel_closes_leave_the_context_working(tmp_path: Path) -> None:
    engines = zmq.Context()
    for i in range(100):  # red within 100 rounds before the fix (the race is in libzmq's I/O thread)
        directory = tmp_path / str(i)
        directory.mkdir()
        channel = CellChannel(directory, "127.0.0.1")
        socks = ranks_connected(channel.info(), 4, engines)
        leave = threading.Thread(target=lambda socks=socks: [s.close(0) for s in socks])
        leave.start()
        channel.close()
        leave.join()
    assert context_still_works(tmp_path), "the kernel's ZeroMQ context stopped: no new pool could connect"
