#!/usr/bin/env bash
# Set everything up, then run every test: lint, Python tests (real MPI ranks, kernels, JupyterLab + Chromium).
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -k pool -x`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --with-test-tools
export PATH="$PWD/.venv/bin:$PATH"
echo "[test] ruff"
ruff check .
ruff format --check .
echo "[test] pytest"
exec python -m pytest "$@"
