"""Progress bars and loops tell the live view how training goes, as report() does, with no change to the cell.

- tqdm's bars (`tqdm`, `tqdm.auto`, `trange`, PyTorch Lightning's, which are tqdm's): each bar's position, total
  and description give the step, the ETA and the status line; `set_postfix(loss=...)` and `set_postfix_str(...)`
  give metrics, with exact values (not the rounded text of the bar), on every rank (the sidebar's loss column).
- `tqdm.auto` draws a text bar: its notebook widget cannot be shown from an engine (the notebook would say
  "Error displaying widget"), and the live view draws text bars in place.
- A loop `for step in range(N)` (or `for step, batch in enumerate(loader)`) that calls `report(step=step)` gets N
  (or len(loader)) as its total, so the status line has an ETA.

Imported on the engines only. `install()` runs once, from the bootstrap. A hook that fails never breaks the bar:
its records are dropped and the user is told once (engine/cell/report.py).
"""

from __future__ import annotations

import ast
import functools
import linecache
import math
import numbers
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

from ...metrics import parse_line
from .. import outbox
from . import report

_installed = False
_cell: Any = None  # the cell the bars' offsets below belong to
_base: dict[int, float] = {}  # per bar position (nesting level): steps of the bars at that level that ended
_open: dict[int, Any] = {}  # per position, the bar open there


def install() -> None:
    """Hook tqdm (when it is installed): text bars for `tqdm.auto`, and every bar feeds the live view. Idempotent."""
    global _installed
    report.loop_total = loop_total
    try:
        import tqdm
        import tqdm.std
    except ImportError:
        return
    text_bars = types.ModuleType("tqdm.autonotebook", "tqdm.autonotebook, as the engines give it: text bars")
    for name, value in (("tqdm", tqdm.std.tqdm), ("trange", tqdm.std.trange), ("__all__", ["tqdm", "trange"])):
        setattr(text_bars, name, value)
    sys.modules["tqdm.autonotebook"] = text_bars
    setattr(tqdm, "autonotebook", text_bars)  # noqa: B010  (the package's attribute, as an import would set it)
    if _installed:
        return
    bar = tqdm.std.tqdm
    bar.__iter__ = _iterating(bar.__iter__)
    bar.__init__ = _opened(bar.__init__)
    bar.refresh = _refreshed(bar.refresh)
    bar.close = _closed(bar.close)
    bar.reset = _reset(bar.reset)
    bar.set_postfix = _postfix(bar.set_postfix)
    bar.set_postfix_str = _postfix_str(bar.set_postfix_str)
    _installed = True


# ---- tqdm -------------------------------------------------------------------------------------------------------


def _level(bar: Any) -> int:
    global _cell
    cell = outbox.running_cell()
    if cell != _cell:  # offsets count within one cell
        _cell = cell
        _base.clear()
        _open.clear()
    return abs(getattr(bar, "pos", 0) or 0)


def _done(bar: Any) -> float:
    """How far `bar` is: the items it has started (while iterating) or its count (updated by hand)."""
    return max(float(getattr(bar, "n", 0) or 0), float(getattr(bar, "_hvd_started", 0)))


def _step(bar: Any) -> float:
    """The bar's position counted on from the bars before it at its level (a bar per epoch keeps counting)."""
    return _base.get(_level(bar), 0.0) + _done(bar)


def _total(bar: Any) -> int | None:
    total = getattr(bar, "total", None)
    if not isinstance(total, numbers.Real) or not math.isfinite(total) or total <= 0:
        return None
    return int(_base.get(_level(bar), 0.0) + float(total))


def _desc(bar: Any) -> str | None:
    desc = str(getattr(bar, "desc", "") or "").strip().rstrip(":").strip()
    return desc[:80] or None


def _innermost(bar: Any) -> bool:
    """Whether no bar is open below `bar` (the status line follows the innermost bar: the batches, not the epochs)."""
    level = _level(bar)
    return not any(pos > level and other is not bar for pos, other in _open.items())


