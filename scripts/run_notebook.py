"""Execute a notebook headless in a real kernel, echo what its cells print, and save the executed copy.

Usage: python scripts/run_notebook.py notebooks/01_quickstart.ipynb [--timeout 600]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebook", type=Path)
    parser.add_argument("--timeout", type=int, default=600, help="seconds per cell")
    args = parser.parse_args()
    nb = nbformat.read(args.notebook, as_version=4)
    out = args.notebook.with_suffix(".executed.ipynb")
    client = NotebookClient(
        nb, timeout=args.timeout, kernel_name="python3", resources={"metadata": {"path": str(args.notebook.parent)}}
    )
    t0 = time.monotonic()
    try:
        client.execute()
        ok = True
    except CellExecutionError as exc:
        print(exc, file=sys.stderr)
        ok = False
    finally:
        nbformat.write(nb, out)
    for cell in nb.cells:
        for o in cell.get("outputs", []):
            if o.get("output_type") == "stream" and o.get("name") == "stdout":
                sys.stdout.write(o["text"])
    print(
        f"\n{'Executed' if ok else 'FAILED'} {args.notebook} in {time.monotonic() - t0:.0f} s; executed notebook: {out}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
