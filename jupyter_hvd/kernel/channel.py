"""The cell channel, kernel side: cells go straight to the ranks, and their output and ends come straight back.

Two sockets bound by the kernel: a ROUTER that sends requests to each rank (cells, joins, rests) and a PULL that
receives every rank's events (output, metrics, displays, ends). Requests and events are the typed messages of
jupyter_hvd/wire.py; an event's `cell` is the number of the cell it belongs to. ipyparallel still starts the engines
and carries the bootstrap, push and pull.

Only the pool's engines get in:
- A pool on this host binds `ipc://` sockets in the pool's private directory (0700): no other user can connect.
  A pool with other hosts (or a directory path too long for a socket name) binds TCP on the controller's address
  with ZeroMQ CURVE: traffic is encrypted, and a ZAP handler admits only the client key made for this pool's engines.
- Every message is signed with the pool's key and numbered per sender: unsigned, replayed and oversized messages
  are dropped and counted (`%hvd_status` shows the counts), and never reach the cell runner.
- Each rank connects under an address the kernel draws at random for each start, so no one can take it first.
- The sockets refuse messages above wire.MAX_MESSAGE_BYTES and queue only a few per connection, and the pool's
  watcher reads them between cells (`drain`), so junk cannot pile up in the kernel.
"""

from __future__ import annotations

import collections
import contextlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import zmq
from zmq.utils.monitor import parse_monitor_message

from .. import wire
from ..wire import CommitFailed, Committed, Event, Hello, Output, Ping, Pong, Problem, Request, Rested

# A message may carry this much around its payload (signature, sender, pickle framing).
ENVELOPE_BYTES = 64 * 1024
# Messages queued per connection before the sender waits: junk from one connection stays within a few messages.
RECEIVE_HWM = 4
# Unix socket names are limited to 107 bytes (sun_path); longer pool directories use TCP with CURVE instead.
IPC_PATH_MAX = 100
BETWEEN_KEPT = 100_000  # characters of between-cell output the kernel keeps until the next cell shows them
DRAIN_MAX = 10_000  # messages read by one drain at most: a flood cannot hold the pool lock for long
_HANDSHAKE_FAILED = (
    zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_AUTH
)
_MONITORED = _HANDSHAKE_FAILED | zmq.EVENT_DISCONNECTED


class ChannelError(Exception):
    """A request could not be sent: the rank's engine is not connected (it died, or was never started)."""


class Channel(Protocol):
    """What Where and the debugger use of a cell channel (CellChannel): a fake one plays the ranks in tests."""

    def send(self, rank: int, request: Request) -> None: ...

    def receive(self, timeout: float) -> Event | None: ...


class _OnlyThisKey:
    """A ZAP credentials provider that admits one CURVE client key: the one made for this pool's engines."""

    def __init__(self, public_key: bytes) -> None:
        self.public_key = public_key

    def callback(self, domain: str, key: bytes) -> bool:
        return key == self.public_key


