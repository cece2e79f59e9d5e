"""The contract between a kernel and its engines: the cell channel's messages, how they are signed, how a rank is
addressed, how a user's value becomes bytes, and the rules both sides must apply alike.

The kernel (jupyter_hvd/kernel/) and the engines (jupyter_hvd/engine/) import this module and nothing of each
other. What the kernel asks of the engines besides the user's cells is a typed `Task`, done by one dispatcher on the
engine (engine/tasks.py): on the cell channel inside a `RunCell` (a restore, which must run in the cells' order and
be watched as a cell is), or through ipyparallel for what needs its zero-copy buffers or comes before the channel
(a push or pull of a big value, the start), signed there with ipyparallel's own session key.

A channel message is two frames: an HMAC-SHA256 of the payload under the pool's key, then the pickled payload,
`(VERSION, sender, seq, message)`. Either side drops a message whose signature does not match before unpickling it
(as ipyparallel does with its own session key), one of another VERSION after, and one whose `seq` is not above the
last one seen from that sender (a replay). `sender` is the kernel's name or a rank's identity, a random address the
kernel gives each rank at each start (`new_identity`). jupyter_client's `Session` would sign
the same way, at 31.6 us per message packed and read against 5.3 us here (bench/signing.py): the hot path keeps its
own.
"""

from __future__ import annotations

import hmac
import io
import os
import pickle
import re
import secrets
import site
import sys
import sysconfig
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypedDict

import cloudpickle

VERSION = 2
KEY_BYTES = 32
# The largest payload either side sends; the receivers' sockets refuse bigger ones (ZMQ_MAXMSGSIZE, with room for the
# envelope), so junk cannot make the kernel hold more than a few of these per connection.
MAX_MESSAGE_BYTES = 8 * 2**20
KERNEL = b"kernel"  # the sender of requests

# ---- messages: kernel -> one rank (requests) ---------------------------------------------------------------


@dataclass(frozen=True)
class RunCell:
    """Run a `%%hvd` cell: `source` is already transformed Python; `show`: this rank's output goes to the notebook.
    With a `task`, the rank does that instead of running source, watched as a cell is; its result is the value."""

    cell: int
    source: str
    filename: str
    show: bool
    max_lines: int
    count: int | None = None  # the notebook's execution count, as in [7] (snapshots taken in this cell say it)
    every_value: bool = False  # every rank sends its last expression's value, not rank 0 alone
    task: CellTask | None = None
    # Rank 0 sends its last expression as IPython formats it for the notebook (CellRecord.shown), not pickled: the
    # kernel shows any value without importing what it is made of (torch, a class defined in a cell), as %%px does.
    formatted: bool = False


@dataclass(frozen=True)
class Join:
    """Leave Horovod's collectives once this rank's cell has ended (the wind-down after a failure)."""

    cell: int


@dataclass(frozen=True)
class Decline:
    """This rank's cell has ended while its peers wait for it in torch.distributed: at the check before a collective
    (`agreeing_at`: the group's sequence number there), where it takes part calling nothing (they raise); or for
    asynchronous allreduces (`owed`: [sequence number, elements, dtype] each), which it completes with zeros, as a
    rank that joined Horovod does. Only where its own sequence number is that one (the group stays in step). Then
    Joined, with the collectives entered since."""

    cell: int
    agreeing_at: int | None = None
    owed: tuple[tuple[int, int, str], ...] = ()


@dataclass(frozen=True)
class Rest:
    """Stop Horovod until the next cell (engine/horovod/rest.py); sent to every rank or none."""


@dataclass(frozen=True)
class Ping:
    """Answered with a Pong once every request sent before it was handled."""

    n: int


# A snapshot generation: (cell, k). k >= 1 numbers the `jupyter_hvd.commit()` calls in cell `cell`; k == 0 is a
# snapshot the kernel asked for (a cell's end, %hvd_keep) under a number of its own from the cells' counter, so
# generations sort in the order they were taken.
GenId = tuple[int, int]


@dataclass(frozen=True)
class Keep:
    """Keep these names of the ranks' namespaces (engine/keep/snapshot.py), with snapshots in `directory`."""

    names: list[str]
    directory: str


@dataclass(frozen=True)
class Commit:
    """Snapshot the kept names that changed since this rank's last snapshot, as generation `gen` (the end of a
    successful cell, or %hvd_keep)."""

    count: int | None
    gen: GenId = (0, 0)


