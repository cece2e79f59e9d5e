#!/usr/bin/env bash
# Set everything up (first run: about 10 minutes, Horovod compiles once), then train the quickstart
# notebook on 2 ranks (CPU ranks where there is no GPU) and say where the executed notebook is.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if .venv/bin/python -c 'import horovod.torch' 2>/dev/null; then
  exec .venv/bin/python scripts/run_notebook.py notebooks/01_quickstart.ipynb "$@"
fi
echo "[quickstart] Horovod is not installed here: training the torch.distributed notebook (DDP, then FSDP2) instead"
exec .venv/bin/python scripts/run_notebook.py notebooks/04_torch_distributed.ipynb "$@"
