"""Drive a real IPython kernel from Python: run cells, collect what they send, time them.

Used by the test suite and the benchmarks (a jupyter_client kernel, as a notebook front end would use it).
"""

from __future__ import annotations

import os
import queue
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class CellResult:
    """What a real kernel sent back for one cell: status, stream text with arrival times, errors."""

    status: str
    streams: list[tuple[float, str, str]] = field(default_factory=list)  # (time, name, text)
    error: dict[str, Any] | None = None
    outputs: list[dict[str, Any]] = field(default_factory=list)
    prompts: list[str] = field(default_factory=list)  # input requests the cell made, in order
    started: float = 0.0
    finished: float = 0.0

    @property
    def stdout(self) -> str:
        return "".join(t for _, n, t in self.streams if n == "stdout")

    @property
    def stderr(self) -> str:
        return "".join(t for _, n, t in self.streams if n == "stderr")

    @property
    def error_text(self) -> str:
        return "\n".join(self.error["traceback"]) if self.error else ""


class Kernel:
    """A real IPython kernel (jupyter_client) with helpers to run a cell and collect what it sends."""

    def __init__(self, extra_env: dict[str, str] | None = None) -> None:
        from jupyter_client.manager import KernelManager

        env = {**os.environ, **(extra_env or {})}
        self.km = KernelManager(kernel_name="python3")
        self.km.start_kernel(env=env)
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=60)
        self.pid: int = self.km.provisioner.process.pid  # type: ignore[union-attr]

    def run(
        self,
        code: str,
        timeout: float = 120.0,
        on_start: Any = None,
        cell_id: str | None = None,
        inputs: list[str] | Callable[[str], str | None] | None = None,
    ) -> CellResult:
        """Execute `code`, collect iopub until idle; `on_start(result)` runs once the cell is sent.

        `cell_id`: sent as the notebook cell's id, as JupyterLab, Notebook 7 and VS Code send it.
        `inputs`: what the user types into the input box, one answer per input request, in order, or a function of
        the prompt that returns the answer (None: no answer, e.g. it pressed the stop button instead); the prompts
        are kept in the result. Without it the front end takes no input, as nbclient.
        """
        answers = inputs if callable(inputs) else list(inputs) if inputs is not None else None
        if cell_id is None and answers is None:
            msg_id = self.kc.execute(code)
        else:
            content = {"code": code, "silent": False, "store_history": True, "user_expressions": {}}
            content.update(allow_stdin=answers is not None, stop_on_error=True)
            msg = self.kc.session.msg("execute_request", content, metadata={"cellId": cell_id} if cell_id else {})
            self.kc.shell_channel.send(msg)
            msg_id = msg["header"]["msg_id"]
        res = CellResult(status="?", started=time.monotonic())
        if on_start is not None:
            on_start(res)
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
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
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                res.streams.append((time.monotonic(), content["name"], content["text"]))
            elif kind == "error":
                res.error = content
            elif kind in ("display_data", "execute_result"):
                res.outputs.append(content)
            elif kind == "status" and content["execution_state"] == "idle":
                break
        # The reply to this cell: wait_for_ready() sends kernel_info requests until one is answered, and the
        # answers to the others still wait on the shell channel; taking the first reply shifted every status by one.
        reply = self.kc.get_shell_msg(timeout=10)
        while reply["parent_header"].get("msg_id") != msg_id:
            reply = self.kc.get_shell_msg(timeout=10)
        res.status = reply["content"]["status"]
        res.finished = time.monotonic()
        return res

    def shutdown(self) -> None:
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=False)