@dataclass(frozen=True)
class Prune:
    """Delete these snapshot generations of this rank (the kernel keeps the others: engine/keep/files.py), or of
    `rank`: a rank the pool no longer has since it was resized to fewer ranks."""

    gens: list[GenId]
    rank: int | None = None


@dataclass(frozen=True)
class Where:
    """Say where this rank is now (answered by a thread of its own, also while a cell runs: engine/diagnose/where.py).
    The rank sends every frame from the cell's down, marked `library` or not; the kernel folds them."""

    n: int


@dataclass(frozen=True)
class Debug:
    """Open pdb in the frame where this rank's last failed cell raised (%hvd_debug): engine/diagnose/debugger.py."""

    n: int


@dataclass(frozen=True)
class InputReply:
    """What the user typed at a rank's pdb prompt (answered on the rank's reading thread, while pdb runs)."""

    n: int
    text: str


@dataclass(frozen=True)
class Interrupt:
    """Stop cell (or debug session) `cell` on this rank with KeyboardInterrupt: at once where it runs, before its
    first line where it has not started yet, not at all where it ended (handled on the rank's reading thread; a
    signal from outside could land before the cell began, and be lost, or after it ended, in what came next)."""

    cell: int


Request = RunCell | Join | Decline | Rest | Ping | Keep | Commit | Prune | Where | Debug | InputReply | Interrupt

# ---- tasks: jupyter-hvd's own work on the ranks (engine/tasks.py does each) ------------------------------------


@dataclass(frozen=True)
class Start:
    """A new engine joins its pool: MPI, Horovod (and torch.distributed), device, namespace, the cell channel
    (engine/bootstrap.py, through `start`); the result is the rank's row of the pool table."""

    env: dict[str, str]
    device: str
    channel: dict[str, Any]
    torch_distributed: bool
    torch_store: dict[str, Any]


@dataclass(frozen=True)
class Resize:
    """A snapshot taken on `old` ranks restored on `new` ones: every rank reads rank `source`'s part (data-parallel
    training keeps modules and optimizers alike on every rank), DTensor shards are laid out anew from every old
    rank's, a learning rate the setup scales by the size is scaled with it, and the random generators stay as the
    setup cells left them (they were per rank)."""

    old: int
    new: int
    source: int = 0


@dataclass(frozen=True)
class RestorePrepare:
    """Read this rank's part of a snapshot (`plan`: rank -> generation) without touching the namespace; the result
    says which names it could bring back (engine/keep/restore.py)."""

    plan: dict[int, GenId]
    directory: str
    resize: Resize | None = None

    def words(self) -> str:
        return "reading the snapshot of the kept names"


@dataclass(frozen=True)
class RestoreApply:
    """Put the names every rank could read in place, all of them (the second step of a restore)."""

    names: list[str]

    def words(self) -> str:
        return f"restoring {', '.join(self.names)} from the snapshot"


@dataclass(frozen=True)
class TimelineStart:
    """Record Horovod's timeline into `path` (engine/horovod/timeline.py)."""

    path: str


@dataclass(frozen=True)
class TimelineStop:
    """Stop the timeline; the result says where rank 0's file is and how big."""

    path: str


@dataclass(frozen=True)
class TimelineRead:
    """The timeline file's text (rank 0 on another host)."""

    path: str


@dataclass(frozen=True)
class ProfileStart:
    """Record the next cell with torch.profiler (engine/diagnose/profile.py)."""


@dataclass(frozen=True)
class ProfileStop:
    """Stop recording; each rank writes its trace into `folder` and says where its time went."""

    folder: str


@dataclass(frozen=True)
class Stage:
    """Serialise the rank's variable `name` for a pull; the result says how big it is (engine/transfer.py)."""

    name: str


@dataclass(frozen=True)
class Take:
    """Hand out what Stage serialised: the pickle, then its buffers (ipyparallel sends them without a copy)."""


@dataclass(frozen=True)
class Receive:
    """Bind pushed values: `counts[i]` of the buffers sent beside the task belong to `names[i]`."""

    names: list[str]
    headers: list[bytes]
    counts: list[int]


# Tasks that run as a cell does, on the cell channel.
CellTask = RestorePrepare | RestoreApply

