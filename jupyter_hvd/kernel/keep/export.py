"""`%hvd_export PATH`: the notebook's training as a script for `mpirun -np N python PATH`, and with `--sbatch` a SLURM
batch script for it.

The script is the engines' prelude (jupyter_hvd/prelude.py, copied in verbatim, so the names cells use mean
the same there), then the setup journal (setup cells, and pushed values loaded from a file beside the script), then
the pool's other successful `%%hvd` cells in the order they ran. User code is written as it ran; IPython lines
become their plain Python where there is one (`%time X` runs X, `!cmd` runs cmd in a shell exactly as typed, or
with IPython's `{expression}`/`$name` expansion where IPython would expand it, `%env K=V` sets os.environ), and what
has none is left as a comment, named in the script's header and in the magic's output. The pool's environment
(`--env`, Horovod's options) goes into the launch line and the batch script, shell-quoted; what cannot be written
safely there is refused with a PoolError that says what to change. Text from the notebook that lands in a comment
(its name, left-out lines) is kept on the comment's line. Only rank 0 prints, as the notebook showed only rank 0's
output.

Runs in the user's kernel.
"""

from __future__ import annotations

import ast
import inspect
import os
import re
import shlex
import string
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cloudpickle

from ... import wire
from ...prelude import prelude
from .. import transfer
from ..errors import PoolError
from ..launch import slurm
from ..launch.options import HvdPool
from .journal import Cell, Keeper, Push

SIDECAR = ".pushed.pkl"  # beside the script: train.py -> train.pushed.pkl
SHELL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # what `export NAME=...` and `NAME=... cmd` take as a name


@dataclass
class Script:
    """An exported script: its text, the pushed values that go beside it, and what could not be exported."""

    text: str
    pushed: list[dict[str, Any]] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)  # "cell [7] line 2: %pip install x"
    expands: bool = False  # a `!` command takes Python values, so the script needs _expand()


def prelude_source() -> str:
    """The source of the engines' `prelude()` function, verbatim."""
    return inspect.getsource(prelude)


def launch_line(options: HvdPool, script_path: str) -> str:
    """How the pool's ranks are started, for the script: mpirun with the pool's rank count and environment, every
    value shell-quoted (a shell runs this line as written, whatever the values hold)."""
    env = options.horovod_env()
    exports = " ".join(f"-x {shlex.quote(f'{k}={v}')}" for k, v in env.items())
    return f"mpirun -np {options.np or 2} {exports + ' ' if exports else ''}python {shlex.quote(script_path)}"


