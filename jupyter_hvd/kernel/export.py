"""`%hvd_export PATH`: the notebook's training as a script for `mpirun -np N python PATH` (or `horovodrun`), and with
`--sbatch` a SLURM batch script for it.

The script is the setup journal, then the pool's other successful `%%hvd` cells in the order they ran (failed cells
left out), after the prelude the engines run before any cell (jupyter_hvd/engine/prelude.py, copied in verbatim), so
the names cells use mean the same there. Only rank 0 prints, as the notebook showed only rank 0's output. Lines that
need IPython (`%magics`, `!shell`) stay in as comments.

Runs in the user's kernel.
"""

from __future__ import annotations

import ast
import os
import shlex
import time
from pathlib import Path

from . import slurm
from .keep import Cell, Keeper
from .options import HvdPool

IPYTHON_ONLY = "get_ipython()"  # what IPython's transform leaves of a %magic or !command
PRELUDE = Path(__file__).resolve().parents[1] / "engine" / "prelude.py"  # read as text: the kernel runs no engine code


def prelude_source() -> str:
    """The source of the engines' `prelude()` function, verbatim."""
    text = PRELUDE.read_text()
    function = next(n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef) and n.name == "prelude")
    return ast.get_source_segment(text, function) or ""


def script(keeper: Keeper, options: HvdPool, notebook: str = "") -> str:
    """The text of the exported script."""
    cells = [*keeper.journal, *(c for c in keeper.cells if not c.setup)]
    np = options.np or 2
    lines = [
        "#!/usr/bin/env python",
        f"# Exported by jupyter-hvd {time.strftime('%Y-%m-%d %H:%M')}"
        + (f" from {notebook}" if notebook else "")
        + f": {len(keeper.journal)} setup cells, then {len(cells) - len(keeper.journal)} cells, as they ran.",
        f"# Run it as the pool ran:   mpirun -np {np} python {{path}}",
        f"#                    or:   horovodrun -np {np} python {{path}}",
        "",
        "import os",
        "import sys",
        "",
        "from typing import Any",
        "",
        "",
        prelude_source(),
        "",
        "",
        f"globals().update(prelude({'cpu' if options.cpu else 'auto'!r}))",
        "if rank != 0:  # the notebook showed rank 0's output only",
        "    sys.stdout = open(os.devnull, 'w')",
        "",
    ]
    for cell in cells:
        lines += ["", _heading(cell), *_body(cell), ""]
    return "\n".join(lines)


def _heading(cell: Cell) -> str:
    kind = "setup cell" if cell.setup else "cell"
    count = f" [{cell.count}]" if cell.count is not None else ""
    return f"# ---- {kind}{count} " + "-" * max(4, 100 - len(kind) - len(count))


def _body(cell: Cell) -> list[str]:
    out = []
    for line in cell.source.rstrip().splitlines():
        if IPYTHON_ONLY in line:
            indent = line[: len(line) - len(line.lstrip())]
            out.append(f"{indent}pass  # needs IPython, left out: {line.strip()}")
        else:
            out.append(line)
    return out


def sbatch(options: HvdPool, script_path: Path) -> str:
    """A SLURM batch script that runs the exported script with the pool's SLURM options (or its rank count)."""
    np = options.np or 2
    lines = [
        "#!/bin/sh",
        "#SBATCH --job-name=jupyter-hvd-export",
        *slurm.resource_lines(options, options.nodes or 1, np),
    ]
    lines += ["", f"mpirun -np {np} python {shlex.quote(str(script_path))}", ""]
    return "\n".join(lines)


def write(path: str, keeper: Keeper, options: HvdPool, with_sbatch: bool, notebook: str = "") -> list[Path]:
    """Write the script (and the batch script beside it, PATH with .sbatch); the paths written."""
    target = Path(path).expanduser()
    text = script(keeper, options, notebook).replace("{path}", shlex.quote(str(target)))
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    os.chmod(target, 0o755)
    written = [target]
    if with_sbatch:
        batch = target.with_suffix(".sbatch")
        batch.write_text(sbatch(options, target))
        written.append(batch)
    return written