Task = (
    RestorePrepare
    | RestoreApply
    | TimelineStart
    | TimelineStop
    | TimelineRead
    | ProfileStart
    | ProfileStop
    | Stage
    | Take
    | Receive
)

# ---- messages: a rank -> the kernel (events) ---------------------------------------------------------------


class ErrorInfo(TypedDict, total=False):
    """How a cell (or a join, a rest) ended in an exception on a rank."""

    ename: str
    evalue: str
    traceback: str
    where: str  # the innermost line of the user's cell: "line 3: hvd.allreduce(...)"
    exit: str  # the code of exit(), quit() or sys.exit()


class Shown(TypedDict):
    """A value as IPython's display formatter gives it: a display_data message's content."""

    data: dict[str, Any]  # MIME type -> what to show (text/plain always)
    metadata: dict[str, Any]


@dataclass
class CellRecord:
    """How a cell ended on one rank."""

    rank: int
    ok: bool
    value: bytes | None = None  # rank 0's last expression, pickled
    shown: Shown | None = None  # rank 0's last expression as the notebook shows it (RunCell.formatted)
    error: ErrorInfo | None = None
    woke: float = 0.0  # seconds Horovod took to start again after a rest
    seconds: float = 0.0
    tail: list[str] = field(default_factory=list)  # the last lines printed, shown or not
    lines: int = 0
    collectives: int = 0  # collectives the cell started on this rank
    commits: int = 0  # jupyter_hvd.commit() calls the cell made on this rank


@dataclass(frozen=True)
class Hello:
    """A rank's engine connected (sent on both sockets: on the request socket, the kernel's ROUTER learns its
    address)."""

    rank: int
    pid: int


@dataclass(frozen=True)
class Output:
    """Text a cell wrote to `stream` (stdout or stderr)."""

    rank: int
    cell: int | None
    stream: str
    text: str


@dataclass(frozen=True)
class Metrics:
    """A batch of `report()` records (engine/cell/report.py)."""

    rank: int
    cell: int | None
    records: list[dict[str, Any]]


@dataclass(frozen=True)
class Display:
    """A `display()` in a cell."""

    rank: int
    cell: int | None
    data: dict[str, Any]
    metadata: dict[str, Any]


@dataclass(frozen=True)
class CellEnded:
    """The cell ended on this rank; everything it wrote was sent before."""

    rank: int
    cell: int
    record: CellRecord


@dataclass(frozen=True)
class Waiting:
    """The cell's main thread has waited in a collective for a while (`wait`: name, waited, number, kind), or no
    longer does (`wait` None). Waits that peers whose cell ended can release (Decline) say so: "agreeing_at", the
    torch group's sequence number at the ranks' check before a collective; "owed", the asynchronous allreduces it
    waits for (DDP's buckets), [sequence number, elements, dtype] each, in launch order."""

    rank: int
    cell: int | None
    wait: dict[str, Any] | None


@dataclass(frozen=True)
class Problem:
    """Something of jupyter-hvd's own (or a user's thread) failed on this rank, outside any cell's own result."""

    rank: int
    cell: int | None
    text: str


@dataclass(frozen=True)
class Joined:
    """This rank left Horovod's collectives after a failed cell: ok, in_flight (ops left), or error; `entered`: how
    many torch.distributed collectives it has entered on its default group (-1: it has none)."""

    rank: int
    cell: int
    ok: bool
    in_flight: int = 0
    error: ErrorInfo | None = None
    entered: int = -1


@dataclass(frozen=True)
class Rested:
    """This rank's answer to a Rest: whether Horovod now rests, why not, or what failed."""

    rank: int
    resting: bool
    busy: str = ""
    error: ErrorInfo | None = None


@dataclass(frozen=True)
class Pong:
    """The answer to Ping `n`."""

    rank: int
    n: int


