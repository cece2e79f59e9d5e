#!/usr/bin/env bash
# Sets up .venv with everything jupyter-hvd needs: torch, Open MPI + mpi4py from PyPI, Horovod 0.28.1
# (built once, then taken from a wheel cache keyed by torch version and build flags), and this package.
# Idempotent: a second run installs nothing new and compiles nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
WITH_TEST_TOOLS=0
for arg in "$@"; do
  case "$arg" in
    --with-test-tools) WITH_TEST_TOOLS=1 ;;  # Chromium for the browser tests
    *) echo "usage: scripts/setup.sh [--with-test-tools]" >&2; exit 2 ;;
  esac
done
PY=${PYTHON:-python3.11}
VENV=$ROOT/.venv
CACHE=${JUPYTER_HVD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/jupyter-hvd}
log() { printf '\033[1m[setup]\033[0m %s\n' "$*"; }

command -v "$PY" >/dev/null || PY=python3
[ -x "$VENV/bin/python" ] || { log "creating $VENV"; "$PY" -m venv "$VENV"; }
export PATH="$VENV/bin:$PATH"   # the venv's mpicc/mpirun first, so Horovod, mpi4py and ipyparallel share one libmpi
# pip, quiet, without this machine's harmless "Location ... is ignored" notes about local indexes; installs without
# byte-compiling every file (torch alone: 20 s -> 6 s on 2 cores): Python compiles what it imports, once.
pip() {
  local out rc=0
  if [ "$1" = install ]; then shift; set -- install --no-compile "$@"; fi
  out=$("$VENV/bin/python" -m pip --disable-pip-version-check -q "$@" 2>&1) || rc=$?
  printf '%s\n' "$out" | grep -v -e "is ignored: it is neither" -e '^$' || true
  return $rc
}

# grep without -q: under pipefail an early exit of grep would fail nvidia-smi with SIGPIPE.
has_gpu() { command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep GPU >/dev/null; }

# torch: keep a CUDA build that is already there; otherwise the CPU build (never pull a CUDA build into CI).
if ! "$VENV/bin/python" -c 'import torch' 2>/dev/null; then
  if has_gpu; then log "GPU found: installing torch (CUDA build)"; pip install torch
  else log "no GPU: installing torch 2.13.0 (CPU build)"; pip install torch==2.13.0; fi
fi
TORCH_VERSION=$("$VENV/bin/python" -c 'import torch; print(torch.__version__)')
TORCH_CUDA=$("$VENV/bin/python" -c 'import torch; print(torch.version.cuda or "")')

log "installing build and runtime dependencies"
pip install -r requirements.txt

# --- Horovod 0.28.1 -------------------------------------------------------------------------------------------
FLAGS="HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_MPI=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1"
if [ -n "$TORCH_CUDA" ]; then
  FLAGS="$FLAGS HOROVOD_GPU_OPERATIONS=NCCL"
  # Build for the GPUs present (e.g. 90 for an H100): Horovod's default list does not reach recent ones, and CUDA 13
  # no longer compiles for the oldest ones in it. nvidia-smi says it; drivers too old for that query leave it to torch.
  CC_LIST=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | tr -d '.' | sort -u | paste -sd, -)
  case "$CC_LIST" in *[!0-9,]*|"") CC_LIST=$("$VENV/bin/python" -c 'import torch
print(",".join(sorted({"%d%d" % torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count())})))' \
    2>/dev/null || true);; esac
  [ -n "$CC_LIST" ] && FLAGS="$FLAGS HOROVOD_BUILD_CUDA_CC_LIST=$CC_LIST"
fi
KEY=$(printf '%s|%s|%s' "$TORCH_VERSION" "$FLAGS" "$("$VENV/bin/python" -c 'import sys; print(sys.version_info[:2])')" | sha256sum | cut -c1-12)
WHEELDIR=$CACHE/horovod-0.28.1-$KEY

build_horovod() {
  log "building Horovod 0.28.1 for torch $TORCH_VERSION (one time, about 6 minutes on 2 cores)"
  mkdir -p "$CACHE/build-$KEY"
  # Horovod 0.28.1 forces C++14 and strips -std= from CXXFLAGS, while torch >= 2.1 needs C++17; and GCC 13's headers
  # no longer bring <string> and <stdexcept> in where two of Horovod's headers rely on it. A wrapper fixes both for
  # Horovod's C++ (harmless with GCC 12). nvcc runs it as its host compiler too (CMAKE_CUDA_HOST_COMPILER): those
  # calls pass through as they are, since nvcc's front end parses what they preprocess in its own -std, and their last
  # step compiles code that has every header in already (a second <string> there is a redefinition).
  WRAP=$CACHE/build-$KEY/cxx17
  REAL_CXX=$(command -v "${CXX:-g++}" || echo "${CXX:-g++}")
  cat >"$WRAP" <<EOF
#!/bin/sh
case " \$* " in *__CUDACC__*|*__CUDA_ARCH_LIST__*|*".cudafe1.cpp "*) exec "$REAL_CXX" "\$@";; esac
for a; do shift; case "\$a" in -std=c++11|-std=c++14) a=-std=c++17;; esac; set -- "\$@" "\$a"; done
case " \$* " in *" -c "*) set -- -include string -include stdexcept "\$@";; esac
exec "$REAL_CXX" "\$@"
EOF
  chmod +x "$WRAP"
  if [ -n "$TORCH_CUDA" ]; then
    NCCL=$("$VENV/bin/python" -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__) if nvidia.nccl.__file__ else list(nvidia.nccl.__path__)[0])' 2>/dev/null || true)
    [ -n "$NCCL" ] && export HOROVOD_NCCL_INCLUDE=$NCCL/include HOROVOD_NCCL_LIB=$NCCL/lib HOROVOD_NCCL_LINK=SHARED
  fi
  # CMake 4 refuses the vendored gloo's cmake_minimum_required(2.8.12) without this policy floor; where there is no
  # `cc` (seen on a GPU machine's image), CMake finds no C compiler unless told.
  command -v cc >/dev/null || export CC=gcc
  env $FLAGS CXX="$WRAP" CMAKE_POLICY_VERSION_MINIMUM=3.5 MAKEFLAGS="-j$(nproc)" \
    "$VENV/bin/python" -m pip wheel --disable-pip-version-check -q --no-build-isolation --no-deps --no-cache-dir \
    -w "$CACHE/build-$KEY/out" horovod==0.28.1 >"$CACHE/horovod-build.log" 2>&1 || return 1
  mkdir -p "$WHEELDIR" && mv "$CACHE/build-$KEY"/out/horovod-*.whl "$WHEELDIR/" && rm -rf "$CACHE/build-$KEY"
}