def _safely(hook: Callable[..., None]) -> Callable[..., None]:
    @functools.wraps(hook)
    def safe(*args: Any, **kwargs: Any) -> None:
        try:
            hook(*args, **kwargs)
        except Exception as exc:  # the user's bar must go on whatever happens here
            report.dropped(exc)

    return safe


@_safely
def _progress(bar: Any, metrics: dict[str, Any] | None = None) -> None:
    """One record: the bar's step, total and description, with `metrics` (from set_postfix) when given."""
    if not metrics and not _innermost(bar):
        return
    report.progress(_step(bar), _total(bar), _desc(bar), metrics or {})


def _iterating(real: Callable[..., Iterator[Any]]) -> Callable[..., Iterator[Any]]:
    @functools.wraps(real)
    def __iter__(self: Any) -> Iterator[Any]:
        # tqdm counts an item once it is done, and updates `n` only when it redraws: count the items started here,
        # so set_postfix() inside the loop gives the step it is at.
        start = float(getattr(self, "n", 0) or 0)
        for i, item in enumerate(real(self), 1):
            self._hvd_started = start + i
            yield item

    return __iter__


def _opened(real: Callable[..., None]) -> Callable[..., None]:
    @functools.wraps(real)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        real(self, *args, **kwargs)
        _register(self)

    return __init__


@_safely
def _register(bar: Any) -> None:
    _open[_level(bar)] = bar