@dataclass(frozen=True)
class Committed:
    """This rank's part of snapshot generation `gen` is on disk (or, `changed` False, it is the same as its part of
    generation `same_as`, and nothing was written)."""

    rank: int
    gen: GenId
    changed: bool
    same_as: GenId | None = None
    count: int | None = None  # the execution count of the cell it was taken in (or at the end of)
    mid_cell: bool = False  # taken by jupyter_hvd.commit() inside the cell
    tag: str = ""  # jupyter_hvd.commit(tag=...): kept until the pool stops
    at: float = 0.0  # epoch s
    kinds: dict[str, str] = field(default_factory=dict)  # name -> "state" (by state_dict) | "value", with its class
    digests: dict[str, str] = field(default_factory=dict)  # name -> digest of what was kept (ranks compared)
    skipped: dict[str, str] = field(default_factory=dict)  # kept names left out, and why
    blobs: dict[str, int] = field(default_factory=dict)  # tensor data files it refers to: digest -> bytes
    nbytes: int = 0  # bytes this rank wrote for it (data already on disk is linked, not written again)
    seconds: float = 0.0  # to write it, in the background
    copy_seconds: float = 0.0  # what the training thread waited: the copy of what the names hold
    manifest_bytes: int = 0  # of its manifest: the kept values that are not tensor data


@dataclass(frozen=True)
class CommitFailed:
    """This rank could not write its part of snapshot generation `gen` (a full disk, an I/O error): the last one
    written stays the one to restore, and the rank's next snapshot writes everything again."""

    rank: int
    gen: GenId
    why: str  # "No space left on device"
    needed: int = 0  # bytes it had to write
    free: int = 0  # bytes free where the snapshots go


class Frame(TypedDict):
    """One frame of a rank's stack, innermost last (engine/diagnose/where.py)."""

    file: str
    line: int
    function: str
    code: str
    library: bool  # not the user's: the standard library, site-packages, jupyter-hvd's own


@dataclass(frozen=True)
class Place:
    """Where a rank is (the answer to Where `n`): its main thread's stack, the collective it waits in, whether a cell
    runs, and who holds it in the debugger."""

    rank: int
    n: int
    cell: int | None
    frames: list[Frame]
    waiting: str = ""  # the collective the main thread waits in ("allreduce 'grad.0'", "dist.all_reduce")
    debugger: bool = False


@dataclass(frozen=True)
class InputRequest:
    """pdb on this rank waits for a command (`n`: the debug session, or 0 for a breakpoint() in cell `cell`)."""

    rank: int
    n: int
    cell: int | None
    prompt: str


@dataclass(frozen=True)
class Debugged:
    """The debug session `n` on this rank ended (pdb quit); `error`: why there was none."""

    rank: int
    n: int
    error: str = ""


@dataclass(frozen=True)
class Interrupted:
    """This rank's reading thread took the Interrupt of cell `cell` (signalled it, cancelled it, or found it ended).
    A rank that does not say so soon cannot run that thread: native code holds the GIL, and only a signal from
    outside reaches it (the kernel sends one then)."""

    rank: int
    cell: int


@dataclass(frozen=True)
class Debugging:
    """A `breakpoint()` in cell `cell` holds this rank in pdb (`active`), or let it go (continue, quit, or the cell's
    end): while one does, the kernel does not end the cell for collectives that wait for that rank."""

    rank: int
    cell: int | None
    active: bool


Event = (
    Hello
    | Output
    | Metrics
    | Display
    | CellEnded
    | Waiting
    | Problem
    | Joined
    | Rested
    | Pong
    | Committed
    | CommitFailed
    | Place
    | InputRequest
    | Debugged
    | Debugging
    | Interrupted
)

# ---- signing -----------------------------------------------------------------------------------------------


def new_key() -> bytes:
    """A fresh random key for one pool."""
    return os.urandom(KEY_BYTES)


def pack(key: bytes, message: Request | Event, sender: bytes = KERNEL, seq: int = 0) -> list[bytes]:
    """The frames that carry `message` from `sender` (its `seq`-th message), signed with `key`."""
    payload = pickle.dumps((VERSION, sender, seq, message), protocol=pickle.HIGHEST_PROTOCOL)
    return [hmac.digest(key, payload, "sha256"), payload]


@dataclass(frozen=True)
class Signed:
    """A message that carried the pool's signature, with who sent it and its number in that sender's sequence."""

    sender: bytes
    seq: int
    message: Request | Event


def unpack(key: bytes, frames: list[Any]) -> Signed | None:
    """The signed message the frames carry; None when they are not signed with `key`, not a message of this
    VERSION, or not readable here (signed, but made of a class this side cannot import)."""
    if len(frames) != 2:
        return None
    signature, payload = frames
    if not hmac.compare_digest(bytes(signature), hmac.digest(key, payload, "sha256")):
        return None
    try:
        version, sender, seq, message = pickle.loads(payload)
    except Exception:
        return None
    return Signed(sender, seq, message) if version == VERSION else None


