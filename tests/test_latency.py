"""A line printed on rank 0 shows in the notebook at once, and a flood of output cannot swamp the kernel.

A real kernel (jupyter_client in the front end's place) and a real 2-rank pool; arrival is stamped at the client,
on the same host and clock as the rank's print.
"""

from __future__ import annotations

import queue
import re
import statistics
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import psutil
import pytest

from jupyter_hvd.testing import Kernel

QUIET_PRINTS = """%%hvd
import time
for i in range({n}):
    time.sleep(1.0)  # a quiet spell: no batching window may hold this line back
    print(f"LAT {{time.time():.6f}}")
"""
SUSTAINED = """%%hvd --log-lines 100000000
import time
end = time.time() + 3
while time.time() < end:
    print("step", time.time(), "loss=0.1")
"""
FLOOD = """%%hvd
for i in range(1_000_000):
    print(i, "some text a training loop might print")
"""


@pytest.fixture(scope="module")
def pool_kernel() -> Iterator[Kernel]:
    k = Kernel()
    try:
        run(k, "%load_ext jupyter_hvd\n%hvd_start -np 2")
        yield k
    finally:
        try:
            run(k, "%hvd_stop", timeout=60)
        finally:
            k.shutdown()


def run(k: Kernel, code: str, timeout: float = 300) -> list[tuple[float, dict[str, Any]]]:
    """Execute `code`; the cell's IOPub messages with their wall-clock arrival times."""
    msg_id = k.kc.execute(code)
    got = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            msg = k.kc.get_iopub_msg(timeout=1)
        except queue.Empty:
            continue
        t = time.time()
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        got.append((t, msg))
        assert msg["msg_type"] != "error", "\n".join(msg["content"]["traceback"])
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            k.kc.get_shell_msg(timeout=10)
            return got
    raise TimeoutError(code[:60])


def shown_text(messages: list[tuple[float, dict[str, Any]]]) -> list[tuple[float, str]]:
    """(arrival, text) of stream messages and of the live view's log lines (its comm messages)."""
    out = []
    for t, m in messages:
        if m["msg_type"] == "stream":
            out.append((t, m["content"]["text"]))
        elif m["msg_type"] == "comm_msg":
            data = m["content"]["data"]
            if data.get("method") == "custom" and data["content"].get("type") == "update":
                out += [(t, text) for text, _ in (data["content"].get("log") or {}).get("append", [])]
    return out


@pytest.mark.parametrize("view", ["text", "widget"])
def test_a_print_after_a_quiet_spell_reaches_the_notebook_at_once(pool_kernel: Kernel, view: str) -> None:
    run(pool_kernel, f"%config HvdPool.live_view = {view!r}")
    messages = run(pool_kernel, QUIET_PRINTS.format(n=10))
    late_ms = [(t - float(s)) * 1e3 for t, text in shown_text(messages) for s in re.findall(r"LAT (\d+\.\d+)", text)]
    assert len(late_ms) == 10
    # Measured 2 ms here; any fixed batching delay (the old 50 ms engine sleep, ipykernel's 0.2 s timer) fails.
    assert statistics.median(late_ms) < 40, sorted(late_ms)


def test_a_million_printed_lines_neither_swamp_the_notebook_nor_grow_the_kernel(pool_kernel: Kernel) -> None:
    run(pool_kernel, "%config HvdPool.live_view = 'text'")
    kernel = psutil.Process(pool_kernel.pid)
    before = kernel.memory_info().rss
    t0 = time.time()
    messages = run(pool_kernel, FLOOD, timeout=240)
    grew_mb = (kernel.memory_info().rss - before) / 2**20
    text = "".join(text for _, text in shown_text(messages))
    assert "999999 some text" in text  # the end of the flood is shown
    assert "more lines were not shown" in text
    assert grew_mb < 64
    assert time.time() - t0 < 120


def test_output_without_pause_is_sent_in_a_bounded_number_of_messages(pool_kernel: Kernel) -> None:
    run(pool_kernel, "%config HvdPool.live_view = 'text'")
    t0 = time.time()
    messages = run(pool_kernel, SUSTAINED)
    per_second = Counter(int(t - t0) for t, m in messages if m["msg_type"] == "stream")
    assert sum(per_second.values()) > 10  # it did stream while the cell ran
    # Measured at most 33 here; unthrottled (a message per write the threads can hand over), 100-120.
    assert max(per_second.values()) <= 80, per_second
