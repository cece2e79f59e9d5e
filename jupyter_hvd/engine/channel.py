"""The cell channel, engine side: the kernel's cells, joins and rests arrive here straight from the kernel, and all
that a cell sends back (output, metrics, displays, how it ended) leaves in order on one socket.

ipyparallel's path (kernel -> controller -> engine, replies and output back through the controller) took 18-26 ms
for an empty cell on 2 ranks here; two sockets straight to the kernel take well under a millisecond. What is off a
cell's hot path (the bootstrap, push/pull, timeline files) still goes through ipyparallel.

Requests are handled on the engine's main thread, on ipykernel's event loop, one at a time, as ipyparallel's own
requests are: a join or rest sent after a cell runs after it. A thread of its own reads them and hands them over, and
answers two at once itself: "where" and the user's answers to pdb, which must not wait for the cell (or pdb) that
holds the main thread. Output and the cell's end share one socket, so the kernel has all of a cell's output when it
learns the cell ended.

Imported on the engines only.
"""

from __future__ import annotations

import functools
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import zmq

from .. import compat, wire
from ..wire import (
    CellEnded,
    CellRecord,
    Commit,
    Debug,
    Debugged,
    Decline,
    Display,
    InputReply,
    Interrupt,
    Join,
    Joined,
    Keep,
    Metrics,
    Output,
    Ping,
    Pong,
    Problem,
    Prune,
    Rest,
    Rested,
    RunCell,
    Waiting,
    Where,
)
from . import backend, collectives, outbox, tasks
from .cell import runner
from .diagnose import debugger, where
from .keep import snapshot

# Output after a quiet spell leaves at once (leading edge); under load one message per stream per FLUSH_S at most:
# 20 a second is live to the eye, and each message costs the ranks CPU (a DDP cell printing every step was 3-6%
# slower than under torchrun at 50 a second, within 2% at 20; bench/throughput.py --ddp --print-every 1).
FLUSH_S = 0.05
OUTPUT_CHUNK = 2**20  # characters of output per message (at most 4 bytes each: below wire.MAX_MESSAGE_BYTES)
DISPLAY_BYTES_PER_CELL = 64 * 2**20  # displays of one cell beyond this are replaced by a note
BETWEEN_CHARS = 20_000  # output between two cells sent to the kernel (a thread printing in a loop is cut there)


