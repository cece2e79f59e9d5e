"""The cell channel, kernel side: cells go straight to the ranks, and their output and ends come straight back.

Two sockets bound by the kernel, on the pool's controller address (loopback for a pool on this host): a ROUTER
that sends requests to each rank (cells, joins, rests) and a PULL that receives every rank's events (output,
metrics, displays, ends). Messages are signed with a key only this pool's engines hold (jupyter_hvd/wire.py);
anything else is dropped unread. ipyparallel still starts the engines and carries the bootstrap, push and pull.

Requests and events are the typed messages of jupyter_hvd/wire.py; an event's `cell` is the number of the cell it
belongs to.
"""

from __future__ import annotations

import time
from typing import Any

import zmq

from .. import wire
from ..wire import Committed, Event, Hello, Ping, Pong, Problem, Request, Rested


class ChannelError(Exception):
    """A request could not be sent: the rank's engine is not connected (it died, or was never started)."""


class CellChannel:
    """The kernel's end of one pool's cell channel. Use it from one thread at a time (the pool lock sees to it)."""

    def __init__(self, ip: str) -> None:
        self.key = wire.new_key()
        self.generation = 0  # engines of each start of the pool get new addresses
        self._pings = 0
        ctx = zmq.Context.instance()
        self._requests = ctx.socket(zmq.ROUTER)
        self._requests.setsockopt(zmq.ROUTER_MANDATORY, 1)  # a request to a rank that is not there raises
        self._requests.setsockopt(zmq.LINGER, 0)
        self._events = ctx.socket(zmq.PULL)
        self._events.setsockopt(zmq.LINGER, 0)
        host = f"[{ip}]" if ":" in ip else ip
        self._requests.bind(f"tcp://{host}:0")
        self._events.bind(f"tcp://{host}:0")
        self._poller = zmq.Poller()
        self._poller.register(self._events, zmq.POLLIN)
        self.problems: list[tuple[int, str]] = []  # what failed on the ranks outside any cell's view (new first)
        self.rests: dict[int, Rested] = {}  # each rank's answer to the last rest request
        self.committed: Committed | None = None  # the newest snapshot rank 0 wrote

    def info(self) -> dict[str, Any]:
        """What the engines need to connect (sent to them through ipyparallel's authenticated bootstrap)."""
        return {
            "requests": self._requests.getsockopt_string(zmq.LAST_ENDPOINT),
            "events": self._events.getsockopt_string(zmq.LAST_ENDPOINT),
            "key": self.key.hex(),
            "generation": self.generation,
        }

    def new_generation(self) -> None:
        """A (re)start of the engines: requests now go to the new ones only."""
        self.generation += 1

    def wait_for_ranks(self, ranks: int, timeout: float) -> list[int]:
        """Wait until every rank of this generation said hello; returns the ranks that did not in time."""
        waiting = set(range(ranks))
        deadline = time.monotonic() + timeout
        while waiting and time.monotonic() < deadline:
            if not self._requests.poll(int(max(0.0, deadline - time.monotonic()) * 1000) + 1):
                continue
            frames = self._requests.recv_multipart()
            message = wire.unpack(self.key, frames[1:])
            if isinstance(message, Hello) and frames[0] == wire.identity(self.generation, message.rank):
                waiting.discard(message.rank)
        return sorted(waiting)

    def send(self, rank: int, request: Request) -> None:
        """Send one request to one rank."""
        try:
            self._requests.send_multipart([wire.identity(self.generation, rank), *wire.pack(self.key, request)])
        except zmq.ZMQError as exc:
            raise ChannelError(f"rank {rank} is not connected ({exc})") from None

    def receive(self, timeout: float) -> Event | None:
        """The next event from any rank, waiting up to `timeout` seconds; None if none came. Ctrl-C interrupts."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                frames = self._events.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                left = deadline - time.monotonic()
                if left <= 0 or not self._poller.poll(max(1, int(left * 1000))):
                    return None
                continue
            event = wire.unpack(self.key, frames)
            if isinstance(event, Problem):
                self.problems = [(event.rank, event.text), *self.problems][:20]
            elif isinstance(event, Rested):
                self.rests[event.rank] = event
            elif isinstance(event, Committed) and (self.committed is None or event.seq > self.committed.seq):
                self.committed = event
            if event is not None:
                return event  # type: ignore[return-value]

    def settle(self, ranks: int, timeout: float = 10.0) -> bool:
        """Wait until every rank has handled all requests sent to it so far (a rest, say); whether all did.

        For requests that go through ipyparallel instead: they must not overtake one sent here first.
        """
        self._pings += 1
        for rank in range(ranks):
            self.send(rank, Ping(self._pings))
        waiting = set(range(ranks))
        deadline = time.monotonic() + timeout
        while waiting:
            event = self.receive(deadline - time.monotonic())
            if event is None:
                return False
            if isinstance(event, Pong) and event.n == self._pings:
                waiting.discard(event.rank)
        return True

    def drain(self) -> None:
        """Drop events of earlier cells still queued (e.g. a rest's acknowledgement)."""
        while self.receive(0) is not None:
            pass

    def close(self) -> None:
        self._requests.close(0)
        self._events.close(0)
