#!/usr/bin/env bash
# The static vs dynamic sparsity experiment of docs/EXPERIMENTS.md, in one command:
#
#   bash bench/experiment_dynamic.sh [OUT_DIR]        (default /tmp/hc-experiment)
#
# 1. Profile SmolLM2-135M-Instruct (Q8_0) on general text (TinyStories): per-neuron firing
#    statistics and per-layer thresholds for 80% sparsity.
# 2. Accuracy and speed on the host, every configuration on the same tasks (WikiText-2 and
#    TinyStories perplexity, code perplexity of HumanEval's reference solutions, HumanEval and
#    MBPP pass@1 on the first $LIMIT problems): dense; static thresholds (from the prose profile)
#    at 50/70/80/90% sparsity; dynamic thresholds holding 80% sparsity or a recall target online.
# 3. Placement on the CPU second device: plans for three device budgets made from the prose
#    profile (with a GPU-like hardware profile, so the planner places hot neurons), then the code
#    tasks with the static plan and with online migration: tokens/s, share of the firing mass on
#    the device over time, device memory.
# All results land in OUT_DIR (results.md, results.json, PNG plots; per configuration a
# directory with summary.json, per-problem JSON lines and the dynamic trace). Rerunning resumes.
# Environment: HC (binary, default build/hotcold), MODEL, LIMIT (default 40), THREADS (2),
# SPARSITIES (the static sweep, default "0.5 0.7 0.8 0.9"), DYN (the sparsity the dynamic runs and
# the device runs hold, default 0.8).
# A ReLU model (hotcold.ffn_activation relu, e.g. SmolLM2-135M-ReLU from setup) also gets the
# exact sparse FFN (`--sparse`, its own zeros) as a row; its thresholds sweep above them:
#   MODEL=~/.cache/hotcold/models/SmolLM2-135M-ReLU.Q8_0.gguf SPARSITIES="0.9 0.93 0.95 0.97" \
#     DYN=0.93 bash bench/experiment_dynamic.sh /tmp/hc-experiment-relu
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
HC=${HC:-build/hotcold}
M=${MODEL:-$HOME/.cache/hotcold/models/SmolLM2-135M-Instruct.Q8_0.gguf}
OUT=${1:-/tmp/hc-experiment}
LIMIT=${LIMIT:-40}
T=${THREADS:-2}
read -r -a SPARSITIES <<<"${SPARSITIES:-0.5 0.7 0.8 0.9}"
DYN=${DYN:-0.8}
mkdir -p "$OUT"
[[ -x $HC ]] || { echo "no hotcold binary at $HC (build first, or set HC)" >&2; exit 1; }
[[ -f $M ]] || { echo "no model at $M (run scripts/setup.sh, or set MODEL)" >&2; exit 1; }
RELU=0
# Read inspect's whole output first: `inspect | grep -q` under pipefail fails when grep's early
# exit stops inspect with SIGPIPE, and the ReLU row was silently skipped.
META="$("$HC" inspect "$M" 2>/dev/null || true)"
grep -Eq 'ffn_activation +string +"relu"' <<<"$META" && RELU=1

STATS=$OUT/prose.stats.gguf
if [[ ! -f $STATS ]]; then
  echo "== 1. profile on general text (TinyStories)"
  "$HC" profile -m "$M" -f ../shared/data/tinystories/tinystories_val_head.txt --chunks 16 \
    -c 256 --sparsity "$DYN" -t "$T" -o "$STATS"
fi

ALL=(--tasks wikitext2,tinystories,code-ppl,humaneval,mbpp --limit "$LIMIT" --n-predict 128
     --ppl-chunks 8 -t "$T" -o "$OUT")
CODE=(--tasks code-ppl,humaneval,mbpp --limit "$LIMIT" --n-predict 128 -t "$T" -o "$OUT")
ev() { echo "== eval $*"; "$HC" eval -m "$M" "$@"; }

echo "== 2. host: dense, static and dynamic thresholds"
ev "${ALL[@]}" --label dense
((RELU)) && ev "${ALL[@]}" --sparse --label relu-exact
for s in "${SPARSITIES[@]}"; do
  ev "${ALL[@]}" --sparsity "$s" --stats "$STATS" --label "static-s$s"
done
ev "${ALL[@]}" --sparsity "$DYN" --stats "$STATS" --dynamic --dyn-target "sparsity:$DYN" \
  --label "dynamic-sparsity$DYN"
ev "${ALL[@]}" --sparsity "$DYN" --stats "$STATS" --dynamic --dyn-target recall:0.9 \
  --label dynamic-recall0.9

echo "== 3. CPU second device: static plan vs online migration"
for b in 0.01 0.02 0.04; do
  PLAN=$OUT/plan-$b.gguf
  # A fixed, GPU-like hardware profile (device 1000 GB/s, host 10 GB/s, 1 us per operation,
  # 2 us per round trip) so the plans do not depend on a bandwidth probe taken under load and the
  # planner does place hot neurons (on the CPU device itself, offloading never pays here).
  [[ -f $PLAN ]] || "$HC" plan -m "$M" --stats "$STATS" --vram-budget "$b" --device cpu \
    --host-gbps 10 --dev-gbps 1000 --link-gbps 25 --op-us 1 --sync-us 2 -o "$PLAN"
  # No runtime budget: the CPU device keeps the gate's decode layout too (more bytes than a GPU
  # would hold); the plan's budget is what the placement was made for and what the report shows.
  DEV=(--sparsity "$DYN" --stats "$STATS" --device cpu --plan "$PLAN")
  ev "${CODE[@]}" "${DEV[@]}" --label "device-b$b-static"
  ev "${CODE[@]}" "${DEV[@]}" --migrate --label "device-b$b-migrate"
done
"$HC" eval --report -o "$OUT"