class Channel:
    """This engine's end of the pool's cell channel (one per engine, made by `connect`)."""

    def __init__(self, info: dict[str, Any], rank: int) -> None:
        self.key = bytes.fromhex(info["key"])
        self.rank = rank
        self.identity = info["identities"][rank].encode()  # drawn by the kernel for this start: its address for us
        self.cell: int | None = None  # the cell running now, if one is
        self.count: int | None = None  # its execution count in the notebook
        self._sent = 0  # the number of the last event sent (wire.pack's seq; each socket counts on its own)
        self._kernel_seq = 0  # the number of the last request taken: an older one is a replay
        self._display_bytes = 0  # displays sent by the running cell
        # What an Interrupt may stop: the cell (or debug session) whose run has SIGINT enabled now; the newest one
        # begun; interrupts of cells not begun yet. The kernel numbers cells and debug sessions with one counter.
        self._interrupt_lock = threading.Lock()
        self._interruptible: int | None = None
        self._begun = 0
        self._cancelled: set[int] = set()
        ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
        self._requests = ctx.socket(zmq.DEALER)
        self._requests.setsockopt(zmq.IDENTITY, self.identity)
        self._requests.setsockopt(zmq.LINGER, 0)
        self._requests.setsockopt(zmq.MAXMSGSIZE, wire.MAX_MESSAGE_BYTES + 2**16)
        self._requests.setsockopt(zmq.RCVHWM, 1000)  # from the kernel only: a cell, its join, a rest, pings
        self._events = ctx.socket(zmq.PUSH)
        self._events.setsockopt(zmq.LINGER, 2000)
        for sock in (self._requests, self._events):
            if info.get("curve"):  # TCP between hosts: encrypted, and the kernel admits only this pool's key
                sock.curve_serverkey = info["curve"]["server"].encode()
                sock.curve_publickey = info["curve"]["public"].encode()
                sock.curve_secretkey = info["curve"]["secret"].encode()
        self._requests.connect(info["requests"])
        self._events.connect(info["events"])
        self._send_lock = threading.Lock()  # the events socket is shared by the main, flusher and metrics threads
        self._output_lock = threading.Lock()  # queued output is taken by one sender at a time, in order
        self._text: dict[str, list[str]] = {"stdout": [], "stderr": []}
        self._wake = threading.Event()
        threading.Thread(target=self._flush_loop, name="jupyter-hvd output", daemon=True).start()
        threading.Thread(target=self._watch_collectives, name="jupyter-hvd collectives", daemon=True).start()
        self._forked = False
        os.register_at_fork(after_in_child=self._in_child)
        threading.excepthook = self._thread_raised
        self._route_native_output()
        self._route_displays()
        # The DEALER says hello itself: the kernel's ROUTER can address it from then on. The events socket says it
        # too, so the kernel knows both ways work before the first cell.
        hello = wire.Hello(rank, os.getpid())
        self._requests.send_multipart(wire.pack(self.key, hello, self.identity, 1))  # its only message there
        self.send(hello)

    def listen(self) -> None:
        """Handle requests on this thread's event loop (ipykernel's main loop: call from the main thread).

        A thread of its own reads them: "where" and the notebook's answers to pdb are handled there at once, also
        while a cell (or pdb) holds the main thread; everything else goes to the main thread's loop, in order.
        """
        from tornado.ioloop import IOLoop

        self._loop = IOLoop.current()
        threading.Thread(target=self._read_requests, name="jupyter-hvd requests", daemon=True).start()

    # ---- requests ------------------------------------------------------------------------------------------

    def _read_requests(self) -> None:
        while True:
            try:
                frames = self._requests.recv_multipart()
            except zmq.ZMQError:  # the engine is shutting down
                return
            signed = wire.unpack(self.key, frames)
            if signed is None or signed.sender != wire.KERNEL or signed.seq <= self._kernel_seq:
                continue  # not from this pool's kernel (unsigned, of another version) or a replay: dropped
            self._kernel_seq = signed.seq
            message = signed.message
            if isinstance(message, Where):  # on this thread: the main one may be busy in the cell, or in pdb
                try:
                    self.send(where.place(self.rank, message.n, self.cell, debugger.active()))
                except Exception as exc:  # the kernel names this rank as not answering; the reading goes on
                    self.problem(f"'where' could not be answered: {type(exc).__name__}: {exc}")
            elif isinstance(message, InputReply):
                debugger.reply(message)
            elif isinstance(message, Interrupt):
                self._interrupt(message.cell)
            else:
                self._loop.add_callback(self._on_request, message)

    def _interrupt(self, cell: int) -> None:
        """Stop `cell` (on the reading thread): SIGINT to the main thread where it runs, noted where not begun; the
        kernel is told it was taken."""
        with self._interrupt_lock:
            if self._interruptible == cell:
                main = threading.main_thread().ident
                if main is not None:
                    signal.pthread_kill(main, signal.SIGINT)  # the main thread's own: a wait there wakes (EINTR)
            elif cell > self._begun:
                self._cancelled.add(cell)
        self.send(wire.Interrupted(self.rank, cell))

    def _interruptible_run(self, cell: int | None, fn: Any, *args: Any) -> Any:
        """`fn(*args)` with Ctrl-C enabled (as ipykernel does while it handles a request; engines ignore SIGINT
        otherwise), and, for a cell or debug session, Interrupts of it; a record of the interrupt instead where one
        came before it began. Never raises: a KeyboardInterrupt that lands outside `fn`'s own handling is a record."""
        saved: Any = None
        try:
            with self._interrupt_lock:
                if cell is not None:
                    self._begun = max(self._begun, cell)
                    if cell in self._cancelled:
                        self._cancelled.discard(cell)
                        raise KeyboardInterrupt  # the kernel stopped it before it began: none of it runs
                    self._cancelled = {c for c in self._cancelled if c > cell}
                saved = signal.signal(signal.SIGINT, signal.default_int_handler)
                self._interruptible = cell
            return fn(*args)
        except BaseException as exc:
            return {"ok": False, "error": runner.describe_exception(exc)}
        finally:
            with self._interrupt_lock:
                if saved is not None:
                    signal.signal(signal.SIGINT, saved)
                self._interruptible = None

    def _on_request(self, message: wire.Request) -> None:
        try:
            self._handle(message)
        except KeyboardInterrupt:  # a late Ctrl-C that landed as a run wound down: the request was handled
            pass

    def _handle(self, message: wire.Request) -> None:
        if isinstance(message, RunCell):
            self._run_cell(message)
        elif isinstance(message, Join):
            self._join(message.cell, backend.leave_collectives)
        elif isinstance(message, Decline):
            self._join(message.cell, functools.partial(backend.decline, message.agreeing_at, message.owed))
        elif isinstance(message, Rest):
            result = self._interruptible_run(None, backend.rest)
            error = result.get("error")
            if error:
                self.problem(f"Horovod's idle rest failed: {error['ename']}: {error['evalue']}")
            self.send(Rested(self.rank, bool(result.get("resting")), result.get("busy", ""), error))
        elif isinstance(message, Ping):  # the kernel waits until the requests before this one were handled
            snapshot.wait_written(30.0)  # a snapshot taken before counts as handled once it is written
            self.send(Pong(self.rank, message.n))
        elif isinstance(message, Keep):
            snapshot.configure(message.names, message.directory)
        elif isinstance(message, Commit):  # the end of a successful cell, or %hvd_keep
            failed = self._interruptible_run(None, snapshot.snapshot, message.gen, message.count)
            if isinstance(failed, dict) and failed.get("error"):
                self.problem(f"the snapshot of the kept names failed: {failed['error']['evalue']}")
        elif isinstance(message, Prune):
            snapshot.prune(message.gens, message.rank)
        elif isinstance(message, Debug):
            self.cell = message.n
            try:
                error = self._interruptible_run(message.n, debugger.post_mortem, message.n)
            finally:
                self.cell = None
            self.send(Debugged(self.rank, message.n, error if isinstance(error, str) else str(error.get("error"))))

    def _run_cell(self, request: RunCell) -> None:
        self.send_output()  # what was printed between cells leaves as such, before the cell's own output
        self._between_chars = 0
        self.cell = request.cell
        self.count = request.count
        self._display_bytes = 0
        out = _CellText(self, "stdout")
        err = _CellText(self, "stderr")
        record = self._interruptible_run(
            request.cell,
            runner.run_cell,
            request.source,
            request.filename,
            request.show,
            request.max_lines,
            out,
            err,
            request.every_value,
            functools.partial(tasks.perform, request.task) if request.task is not None else None,
            request.count,
            request.formatted,
        )
        if not isinstance(record, CellRecord):  # an interrupt that landed outside the cell's own handling
            record = CellRecord(rank=self.rank, ok=False, error=record.get("error"))
        record.rank = self.rank
        record.commits = snapshot.commits_in(request.cell)
        try:
            self.send_output()
            self.send(CellEnded(self.rank, request.cell, record))
        except Exception as exc:  # the kernel waits for this end: it must arrive, if only as an error
            error = wire.ErrorInfo(ename=type(exc).__name__, evalue=f"the cell's end could not be sent: {exc}")
            self.send(CellEnded(self.rank, request.cell, CellRecord(rank=self.rank, ok=False, error=error)))
        self.cell = None

    def _join(self, cell: int, leave: Callable[[], dict[str, Any]]) -> None:
        result = self._interruptible_run(None, leave)
        ok, in_flight, error = bool(result.get("ok")), result.get("in_flight", 0), result.get("error")
        self.send(Joined(self.rank, cell, ok, in_flight, error, entered=result.get("entered", -1)))

    # ---- events --------------------------------------------------------------------------------------------

    def send(self, event: wire.Event) -> None:
        """Send one event to the kernel (from any thread)."""
        if self._forked:
            return  # a child of os.fork() in a cell: the kernel talks to the engine, not to its children
        with self._send_lock:  # numbered in the order sent: the kernel drops a number it has seen as a replay
            self._sent += 1
            frames = wire.pack(self.key, event, self.identity, self._sent)
            if len(frames[1]) <= wire.MAX_MESSAGE_BYTES:
                self._events.send_multipart(frames)
                return
            self._sent -= 1
        for smaller in _within_limit(event, len(frames[1])):  # the kernel's socket would refuse it
            self.send(smaller)

    _sent_at = 0.0  # when output last left (monotonic): the throttle's leading edge is FLUSH_S after it

    def write(self, name: str, text: str) -> None:
        """Queue cell output; the flusher thread sends it at once after a quiet spell, else within FLUSH_S."""
        self._text[name].append(text)
        if not self._wake.is_set():
            self._wake.set()

    def send_output(self) -> None:
        """Send the queued output now."""
        with self._output_lock:
            for name, parts in self._text.items():
                if parts:
                    n = len(parts)  # other threads may append meanwhile: take what is there now
                    text = "".join(parts[:n])
                    del parts[:n]
                    self._sent_at = time.monotonic()
                    for start in range(0, len(text), OUTPUT_CHUNK):  # one message stays well below the limit
                        self.send(Output(self.rank, self.cell, name, text[start : start + OUTPUT_CHUNK]))

    def _flush_loop(self) -> None:
        while True:
            self._wake.wait()
            try:
                # A print's "\n" is written right after its text, before this thread gets the GIL: one message.
                delay = self._sent_at + FLUSH_S - time.monotonic()
                if delay > 0:
                    time.sleep(delay)  # under load: what the next writes add goes in the same message
                self._wake.clear()
                self.send_output()
            except zmq.ZMQError:  # the engine is shutting down
                return
            except Exception as exc:  # output must not stop unseen: say so, drop what could not be sent, go on
                self.problem(f"output could not be sent ({type(exc).__name__}: {exc}); some lines are missing")
                for parts in self._text.values():
                    parts.clear()

    def problem(self, text: str) -> None:
        """Tell the kernel that something of jupyter-hvd's (or a user's thread) failed on this rank: it shows the
        line in the running cell, in %hvd_status and in the sidebar."""
        try:
            self.send(Problem(self.rank, self.cell, text[:2000]))
        except Exception:
            print(f"jupyter-hvd: {text}", file=sys.__stderr__, flush=True)  # the engine's own log, at least

    def _thread_raised(self, args: threading.ExceptHookArgs) -> None:
        """An exception that ended a thread (a user's background thread, or one of ours) is shown, not lost."""
        if args.exc_type is SystemExit:
            return
        name = args.thread.name if args.thread is not None else "a thread"
        where = runner.describe_exception(args.exc_value) if args.exc_value is not None else {}
        self.problem(
            f"thread {name!r} raised {args.exc_type.__name__}: {args.exc_value}\n{where.get('traceback', '')}".rstrip()
        )

    def _watch_collectives(self) -> None:
        """While a cell runs, tell the kernel when its main thread has waited in a collective for a while, and when
        that wait ends: a rank that waits while its peers finished the cell (or wait on another tensor) never
        returns by itself."""
        reported: dict[str, Any] | None = None
        while True:
            time.sleep(0.1 if self.cell is not None else 0.25)
            try:
                cell = self.cell
                wait = collectives.main_thread_wait() if cell is not None else None
                if wait is not None and (reported is None or _what(wait) != _what(reported)):
                    self.send(Waiting(self.rank, cell, wait))
                elif wait is None and reported is not None and cell is not None:
                    self.send(Waiting(self.rank, cell, None))
                reported = wait
            except Exception as exc:  # report once, and keep watching
                self.problem(f"the collectives watch failed: {type(exc).__name__}: {exc}")
                time.sleep(5)

    _between_chars = 0  # output between cells since the last cell ended (a budget, as a cell's)

    def _between(self, name: str, text: str) -> None:
        """Output written while no cell runs (a user's thread, Horovod's warnings): sent to the kernel, which shows
        it under the next cell; beyond BETWEEN_CHARS until then, counted only."""
        if self._between_chars < BETWEEN_CHARS:
            self.write(name, text[: BETWEEN_CHARS - self._between_chars])
        self._between_chars += len(text)
        if self._between_chars >= BETWEEN_CHARS and self._between_chars - len(text) < BETWEEN_CHARS:
            self.write(
                name, f"\n[jupyter-hvd] more output between cells was left out (over {BETWEEN_CHARS} characters)\n"
            )

    def _in_child(self) -> None:
        self._forked = True

    def _route_native_output(self) -> None:
        """Output written below Python (C/C++ on fds 1 and 2: Horovod's stall and error reports, NCCL warnings)
        reaches ipykernel's output streams; while a cell runs it goes to that cell's output instead."""
        for name in ("stdout", "stderr"):
            stream = getattr(sys, name)
            original = stream.write

            def write(text: str, _name: str = name, _stream: Any = stream, _original: Any = original) -> int:
                # During a cell sys.stdout/err are the cell's streams (runner.CellStream, with its line budget).
                target = getattr(sys, _name)
                if self.cell is not None and target is not _stream:
                    return target.write(text)
                # A thread of the user's between cells: to the kernel. The main thread between cells runs what
                # ipyparallel asks (%%px, apply), whose output ipykernel sends to that request.
                if self.cell is None and not self._forked and threading.current_thread() is not threading.main_thread():
                    self._between(_name, text)
                    return len(text)
                return _original(text)

            stream.write = write

    def _route_displays(self) -> None:
        """`display(...)` in a cell: sent with the cell's output, in order (rank 0's is shown in the notebook)."""
        from IPython import get_ipython

        def wrap(original: Any) -> Any:
            def publish(data: dict[str, Any], metadata: dict[str, Any] | None = None, *args: Any, **kw: Any) -> None:
                if self.cell is None:
                    original(data, metadata, *args, **kw)
                    return
                self.send_output()
                self._display_bytes += sum(len(v) if isinstance(v, (str, bytes)) else 64 for v in data.values())
                if self._display_bytes > DISPLAY_BYTES_PER_CELL:
                    data, metadata = {"text/plain": _DISPLAY_CAP_NOTE}, {}
                self.send(Display(self.rank, self.cell, data, metadata or {}))

            return publish

        compat.wrap_display_publisher(get_ipython(), wrap)


