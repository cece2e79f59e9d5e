"""Ranks waiting in a collective that their peers never join show as 'stalled' (with the tensor they wait on) in
the pool's state, which the sidebar shows; the stall ends with the cell."""

from __future__ import annotations

import threading
import time
from typing import Any

from conftest import Kernel

from jupyter_hvd import state


def _ranks() -> list[dict[str, Any]]:
    pools = state.list_pools()
    return pools[0]["ranks"] if pools else []


def test_mismatched_allreduce_shows_both_ranks_stalled(tmp_path, monkeypatch):
    monkeypatch.setenv("JUPYTER_HVD_STATE_DIR", str(tmp_path))
    kernel = Kernel(extra_env={"JUPYTER_HVD_STATE_DIR": str(tmp_path)})
    try:
        # Horovod's stall inspector reports after 2 s instead of the pool's default 10 s; ranks that cannot leave
        # the stuck collective after the interrupt are restarted after 3 s instead of 10.
        start = "%hvd_start -np 2 --fail-timeout 3 --env HOROVOD_STALL_CHECK_TIME_SECONDS=2"
        r = kernel.run("%load_ext jupyter_hvd\n" + start)
        assert r.status == "ok" and "Pool ready" in r.stdout, r.error_text + r.stderr
        seen: dict[int, dict[str, Any]] = {}

        def watch_then_interrupt(_res: Any) -> None:
            def go() -> None:
                deadline = time.monotonic() + 45
                while time.monotonic() < deadline:
                    ranks = _ranks()
                    if ranks and all(rk.get("state") == "stalled" for rk in ranks):
                        seen.update({rk["rank"]: rk for rk in ranks})
                        break
                    time.sleep(0.2)
                kernel.km.interrupt_kernel()

            threading.Thread(target=go, daemon=True).start()

        # Each rank names its tensor after itself: neither name is ever submitted by the other rank.
        r = kernel.run("%%hvd\nhvd.allreduce(torch.ones(1), name=f'grad_of_rank{rank}')", on_start=watch_then_interrupt)
        assert sorted(seen) == [0, 1], f"the ranks never showed as stalled: {_ranks()}"
        assert "grad_of_rank0" in seen[0]["stalled_on"], seen
        assert "grad_of_rank1" in seen[1]["stalled_on"], seen
        # Neither rank can leave a collective that the other never joins: the interrupt ends in a restart.
        assert r.status == "error" and "restarted" in r.error_text, r.error_text

        # The stall ended with the cell: the next write of the state shows the ranks idle, not stalled.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and {rk.get("state") for rk in _ranks()} != {"idle"}:
            time.sleep(0.2)
        assert [rk.get("state") for rk in _ranks()] == ["idle", "idle"]
        assert not any(rk.get("stalled_on") for rk in _ranks())
    finally:
        kernel.shutdown()
