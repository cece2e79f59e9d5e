#!/usr/bin/env bash
# Set everything up (first run: about 10 minutes, Horovod compiles once), then train the quickstart
# notebook on 2 ranks (CPU ranks where there is no GPU) and say where the executed notebook is.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python scripts/run_notebook.py notebooks/01_quickstart.ipynb "$@"