def new_identity() -> bytes:
    """A rank's address on the channel for one start of the pool: random, so no one can take it before the engine
    connects, and engines of an earlier start (a restart) are never confused with the new ones."""
    return secrets.token_hex(16).encode()


# ---- tasks the kernel sends through ipyparallel ----------------------------------------------------------------


# The kernel sends `perform` and `start` through ipyparallel by reference: both sides import this module, and an
# engine's entry point (engine/main.py) hands them what does the work there, so the contract names no engine code.
_on_engine: dict[str, Callable[..., Any]] = {}


def serve(start: Callable[[Start], dict[str, Any]], perform: Callable[..., Any]) -> None:
    """On an engine, before it registers: what `start` and `perform` do there."""
    _on_engine.update(start=start, perform=perform)


def _engines(name: str) -> Callable[..., Any]:
    if name not in _on_engine:
        raise RuntimeError(f"wire.{name} runs on a jupyter-hvd engine only (python -m jupyter_hvd.engine.main)")
    return _on_engine[name]


def perform(task: Task, *buffers: Any) -> Any:
    """Do `task` on an engine (engine/tasks.py), with `buffers` sent beside it."""
    return _engines("perform")(task, *buffers)


def start(task: Start) -> dict[str, Any]:
    """Make a new engine a rank of its pool (engine/bootstrap.py); its row of the pool table."""
    return _engines("start")(task)


# ---- rules both sides apply alike ------------------------------------------------------------------------------

# Horovod 0.28.1 cannot be initialised again once one of these fixed a tuning parameter: the first hvd.init() drops
# the parameter from its tuning vector, the second writes to the old index (parameter_manager.cc) and the rank
# died with SIGSEGV in 3 of 4 tries. (Dynamic process sets do not keep a pool awake: each start registers again those
# that cells added, engine/horovod/rest.py.)
# "1": every rank of the pool waits in Horovod's negotiation with naps (engine/horovod/negotiation.py); the kernel
# decides for the whole pool, since ranks that wait otherwise would never match.
NEGOTIATION_NAPS_ENV = "JUPYTER_HVD_NEGOTIATION_NAPS"

NO_REST = ("HOROVOD_CYCLE_TIME", "HOROVOD_FUSION_THRESHOLD", "HOROVOD_AUTOTUNE")


def can_rest(env: Mapping[str, str]) -> bool:
    """Whether a pool whose engines have environment `env` may stop Horovod while idle and start it again.

    Decided from the environment only, which every rank shares and the kernel knows: the ranks must all decide
    alike (the first shutdown stops every rank's Horovod).
    """
    return not any(env.get(k) for k in NO_REST)


