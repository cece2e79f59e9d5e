"""Drive a real IPython kernel from Python: run cells, collect what they send, time them.

The one collector of kernel messages of the test suite and the benchmarks (a jupyter_client kernel, as a notebook
front end would use it). Times are wall-clock (time.time()), so they compare with time stamps printed on the ranks.
"""

from __future__ import annotations

import atexit
import os
import queue
import shutil
import tempfile
import threading
import time
from array import array
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Message = tuple[float, dict[str, Any]]  # (arrival, a Jupyter message)


@dataclass
class CellResult:
    """What a real kernel sent back for one cell: status, every IOPub message with its arrival time, and views of
    them (stream text, errors, displays, the live view's updates)."""

    status: str
    messages: list[Message] = field(default_factory=list)  # every IOPub message of the cell, in order
    prompts: list[str] = field(default_factory=list)  # input requests the cell made, in order
    started: float = 0.0
    finished: float = 0.0

    def of(self, kind: str) -> list[Message]:
        """The messages of one type ("stream", "comm_msg", "display_data", ...)."""
        return [(t, m) for t, m in self.messages if m["msg_type"] == kind]

    @property
    def streams(self) -> list[tuple[float, str, str]]:
        """(arrival, "stdout" or "stderr", text) of every stream message."""
        return [(t, m["content"]["name"], m["content"]["text"]) for t, m in self.of("stream")]

    @property
    def error(self) -> dict[str, Any] | None:
        """The cell's error message's content (the last one), or None."""
        errors = self.of("error")
        return errors[-1][1]["content"] if errors else None

    @property
    def outputs(self) -> list[dict[str, Any]]:
        """The contents of display_data and execute_result messages."""
        return [m["content"] for _, m in self.messages if m["msg_type"] in ("display_data", "execute_result")]

    @property
    def stdout(self) -> str:
        return "".join(t for _, n, t in self.streams if n == "stdout")

    @property
    def stderr(self) -> str:
        return "".join(t for _, n, t in self.streams if n == "stderr")

    @property
    def error_text(self) -> str:
        return "\n".join(self.error["traceback"]) if self.error else ""

    def check(self) -> CellResult:
        """This result, or AssertionError with the traceback where the cell raised."""
        assert self.error is None, self.error_text
        return self

    @property
    def updates(self) -> list[tuple[float, dict[str, Any], list[Any]]]:
        """(arrival, content, buffers) of the live view's update messages (widgets/live_view.py)."""
        out = []
        for t, m in self.of("comm_msg"):
            data = m["content"]["data"]
            if data.get("method") == "custom" and data["content"].get("type") == "update":
                out.append((t, data["content"], m.get("buffers") or []))
        return out

    def points(self, name: str) -> tuple[list[float], list[float]]:
        """The x and y values the live view drew for the curve `name`, across its updates."""
        xs: list[float] = []
        ys: list[float] = []
        for _, content, buffers in self.updates:
            for k, curve in enumerate(content["curves"]):
                if curve["name"] != name:
                    continue
                if curve["reset"]:
                    xs, ys = [], []
                xs += array("d", bytes(buffers[2 * k]))
                ys += array("d", bytes(buffers[2 * k + 1]))
        return xs, ys

    def shown_text(self) -> list[tuple[float, str]]:
        """(arrival, text) of what the notebook shows as text: streams, text displays (%%px --stream re-sends its
        output as one), and the live view's log lines."""
        out: list[tuple[float, str]] = []
        for t, m in self.messages:
            kind = m["msg_type"]
            if kind == "stream":
                out.append((t, m["content"]["text"]))
            elif kind in ("display_data", "update_display_data"):
                out.append((t, m["content"]["data"].get("text/plain", "")))
        for t, content, _ in self.updates:
            out += [(t, line[0]) for line in (content.get("log") or {}).get("append", [])]
        return sorted(out, key=lambda item: item[0])


_runtime_swap = threading.RLock()  # pool() inside runtime() takes it again


