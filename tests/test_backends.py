"""The backend seam's pure logic: how a pool with Horovod and torch.distributed combines them (engine/backend.py),
and what the kernel makes of the ranks' rows (kernel/launch/backends.py). Real pools with each backend are tested in
tests/test_horovod_in_cells.py and tests/test_torch_distributed.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from jupyter_hvd.engine import backend
from jupyter_hvd.kernel.launch.backends import Backends


class Fake:
    """A backend as engine/backend.py's Protocol describes it, answering what it is told to."""

    def __init__(self, name: str, rest: dict[str, Any], leave: dict[str, Any], row: dict[str, Any]) -> None:
        self.name = name
        self._rest, self._leave, self._row = rest, leave, row
        self.calls: list[str] = []

    def install(self, device: Any) -> None:
        self.calls.append("install")

    def ops(self, cuda: bool) -> str:
        return f"{self.name}-ops"

    def row(self) -> dict[str, Any]:
        return dict(self._row)

    def ready(self, cuda: bool) -> None:
        self.calls.append("ready")

    def begin_cell(self) -> float:
        self.calls.append("begin_cell")
        return 0.25

    def rest(self) -> dict[str, Any]:
        self.calls.append("rest")
        return dict(self._rest)

    def leave_collectives(self) -> dict[str, Any]:
        self.calls.append("leave")
        return dict(self._leave)

    def decline(self, agreeing_at: int | None, owed: tuple[tuple[int, int, str], ...]) -> dict[str, Any]:
        self.calls.append("decline")
        return {"ok": True, "in_flight": 0, "entered": 7 if self.name == "dist" else -1}

    def average(self, local: Any, name: str) -> Any:
        return (self.name, local, name)


@pytest.fixture(autouse=True)
def no_backends() -> Iterator[None]:
    yield
    backend.choose([])


def horovod(**kw: Any) -> Fake:
    rest = kw.get("rest", {"resting": True, "busy": "", "seconds": 0.1})
    leave = kw.get("leave", {"ok": True, "in_flight": 1, "seconds": 0.1})
    return Fake("hvd", rest, leave, {"controller": "MPI", "cross_rank": 3, "horovod": True, "warning": ""})


def torch_distributed(**kw: Any) -> Fake:
    rest = kw.get("rest", {"resting": False, "busy": "", "seconds": 0.0})
    leave = kw.get("leave", {"ok": True, "in_flight": 0, "seconds": 0.0})
    return Fake("dist", rest, leave, {"controller": "torch", "cross_rank": 0, "horovod": False, "warning": ""})


def test_a_pool_with_both_backends_has_horovods_row_and_both_ops() -> None:
    backend.choose([horovod(), torch_distributed()])
    assert backend.row() == {"controller": "MPI", "cross_rank": 3, "horovod": True, "warning": ""}
    assert backend.ops(False) == "hvd-ops + dist-ops"
    assert backend.average(1.0, "m")[0] == "hvd"  # users' averages go through Horovod where it is there
    assert backend.begin_cell() == 0.5


def test_a_pool_rests_as_a_whole_or_not_at_all() -> None:
    backend.choose([horovod(), torch_distributed()])
    assert backend.rest()["resting"] is True
    busy = {"resting": False, "busy": "a thread of this rank still uses Horovod", "seconds": 0.0}
    backend.choose([horovod(rest=busy), torch_distributed()])
    assert backend.rest()["busy"] == busy["busy"]


def test_a_failed_join_is_what_the_kernel_hears_and_in_flight_ops_add_up() -> None:
    first, second = horovod(), torch_distributed(leave={"ok": True, "in_flight": 2, "seconds": 0.0})
    backend.choose([first, second])
    assert backend.leave_collectives()["in_flight"] == 3
    failed = {"ok": False, "error": {"ename": "HorovodInternalError"}}
    first, second = horovod(leave=failed), torch_distributed()
    backend.choose([first, second])
    assert backend.leave_collectives() == failed
    assert second.calls == []  # the first failure ends the join on this rank


def test_a_decline_asks_every_backend_and_says_the_collectives_entered() -> None:
    first, second = horovod(), torch_distributed()
    backend.choose([first, second])
    assert backend.decline(3, ())["entered"] == 7  # torch.distributed's count, which the kernel compares across ranks
    assert first.calls == second.calls == ["decline"]


def test_a_rank_without_a_backend_says_so() -> None:
    with pytest.raises(RuntimeError, match="no collective library"):
        backend.first()


def test_the_kernel_reads_the_backends_once_from_the_rows() -> None:
    rows = [{"horovod": True, "tensor_ops": "MPI + torch/Gloo"}, {"horovod": True, "tensor_ops": "MPI + torch/Gloo"}]
    both = Backends.of(rows, asked_torch_distributed=True)
    assert both.initialised() == "Horovod and torch.distributed (Gloo) initialised"
    assert both.can_rest() and both.may_strand() and not both.timeline_missing()
    alone = Backends.of([{"horovod": False, "tensor_ops": "torch/Gloo"}], asked_torch_distributed=False)
    assert alone.torch_distributed and not alone.can_rest()  # no Horovod: torch.distributed though not asked for
    assert "use --profile" in alone.timeline_missing()
    assert Backends.of(rows[:1], asked_torch_distributed=False).initialised() == "Horovod initialised"
