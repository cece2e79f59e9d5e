"""`%hvd_export PATH`: the notebook's training as a script for `mpirun -np N python PATH`, and with `--sbatch` a SLURM
batch script for it.

The script is the engines' prelude (jupyter_hvd/engine/prelude.py, copied in verbatim, so the names cells use mean
the same there), then the setup journal (setup cells, and pushed values loaded from a file beside the script), then
the pool's other successful `%%hvd` cells in the order they ran. User code is written as it ran; IPython lines
become their plain Python where there is one (`%time X` runs X, `!cmd` runs cmd in a shell, `%env K=V` sets
os.environ), and what has none is left as a comment, named in the script's header and in the magic's output. The
pool's environment (`--env`, Horovod's options) goes into the launch line and the batch script. Only rank 0 prints,
as the notebook showed only rank 0's output.

Runs in the user's kernel.
"""

from __future__ import annotations

import ast
import os
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cloudpickle

from .. import wire
from . import slurm, transfer
from .keep import Cell, Keeper, Push
from .options import HvdPool

PRELUDE = Path(__file__).resolve().parents[1] / "engine" / "prelude.py"  # read as text: the kernel runs no engine code
SIDECAR = ".pushed.pkl"  # beside the script: train.py -> train.pushed.pkl


@dataclass
class Script:
    """An exported script: its text, the pushed values that go beside it, and what could not be exported."""

    text: str
    pushed: list[dict[str, Any]] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)  # "cell [7] line 2: %pip install x"


def prelude_source() -> str:
    """The source of the engines' `prelude()` function, verbatim."""
    text = PRELUDE.read_text()
    function = next(n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef) and n.name == "prelude")
    return ast.get_source_segment(text, function) or ""


def launch_line(options: HvdPool, script_path: str) -> str:
    """How the pool's ranks are started, for the script: mpirun with the pool's rank count and environment."""
    env = options.horovod_env()
    exports = " ".join(f"-x {shlex.quote(f'{k}={v}')}" for k, v in env.items())
    return f"mpirun -np {options.np or 2} {exports + ' ' if exports else ''}python {shlex.quote(script_path)}"


def torchrun_line(options: HvdPool, script_path: str) -> str:
    """The same for torchrun (a torch.distributed pool whose cells do not use Horovod)."""
    env = " ".join(shlex.quote(f"{k}={v}") for k, v in options.env.items())
    return f"{env + ' ' if env else ''}torchrun --nproc-per-node {options.np or 2} {shlex.quote(script_path)}"


def script(
    keeper: Keeper, options: HvdPool, script_path: str, notebook: str = "", torch_distributed: bool = False
) -> Script:
    """The exported script for `script_path` (`torch_distributed`: the pool had a torch.distributed process group)."""
    out = Script("")
    body: list[str] = []
    for entry in [*keeper.journal, *(c for c in keeper.cells if not c.setup)]:
        if isinstance(entry, Push):
            body += ["", _heading("push", entry.count), *_push(entry, out)]
        else:
            body += ["", _heading("setup cell" if entry.setup else "cell", entry.count), *_cell(entry, out), ""]
    cells = len(keeper.journal) + sum(not c.setup for c in keeper.cells)
    lines = [
        "#!/usr/bin/env python",
        f"# Exported by jupyter-hvd {time.strftime('%Y-%m-%d %H:%M')}"
        + (f" from {notebook}" if notebook else "")
        + f": {cells} entries, as they ran (the setup journal first).",
        f"# Run it as the pool ran:   {launch_line(options, script_path)}",
    ]
    if torch_distributed:
        lines.append(f"#   or, without Horovod:   {torchrun_line(options, script_path)}")
    if out.left_out:
        lines.append("# Not exported (they need IPython; left as comments below):")
        lines += [f"#   {what}" for what in out.left_out]
    lines += [
        "",
        "import os",
        "import pickle",
        "import subprocess",
        "import sys",
        "",
        "from typing import Any",
        "",
        "",
        prelude_source(),
        "",
        "",
        f"globals().update(prelude({'cpu' if options.cpu else 'auto'!r}, torch_distributed={torch_distributed}))",
        "if rank != 0:  # the notebook showed rank 0's output only",
        "    sys.stdout = open(os.devnull, 'w')",
    ]
    if out.pushed:
        lines += [
            "# Values pushed from the notebook (%hvd_push), in the file beside this script.",
            f"with open(os.path.splitext(os.path.abspath(__file__))[0] + {SIDECAR!r}, 'rb') as _f:",
            "    _PUSHED = pickle.load(_f)",
        ]
    out.text = "\n".join(lines + body) + "\n"
    return out


def _heading(kind: str, count: int | None) -> str:
    number = f" [{count}]" if count is not None else ""
    return f"# ---- {kind}{number} " + "-" * max(4, 100 - len(kind) - len(number))


def _push(entry: Push, out: Script) -> list[str]:
    """Bind the pushed values, from the file beside the script."""
    out.pushed.append({"names": entry.names, "file": entry.file})
    return [f"globals().update(_PUSHED[{len(out.pushed) - 1}])  # %hvd_push {' '.join(entry.names)}"]


