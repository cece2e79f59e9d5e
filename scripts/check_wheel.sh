#!/usr/bin/env bash
# CI check in the manner of jupyterlab/extension-template: build the wheel, install it in a fresh venv where
# node is hidden, and check that JupyterLab and jupyter_server see the extension enabled and start cleanly
# (`python -m jupyterlab.browser_check --no-browser-test`) and that the live view's bundle is there; then load
# JupyterLab from that venv in headless Chromium and check the sidebar appears.
# Usage: bash scripts/check_wheel.sh [workdir]
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
WORK="${1:-$(mktemp -d)}"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
mkdir -p "$WORK"

echo "== build the wheel (the labextension is built into it; node is allowed here)"
rm -rf "$WORK/dist"
PATH="$(dirname "$PY"):$PATH" "$PY" -m pip wheel --no-deps --no-build-isolation -q -w "$WORK/dist" "$ROOT"
WHEEL="$(ls "$WORK"/dist/jupyter_hvd-*.whl)"
# The listing goes to a file: `unzip -l | grep -q` under pipefail fails with SIGPIPE (141) whenever grep finds its
# line before unzip has written the rest.
unzip -l "$WHEEL" > "$WORK/wheel-files.txt"
grep -q "share/jupyter/labextensions/jupyter-hvd/package.json" "$WORK/wheel-files.txt"
grep -q "etc/jupyter/jupyter_server_config.d/jupyter_hvd.json" "$WORK/wheel-files.txt"
grep -q "jupyter_hvd/widgets/static/live_view.js" "$WORK/wheel-files.txt"
grep -q "jupyter_hvd/widgets/static/live_view.css" "$WORK/wheel-files.txt"
if grep -q "jupyter_hvd/testing/" "$WORK/wheel-files.txt"; then echo "the wheel ships the test harness" >&2; exit 1; fi
echo "   $WHEEL holds the labextension, the live view's bundle and the server config, not the test harness"

echo "== install it where node is hidden"
SHIMS="$WORK/no-node"
mkdir -p "$SHIMS"
for tool in node npm npx jlpm yarn; do
  printf '#!/bin/sh\necho "%s is hidden for this check" >&2\nexit 127\n' "$tool" > "$SHIMS/$tool"
  chmod +x "$SHIMS/$tool"
done
rm -rf "$WORK/venv"
"$PY" -m venv "$WORK/venv"
export PATH="$SHIMS:$WORK/venv/bin:$PATH"
if node --version >/dev/null 2>&1; then echo "node is still visible" >&2; exit 1; fi
pip install -q "$WHEEL" "jupyterlab>=4.2,<5"

echo "== extension lists"
jupyter labextension list 2>&1 | tee "$WORK/labextensions.txt"
grep -E "jupyter-hvd v[0-9.]+ .*enabled.*OK" "$WORK/labextensions.txt" >/dev/null
jupyter server extension list 2>&1 | tee "$WORK/serverextensions.txt"
grep -E "jupyter_hvd .*enabled" "$WORK/serverextensions.txt" >/dev/null

echo "== the live view's widget finds its bundled JS and CSS (anywidget reads them when the class is defined)"
(cd "$WORK" && python -c "from jupyter_hvd.widgets.live_view import STATIC, TrainingView; print('  ', STATIC)")

echo "== browser_check (server side, no node)"
(cd "$WORK" && python -m jupyterlab.browser_check --no-browser-test --ServerApp.allow_root=True)

echo "== the sidebar loads in headless Chromium from the wheel's files"
PORT="$(python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
TOKEN="$(python -c 'import secrets; print(secrets.token_hex(16))')"
mkdir -p "$WORK/root" "$WORK/settings/@jupyterlab/apputils-extension"
# Settings and workspaces of this check's own: a workspace saved by an earlier run (the user's, or this check's)
# would reopen with the sidebar shown, and the check's click on its tab would then close it.
rm -rf "$WORK/workspaces"
echo '{"fetchNews": "false"}' > "$WORK/settings/@jupyterlab/apputils-extension/notification.jupyterlab-settings"
JUPYTER_RUNTIME_DIR="$WORK/runtime" jupyter lab --no-browser --allow-root --ServerApp.ip=127.0.0.1 \
  --ServerApp.port="$PORT" --IdentityProvider.token="$TOKEN" --ServerApp.root_dir="$WORK/root" \
  --LabApp.user_settings_dir="$WORK/settings" --LabApp.workspaces_dir="$WORK/workspaces" \
  > "$WORK/lab.log" 2>&1 &
LAB=$!
trap 'kill $LAB 2>/dev/null; wait $LAB 2>/dev/null || true' EXIT
for _ in $(seq 120); do
  python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$PORT/api/status?token=$TOKEN')" 2>/dev/null && break
  sleep 0.5
done
grep -q "jupyter_hvd | extension was successfully loaded" "$WORK/lab.log"
# The browser driver is a test tool: it runs with the machine's node, against the server from the wheel.
LAB_URL="http://127.0.0.1:$PORT/lab?token=$TOKEN" ARTIFACTS="$WORK/sidebar-from-wheel" \
  /usr/bin/env PATH="${PATH#"$SHIMS:"}" node "$ROOT/ui-tests/sidebar_loads.mjs"
echo "wheel check passed"
