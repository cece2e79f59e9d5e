"""The view of a cell the user did not type (a setup replay, a restore): nothing shown."""

from __future__ import annotations

from typing import Any

from ..digest import Chunk


class QuietView:
    """The CellView of a cell the user did not type (a setup replay, a restore): what it prints, displays or reports
    is kept, not shown, so a replay can never fail for what the cell does with its output."""

    def __init__(self) -> None:
        self.text: list[str] = []  # rank 0's output, for a message that says why the cell failed
        self.displays = 0

    def output(self, chunk: Chunk) -> None:
        if chunk.rank == 0:
            self.text.append(chunk.text)

    def metrics(self, rank: int, records: Any) -> None:
        pass

    def nonfinite(self, message: str) -> None:
        pass

    def straggler(self, message: str | None) -> None:
        pass

    def display(self, rank: int, data: dict[str, Any], metadata: dict[str, Any]) -> None:
        self.displays += 1

    def activity(self, text: str | None) -> None:
        pass

    def tick(self) -> None:
        pass

    def close(self, ok: bool) -> None:
        pass
