#!/usr/bin/env bash
# Writes the Llama-2-7B-shaped benchmark models: 4 layers of the real shape (n_embd 4096, n_ff
# 11008, 32 heads, vocab 32000) with random weights (tools/synth, hc-synth-model), one file per
# weight type, for benchmarks where weight bandwidth dominates. Existing files are kept.
# F16 Q8_0 Q4_0 Q4_K are uniform files written by hc-synth-model; Q4_0-lq Q4_K_M Q5_K_M Q6_K are
# what users run: the F16 file quantised by llama.cpp's own quantiser (llama-quantize's
# per-tensor rules: the output Q6_K, Q4_K_M / Q5_K_M's Q6_K attn_v / ffn_down layers).
#
#   bench/make_7b_models.sh [TYPE...]      TYPE: F16 Q8_0 Q4_0 Q4_K Q4_0-lq Q4_K_M Q5_K_M Q6_K
#                                          (default: F16 Q8_0 Q4_0 Q4_K)
#
# Output: $HOTCOLD_CACHE/models/synth/llama2-7b-4L.<TYPE>.gguf (HOTCOLD_CACHE defaults to
# ~/.cache/hotcold). Sizes: F16 2.1 GB, Q8_0 1.1 GB, Q4_0 0.6 GB, Q4_K 0.6 GB, Q4_0-lq 0.7 GB,
# Q4_K_M 0.7 GB, Q5_K_M 0.8 GB, Q6_K 0.9 GB. The llama.cpp types need the venv of
# scripts/setup.sh (llama-cpp-python) and write the F16 file first if it is missing.
# Environment: HOTCOLD_BUILD_DIR (default ./build; needs the hc-synth-model target built),
# THREADS (default: all cores), SEED (default 1).
# Exit status: 0 all files present; 1 a file could not be made; 2 usage error.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${HOTCOLD_BUILD_DIR:-$ROOT/build}"
SYNTH="$BUILD_DIR/hc-synth-model"
CACHE="${HOTCOLD_CACHE:-$HOME/.cache/hotcold}"
OUT_DIR="$CACHE/models/synth"
PY="$CACHE/venv/bin/python"
THREADS="${THREADS:-$(nproc)}"
SEED="${SEED:-1}"
LAYERS=4

types=("$@")
((${#types[@]})) || types=(F16 Q8_0 Q4_0 Q4_K)
for t in "${types[@]}"; do
  case "$t" in
    F16 | Q8_0 | Q4_0 | Q4_K | Q4_0-lq | Q4_K_M | Q5_K_M | Q6_K) ;;
    -h | --help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "make_7b_models.sh: error: unknown type '$t' (expected F16, Q8_0, Q4_0, Q4_K," \
            "Q4_0-lq, Q4_K_M, Q5_K_M or Q6_K)" >&2
       exit 2 ;;
  esac
done
if [[ ! -x "$SYNTH" ]]; then
  echo "make_7b_models.sh: error: $SYNTH not found; build it with" \
       "'ninja -C $BUILD_DIR hc-synth-model' (or set HOTCOLD_BUILD_DIR)" >&2
  exit 1
fi
mkdir -p "$OUT_DIR"

n=0
for t in "${types[@]}"; do
  n=$((n + 1))
  out="$OUT_DIR/llama2-7b-${LAYERS}L.$t.gguf"
  if [[ -s "$out" ]]; then
    echo "[$n/${#types[@]}] $t: $out exists ($(du -h "$out" | cut -f1)), skipped"
    continue
  fi
  echo "[$n/${#types[@]}] $t: writing $out"
  start=$SECONDS
  case "$t" in
    F16 | Q8_0 | Q4_0 | Q4_K)
      "$SYNTH" --shape llama2-7b --layers "$LAYERS" --type "${t,,}" --seed "$SEED" \
        -t "$THREADS" -o "$out" ;;
    *)
      src="$OUT_DIR/llama2-7b-${LAYERS}L.F16.gguf"
      if [[ ! -x "$PY" ]]; then
        echo "make_7b_models.sh: error: $PY not found: run scripts/setup.sh first" >&2
        exit 1
      fi
      if [[ ! -s "$src" ]]; then
        echo "[$n/${#types[@]}] $t: writing the F16 source $src"
        "$SYNTH" --shape llama2-7b --layers "$LAYERS" --type f16 --seed "$SEED" \
          -t "$THREADS" -o "$src"
      fi
      lq="${t%-lq}"
      echo "[$n/${#types[@]}] $t: llama.cpp's quantiser ($lq) from $src"
      "$PY" -c "import sys; sys.path.insert(0, '$ROOT/tools/ref'); import llamacpp_ref as r; \
r.quantize(sys.argv[1], sys.argv[2], sys.argv[3].lower(), n_threads=$THREADS)" "$src" "$out" "$lq" ;;
  esac
  echo "[$n/${#types[@]}] $t: $(du -h "$out" | cut -f1) in $((SECONDS - start)) s"
done