class Kernel:
    """A real IPython kernel (jupyter_client) with helpers to run a cell and collect what it sends.

    Each kernel has a Jupyter runtime directory of its own (unless `extra_env` names one), so its pool files are the
    only ones its helpers see: pools(), request_action(), action_pending()."""

    def __init__(self, extra_env: dict[str, str] | None = None, extension: bool = True) -> None:
        """`extension`: the kernel starts with jupyter_hvd loaded (`--ext`, as `c.InteractiveShellApp.extensions`
        does) and is handed over once its warm template is ready, as a user's kernel is a few seconds after
        `%load_ext`: pools then fork their ranks instead of importing torch and Horovod in each (about 4 CPU-s a
        start, the suite's largest cost). A cell's `%load_ext jupyter_hvd` then only says it is loaded. False: a
        bare kernel, for the tests of loading the extension and of a start in its cell."""
        from jupyter_client.manager import KernelManager

        env = {**os.environ, **(extra_env or {})}
        if "JUPYTER_RUNTIME_DIR" not in (extra_env or {}):
            # In /tmp: a deeper directory would make the pool's ipc socket names too long, and the pool would listen
            # on TCP (kernel/channel.py's IPC_PATH_MAX) as no user's does.
            runtime = tempfile.mkdtemp(prefix="hvd-k-")
            atexit.register(shutil.rmtree, runtime, ignore_errors=True)
            env["JUPYTER_RUNTIME_DIR"] = runtime
        self.env = env
        self.runtime_dir = Path(env["JUPYTER_RUNTIME_DIR"])
        self.state_dir = self.runtime_dir / "jupyter-hvd"  # where its pools' files are (jupyter_hvd.state)
        self.km = KernelManager(kernel_name="python3")
        self.km.start_kernel(env=env, extra_arguments=["--ext=jupyter_hvd"] if extension else [])
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=60)
        self.pid: int = self.km.provisioner.process.pid  # type: ignore[union-attr]
        if extension:
            self.wait_for_template()

    def wait_for_template(self, timeout: float = 60.0) -> bool:
        """Wait until this kernel's warm template (its own, or one it borrowed: kernel/launch/template.py) is ready;
        False where it has none (no mpiexec, `c.HvdPool.warm_start = False`), it died, or it was not ready within
        `timeout` s. Pools start their ranks cold then, as the user's would."""
        import psutil

        from jupyter_hvd.kernel.launch.template import TEMPLATE_DIR_ENV, directory_of

        where = Path(self.env.get(TEMPLATE_DIR_ENV) or self.state_dir)
        mine = directory_of(where, self.pid)
        deadline = time.monotonic() + timeout
        while not (mine / "ready").exists():
            try:
                children = psutil.Process(self.pid).children()
                alive = any("jupyter_hvd.processes.template" in " ".join(c.cmdline()) for c in children)
            except psutil.Error:
                alive = False
            if not alive or time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    def run(
        self,
        code: str,
        timeout: float = 120.0,
        on_start: Any = None,
        cell_id: str | None = None,
        inputs: list[str] | Callable[[str], str | None] | None = None,
        unparented_streams: bool = False,
    ) -> CellResult:
        """Execute `code`, collect iopub until idle; `on_start(result)` runs once the cell is sent.

        `cell_id`: sent as the notebook cell's id, as JupyterLab, Notebook 7 and VS Code send it.
        `inputs`: what the user types into the input box, one answer per input request, in order, or a function of
        the prompt that returns the answer (None: no answer, e.g. it pressed the stop button instead); the prompts
        are kept in the result. Without it the front end takes no input, as nbclient.
        """
        answers = inputs if callable(inputs) else list(inputs) if inputs is not None else None
        # Before the request leaves: the kernel may start the cell (and date it) before send() returns here.
        res = CellResult(status="?", started=time.time())
        if cell_id is None and answers is None:
            msg_id = self.kc.execute(code)
        else:
            content = {"code": code, "silent": False, "store_history": True, "user_expressions": {}}
            content.update(allow_stdin=answers is not None, stop_on_error=True)
            msg = self.kc.session.msg("execute_request", content, metadata={"cellId": cell_id} if cell_id else {})
            self.kc.shell_channel.send(msg)
            msg_id = msg["header"]["msg_id"]
        if on_start is not None:
            on_start(res)
        deadline = time.time() + timeout
        while True:
            remaining = deadline - time.time()
            if remaining <= 0:
                raise TimeoutError(f"cell did not finish within {timeout} s: {code[:80]!r}")
            if answers is not None:
                try:
                    request = self.kc.get_stdin_msg(timeout=0)
                except queue.Empty:
                    request = None
                if request is not None and request["msg_type"] == "input_request":
                    res.prompts.append(request["content"]["prompt"])
                    text = answers(res.prompts[-1]) if callable(answers) else answers.pop(0) if answers else ""
                    if text is not None:
                        self.kc.input(text)
            try:
                msg = self.kc.get_iopub_msg(timeout=min(remaining, 0.05 if answers is not None else 1.0))
            except queue.Empty:
                continue
            arrived = time.time()
            parent = msg["parent_header"].get("msg_id")
            if parent != msg_id and not (unparented_streams and parent is None and msg["msg_type"] == "stream"):
                continue
            res.messages.append((arrived, msg))
            if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                break
        # The reply to this cell: wait_for_ready() sends kernel_info requests until one is answered, and the
        # answers to the others still wait on the shell channel; taking the first reply shifted every status by one.
        reply = self.kc.get_shell_msg(timeout=10)
        while reply["parent_header"].get("msg_id") != msg_id:
            reply = self.kc.get_shell_msg(timeout=10)
        res.status = reply["content"]["status"]
        res.finished = time.time()
        return res

    def shutdown(self) -> None:
        """Shut the kernel down as a Jupyter server does (killed after 5 s). A pool the kernel did not stop by then
        is ended by its reaper, which reads the pool's file: this waits (up to 20 s) until no file of this kernel's
        pools is left, so that the runtime directory's removal at exit cannot come first and leave the pool running."""
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=False)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and any(self.state_dir.glob(f"pool-hvd-{self.pid}-*.json")):
            time.sleep(0.1)

    # ---- its pools, as its Jupyter server sees them --------------------------------------------------------------

    @contextmanager
    def runtime(self) -> Iterator[None]:
        """jupyter_hvd.state in this process reads and writes this kernel's runtime directory inside the block."""
        with _runtime_swap:
            old = os.environ.get("JUPYTER_RUNTIME_DIR")
            os.environ["JUPYTER_RUNTIME_DIR"] = str(self.runtime_dir)
            try:
                yield
            finally:
                if old is None:
                    os.environ.pop("JUPYTER_RUNTIME_DIR", None)
                else:
                    os.environ["JUPYTER_RUNTIME_DIR"] = old

    def pools(self) -> list[dict[str, Any]]:
        """This kernel's pool files, as the sidebar's server lists them."""
        from jupyter_hvd import state

        with self.runtime():
            return state.list_pools() if self.state_dir.is_dir() else []

    def pool(self) -> dict[str, Any]:
        """This kernel's one pool file (AssertionError where it has none or several)."""
        pools = self.pools()
        assert len(pools) == 1, f"{len(pools)} pool files in {self.state_dir}: {[p.get('id') for p in pools]}"
        return pools[0]

    def request_action(self, action: str, pool_id: str | None = None, np: int | None = None) -> None:
        """Ask this kernel's pool (its one pool, or `pool_id`) for a sidebar action (interrupt, restart, stop, where,
        ...), as its Jupyter server does."""
        from jupyter_hvd import state

        with self.runtime():
            state.request_action(pool_id or self.pool()["id"], action, np)

    def action_pending(self, pool_id: str | None = None) -> bool:
        """Whether the kernel has not yet taken the last action asked of its pool (its one pool, or `pool_id`)."""
        from jupyter_hvd import state

        with self.runtime():
            return state.action_file(pool_id or self.pool()["id"]).exists()