def torchrun_line(options: HvdPool, script_path: str) -> str:
    """The same for torchrun (a torch.distributed pool whose cells do not use Horovod): `NAME=value torchrun ...`,
    or `env 'name=value' torchrun ...` where a name is not one the shell can assign."""
    pairs = options.env.items()
    if all(SHELL_NAME.fullmatch(k) for k in options.env):
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in pairs)  # quoting `NAME=v` whole would make it a command
    else:
        env = " ".join(["env", *(shlex.quote(f"{k}={v}") for k, v in pairs)])
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
        + (f" from {_comment(notebook)}" if notebook else "")
        + f": {cells} entries, as they ran (the setup journal first).",
        f"# Run it as the pool ran:   {_comment(launch_line(options, script_path))}",
    ]
    if torch_distributed:
        lines.append(f"#   or, without Horovod:   {_comment(torchrun_line(options, script_path))}")
    if out.left_out:
        lines.append("# Not exported (they need IPython; left as comments below):")
        lines += [f"#   {what}" for what in out.left_out]
    lines += [
        "",
        "import os",
        "import pickle",
        *(["import re"] if out.expands else []),
        *(["import string"] if out.expands else []),
        "import subprocess",
        "import sys",
        "",
        "from typing import Any",
        "",
        "",
        prelude_source(),
        "",
        "",
    ]
    if out.expands:
        lines += [inspect.getsource(_dollar_fields), "", inspect.getsource(_expand), ""]
    lines += [
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


def _comment(text: str) -> str:
    """`text` to put in a `#` comment of the script: kept on the comment's line."""
    # What is not printable (line breaks, \r, \x00, \u2028, terminal escapes) is written as its backslash escape.
    return "".join(c if c.isprintable() or c == " " else ascii(c)[1:-1] for c in text)


def _lines(source: str) -> list[str]:
    """`source` split where Python ends its lines (str.splitlines also splits at form feeds, U+2028 and other
    characters that may sit inside a string literal)."""
    text = source.rstrip().replace("\r\n", "\n").replace("\r", "\n")
    return text.split("\n") if text else []


def _heading(kind: str, count: int | None) -> str:
    number = f" [{count}]" if count is not None else ""
    return _comment(f"# ---- {kind}{number} " + "-" * max(4, 100 - len(kind) - len(number)))


def _push(entry: Push, out: Script) -> list[str]:
    """Bind the pushed values, from the file beside the script."""
    out.pushed.append({"names": entry.names, "file": entry.file})
    return [f"globals().update(_PUSHED[{len(out.pushed) - 1}])  # %hvd_push {_comment(' '.join(entry.names))}"]


def _cell(cell: Cell, out: Script) -> list[str]:
    """The cell's code as it ran, with IPython's calls turned into plain Python where there is an equivalent."""
    lines = _lines(cell.source)
    try:
        tree = ast.parse(cell.source)
    except SyntaxError:
        return lines
    edits: list[tuple[int, int, list[str]]] = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Expr, ast.Assign)) or not isinstance(node.value, ast.Call):
            continue
        if not _ipython_call(node.value):
            continue
        first = lines[node.lineno - 1]
        indent = first[: len(first) - len(first.lstrip())]
        target = ast.get_source_segment(cell.source, node.targets[0]) if isinstance(node, ast.Assign) else None
        plain = _plain(node.value, target, out)
        if plain is None:
            typed = _comment(_as_typed(node.value))
            out.left_out.append(f"cell [{cell.count}] line {node.lineno}: {typed}")
            plain = [f"pass  # not exported (needs IPython): {typed}"]
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


def _plain(call: ast.Call, target: str | None, out: Script) -> list[str] | None:
    """Plain Python for one IPython call (assigned to `target`, if it was), or None where there is none."""
    args = _literal_args(call)
    method = call.func.attr  # type: ignore[attr-defined]
    if args is None:
        return None
    assign = f"{target} = " if target else ""
    if method == "run_line_magic" and len(args) >= 2:
        name, line = args[0], args[1]
        if name in ("time", "timeit") and line.strip():
            code = _lines(line.strip())
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
        return _lines(args[2]) or ["pass"]
    if method == "system" and args and not assign:
        return [f"subprocess.run({_shell(args[0], out)}, shell=True, check=False)"]
    if method == "getoutput" and args:
        # IPython's `x = !cmd` gives the lines of stdout and stderr together.
        run = f"subprocess.run({_shell(args[0], out)}, shell=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT"
        return [f"{assign}{run}, text=True).stdout.splitlines()"]
    return None


def _shell(command: str, out: Script) -> str:
    """The command a `!` line runs, as Python source: its text exactly, or `_expand(text)` where it names Python
    values (`{expression}`, `$name`) that IPython fills in when the cell runs."""
    try:
        fields = _dollar_fields(command)
    except ValueError:  # a lone { or }: IPython runs the command as written
        return repr(command)
    expressions = [f"{name}:{spec}" if spec else name for _, name, spec, _ in fields if name is not None]
    if not expressions:
        return repr("".join(text for text, *_ in fields))  # only the escapes {{ }} $$, which IPython undoes
    try:
        for expression in expressions:
            compile(expression, "<!command>", "eval")
    except (SyntaxError, ValueError):  # awk '{print $1}': IPython cannot evaluate it, and runs the command as written
        return repr(command)
    out.expands = True
    return f"_expand({command!r})"