def _refreshed(real: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(real)
    def refresh(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = real(self, *args, **kwargs)
        if not getattr(self, "_hvd_quiet", False):
            _progress(self)
        return out

    return refresh


def _closed(real: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(real)
    def close(self: Any) -> Any:
        if not getattr(self, "_hvd_closed", False):
            self._hvd_closed = True
            _ended(self)
        return real(self)

    return close


@_safely
def _ended(bar: Any) -> None:
    """A bar ends: its last position is said once more, and the next bar at its level counts on from it."""
    level = _level(bar)
    if _done(bar):
        report.progress(_step(bar), _total(bar), _desc(bar), {})
    _base[level] = _base.get(level, 0.0) + _done(bar)
    if _open.get(level) is bar:
        del _open[level]


def _reset(real: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(real)
    def reset(self: Any, *args: Any, **kwargs: Any) -> Any:
        _restarted(self)  # Lightning reuses one bar for every epoch
        return real(self, *args, **kwargs)

    return reset


@_safely
def _restarted(bar: Any) -> None:
    level = _level(bar)
    _base[level] = _base.get(level, 0.0) + _done(bar)
    bar._hvd_started = 0


def _postfix(real: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(real)
    def set_postfix(self: Any, ordered_dict: Any = None, refresh: bool = True, **kwargs: Any) -> Any:
        self._hvd_quiet = True  # its refresh sends no record of its own: this one carries the step
        try:
            out = real(self, ordered_dict, refresh, **kwargs)
        finally:
            self._hvd_quiet = False
        values = dict(ordered_dict or {})
        values.update(kwargs)
        _progress(self, _numbers(values))
        return out

    return set_postfix


def _postfix_str(real: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(real)
    def set_postfix_str(self: Any, s: str = "", refresh: bool = True) -> Any:
        self._hvd_quiet = True
        try:
            out = real(self, s, refresh)
        finally:
            self._hvd_quiet = False
        _progress(self, dict(parse_line(str(s)).values))
        return out

    return set_postfix_str


def _numbers(values: dict[str, Any]) -> dict[str, Any]:
    """The values of a postfix that are numbers: numbers, one-element tensors and arrays, and numeric strings."""
    out: dict[str, Any] = {}
    for name, value in values.items():
        if isinstance(value, str):
            try:
                out[str(name)] = float(value.strip().rstrip("%"))
            except ValueError:
                continue
        elif isinstance(value, numbers.Real) and not isinstance(value, bool):
            out[str(name)] = value
        elif getattr(value, "numel", None) is not None and value.numel() == 1:
            out[str(name)] = value  # a tensor: report() reads it (a CUDA one on its publishing thread)
        elif getattr(value, "size", None) == 1 and hasattr(value, "item"):
            out[str(name)] = value
    return out


# ---- loops with report(step=...) ------------------------------------------------------------------------------

_totals: dict[tuple[Any, int, Any], int | None] = {}  # (code, line, cell) -> the loop's total


def loop_total(frame: types.FrameType | None) -> int | None:
    """The total steps of the loop around a `report(step=NAME)` call in `frame`: `for NAME in range(...)` gives the
    range's end, `for NAME, x in enumerate(X)` gives len(X); None when the loop is not one of these. Once per call
    site and cell (the loop's bounds are read once, from the cell's own source)."""
    if frame is None:
        return None
    key = (frame.f_code, frame.f_lineno, outbox.running_cell())
    if key not in _totals:
        if len(_totals) > 256:
            _totals.clear()
        try:
            _totals[key] = _find_total(frame)
        except Exception:  # a loop we cannot read gives no ETA, nothing worse
            _totals[key] = None
    return _totals[key]


def _find_total(frame: types.FrameType) -> int | None:
    lines = linecache.getlines(frame.f_code.co_filename)
    if not lines:
        return None
    tree = ast.parse("".join(lines))
    line = frame.f_lineno
    name = None
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.lineno <= line <= (node.end_lineno or node.lineno):
            for kw in node.keywords:
                if kw.arg == "step" and isinstance(kw.value, ast.Name):
                    name = kw.value.id
    if name is None:
        return None
    loops = [
        n
        for n in ast.walk(tree)
        if isinstance(n, (ast.For, ast.AsyncFor)) and n.lineno <= line <= (n.end_lineno or n.lineno)
    ]
    for loop in sorted(loops, key=lambda n: -n.lineno):  # the innermost loop that sets the step
        target, it = loop.target, loop.iter
        if isinstance(target, ast.Name) and target.id == name and _call_of(it, "range"):
            args = [_value(a, frame) for a in it.args]  # type: ignore[attr-defined]
            if len(args) == 1:
                return int(args[0]) if args[0] > 0 else None
            span = range(*[int(a) for a in args])
            return int(span[-1]) + 1 if len(span) and span.step > 0 else None
        if (
            isinstance(target, ast.Tuple)
            and target.elts
            and isinstance(target.elts[0], ast.Name)
            and target.elts[0].id == name
            and _call_of(it, "enumerate")
            and it.args  # type: ignore[attr-defined]
        ):
            start = _value(it.args[1], frame) if len(it.args) > 1 else 0  # type: ignore[attr-defined]
            return len(_value(it.args[0], frame)) + int(start)  # type: ignore[attr-defined]
        if isinstance(target, ast.Name) and target.id == name:
            return None  # the step comes from another kind of loop
    return None


def _call_of(node: ast.expr, function: str) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == function


# Only names, attributes, constants, arithmetic and len(): reading a loop's bounds must not run the user's code.
_SAFE = (ast.Name, ast.Attribute, ast.Constant, ast.BinOp, ast.UnaryOp, ast.operator, ast.unaryop, ast.Load)


def _value(node: ast.expr, frame: types.FrameType) -> Any:
    for part in ast.walk(node):
        if isinstance(part, ast.Call):
            if not (_call_of(part, "len") and len(part.args) == 1):
                raise ValueError("a call in the loop's bounds")
        elif not isinstance(part, (*_SAFE, ast.Call)):
            raise ValueError(f"{type(part).__name__} in the loop's bounds")
    code = compile(ast.Expression(node), "<loop bounds>", "eval")
    return eval(code, frame.f_globals, {**frame.f_locals, "len": len})  # checked above: names, arithmetic, len()
