#!/usr/bin/env bash
# Writes the mixture-of-experts benchmark models: a few layers of the real shapes with random
# weights (tools/synth, hc-synth-model, default router skew), written in F16 and then
# quantised by llama.cpp's own quantiser (llama-quantize's per-tensor rules: the output Q6_K,
# routers F32, Q4_K_M's Q6_K layers, Mixtral's Q8_0 attn_k / attn_v), as users' files are:
#   qwen3moe-30b-a3b-4L   Qwen3-30B-A3B: n_embd 2048, 32/4 heads of 128, 128 experts of 768,
#                         8 used, vocab 151936; 4 of its 48 layers
#   mixtral-8x7b-2L       Mixtral-8x7B: n_embd 4096, 32/8 heads, 8 experts of 14336, 2 used,
#                         vocab 32000; 2 of its 32 layers
# Existing files are kept.
#
#   bench/make_moe_models.sh [TYPE...]     TYPE: Q4_0 Q4_K_M Q8_0 (default: Q4_0 Q4_K_M)
#
# Output: $HOTCOLD_CACHE/models/synth/<name>.<TYPE>.gguf (HOTCOLD_CACHE defaults to
# ~/.cache/hotcold); the F16 sources (~6 GB each) are deleted once every type is written.
# Sizes: ~1.8-2.0 GB per quantised file. Needs the venv of scripts/setup.sh (llama-cpp-python).
# Environment: HOTCOLD_BUILD_DIR (default ./build; needs the hc-synth-model target built),
# THREADS (default: all cores), SEED (default 1).
# Exit status: 0 all files present; 1 a file could not be made; 2 usage error.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${HOTCOLD_BUILD_DIR:-$ROOT/build}"
SYNTH="$BUILD_DIR/hc-synth-model"
CACHE="${HOTCOLD_CACHE:-$HOME/.cache/hotcold}"
PY="$CACHE/venv/bin/python"
OUT_DIR="$CACHE/models/synth"
THREADS="${THREADS:-$(nproc)}"
SEED="${SEED:-1}"

types=("$@")
((${#types[@]})) || types=(Q4_0 Q4_K_M)
for t in "${types[@]}"; do
  case "$t" in
    Q4_0 | Q4_K_M | Q8_0) ;;
    -h | --help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "make_moe_models.sh: error: unknown type '$t' (expected Q4_0, Q4_K_M or Q8_0)" >&2
       exit 2 ;;
  esac
done
if [[ ! -x "$SYNTH" ]]; then
  echo "make_moe_models.sh: error: $SYNTH not found; build it with" \
       "'ninja -C $BUILD_DIR hc-synth-model' (or set HOTCOLD_BUILD_DIR)" >&2
  exit 1
fi
if [[ ! -x "$PY" ]]; then
  echo "make_moe_models.sh: error: $PY not found: run scripts/setup.sh first" >&2
  exit 1
fi
mkdir -p "$OUT_DIR"

# name | hc-synth-model flags
models=(
  "qwen3moe-30b-a3b-4L|--shape qwen3-30b-a3b --arch qwen3moe --layers 4"
  "mixtral-8x7b-2L|--shape mixtral-8x7b --layers 2"
)
for m in "${models[@]}"; do
  name="${m%%|*}"
  read -r -a flags <<<"${m#*|}"
  src="$OUT_DIR/$name.F16.gguf"
  for t in "${types[@]}"; do
    out="$OUT_DIR/$name.$t.gguf"
    if [[ -s "$out" ]]; then
      echo "$name $t: $out exists ($(du -h "$out" | cut -f1)), skipped"
      continue
    fi
    if [[ ! -s "$src" ]]; then
      echo "$name: writing the F16 source $src"
      "$SYNTH" "${flags[@]}" --type f16 --seed "$SEED" -t "$THREADS" -o "$src" >/dev/null
    fi
    echo "$name $t: llama.cpp's quantiser -> $out"
    start=$SECONDS
    "$PY" -c "import sys; sys.path.insert(0, '$ROOT/tools/ref'); import llamacpp_ref as r; \
r.quantize(sys.argv[1], sys.argv[2], sys.argv[3].lower(), n_threads=$THREADS)" "$src" "$out" "$t"
    echo "$name $t: $(du -h "$out" | cut -f1) in $((SECONDS - start)) s"
  done
  rm -f "$src"
done