class CellChannel:
    """The kernel's end of one pool's cell channel. Use it from one thread at a time (the pool lock sees to it).

    `directory`: the pool's private directory, for the ipc sockets; `ip`: the controller's address, for TCP;
    `curve`: TCP with CURVE even for a pool on this host (a pool with other hosts always uses it).
    """

    def __init__(self, directory: Path, ip: str, curve: bool = False) -> None:
        self.key = wire.new_key()
        self.generation = 0  # each start of the pool's engines gets new identities
        self.identities: list[bytes] = []  # each rank's address in this generation
        self._pings = 0
        self._sent = 0  # the number of the last request sent (wire.pack's seq)
        # Per rank identity and socket (each is a stream of its own, in order): the number of its last message.
        self._last_seq: dict[tuple[bytes, bool], int] = {}
        self._senders: dict[bytes, int] = {}  # identity -> rank, this generation
        self._trusted_fds: set[int] = set()  # the ranks' connections (those that said a signed hello)
        self.dropped: collections.Counter[str] = collections.Counter()
        self.problems: list[tuple[int, str]] = []  # what failed on the ranks outside any cell's view (new first)
        self.rests: dict[int, Rested] = {}  # each rank's answer to the last rest request
        # a rank's part of a snapshot is written, or could not be
        self.on_committed: Callable[[Committed | CommitFailed], None] | None = None
        self.between: list[tuple[int, str, str]] = []  # (rank, stream, text) printed while no cell ran
        requests_path, events_path = directory / "requests", directory / "events"
        self.curve = curve or len(str(requests_path)) > IPC_PATH_MAX
        self._auth: Any = None
        self._curve_keys: dict[str, str] = {}
        if self.curve:
            # A context of its own: its ZAP handler must judge this channel's connections only.
            self._ctx = zmq.Context()
            from zmq.auth.thread import ThreadAuthenticator

            server_public, server_secret = zmq.curve_keypair()
            client_public, client_secret = zmq.curve_keypair()
            self._auth = ThreadAuthenticator(self._ctx)
            self._auth.start()
            self._auth.configure_curve_callback("*", _OnlyThisKey(client_public))
            self._curve_keys = {
                "server": server_public.decode(),
                "public": client_public.decode(),
                "secret": client_secret.decode(),
            }
        else:
            self._ctx = zmq.Context.instance()
        self._requests = self._socket(zmq.ROUTER)
        self._requests.setsockopt(zmq.ROUTER_MANDATORY, 1)  # a request to a rank that is not there raises
        # The engine that connects with a rank's identity gets it, even if a connection already holds it.
        self._requests.setsockopt(zmq.ROUTER_HANDOVER, 1)
        self._events = self._socket(zmq.PULL)
        if self.curve:
            for sock in (self._requests, self._events):
                sock.curve_server = True
                sock.curve_secretkey = server_secret
            host = f"[{ip}]" if ":" in ip else ip
            self._requests.bind(f"tcp://{host}:0")
            self._events.bind(f"tcp://{host}:0")
        else:
            self._requests.bind(f"ipc://{requests_path}")
            self._events.bind(f"ipc://{events_path}")
        self._monitors = [s.get_monitor_socket(_MONITORED) for s in (self._requests, self._events)]
        self._poller = zmq.Poller()
        self._poller.register(self._events, zmq.POLLIN)

    def _socket(self, kind: int) -> zmq.Socket:
        sock = self._ctx.socket(kind)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.MAXMSGSIZE, wire.MAX_MESSAGE_BYTES + ENVELOPE_BYTES)
        sock.setsockopt(zmq.RCVHWM, RECEIVE_HWM)
        return sock

    def info(self) -> dict[str, Any]:
        """What the engines need to connect (sent to them through ipyparallel's authenticated bootstrap)."""
        return {
            "requests": self._requests.getsockopt_string(zmq.LAST_ENDPOINT),
            "events": self._events.getsockopt_string(zmq.LAST_ENDPOINT),
            "key": self.key.hex(),
            "identities": [i.decode() for i in self.identities],
            "curve": self._curve_keys,
        }

    def new_generation(self, ranks: int) -> None:
        """A (re)start of the engines: each rank gets a new random identity; requests go to the new ones only."""
        self.generation += 1
        self.identities = [wire.new_identity() for _ in range(ranks)]
        self._senders = {identity: rank for rank, identity in enumerate(self.identities)}
        self._last_seq = {}

    def _open(self, frames: list[Any], routed: bool = False) -> wire.Signed | None:
        """The signed message of `frames` (bytes, or zmq Frames; from the request socket when `routed`) from a rank of
        this generation; None (counted) for anything else."""
        if any(len(f) > wire.MAX_MESSAGE_BYTES for f in frames):  # bigger ones the socket refuses itself
            self.dropped["oversized"] += 1
            return None
        signed = wire.unpack(self.key, [getattr(f, "buffer", f) for f in frames])
        if signed is None:
            self.dropped["unsigned"] += 1
            return None
        if signed.sender not in self._senders:
            return None  # an engine of an earlier start, still sending as it ends
        if signed.seq <= self._last_seq.get((signed.sender, routed), 0):
            self.dropped["replayed"] += 1
            return None
        self._last_seq[(signed.sender, routed)] = signed.seq
        return signed

    def wait_for_ranks(self, ranks: int, timeout: float) -> list[int]:
        """Wait until every rank of this generation said hello on both sockets; returns the ranks that did not in
        time.

        A hello counts when it is signed, fresh, and (on the request socket) came from the connection that holds the
        rank's identity; anything else is dropped (and counted) without delaying the others.
        """
        waiting = {(rank, sock) for rank in range(ranks) for sock in (self._requests, self._events)}
        poller = zmq.Poller()
        poller.register(self._requests, zmq.POLLIN)
        poller.register(self._events, zmq.POLLIN)
        deadline = time.monotonic() + timeout
        while waiting and time.monotonic() < deadline:
            for sock, _ in poller.poll(int(max(0.0, deadline - time.monotonic()) * 1000) + 1):
                frames = sock.recv_multipart(copy=False)
                routed = sock is self._requests
                signed = self._open(frames[1:] if routed else frames, routed)
                if signed is None or not isinstance(signed.message, Hello):
                    if signed is not None:
                        self._note(signed.message)  # type: ignore[arg-type]
                    continue
                rank = signed.message.rank
                if signed.sender == self._identity(rank) and (not routed or frames[0].bytes == signed.sender):
                    waiting.discard((rank, sock))
                    self._trusted_fds.add(frames[-1].get(zmq.SRCFD))  # the rank's connection, for _read_monitors
        return sorted({rank for rank, _ in waiting})

    def _identity(self, rank: int) -> bytes | None:
        return self.identities[rank] if 0 <= rank < len(self.identities) else None

    def send_all(self, request: Request) -> None:
        """Send one request to every rank, in rank order (ChannelError at the first that cannot take it)."""
        for rank in range(len(self.identities)):
            self.send(rank, request)

    def send(self, rank: int, request: Request) -> None:
        """Send one request to one rank."""
        identity = self._identity(rank)
        if identity is None:
            raise ChannelError(f"rank {rank} is not part of the pool")
        self._sent += 1
        frames = wire.pack(self.key, request, wire.KERNEL, self._sent)
        if len(frames[1]) > wire.MAX_MESSAGE_BYTES:
            raise ChannelError(
                f"the request to rank {rank} is {len(frames[1]) / 2**20:.0f} MB, above the channel's "
                f"{wire.MAX_MESSAGE_BYTES / 2**20:.0f} MB: send big data with %hvd_push, not inside a cell's source"
            )
        try:
            self._requests.send_multipart([identity, *frames])
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
            signed = self._open(frames)
            if signed is None:
                continue
            event: Event = signed.message  # type: ignore[assignment]
            self._note(event)
            return event

    def _note(self, event: Event) -> None:
        """Keep what the pool shows outside any cell: failed threads on the ranks, answers to a rest, snapshots,
        output printed between cells."""
        if isinstance(event, Output) and event.cell is None:
            if sum(len(t) for _, _, t in self.between) < BETWEEN_KEPT:
                self.between.append((event.rank, event.stream, event.text))
        elif isinstance(event, Problem):
            self.problems = [(event.rank, event.text), *self.problems][:20]
        elif isinstance(event, Rested):
            self.rests[event.rank] = event
        elif isinstance(event, (Committed, CommitFailed)) and self.on_committed is not None:
            self.on_committed(event)

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
        """Read what is queued on both sockets now: events of earlier cells (a rest's acknowledgement) are dropped,
        what a failed thread reported is kept for %hvd_status, junk is counted. Reads DRAIN_MAX messages at most."""
        for _ in range(DRAIN_MAX):
            if self.receive(0) is None:
                break
        for _ in range(DRAIN_MAX):
            try:
                frames = self._requests.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                break
            self._open(frames[1:], routed=True)  # no rank sends requests here after its hello: only counted
        self._read_monitors()

    def _read_monitors(self) -> None:
        """Count connections from outside the pool: refused at the handshake (not ZeroMQ, or a wrong CURVE key), or
        closed without ever delivering a signed message (junk, or a message above the size limit)."""
        for monitor in self._monitors:
            for _ in range(DRAIN_MAX):
                try:
                    event = parse_monitor_message(monitor.recv_multipart(zmq.NOBLOCK))
                except zmq.Again:
                    break
                fd = event["value"]
                if event["event"] & _HANDSHAKE_FAILED:
                    self.dropped["refused"] += 1
                elif fd in self._trusted_fds:
                    self._trusted_fds.discard(fd)  # an engine that left
                else:
                    self.dropped["outside"] += 1

    def dropped_text(self) -> str:
        """What the channel dropped since the pool started (as of the watcher's last reading), for %hvd_status; ""
        when nothing was."""
        names = {
            "unsigned": "messages not signed by this pool",
            "replayed": "replayed messages",
            "oversized": "oversized messages",
            "refused": "connections refused at the handshake",
            "outside": "connections from outside the pool closed or cut",
        }
        parts = [f"{self.dropped[k]} {text}" for k, text in names.items() if self.dropped[k]]
        if not parts:
            return ""
        return "cell channel: dropped " + ", ".join(parts) + " (someone else may be probing this pool's sockets)"

    def close(self) -> None:
        # Monitoring stops before its reader closes: libzmq's I/O thread sends an event (a rank that leaves) to a
        # monitor without a reader by waiting forever, and with it every socket of the kernel's context stops (the
        # next pool's ranks could not connect). Drained first: a full monitor would hold the stop itself.
        self._read_monitors()
        for sock in (self._requests, self._events):
            with contextlib.suppress(zmq.ZMQError):
                sock.disable_monitor()
        for monitor in self._monitors:
            monitor.close(0)
        self._requests.close(0)
        self._events.close(0)
        if self._auth is not None:
            self._auth.stop()
            with contextlib.suppress(zmq.ZMQError):
                self._ctx.term()