def _cell(cell: Cell, out: Script) -> list[str]:
    """The cell's code as it ran, with IPython's calls turned into plain Python where there is an equivalent."""
    lines = cell.source.rstrip().splitlines()
    try:
        tree = ast.parse(cell.source)
    except SyntaxError:
        return lines
    edits: list[tuple[int, int, list[str]]] = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Expr, ast.Assign)) or not _ipython_call(node.value):
            continue
        first = lines[node.lineno - 1]
        indent = first[: len(first) - len(first.lstrip())]
        target = ast.get_source_segment(cell.source, node.targets[0]) if isinstance(node, ast.Assign) else None
        plain = _plain(node.value, target)
        if plain is None:
            out.left_out.append(f"cell [{cell.count}] line {node.lineno}: {_as_typed(node.value)}")
            plain = [f"pass  # not exported (needs IPython): {_as_typed(node.value)}"]
        edits.append((node.lineno, node.end_lineno or node.lineno, [indent + ln if ln.strip() else ln for ln in plain]))
    for start, end, new in sorted(edits, reverse=True):
        lines[start - 1 : end] = new
    return lines


def _ipython_call(value: ast.AST) -> bool:
    """`get_ipython().<method>(...)`: what IPython's transforms make of a %magic, a %%magic or a !command."""
    return (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Attribute)
        and isinstance(value.func.value, ast.Call)
        and isinstance(value.func.value.func, ast.Name)
        and value.func.value.func.id == "get_ipython"
    )


def _literal_args(call: ast.Call) -> list[str] | None:
    try:
        return [ast.literal_eval(a) for a in call.args]
    except ValueError:
        return None


def _as_typed(call: ast.Call) -> str:
    """The line as the user typed it: %name args, %%name, !cmd."""
    args = _literal_args(call) or []
    method = call.func.attr  # type: ignore[attr-defined]
    if method == "run_line_magic" and len(args) >= 2:
        return f"%{args[0]} {args[1]}".rstrip()
    if method == "run_cell_magic" and args:
        return f"%%{args[0]} {args[1] if len(args) > 1 else ''}".rstrip()
    if method in ("system", "getoutput") and args:
        return f"!{args[0]}"
    return ast.unparse(call)


def _plain(call: ast.Call, target: str | None) -> list[str] | None:
    """Plain Python for one IPython call (assigned to `target`, if it was), or None where there is none."""
    args = _literal_args(call)
    method = call.func.attr  # type: ignore[attr-defined]
    if args is None:
        return None
    assign = f"{target} = " if target else ""
    if method == "run_line_magic" and len(args) >= 2:
        name, line = args[0], args[1]
        if name in ("time", "timeit") and line.strip():
            code = line.strip().splitlines()
            try:
                tree = ast.parse(line.strip())
            except SyntaxError:
                return None
            if assign and (len(tree.body) != 1 or not isinstance(tree.body[0], ast.Expr)):
                return None
            note = ["# %timeit: run once here"] if name == "timeit" else []
            return note + ([assign + code[0], *code[1:]] if assign else code)
        if name == "env" and not assign:
            key, _, value = line.strip().partition("=") if "=" in line else line.strip().partition(" ")
            if key and value:
                return [f"os.environ[{key.strip()!r}] = {value.strip()!r}"]
        return None
    if method == "run_cell_magic" and len(args) >= 3 and args[0] in ("time", "timeit") and not assign:
        return args[2].rstrip().splitlines() or ["pass"]
    if method == "system" and args and not assign:
        return [f"subprocess.run({_shell(args[0])}, shell=True, check=False)"]
    if method == "getoutput" and args:
        run = f"subprocess.run({_shell(args[0])}, shell=True, capture_output=True, text=True)"
        return [f"{assign}{run}.stdout.splitlines()"]
    return None


def _shell(command: str) -> str:
    """A shell command as IPython runs it: `{expr}` takes a Python value (an f-string); `$NAME` is left to the shell
    (IPython would take a Python variable of that name first: rare, and not knowable here)."""
    return ("f" + repr(command)) if "{" in command else repr(command)


def sbatch(options: HvdPool, script_path: Path) -> str:
    """A SLURM batch script that runs the exported script with the pool's SLURM options, rank count and
    environment."""
    np = options.np or 2
    lines = [
        "#!/bin/sh",
        "#SBATCH --job-name=jupyter-hvd-export",
        *slurm.resource_lines(options, options.nodes or 1, np),
        "",
    ]
    lines += [f"export {k}={shlex.quote(v)}" for k, v in options.horovod_env().items()]
    lines += ["", launch_line(options, str(script_path)), ""]
    return "\n".join(lines)


def write(
    path: str,
    keeper: Keeper,
    options: HvdPool,
    with_sbatch: bool,
    pushed: Path,
    notebook: str = "",
    torch_distributed: bool = False,
) -> tuple[list[Path], list[str]]:
    """Write the script (the pushed values beside it, and the batch script, PATH with .sbatch); the paths written,
    and what could not be exported. `pushed`: the pool's folder of pushed values."""
    target = Path(path).expanduser()
    exported = script(keeper, options, str(target), notebook, torch_distributed)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(exported.text)
    os.chmod(target, 0o755)
    written = [target]
    if exported.pushed:
        values = []
        for push in exported.pushed:
            payload = transfer.load(pushed / push["file"])
            rebuilt, at = {}, 0
            for name, header, count in zip(payload.names, payload.headers, payload.counts, strict=True):
                rebuilt[name] = wire.loads(header, payload.buffers[at : at + count])
                at += count
            values.append(rebuilt)
        sidecar = target.with_name(target.stem + SIDECAR)
        sidecar.write_bytes(cloudpickle.dumps(values))
        written.append(sidecar)
    if with_sbatch:
        batch = target.with_suffix(".sbatch")
        batch.write_text(sbatch(options, target))
        written.append(batch)
    return written, exported.left_out
