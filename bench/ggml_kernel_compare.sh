#!/usr/bin/env bash
# hotcold's batch-1 decode kernels against ggml's on the same matrix (issue 41 item 2): builds
# ggml from the llama.cpp that setup pins (scripts/build_llama_cpp.sh keeps its static
# libraries), configures the build directory with -DHC_GGML_DIR, builds hc-ggml-kernel-bench
# and runs it. Arguments go to hc-ggml-kernel-bench (bench/ggml_kernel_bench.cpp), e.g.
#
#   bench/ggml_kernel_compare.sh                              7B shapes (11008 x 4096), q4_K,
#                                                             q5_K, q6_K, f16, q4_0, q8_0;
#                                                             1 and 2 threads, 9 rounds
#   bench/ggml_kernel_compare.sh --types q6_K --threads 2 --rounds 15
#
# Output: a markdown table (or --json) on stdout, progress on stderr. Not part of CI (the
# llama.cpp build takes ~6 minutes on 2 cores the first time). Environment: HOTCOLD_BUILD_DIR
# (default ./build, configured by scripts/setup.sh).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${HOTCOLD_BUILD_DIR:-$ROOT/build}"
log() { echo "[ggml_kernel_compare] $*" >&2; }

if [[ ! -f "$BUILD_DIR/CMakeCache.txt" ]]; then
  log "error: $BUILD_DIR is not configured: run scripts/setup.sh first (or set HOTCOLD_BUILD_DIR)"
  exit 1
fi
LLAMA_DIR="$(bash "$ROOT/scripts/build_llama_cpp.sh")"
GGML_DIR="$LLAMA_DIR/ggml"
[[ -s "$GGML_DIR/lib/libggml-cpu.a" ]] || { log "error: $GGML_DIR/lib/libggml-cpu.a missing"; exit 1; }
if ! grep -q "^HC_GGML_DIR:PATH=$GGML_DIR\$" "$BUILD_DIR/CMakeCache.txt"; then
  log "configuring $BUILD_DIR with HC_GGML_DIR=$GGML_DIR"
  cmake -S "$ROOT" -B "$BUILD_DIR" -DHC_GGML_DIR="$GGML_DIR" > /dev/null
fi
log "building hc-ggml-kernel-bench"
cmake --build "$BUILD_DIR" --target hc-ggml-kernel-bench > /dev/null
exec "$BUILD_DIR/hc-ggml-kernel-bench" "$@"
