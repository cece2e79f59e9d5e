"""Ranks waiting in a collective that their peers never join show as 'stalled' (with the tensor they wait on) in
the pool's state, which the sidebar shows; the stall ends with the cell."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from conftest import Kernel

from jupyter_hvd import state


def _ranks() -> list[dict[str, Any]]:
    pools = state.list_pools()
    return pools[0]["ranks"] if pools else []


@pytest.mark.parametrize("horovod", ["awake", "resting"])
def test_a_rank_waiting_for_a_busy_peer_shows_stalled(tmp_path, monkeypatch, horovod):
    """Awake, Horovod's stall inspector names the stall. Resting (the pool was idle before the cell, as between a
    user's cells), the waiting rank's collective starts Horovod, which waits for every rank: the kernel names it from
    the rank's own report of its wait."""
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path))
    kernel = Kernel(extra_env={"JUPYTER_RUNTIME_DIR": str(tmp_path)})
    try:
        # Horovod's stall inspector reports after 2 s instead of the pool's default 10 s; ranks that cannot leave
        # the stuck collective after the interrupt are restarted after 3 s instead of 10.
        start = "%hvd_start -np 2 --fail-timeout 3 --env HOROVOD_STALL_CHECK_TIME_SECONDS=2"
        r = kernel.run("%load_ext jupyter_hvd\n" + start)
        assert r.status == "ok" and "Pool ready" in r.stdout, r.error_text + r.stderr
        deadline = time.monotonic() + 15
        while horovod == "resting" and "Horovod is resting" not in kernel.run("%hvd_status").stdout:
            assert time.monotonic() < deadline, "the idle pool's Horovod did not rest"
            time.sleep(0.5)
        seen: dict[int, dict[str, Any]] = {}

        def watch_then_interrupt(_res: Any) -> None:
            def go() -> None:
                deadline = time.monotonic() + 45
                while time.monotonic() < deadline:
                    ranks = _ranks()
                    if ranks and ranks[0].get("state") == "stalled":
                        seen.update({rk["rank"]: rk for rk in ranks})
                        break
                    time.sleep(0.2)
                kernel.km.interrupt_kernel()

            threading.Thread(target=go, daemon=True).start()

        # Rank 1 is busy (not in a collective: no mismatch) while rank 0 waits for it in an allreduce.
        r = kernel.run(
            "%%hvd\nimport time\nif rank == 1:\n    time.sleep(60)\nhvd.allreduce(torch.ones(1), name='grad')",
            on_start=watch_then_interrupt,
        )
        assert 0 in seen, f"rank 0 never showed as stalled: {_ranks()}"
        assert "grad" in seen[0]["stalled_on"], seen
        assert seen[1].get("state") != "stalled", seen
        # The interrupt releases both: rank 1 leaves its sleep, rank 0 its allreduce through the join.
        assert r.status == "error" and "Interrupted" in r.error_text, r.error_text

        # The stall ended with the cell: the next write of the state shows the ranks idle, not stalled.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and {rk.get("state") for rk in _ranks()} != {"idle"}:
            time.sleep(0.2)
        assert [rk.get("state") for rk in _ranks()] == ["idle", "idle"]
        assert not any(rk.get("stalled_on") for rk in _ranks())
    finally:
        kernel.shutdown()