def _dollar_fields(command: str) -> list[tuple[str, str | None, str | None, str | None]]:
    """A `!` command read as IPython reads it (its DollarFormatter): (text, expression, format, conversion) for each
    `{expression}` and `$name`, `{{`, `}}` and `$$` as escapes, a `$name` inside single quotes left to the shell;
    ValueError for a lone brace."""
    dollar = re.compile(r"(.*?)\$(\$?[\w\.]+)(?=([^']*'[^']*')*[^']*$)")
    fields: list[tuple[str, str | None, str | None, str | None]] = []
    for text, name, spec, conversion in string.Formatter().parse(command):
        kept, end = "", 0
        for match in dollar.finditer(text):
            before, word = match.group(1, 2)
            if word.startswith("$"):
                kept += before + word
            else:
                fields.append((kept + before, word, "", None))
                kept = ""
            end = match.end()
        fields.append((kept + text[end:], name, spec, conversion))
    return fields


def _expand(command: str) -> str:
    """`command` with its `{expression}` and `$name` replaced by their values where the `!` line runs, as IPython
    does; where any of them cannot be evaluated (a name not defined, `${HOME}`), the command as written."""
    frame = sys._getframe(1)
    names = {**frame.f_globals, **frame.f_locals}
    parts = []
    try:
        for text, name, spec, conversion in _dollar_fields(command):
            parts.append(text)
            if name is not None:
                value = eval(f"{name}:{spec}" if spec else name, names)
                parts.append(format(string.Formatter().convert_field(value, conversion), ""))
    except Exception:  # IPython's rule: any failure leaves the whole command to the shell as typed
        return command
    return "".join(parts)


def sbatch(options: HvdPool, script_path: Path) -> str:
    """A SLURM batch script that runs the exported script with the pool's SLURM options, rank count and
    environment; PoolError for a value it cannot write as it is (an --env name that is not a shell name, a SLURM
    option that sbatch would read otherwise)."""
    np = options.np or 2
    lines = [
        "#!/bin/sh",
        "#SBATCH --job-name=jupyter-hvd-export",
        *slurm.resource_lines(options, options.nodes or 1, np, _sbatch_word),
        "",
    ]
    lines += [f"export {_shell_name(k)}={shlex.quote(v)}" for k, v in options.horovod_env().items()]
    lines += ["", launch_line(options, str(script_path)), ""]
    return "\n".join(lines)


def _sbatch_word(value: str) -> str:
    """A SLURM option the user typed, for an `#SBATCH` line: as it is, or PoolError where sbatch would misread it."""
    # sbatch reads #SBATCH lines with its own quoting, not the shell's (a backslash escapes even inside quotes).
    if value == shlex.quote(value):
        return value
    raise PoolError(
        f"The SLURM option {value!r} cannot go into the batch script's #SBATCH lines: sbatch would read it "
        "differently (only letters, digits and @%+=:,./- are written as they are).",
        "Export without --sbatch (the script and its mpirun line take it), or start the pool with a plain value: "
        "%hvd_stop, then %hvd_start ... --partition NAME --time 1:00:00",
    )


def _shell_name(key: str) -> str:
    """An --env name for `export NAME=...`: as it is, or PoolError where the shell cannot take it as a name."""
    if SHELL_NAME.fullmatch(key):
        return key
    raise PoolError(
        f"--env {key!r}: the batch script cannot export it, as it is not a shell variable name (letters, digits "
        "and _, not starting with a digit).",
        "Export without --sbatch (mpirun -x takes the name as it is), or start the pool with a name the shell "
        "takes: %hvd_stop, then %hvd_start ... --env NAME=VALUE",
    )


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
    batch = sbatch(options, target) if with_sbatch else ""  # first: what it refuses leaves nothing written
    exported = script(keeper, options, str(target), notebook, torch_distributed)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(exported.text, encoding="utf-8")  # Python reads its source as UTF-8 whatever the locale
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
        batch_path = target.with_suffix(".sbatch")
        batch_path.write_text(batch, encoding="utf-8")
        written.append(batch_path)
    return written, exported.left_out
