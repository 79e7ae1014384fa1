#!/usr/bin/env bash
# The llama.cpp reference as an AVX2-only host runs it, on a host with AVX-512: builds the pinned
# llama-cpp-python with -mno-avx512f (and no AVX-VNNI, no AMX) into its own venv, then runs the
# given reference tests (default: the SmolLM2 greedy and perplexity ones) with that venv and
# HOTCOLD_ISA=avx2, so hotcold takes ggml's AVX2 flavour (docs/ARCHITECTURE.md, "Numerics").
# CI runs the reference tests against the host's own native build; this checks the other
# flavour without an AVX2-only machine (docs/TESTING.md, "Both flavours of ggml's x86 build").
#
#   tools/ref/avx2_reference.sh [pytest args...]
#
# Environment: HOTCOLD_CACHE (default ~/.cache/hotcold: the sdist setup.sh downloaded, and the
# venv-avx2 and its wheel cache made here), HOTCOLD_BIN (default ./build/hotcold).
# Needs scripts/setup.sh to have run (models, sdist). The wheel build takes ~6 min on 2 cores,
# once.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CACHE="${HOTCOLD_CACHE:-$HOME/.cache/hotcold}"
VER=0.3.36
SDIST="$CACHE/wheels/llama_cpp_python-$VER.tar.gz"
VENV="$CACHE/venv-avx2"
WHEELS="$CACHE/wheels/llama-cpp-python-$VER-avx2"
FLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16 -mno-avx512f -mno-avxvnni"
log() { printf '[avx2-ref] %s\n' "$*"; }

[[ -s "$SDIST" ]] || { log "no $SDIST: run scripts/setup.sh first"; exit 1; }
if ! compgen -G "$WHEELS/llama_cpp_python-*.whl" >/dev/null; then
  log "building llama-cpp-python $VER with $FLAGS into $WHEELS (several minutes)"
  mkdir -p "$WHEELS"
  CMAKE_ARGS="-DGGML_CUDA=OFF -DGGML_VULKAN=OFF -DGGML_METAL=OFF -DGGML_BLAS=OFF -DGGML_RPC=OFF -DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF -DGGML_NATIVE=ON -DCMAKE_C_FLAGS='$FLAGS' -DCMAKE_CXX_FLAGS='$FLAGS'" \
    CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" python3 -m pip wheel --no-cache-dir --no-deps -w "$WHEELS" "$SDIST"
fi
if [[ ! -x "$VENV/bin/python" ]]; then
  log "venv $VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q "$(compgen -G "$WHEELS/llama_cpp_python-*.whl" | head -1)" \
    numpy==2.4.6 pytest==9.2.0 gguf==0.19.0
fi
INFO="$("$VENV/bin/python" -c 'import llama_cpp; print(llama_cpp.llama_print_system_info().decode())')"
log "llama.cpp: $INFO"
if [[ "$INFO" == *AVX512* || "$INFO" == *AMX* ]]; then
  log "that build has AVX-512 or AMX: remove $WHEELS and $VENV and rerun"
  exit 1
fi
cd "$ROOT"
(($#)) || set -- -x tests/reference/test_smollm2.py tests/reference/test_smollm2_variants.py \
  tests/reference/test_smollm2_perplexity.py
export HOTCOLD_ISA=avx2 HOTCOLD_ROOT="$ROOT" HOTCOLD_BIN="${HOTCOLD_BIN:-$ROOT/build/hotcold}"
exec "$VENV/bin/python" -m pytest -q "$@"
