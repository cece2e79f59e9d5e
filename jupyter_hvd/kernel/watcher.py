"""A kernel-side thread that keeps the pool's state file fresh and carries out the sidebar's actions.

Every second it samples each local rank's process (CPU %, RSS; GPU memory where nvidia-smi answers) into the
state file, and takes an action file left by the Jupyter server (interrupt, restart, stop, where). While a cell
runs, interrupt, restart and stop are left for it: it takes them on the kernel's main thread within a tick,
interrupts its ranks on the cell channel and winds down, and a restart or stop is carried out after it. Between
cells restart and stop run on the kernel's main loop. Where is left for the running cell to answer, under it;
between cells the watcher answers it (kernel/diagnose/where.py).
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

import psutil

from .. import state
from .asks import Action, Ask, Asks
from .diagnose import where

log = logging.getLogger("jupyter_hvd")
PERIOD_S = 1.0
QUIET_S = 0.05  # a poke is acted on once no other came for this long


def gpu_memory_by_pid() -> dict[int, dict[str, float]]:
    """GPU memory used per process and the card's total/utilisation, from nvidia-smi (empty without GPUs)."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return {}
    try:
        apps = subprocess.run(
            [smi, "--query-compute-apps=pid,used_memory,gpu_uuid", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout
        gpus = subprocess.run(
            [smi, "--query-gpu=uuid,memory.total,utilization.gpu", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    cards = {}
    for line in gpus.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 3:
            cards[parts[0]] = (float(parts[1]), float(parts[2]))
    out = {}
    for line in apps.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 3 and parts[0].isdigit():
            total, util = cards.get(parts[2], (0.0, 0.0))
            out[int(parts[0])] = {"gpu_mem_mb": float(parts[1]), "gpu_mem_total_mb": total, "gpu_util": util}
    return out


class Watched(where.Pool, Protocol):
    """What the watcher uses of a pool (kernel/launch/pool.py)."""

    id: str

    def note_problem(self, text: str) -> None: ...

    def update_rank_stats(self, stats: dict[int, dict[str, Any]], publish: bool = True) -> None: ...

    def rest_if_idle(self) -> bool: ...

    def read_channel(self) -> None: ...

    def write_file(self) -> None: ...


class PoolWatcher(threading.Thread):
    """Samples rank stats and takes the sidebar's asks for one pool, until `stop()`: into `asks` where the running cell
    takes them; `act` carries out a Restart or Stop between cells (kernel/owner.py), on the kernel's main loop."""

    def __init__(self, pool: Watched, asks: Asks, act: Callable[[Action], None]) -> None:
        super().__init__(name=f"jupyter-hvd watcher {pool.id}", daemon=True)
        self.pool = pool
        self.asks = asks
        self._act = act
        self._stopped = threading.Event()
        self._poked = threading.Event()
        self._last_sample = 0.0
        self._procs: dict[int, psutil.Process] = {}
        try:
            # ipyparallel's _sync calls only work on the loop that started the pool (seen: a restart from this
            # thread left the pool 'starting' forever), so restart/stop are handed to the kernel's main loop.
            self._main_loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self._main_loop = None

    def stop(self) -> None:
        self._stopped.set()
        self._poked.set()

    def poke(self) -> None:
        """Write the state file soon: the pool changed (a cell started or ended)."""
        self._poked.set()

    def run(self) -> None:
        while not self._stopped.is_set():
            if self._poked.wait(PERIOD_S):
                self._wait_until_quiet()
            self._poked.clear()
            if self._stopped.is_set():
                return
            try:
                self.tick()
            except Exception as exc:  # the watcher must never take the kernel down, nor fail unseen
                self.pool.note_problem(f"the pool watcher failed: {type(exc).__name__}: {exc}")

    def _wait_until_quiet(self) -> None:
        """Let a burst of pokes (a cell's start and end, the next cell's start) pass before writing the file.

        Woken at once, this thread took the GIL from the cell being dispatched on the main thread: writing the file
        at each start and end cost an empty cell about 10 ms. Waiting for a quiet moment costs the sidebar nothing.
        """
        first = time.monotonic()
        while not self._stopped.is_set() and time.monotonic() - first < PERIOD_S:
            self._poked.clear()
            if not self._poked.wait(QUIET_S):
                return

    def tick(self) -> None:
        """One round: take a pending action and sample the ranks (once a second), write the state file."""
        if time.monotonic() - self._last_sample >= PERIOD_S:
            self._last_sample = time.monotonic()
            action = state.take_action(self.pool.id)
            if action is not None:
                self.carry_out(action)
                if self._stopped.is_set():
                    return
            self.pool.update_rank_stats(self.sample(), publish=False)
            self.answer_where()  # one asked while a restart held the pool
            self.pool.read_channel()
            self.pool.rest_if_idle()
        self.pool.write_file()

    def carry_out(self, action: Action) -> None:
        ask = action.ask
        if ask in (Ask.WHERE, Ask.WHERE_FULL):
            self.asks.put(action)
            self.answer_where()
            return
        if ask is Ask.INTERRUPT:
            if self.pool.busy_cell is not None:  # with no cell running, an interrupt has nothing to stop
                self.asks.put(action)
            return
        if self.pool.busy_cell is not None:
            # The running cell takes it on the main thread within a tick and ends through its own wind-down; the
            # restart or stop then runs after it.
            self.asks.put(action)
            if self.pool.busy_cell is not None:
                return
            # The cell ended between the look and the put, maybe past the point where it takes a waiting ask: left
            # there, the restart or stop would wait for the next cell and end it. Taken back (once: the lock decides).
            taken = self.asks.take_ending()
            if taken is None:
                return
            action = taken
        if self._main_loop is not None and not self._main_loop.is_closed():
            self._main_loop.call_soon_threadsafe(self._act, action)
        else:
            self._act(action)

    def answer_where(self) -> None:
        """The sidebar's Where, between cells (a running cell answers it itself, under the cell)."""
        if self.asks.where() is not None and self.pool.busy_cell is None:
            where.answer_sidebar(self.pool, self.asks)

    def sample(self) -> dict[int, dict[str, Any]]:
        """CPU %, RSS and GPU memory of every local rank's process, keyed by rank."""
        gpus = gpu_memory_by_pid() if any(r.device.startswith("cuda") for r in self.pool.ranks) else {}
        stats: dict[int, dict[str, Any]] = {}
        now = time.time()
        for r in self.pool.ranks:
            proc = self._procs.get(r.pid)
            try:
                if proc is None:
                    proc = self._procs[r.pid] = psutil.Process(r.pid)
                    proc.cpu_percent(None)  # the first call only starts the measurement
                with proc.oneshot():
                    stats[r.rank] = {
                        "cpu_percent": proc.cpu_percent(None),
                        "rss_mb": proc.memory_info().rss / 2**20,
                        "heartbeat": now,
                        **gpus.get(r.pid, {}),
                    }
            except psutil.Error:
                stats[r.rank] = {"state": "dead"}
        return stats