# Where a frame runs: a `%%hvd` cell (kernel/cell/run.py names each run, the engines compile it under that name), or a
# file of the standard library, an installed package or jupyter-hvd (folded when the kernel says where a rank is).
_CELL_FILE = re.compile(r"^<hvd-cell-(\d+)>$")
_LIBRARY = tuple(
    os.path.join(os.path.realpath(p), "")
    for p in {
        *(sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")),
        site.getusersitepackages(),
        os.path.dirname(os.path.abspath(__file__)),
    }
    if p
)


def cell_file(number: int) -> str:
    """The file name the engines compile the kernel's cell run `number` under: `<hvd-cell-N>`."""
    return f"<hvd-cell-{number}>"


def cell_number(filename: str) -> int | None:
    """The kernel's cell run a frame's file name belongs to (`<hvd-cell-N>`: N); None for any other file."""
    m = _CELL_FILE.match(filename)
    return int(m.group(1)) if m else None


def cell_place(prompt: str, line: int, function: str | None = None) -> str:
    """A place in a cell in IPython's own words: 'Cell In[7], line 4' (', in f()' inside a function). `prompt` is the
    cell's, 'In[7]'; `line` counts the cell's body, its first line after `%%hvd` line 1, as the engines compile it."""
    inside = f", in {function}()" if function and function != "<module>" else ""
    return f"Cell {prompt}, line {line}{inside}"


def library_file(filename: str) -> bool:
    """Whether a frame's file is not the user's: the standard library, an installed package, jupyter-hvd's own, or
    code without a file (`<frozen ...>`, `<string>`); a cell's and the user's own files are not."""
    if filename.startswith("<"):
        return cell_number(filename) is None
    return os.path.realpath(filename).startswith(_LIBRARY)


# ---- values: how a user's object crosses (`%hvd_push`, `%hvd_pull`) ---------------------------------------------
# By value with cloudpickle (as ipyparallel's `use_cloudpickle`): functions, lambdas, closures and classes defined in
# notebook cells or `%%hvd` cells live in a `__main__` the other side cannot import, so their code travels with them.
# Protocol 5 keeps the data of numpy arrays and CPU tensors out of band: their memory goes as zmq frames without a
# copy and is rebuilt on the received frames, so a 100 MB tensor is never copied in Python on either side.

PROTOCOL = 5


def _rebuild_tensor(array: Any, parameter: bool, requires_grad: bool) -> Any:
    """A CPU tensor on the memory of `array` (no copy); an nn.Parameter where one was sent."""
    import torch

    if not array.flags.writeable:  # small buffers come inside the pickle (ipyparallel inlines them): copy those
        array = array.copy()
    tensor = torch.from_numpy(array)
    if parameter:
        return torch.nn.Parameter(tensor, requires_grad=requires_grad)
    return tensor.requires_grad_(requires_grad) if requires_grad else tensor


def _tensor_reduce(obj: Any) -> Any:
    """Out-of-band reduction of a plain dense CPU tensor that owns all of its storage; NotImplemented otherwise."""
    torch = sys.modules["torch"]
    kind = type(obj)
    if kind is not torch.Tensor and kind is not torch.nn.Parameter:
        return NotImplemented
    if obj.device.type != "cpu" or obj.layout != torch.strided or obj.is_quantized or obj.grad_fn is not None:
        return NotImplemented
    # A view of a larger storage keeps torch's own pickling, which keeps views sharing their storage.
    if not obj.is_contiguous() or obj.storage_offset() or obj.untyped_storage().nbytes() != obj.nbytes:
        return NotImplemented
    try:
        array = obj.detach().numpy()  # shares the tensor's memory
    except (TypeError, RuntimeError):  # dtypes numpy lacks (bfloat16...)
        return NotImplemented
    return _rebuild_tensor, (array, kind is torch.nn.Parameter, obj.requires_grad)


class _Pickler(cloudpickle.Pickler):
    """cloudpickle, with plain CPU tensors out of band (torch's own pickling copies them twice, through torch.save)."""

    def reducer_override(self, obj: Any) -> Any:
        if "torch" in sys.modules and type(obj).__module__.startswith("torch"):
            reduced = _tensor_reduce(obj)
            if reduced is not NotImplemented:
                return reduced
        return super().reducer_override(obj)


def dumps(value: Any) -> tuple[bytes, list[memoryview]]:
    """`value` as a pickle (protocol 5) and the out-of-band buffers it refers to (views of its memory, not copies)."""
    buffers: list[pickle.PickleBuffer] = []
    out = io.BytesIO()
    _Pickler(out, protocol=PROTOCOL, buffer_callback=buffers.append).dump(value)
    return out.getvalue(), [b.raw() for b in buffers]


def loads(header: bytes, buffers: list[Any]) -> Any:
    """The value `dumps` made, rebuilt on `buffers` (received frames are used in place)."""
    return pickle.loads(header, buffers=buffers)


def nbytes(header: bytes, buffers: list[memoryview]) -> int:
    """Bytes that cross the wire for one value."""
    return len(header) + sum(b.nbytes for b in buffers)


# Why a value cannot be pickled, in the user's words, by what pickle names in its message.
_UNPICKLABLE = {
    "_thread.lock": "it holds a thread lock",
    "_thread.RLock": "it holds a thread lock",
    "_thread._local": "it holds thread-local state",
    "generator": "it is a generator (a running function's state)",
    "coroutine": "it is a coroutine",
    "_io.": "it holds an open file",
    "socket": "it holds a socket",
    "SSLContext": "it holds an SSL context",
    "Connection": "it holds a connection",
    "frame": "it holds a stack frame",
    "module": "it is or holds a module",
}


def why_unpicklable(exc: BaseException) -> str:
    """Why pickling failed with `exc`, in the user's words ("it is a generator (a running function's state)")."""
    text = str(exc)
    for key, why in _UNPICKLABLE.items():
        if key in text:
            return why
    return "it cannot be pickled"