if "$VENV/bin/python" -c 'import horovod.torch' 2>/dev/null; then
  log "Horovod already installed"
elif [ -n "${JUPYTER_HVD_WITHOUT_HOROVOD:-}" ]; then
  log "JUPYTER_HVD_WITHOUT_HOROVOD is set: no Horovod; pools run torch.distributed only (DDP, FSDP2)"
elif ls "$WHEELDIR"/horovod-*.whl >/dev/null 2>&1 || build_horovod; then
  log "Horovod wheel in the cache ($WHEELDIR)"
  pip install --no-deps "$WHEELDIR"/horovod-*.whl
  pip install cloudpickle psutil pyyaml   # horovod's own runtime requirements (installed --no-deps above)
else
  log "Horovod 0.28.1 could not be built for torch $TORCH_VERSION (the end of $CACHE/horovod-build.log says why):"
  tail -5 "$CACHE/horovod-build.log" | sed 's/^/    /'
  log "set-up goes on: pools run torch.distributed only (DDP, FSDP2), and %hvd_start says so"
fi

# The front end: one npm workspace at the root (package.json, package-lock.json) over labextension/ (the sidebar)
# and widgets-js/ (the live view); ui-tests/ drive Chromium with its playwright-core. It gets exactly the locked
# versions (npm ci) unless it has them already; `pip install -e .` below then builds both into jupyter_hvd/
# (hatch-jupyter-builder: npm install, which finds nothing to do, and npm run build).
if ! command -v npm >/dev/null; then
  echo "npm is missing: the sidebar and the live view are built with it (install Node.js 20 with npm)" >&2
  exit 1
fi
if [ ! -f package-lock.json ]; then
  log "installing the front end's packages (npm install: no package-lock.json yet)"
  npm install --no-audit --no-fund >/dev/null 2>&1 || { echo "npm install failed in $ROOT" >&2; exit 1; }
elif [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  log "installing the front end's packages (npm ci)"
  npm ci --no-audit --no-fund >/dev/null 2>&1 || { echo "npm ci failed in $ROOT" >&2; exit 1; }
fi

# Horovod's negotiation waited for with naps instead of a busy wait (jupyter_hvd/engine/horovod/negotiation.py), built
# against the venv's Open MPI; where it cannot be built, ranks busy-wait there as Horovod does under mpirun.
NEGOTIATION=jupyter_hvd/engine/horovod
if [ ! -f "$NEGOTIATION/libnegotiation.so" ] || [ "$NEGOTIATION/negotiation.c" -nt "$NEGOTIATION/libnegotiation.so" ]; then
  "$VENV/bin/mpicc" -O2 -shared -fPIC -o "$NEGOTIATION/libnegotiation.so" "$NEGOTIATION/negotiation.c" \
    || log "could not build $NEGOTIATION/libnegotiation.so: Horovod's negotiation busy-waits as under mpirun"
fi

log "installing jupyter-hvd (editable)"
pip install --no-build-isolation --no-deps -e .
# The package's bytecode now: where PYTHONDONTWRITEBYTECODE is set (as on CI's machines) each kernel, rank and helper
# process would otherwise compile the modules it imports again (0.1-0.15 CPU-s each, hundreds of them in the tests).
"$VENV/bin/python" -m compileall -q jupyter_hvd >/dev/null
# A kernelspec inside the venv, so notebooks run by this venv's Jupyter use this venv's Python.
"$VENV/bin/python" -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (jupyter-hvd)" >/dev/null
"$VENV/bin/python" -m jupyter_hvd.doctor

# Test tools from Debian: Chromium (browser tests), iproute2 (two-host test in network namespaces),
# slurm-wlm + munge (a real single-node SLURM job). Tests that lack one skip with the reason, except Chromium:
# the browser tests fail without it.
if [ "$WITH_TEST_TOOLS" = 1 ]; then
  missing=()
  [ -x /usr/bin/chromium ] || missing+=(chromium)
  command -v ip >/dev/null || missing+=(iproute2)
  command -v slurmctld >/dev/null || missing+=(slurm-wlm)
  command -v munged >/dev/null || missing+=(munge)
  if [ "${#missing[@]}" -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      log "installing test tools from Debian: ${missing[*]}"
      apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    else
      log "missing ${missing[*]} (needs root and apt-get): the tests that use them will skip, or fail (Chromium)"
    fi
  fi
fi

# JupyterLab serves the in-tree build of the sidebar (`npm run build` updates it).
"$VENV/bin/jupyter" labextension develop --overwrite . >/dev/null 2>&1 || log "could not link the sidebar's labextension"