class _CellText:
    """The raw text sink of a cell's stdout or stderr (behind runner.CellStream's budget)."""

    def __init__(self, channel: Channel, name: str) -> None:
        self._channel = channel
        self._name = name

    def write(self, text: str) -> int:
        self._channel.write(self._name, text)
        return len(text)

    def flush(self) -> None:
        pass  # the flusher thread sends at once or within FLUSH_S; a loop's flush=True must not wait for the network


_DISPLAY_CAP_NOTE = f"[jupyter-hvd] more displays than {DISPLAY_BYTES_PER_CELL // 2**20} MB in one cell: not shown"


def _what(wait: dict[str, Any]) -> tuple[str, bool, str]:
    """What a reported wait is: its collective, whether it is the ranks' check before it (a torch.distributed call's
    check, then the call itself, are two waits), and the allreduces it waits for (more as backward starts them)."""
    return wait["name"], "agreeing_at" in wait, str(wait.get("owed", ""))


def _within_limit(event: wire.Event, size: int) -> list[wire.Event]:
    """`event` as messages below wire.MAX_MESSAGE_BYTES: split in two where it is a list of records or text, else a
    stand-in that says what was too big (a cell's end always arrives, so the kernel never waits for it)."""
    mb = f"{size / 2**20:.0f} MB, above the cell channel's {wire.MAX_MESSAGE_BYTES // 2**20} MB"
    if isinstance(event, Metrics) and len(event.records) > 1:
        half = len(event.records) // 2
        return [replace(event, records=event.records[:half]), replace(event, records=event.records[half:])]
    if isinstance(event, Output) and len(event.text) > 1:
        half = len(event.text) // 2
        return [replace(event, text=event.text[:half]), replace(event, text=event.text[half:])]
    if isinstance(event, Display):
        return [replace(event, data={"text/plain": f"[jupyter-hvd] a display of {mb} was not sent"}, metadata={})]
    if isinstance(event, CellEnded):
        error = wire.ErrorInfo(ename="ValueError", evalue=f"the cell's result was {mb}: use %hvd_pull for big values")
        record = CellRecord(rank=event.rank, ok=False, error=error, seconds=event.record.seconds)
        return [replace(event, record=record)]
    return [Problem(event.rank, getattr(event, "cell", None), f"a {type(event).__name__} message of {mb} was dropped")]


def connect(info: dict[str, Any], rank: int) -> None:
    """Open this engine's end of the cell channel and start handling requests (called by the bootstrap)."""
    if outbox.channel is not None:
        return
    outbox.channel = Channel(info, rank)
    outbox.channel.listen()
