#!/usr/bin/env bash
# The GPU check in one command, for a session lent a GPU (issue 20; docs/BENCHMARKS.md "GPU
# check"). Two steps, because the GPU machine reaches no network:
#
#   bench/gpu_check.sh prepare [--no-build] [DIR]
#                                      here, with the package registries: writes DIR (default
#                                      .gpucheck, git-ignored): the Debian packages the build needs
#                                      that the GPU image lacks (.deb, unpacked there with dpkg -x),
#                                      the llama.cpp source the reference package vendors
#                                      (llama-cpp-python 0.3.36), trimmed to what llama-bench needs,
#                                      and (unless --no-build) llama-bench built from it here with
#                                      nvcc for sm_90 (H100 / H200) and every x86 CPU variant of
#                                      ggml (the best one loads on the GPU machine's CPU), packed
#                                      as llama-bench.tar.xz (bin/ with its libraries; the aim is
#                                      <= 40 MiB). 531 build steps, over an hour on 2 cores
#                                      (HOTCOLD_JOBS sets -j); the build tree stays in
#                                      ~/.cache/hotcold/llama-bench-build, so a stopped prepare
#                                      resumes; --no-build skips it.
#   bench/gpu_check.sh run [options]   there (the device tool: carry .gpucheck; output under $OUT):
#     --carry DIR      what prepare wrote (default .gpucheck; absent = use what is installed)
#     --devices LIST   comma-separated among cuda, vulkan, cpu (default: those that open here)
#     --out DIR        where the report goes (default $OUT, else gpu-check-out)
#     --twin NAME      the statistical twin benchmarked (hc-synth-model --twin; default
#                      prosparse-7b: relullama-7b, opt-like-7b and bamboo-7b too)
#     --layers N       its layers (default 8; real shape otherwise)
#     --type T         its weight type (default q4_0)
#     --tokens N       generated tokens per bench repetition (default 64), --reps N (default 3)
#     --moe-layers N   layers of the Qwen3-30B-A3B-shaped MoE model (default 8; 0 = no MoE step)
#     --quick          a tiny model and short runs: checks the script itself (no GPU needed)
#     --no-tests       skip the ctest step; --no-llama: skip the llama.cpp baseline
#     --build DIR      hotcold's build directory (default build-gpu; an existing one is reused
#                      as configured)
#
# What `run` does, each step timed, everything logged to OUT/gpu_check.log:
#   1. builds hotcold (Release; CUDA when nvcc exists, Vulkan when glslc and the headers do) in
#      build-gpu/; unpacks the llama-bench prepare built (when it starts there: it needs the
#      machine's libcudart / libcublas 13), else builds llama-bench from the carried source
#      (CUDA when nvcc exists) in build-llama/;
#   2. runs the `gpu`, `vulkan` and `device` test labels (the device contract on every kind);
#   3. writes the statistical twin (tools/synth/twin.h: a 7B shape whose neurons fire with the
#      published power law, calibrated on the repo's docs; gates of rank 496) twice, in llama's
#      layout and in PowerInfer's with predictors of rank 1024 (the same weights), and their
#      activation profile (another text: the synthetic vocabulary tokenizes any) with the
#      predictors' recall and precision on it;
#   4. for each device and VRAM budget of 10/25/50/100% of the model file: hotcold's hot/cold
#      split (--sparse --stats --vram-budget: the planner places hot neurons and attention;
#      thresholds on the host's gate rows, and --predictor on the PowerInfer-layout copy),
#      hotcold's dense layer offload under the same budget, and llama.cpp's partial offload
#      (llama-bench -ngl = the layers hotcold's dense offload fitted), plus host-only baselines;
#      decode tokens/s, the planner's prediction against the measurement, device bytes charged;
#   4b. a per-operation breakdown of device time from device timers (CUDA events:
#      HC_CUDA_PROFILE=1; Vulkan: HC_VK_PROFILE=1) for -ngl 99 and the split at 25%;
#   4c. the dense mat-vec of Q4_0 / Q4_K / Q8_0 / F16 on each GPU device against its measured
#      read bandwidth (hc-device-bench);
#   5. mixture of experts: a Qwen3-30B-A3B-shaped file (--moe-layers of its 48 layers, Q4_0) and
#      its routing profile; per device: every layer with its experts on the device (-ngl 99),
#      llama.cpp's split (-ngl 99 --cpu-moe: attention there, experts on the host), and hot
#      experts planned from the profile at 25/50% of the file; llama-bench -ngl 99 and
#      -ngl 99 -ncmoe <all layers> on the same file;
#   6. hybrid serving (bench/serve_check.py): per device, `hotcold serve` with the hot/cold split
#      (a plan for 50% of the file, used by both sides) and with -ngl 99, 2 slots decoding 3 prompts together, must answer
#      exactly what `hotcold run` does with the same flags;
#   7. writes OUT/gpu_check.md (the tables for docs/BENCHMARKS.md) and OUT/gpu_check.json.
# The twin holds the same file for hotcold and llama.cpp (llama layout; llama.cpp runs its FFN
# as SwiGLU, which reads the same bytes). Random weights (no power law) were this check's model
# before 2026-12-02: their hot/cold figures in docs/BENCHMARKS.md are a lower bound.
# Exit status: 0 report written (test failures are in it); 1 a build or setup step failed.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
LLAMA_VERSION=0.3.36

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }

# ---- prepare ---------------------------------------------------------------------------------
prepare() {
  local build_bench=1
  [[ "${1:-}" == "--no-build" ]] && { build_bench=0; shift; }
  local dir="${1:-.gpucheck}"
  mkdir -p "$dir/deb"
  grep -qx "/$(basename "$dir")/" .git/info/exclude 2>/dev/null || echo "/$(basename "$dir")/" >> .git/info/exclude
  # Build dependencies a CUDA image does not have (Debian's; their shared libraries are the
  # few the binary and the tests load). apt-get download takes no dependencies: listed here.
  local pkgs=(libgtest-dev libgmock-dev googletest libglpk-dev libglpk40 libamd2 libcolamd2
              libsuitesparseconfig5 libltdl7 libgmp10 nlohmann-json3-dev libcpp-httplib-dev
              libcpp-httplib0.11 libbrotli1 libbrotli-dev libssl-dev zlib1g-dev glslc libshaderc1 libvulkan-dev
              libvulkan1)
  echo "[prepare] apt-get download ${pkgs[*]}"
  (cd "$dir/deb" && apt-get download "${pkgs[@]}")
  local py="${HOTCOLD_CACHE:-$HOME/.cache/hotcold}/venv/bin/python"
  [[ -x "$py" ]] || py=python3
  local tmp
  tmp="$(mktemp -d)"
  # The build tree lives in the cache, outside DIR (it is gigabytes; DIR travels): a prepare
  # that is stopped resumes where it was.
  local work="${HOTCOLD_CACHE:-$HOME/.cache/hotcold}/llama-bench-build"
  echo "[prepare] llama.cpp source from llama-cpp-python $LLAMA_VERSION (sdist)"
  local sdist="${HOTCOLD_CACHE:-$HOME/.cache/hotcold}/wheels/llama_cpp_python-$LLAMA_VERSION.tar.gz"
  if [[ -f "$sdist" ]]; then  # scripts/setup.sh keeps it
    cp "$sdist" "$tmp/"
  else
    "$py" -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$LLAMA_VERSION" -d "$tmp"
  fi
  tar -C "$tmp" -xzf "$tmp"/llama_cpp_python-*.tar.gz
  local src
  src="$(echo "$tmp"/llama_cpp_python-*/vendor/llama.cpp)"
  # What CMake and llama-bench need; the other backends, docs, models and tests stay behind.
  # tools/ keeps llama-bench alone, and its CMakeLists says so.
  (cd "$src" && rm -rf docs models tests examples media pocs gguf-py app benches skills \
     ggml/src/ggml-{sycl,metal,opencl,hexagon,et,cann,musa,kompute,webgpu,zdnn,rpc,hip,blas} &&
     find tools -mindepth 1 -maxdepth 1 ! -name llama-bench -exec rm -rf {} + &&
     printf 'add_subdirectory(llama-bench)\n' > tools/CMakeLists.txt)
  tar -C "$(dirname "$src")" -cJf "$dir/llama.cpp.tar.xz" llama.cpp
  if ((build_bench)); then
    local nvcc
    nvcc="$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)"
    [[ -x "$nvcc" ]] || { echo "[prepare] no nvcc: cannot build llama-bench for CUDA here" >&2; return 1; }
    local jobs="${HOTCOLD_JOBS:-$(nproc)}" t0=$SECONDS
    echo "[prepare] building llama-bench (CUDA sm_90, all x86 CPU variants) with $nvcc, -j$jobs"
    # GGML_BACKEND_DL: the CUDA and CPU backends are modules beside the binary, and the CPU one
    # that suits the machine is picked at run time (GGML_NATIVE would tune it for this host).
    # The source the build reads is a copy kept beside its tree, refreshed only when it differs.
    mkdir -p "$work"
    if ! diff -rq "$src" "$work/llama.cpp" > /dev/null 2>&1; then
      rm -rf "$work/llama.cpp" && cp -a "$src" "$work/llama.cpp"
    fi
    cmake -S "$work/llama.cpp" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLLAMA_BUILD_TESTS=OFF \
      -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_CURL=OFF \
      -DGGML_NATIVE=OFF -DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON -DGGML_CUDA=ON \
      "-DCMAKE_CUDA_COMPILER=$nvcc" -DCMAKE_CUDA_ARCHITECTURES=90-real -DBUILD_SHARED_LIBS=ON \
      > "$dir/llama-bench-build.log" 2>&1 || { tail -20 "$dir/llama-bench-build.log"; return 1; }
    # Progress: ninja's [n/N] lines, one in 25.
    cmake --build "$work/build" -j "$jobs" --target llama-bench 2>&1 | tee -a "$dir/llama-bench-build.log" |
      awk '/^\[[0-9]+\/[0-9]+\]/ { if (++n % 25 == 1) { print "[prepare]   " $1; fflush() } }'
    [[ -x "$work/build/bin/llama-bench" ]] || { tail -20 "$dir/llama-bench-build.log"; return 1; }
    mkdir -p "$tmp/pack/bin"
    cp -a "$work/build/bin/llama-bench" "$work/build/bin/"*.so* "$tmp/pack/bin/" 2>/dev/null || true
    find "$work/build" -name '*.so*' \( -type f -o -type l \) -exec cp -a {} "$tmp/pack/bin/" \;
    strip --strip-unneeded "$tmp/pack/bin/"* 2>/dev/null || true
    tar -C "$tmp/pack" -cJf "$dir/llama-bench.tar.xz" bin
    echo "[prepare] llama-bench built in $((SECONDS - t0)) s; packed $(du -h "$dir/llama-bench.tar.xz" | cut -f1)"
  fi
  rm -rf "$tmp"
  du -sh "$dir"
  echo "[prepare] done: name $dir in the device tool's carry, then run 'bash bench/gpu_check.sh run'"
}

# ---- run -------------------------------------------------------------------------------------
CARRY=.gpucheck
DEVICES=""
OUTDIR="${OUT:-gpu-check-out}"
LAYERS=8
TWIN=prosparse-7b
MOE_LAYERS=8
TYPE=q4_0
TOKENS=64
REPS=3
QUICK=0
TESTS=1
LLAMA=1
JOBS="$(nproc)"
BUILD=build-gpu

log() { printf '[gpu_check %s] %s\n' "$(date +%H:%M:%S)" "$*" | tee -a "$OUTDIR/gpu_check.log" >&2; }
step() { STEP_T0=$SECONDS; log "==> $*"; }
step_done() { log "    done in $((SECONDS - STEP_T0)) s"; }

# The first JSON number at "key": in text.
json_num() { python3 -c 'import json,sys; j=json.loads(sys.argv[1]); v=j
for k in sys.argv[2].split("."): v=v.get(k, {}) if isinstance(v, dict) else {}
print(v if isinstance(v, (int, float)) else "")' "$1" "$2" 2>/dev/null || true; }

# A device's fixed overhead in bytes (CUDA: context and cuBLAS, ~690 MiB on an H100), from the
# error that a budget below it gives; 0 where the device charges none. VRAM budgets below are
# this plus a share of the model file (without it every small budget failed on the first H100).
# The --device flag for a device of DEVICES: vulkan is the first GPU the loader lists, else
# device 0 (lavapipe).
device_flag() {
  if [[ $1 != vulkan ]]; then echo "$1"; return; fi
  local i
  i="$("$HC" --version | { grep -E '^  [0-9]+: .*\[gpu' || true; } | head -1 | grep -oE '[0-9]+' | head -1 || true)"
  echo "vulkan:${i:-0}"
}

dev_overhead() {
  local n
  n="$("$HC" bench -m "$1" -p 0 -n 1 -r 1 --no-membw --vram-budget 0.000001 --device "$2" 2>&1 >/dev/null |
       grep -oE 'fixed overhead [^0-9]* of [0-9]+ bytes' | grep -oE '[0-9]+' | head -1 || true)"
  echo "${n:-0}"
}

run_check() {
  mkdir -p "$OUTDIR"
  : > "$OUTDIR/gpu_check.log"
  local t_all=$SECONDS
  log "host: $(nproc) cores, $(uname -r); GPU: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo none)"

  # 0. carried packages
  if [[ -d "$CARRY/deb" ]]; then
    step "unpacking $(ls "$CARRY"/deb/*.deb | wc -l) carried packages"
    for f in "$CARRY"/deb/*.deb; do dpkg -x "$f" / ; done
    ldconfig
    step_done
  fi

  # 1. build
  step "building hotcold in $BUILD"
  local cargs=(-DCMAKE_BUILD_TYPE=Release -DHC_BENCH=OFF "-DHC_PYTHON=$(command -v python3)")
  local nvcc
  nvcc="$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)"
  [[ -x "$nvcc" ]] && cargs+=(-DHC_CUDA=ON "-DCMAKE_CUDA_COMPILER=$nvcc") || cargs+=(-DHC_CUDA=OFF)
  if [[ ! -f "$BUILD/CMakeCache.txt" ]]; then
    cmake -S . -B "$BUILD" -G Ninja "${cargs[@]}" >> "$OUTDIR/gpu_check.log" 2>&1
  fi
  cmake --build "$BUILD" -j "$JOBS" >> "$OUTDIR/gpu_check.log" 2>&1 || { log "build FAILED (see log)"; return 1; }
  local HC=$BUILD/hotcold SYNTH=$BUILD/hc-synth-model
  "$HC" --version | tee -a "$OUTDIR/gpu_check.log"
  step_done

  local LLAMA_BENCH=""
  if ((LLAMA)) && [[ -f "$CARRY/llama-bench.tar.xz" ]]; then
    step "llama-bench as prepare built it"
    rm -rf build-llama && mkdir -p build-llama
    tar -C build-llama -xJf "$CARRY/llama-bench.tar.xz"
    if LD_LIBRARY_PATH="$ROOT/build-llama/bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
         build-llama/bin/llama-bench --list-devices >> "$OUTDIR/gpu_check.log" 2>&1; then
      LLAMA_BENCH=build-llama/bin/llama-bench
      export LD_LIBRARY_PATH="$ROOT/build-llama/bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    else
      log "the prebuilt llama-bench does not start here (see log): building it from source"
    fi
    step_done
  fi
  if ((LLAMA)) && [[ -z "$LLAMA_BENCH" && -f "$CARRY/llama.cpp.tar.xz" ]]; then
    step "building llama.cpp's llama-bench (llama-cpp-python $LLAMA_VERSION's llama.cpp)"
    rm -rf build-llama && mkdir -p build-llama
    tar -C build-llama -xJf "$CARRY/llama.cpp.tar.xz"
    local largs=(-DCMAKE_BUILD_TYPE=Release -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF
                 -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_CURL=OFF -DGGML_NATIVE=ON)
    [[ -x "$nvcc" ]] && largs+=(-DGGML_CUDA=ON "-DCMAKE_CUDA_COMPILER=$nvcc" -DCMAKE_CUDA_ARCHITECTURES=90)
    if cmake -S build-llama/llama.cpp -B build-llama/build -G Ninja "${largs[@]}" >> "$OUTDIR/gpu_check.log" 2>&1 &&
       cmake --build build-llama/build -j "$JOBS" --target llama-bench >> "$OUTDIR/gpu_check.log" 2>&1; then
      LLAMA_BENCH=build-llama/build/bin/llama-bench
    else
      log "llama-bench did not build (see log): no llama.cpp baseline"
    fi
    step_done
  fi

  # 2. tests
  local tests_line="not run"
  if ((TESTS)); then
    step "ctest -L 'gpu|vulkan|device'"
    local tlog="$OUTDIR/tests.log"
    ctest --test-dir "$BUILD" -L 'gpu|vulkan|device' --output-on-failure -j 4 --timeout 600 > "$tlog" 2>&1 || true
    tests_line="$(grep -E 'tests passed|No tests were found' "$tlog" | tail -1)"
    log "tests: $tests_line"
    grep -E '^\s+[0-9]+ - ' "$tlog" | head -40 | tee -a "$OUTDIR/gpu_check.log" >&2 || true
    step_done
  fi

  # 3. model and profile
  step "the statistical twin $TWIN ($LAYERS layers) and its profile"
  mkdir -p "$BUILD/models"
  local M=$BUILD/models/$TWIN.$TYPE.gguf STATS=$BUILD/models/$TWIN.$TYPE.stats.gguf
  local MP=$BUILD/models/$TWIN.$TYPE.pwri.gguf
  # Gates of rank 496 beside the twin's channel: its predictors, in the PowerInfer-layout copy
  # MP, are exact before quantisation at PowerInfer's size (rank 2 x 496 + 32 = 1024).
  local shape=(--layers "$LAYERS" --gate-rank 496)
  ((QUICK)) && shape=(--shape tiny --n-vocab 32000 --layers 4 --gate-rank 48)
  # Calibrated on the repo's docs, profiled on README + tools' docs (another text).
  cat docs/*.md > "$BUILD/models/calib.txt"
  cat README.md tools/*/README.md bench/*.md 2>/dev/null > "$BUILD/models/corpus.txt" || true
  "$SYNTH" --twin "$TWIN" "${shape[@]}" --type "$TYPE" --calib "$BUILD/models/calib.txt" \
    -t "$JOBS" -o "$M" >> "$OUTDIR/gpu_check.log" 2>&1
  # The same weights in PowerInfer's layout with the predictors (the same calibration: the
  # same flags give the same biases), for hotcold's --predictor runs.
  "$SYNTH" --twin "$TWIN" "${shape[@]}" --type "$TYPE" --calib "$BUILD/models/calib.txt" \
    --powerinfer -t "$JOBS" -o "$MP" >> "$OUTDIR/gpu_check.log" 2>&1
  "$HC" profile -m "$M" -f "$BUILD/models/corpus.txt" -o "$STATS" -c 256 --chunks 8 -t "$JOBS" \
    > "$OUTDIR/profile.txt" 2>> "$OUTDIR/gpu_check.log"
  cat "$OUTDIR/profile.txt" >> "$OUTDIR/gpu_check.log"
  # The predictors on that text: recall and precision per layer (4 chunks: the dense pass of a
  # PowerInfer-layout file runs its transposed down matrices as a prompt-sized sparse product,
  # slower than the matmul; on a 2-core AVX2 host 9x slower, docs/BENCHMARKS.md).
  "$HC" profile -m "$MP" -f "$BUILD/models/corpus.txt" -o "$BUILD/models/pwri.stats.gguf" -c 256 \
    --chunks 4 -t "$JOBS" > "$OUTDIR/profile_pwri.txt" 2>> "$OUTDIR/gpu_check.log"
  cat "$OUTDIR/profile_pwri.txt" >> "$OUTDIR/gpu_check.log"
  local file_bytes
  file_bytes="$(stat -c %s "$M")"
  log "model $M: $((file_bytes >> 20)) MiB"
  step_done

  # 4. devices and budgets
  if [[ -z "$DEVICES" ]]; then
    DEVICES=cpu
    "$HC" --version | grep -q 'cuda' && [[ "$("$HC" --version)" != *"(0 CUDA devices"* ]] && DEVICES="cuda,$DEVICES"
    "$HC" --version | grep -qE '^  0: .*\[gpu' && DEVICES="vulkan,$DEVICES"
  fi
  local budgets=(10 25 50 100)
  ((QUICK)) && { TOKENS=16; REPS=1; }
  local bench=(-p 0 -n "$TOKENS" -r "$REPS" --no-membw --json -t "$JOBS")
  local rows=() json_rows=()
  step "host-only baselines"
  local host_dense host_sparse host_pred ll_host=""
  host_dense="$("$HC" bench -m "$M" "${bench[@]}" 2>>"$OUTDIR/gpu_check.log")"
  host_sparse="$("$HC" bench -m "$M" "${bench[@]}" --sparse 2>>"$OUTDIR/gpu_check.log")"
  host_pred="$("$HC" bench -m "$MP" "${bench[@]}" --predictor 2>>"$OUTDIR/gpu_check.log")"
  if [[ -n "$LLAMA_BENCH" ]]; then
    ll_host="$("$LLAMA_BENCH" -m "$M" -ngl 0 -p 0 -n "$TOKENS" -r "$REPS" -t "$JOBS" -o json 2>>"$OUTDIR/gpu_check.log" |
               python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["avg_ts"])' || true)"
  fi
  log "host: dense $(json_num "$host_dense" tg.tps_mean) tok/s, sparse $(json_num "$host_sparse" tg.tps_mean) tok/s, sparse with predictors $(json_num "$host_pred" tg.tps_mean) tok/s, llama.cpp ${ll_host:-n/a} tok/s"
  step_done
  local dev
  for dev in ${DEVICES//,/ }; do
    local flag
    flag="$(device_flag "$dev")"
    local ovh
    ovh="$(dev_overhead "$M" "$flag")"
    log "$dev: fixed overhead $((ovh >> 20)) MiB (added to every budget)"
    for pct in "${budgets[@]}"; do
      step "$dev at ${pct}% of the model file"
      local gib
      # --quick: the tiny model's file is smaller than the executor's scratch (activations for
      # 512-token batches), so its budgets get 32 MiB on top; the real run uses the file alone.
      gib="$(python3 -c "print(($ovh + $file_bytes * $pct / 100 + ($QUICK and 32 * 2**20)) / 2**30)")"
      local hy de err ngl ll="" pred
      err="$OUTDIR/run-$dev-$pct.err"
      hy="$("$HC" bench -m "$M" "${bench[@]}" --sparse --stats "$STATS" --vram-budget "$gib" \
             --device "$flag" 2>"$err")" || hy="{}"
      pred="$(grep -oE 'predicted [0-9.]+ tok/s' "$err" | tail -1 | grep -oE '[0-9.]+' || true)"
      # PowerInfer's mode: the same split decided by the predictors (the PowerInfer-layout copy).
      local hp hp_t
      hp="$("$HC" bench -m "$MP" "${bench[@]}" --predictor --stats "$STATS" --vram-budget "$gib" \
             --device "$flag" 2>>"$err")" || hp="{}"
      hp_t="$(json_num "$hp" tg.tps_mean)"
      de="$("$HC" bench -m "$M" "${bench[@]}" --vram-budget "$gib" --device "$flag" 2>>"$err")" || de="{}"
      ngl="$(grep -oE '[0-9]+/[0-9]+ layers' "$err" | tail -1 | cut -d/ -f1 || true)"
      if [[ -n "$LLAMA_BENCH" && -n "$ngl" && $dev != cpu ]]; then
        ll="$("$LLAMA_BENCH" -m "$M" -ngl "$ngl" -p 0 -n "$TOKENS" -r "$REPS" -t "$JOBS" -o json 2>>"$err" |
              python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["avg_ts"])' || true)"
      fi
      local hy_t de_t ch
      hy_t="$(json_num "$hy" tg.tps_mean)"
      de_t="$(json_num "$de" tg.tps_mean)"
      ch="$(json_num "$hy" device.charged_mib)"
      # What the hot/cold step moved per token (bench's device counters): syncs, commands, and
      # bytes to / from the device.
      local moved
      moved="$(json_num "$hy" device.syncs_per_token) / $(json_num "$hy" device.ops_per_token) / $(json_num "$hy" device.h2d_bytes_per_token) / $(json_num "$hy" device.d2h_bytes_per_token)"
      local ratio err_pct
      ratio="$(python3 -c "a='$hy_t'; b='$ll'; print(f'{float(a)/float(b):.2f}x' if a and b else 'n/a')")"
      err_pct="$(python3 -c "a='$hy_t'; p='$pred'; print(f'{100*(float(p)-float(a))/float(a):+.1f}%' if a and p else 'n/a')")"
      local de_rep
      de_rep="$(json_num "$de" device.replayed_tokens)"
      local pratio
      pratio="$(python3 -c "a='$hp_t'; b='$ll'; print(f'{float(a)/float(b):.2f}x' if a and b else 'n/a')")"
      rows+=("| $dev | overhead + $pct% ($(python3 -c "print(round($gib*1024))") MiB) | ${hy_t:-FAIL} | ${hp_t:-FAIL} | ${pred:-n/a} | $err_pct | ${ch:-?} | $moved | ${de_t:-FAIL} (${ngl:-?} layers, ${de_rep:-?} replayed) | ${ll:-n/a} | $ratio | $pratio |")
      json_rows+=("{\"device\": \"$dev\", \"budget_pct\": $pct, \"hybrid_tps\": ${hy_t:-null}, \"hybrid_predictor_tps\": ${hp_t:-null}, \"predicted_tps\": ${pred:-null}, \"charged_mib\": ${ch:-null}, \"syncs_per_token\": $(json_num "$hy" device.syncs_per_token | grep . || echo null), \"ops_per_token\": $(json_num "$hy" device.ops_per_token | grep . || echo null), \"dense_offload_tps\": ${de_t:-null}, \"dense_layers\": ${ngl:-null}, \"llamacpp_tps\": ${ll:-null}}")
      log "${rows[-1]}"
      step_done
    done
  done

  # 4b. per-operation device time (device timers: CUDA events with HC_CUDA_PROFILE, Vulkan's
  # HC_VK_PROFILE), every operation waited for: everything on the device (-ngl 99), and the
  # hot/cold split at 25% of the file.
  local prof_txt=$OUTDIR/per_op.txt
  : > "$prof_txt"
  for dev in ${DEVICES//,/ }; do
    local env_var=""
    [[ $dev == cuda ]] && env_var=HC_CUDA_PROFILE
    [[ $dev == vulkan* ]] && env_var=HC_VK_PROFILE
    [[ -n "$env_var" ]] || continue
    local flag
    flag="$(device_flag "$dev")"
    local povh pgib
    povh="$(dev_overhead "$M" "$flag")"
    pgib="$(python3 -c "print(($povh + $file_bytes * 25 / 100 + ($QUICK and 32 * 2**20)) / 2**30)")"
    local pcase
    for pcase in "-ngl 99|everything on the device (-ngl 99)" "--sparse --stats $STATS --vram-budget $pgib|hot/cold split at 25%"; do
      step "per-operation time on $dev: ${pcase#*|}"
      local pargs
      read -r -a pargs <<<"${pcase%%|*}"
      {
        echo "### $dev, ${pcase#*|} ($env_var=1, $TOKENS tokens)"
        echo
        echo '```'
        env "$env_var=1" "$HC" bench -m "$M" -p 0 -n "$TOKENS" -r 1 --no-membw -t "$JOBS" "${pargs[@]}" \
          --device "$flag" 2>&1 >/dev/null | grep -A40 -E "^$env_var:" | grep -E "^($env_var:|  )" || echo "(no breakdown)"
        echo '```'
        echo
      } >> "$prof_txt"
      step_done
    done
  done

  # 4c. the dense mat-vec per weight type against the device's measured read bandwidth
  # (hc-device-bench; the issue's target is >= 70% on the GPU).
  local kern_txt=$OUTDIR/matvec.txt
  : > "$kern_txt"
  for dev in ${DEVICES//,/ }; do
    [[ $dev == cpu ]] && continue
    local kflag
    kflag="$(device_flag "$dev")"
    step "dense mat-vec on $dev (hc-device-bench)"
    local kargs=()
    ((QUICK)) && kargs=(--mib 16 --reps 1)
    "$BUILD/hc-device-bench" --device "$kflag" "${kargs[@]}" >> "$kern_txt" 2>>"$OUTDIR/gpu_check.log" ||
      echo "(hc-device-bench failed on $dev: see gpu_check.log)" >> "$kern_txt"
    echo >> "$kern_txt"
    step_done
  done

  # 5. mixture of experts
  local moe_rows=() MM="" mshape=()
  if ((MOE_LAYERS > 0)); then
    step "Qwen3-30B-A3B-shaped MoE model ($MOE_LAYERS layers, Q4_0) and its routing profile"
    MM=$BUILD/models/synth-qwen3moe.q4_0.gguf
    local MSTATS=$BUILD/models/synth-qwen3moe.stats.gguf
    mshape=(--shape qwen3-30b-a3b --arch qwen3moe --layers "$MOE_LAYERS")
    ((QUICK)) && mshape=(--shape tiny --arch qwen3moe --experts 16 --experts-used 4 --n-ff-exp 256 --layers 2)
    "$SYNTH" "${mshape[@]}" --type q4_0 -t "$JOBS" -o "$MM" >> "$OUTDIR/gpu_check.log" 2>&1
    "$HC" profile -m "$MM" -f "$BUILD/models/corpus.txt" -o "$MSTATS" -c 256 --chunks 8 -t "$JOBS" \
      >> "$OUTDIR/gpu_check.log" 2>&1
    local mbytes
    mbytes="$(stat -c %s "$MM")"
    step_done
    local mhost
    mhost="$("$HC" bench -m "$MM" "${bench[@]}" 2>>"$OUTDIR/gpu_check.log")"
    moe_rows+=("| host | host only | $(json_num "$mhost" tg.tps_mean) | - | - |")
    for dev in ${DEVICES//,/ }; do
      local flag
      flag="$(device_flag "$dev")"
      local cases=("-ngl 99|every layer and expert on the device"
                   "-ngl 99 --cpu-moe|llama.cpp's split: experts on the host")
      local pct
      local movh
      movh="$(dev_overhead "$MM" "$flag")"
      for pct in 25 50; do
        local mgib
        mgib="$(python3 -c "print(($movh + $mbytes * $pct / 100 + ($QUICK and 32 * 2**20)) / 2**30)")"
        cases+=("--vram-budget $mgib --stats $MSTATS|hot experts planned at ${pct}% of the file")
      done
      local c
      for c in "${cases[@]}"; do
        step "MoE on $dev: ${c#*|}"
        local out args
        read -r -a args <<<"${c%%|*}"
        out="$("$HC" bench -m "$MM" "${bench[@]}" "${args[@]}" --device "$flag" 2>>"$OUTDIR/gpu_check.log")" || out="{}"
        moe_rows+=("| $dev | ${c#*|} | $(json_num "$out" tg.tps_mean) | $(json_num "$out" device.experts) | $(json_num "$out" device.device_route_share) |")
        log "${moe_rows[-1]}"
        step_done
      done
    done
    if [[ -n "$LLAMA_BENCH" ]]; then
      local n
      for n in 0 "$MOE_LAYERS"; do
        local v
        v="$("$LLAMA_BENCH" -m "$MM" -ngl 99 -ncmoe "$n" -p 0 -n "$TOKENS" -r "$REPS" -t "$JOBS" -o json 2>>"$OUTDIR/gpu_check.log" |
             python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["avg_ts"])' || true)"
        moe_rows+=("| llama.cpp | -ngl 99 -ncmoe $n | ${v:-n/a} | - | - |")
      done
    fi
  fi

  # 6. hybrid serving: serve = run with the same device flags
  local serve_rows=()
  for dev in ${DEVICES//,/ }; do
    local flag
    flag="$(device_flag "$dev")"
    local sgib sovh
    sovh="$(dev_overhead "$M" "$flag")"
    sgib="$(python3 -c "print(($sovh + $file_bytes * 50 / 100 + ($QUICK and 32 * 2**20)) / 2**30)")"
    # One plan for both sides: planned under --vram-budget, serve leaves room for its other
    # slots' buffers and so may place other neurons than run (the first H100 run differed so).
    local splan=$BUILD/models/serve-$dev.plan.gguf
    "$HC" plan -m "$M" --stats "$STATS" --vram-budget "$sgib" --device "$flag" -o "$splan" \
      >> "$OUTDIR/gpu_check.log" 2>&1 || true
    local scase
    for scase in "--sparse --stats $STATS --plan $splan|hot/cold split at 50% (one plan)" "-ngl 99|-ngl 99 (dense offload)"; do
      step "serve on $dev: ${scase#*|}"
      local sargs sout
      read -r -a sargs <<<"${scase%%|*}"
      sout="$(python3 "$ROOT/bench/serve_check.py" --bin "$HC" -m "$M" -t "$JOBS" -n "$((QUICK ? 8 : 32))" \
                -- "${sargs[@]}" --device "$flag" 2>>"$OUTDIR/gpu_check.log")" || true
      [[ -n "$sout" ]] || sout='{}'
      serve_rows+=("| $dev | ${scase#*|} | $(json_num "$sout" equal) | $(json_num "$sout" tokens_per_s) | $(json_num "$sout" device_kv_mib) | $(json_num "$sout" device_neuron_share) |")
      log "${serve_rows[-1]}"
      step_done
    done
  done

  # 7. report
  {
    echo "# GPU check ($(date -u +%Y-%m-%d), $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || echo 'no GPU'))"
    echo
    echo "Command: \`bash bench/gpu_check.sh run\` (after \`bench/gpu_check.sh prepare\` here)."
    echo "Build: $("$HC" --version | sed -n 2p). Tests (\`ctest -L 'gpu|vulkan|device'\`): $tests_line."
    echo "Model: $M ($((file_bytes >> 20)) MiB, statistical twin $TWIN (hc-synth-model --twin: the same file for hotcold and llama.cpp), ${shape[*]}, $TYPE), decode $TOKENS tokens x $REPS, $JOBS host threads."
    echo "Its profile on another text than it was calibrated on (hotcold profile):"
    echo
    echo '```'
    grep -E '^(layer|  +[0-9]+ |  mean| mean)' "$OUTDIR/profile.txt" 2>/dev/null || true
    echo '```'
    echo
    echo "Predictors (hc-synth-model --twin ${shape[*]} --powerinfer: $MP, the same weights in PowerInfer's layout) on that text:"
    echo
    echo '```'
    sed -n '/^# predictor:/,/^predictor recall/p' "$OUTDIR/profile_pwri.txt" 2>/dev/null || true
    echo '```'
    echo
    echo "Host only: hotcold dense $(json_num "$host_dense" tg.tps_mean) tok/s, sparse $(json_num "$host_sparse" tg.tps_mean) tok/s, sparse with predictors $(json_num "$host_pred" tg.tps_mean) tok/s; llama.cpp ${ll_host:-n/a} tok/s."
    echo
    echo "| device | VRAM budget | hot/cold tok/s (thresholds) | hot/cold tok/s (predictors) | planner predicted (thresholds) | prediction error | charged MiB | hot/cold per token: syncs / commands / bytes to / bytes back | dense offload tok/s (steps replayed) | llama.cpp -ngl tok/s | thresholds vs llama.cpp | predictors vs llama.cpp |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
    printf '%s\n' "${rows[@]}"
    if [[ -s "$kern_txt" ]]; then
      echo
      echo "Dense mat-vec, one token (\`hc-device-bench\`: 1 GiB of weights per type, best of 5 rounds):"
      echo
      cat "$kern_txt"
    fi
    if [[ -s "$prof_txt" ]]; then
      echo
      echo "Per-operation device time (each operation waited for, so slower than the decode above):"
      echo
      cat "$prof_txt"
    fi
    if ((${#moe_rows[@]})); then
      echo
      echo "Mixture of experts: $MM (${mshape[*]}, Q4_0, routing profiled on the docs), decode $TOKENS tokens x $REPS."
      echo
      echo "| device | placement | tok/s | experts on device | routed experts on device |"
      echo "|---|---|---|---|---|"
      printf '%s\n' "${moe_rows[@]}"
    fi
    echo
    echo "Hybrid serving (\`bench/serve_check.py\`: 2 slots, 3 greedy prompts at once, each compared with \`hotcold run\`):"
    echo
    echo "| device | placement | serve = run | tok/s (3 requests together) | device KV MiB | device neuron share |"
    echo "|---|---|---|---|---|---|"
    printf '%s\n' "${serve_rows[@]}"
    echo
    echo "Total: $((SECONDS - t_all)) s."
  } > "$OUTDIR/gpu_check.md"
  printf '{"tests": "%s", "rows": [%s]}\n' "$tests_line" "$(IFS=,; echo "${json_rows[*]}")" > "$OUTDIR/gpu_check.json"
  cat "$OUTDIR/gpu_check.md"
}

cmd="${1:-}"
shift || true
case "$cmd" in
  prepare) prepare "$@" ;;
  run)
    while (($#)); do
      case "$1" in
        --carry) CARRY="$2"; shift ;;
        --devices) DEVICES="$2"; shift ;;
        --out) OUTDIR="$2"; shift ;;
        --layers) LAYERS="$2"; shift ;;
        --twin) TWIN="$2"; shift ;;
        --moe-layers) MOE_LAYERS="$2"; shift ;;
        --type) TYPE="$2"; shift ;;
        --tokens) TOKENS="$2"; shift ;;
        --reps) REPS="$2"; shift ;;
        --quick) QUICK=1 ;;
        --no-tests) TESTS=0 ;;
        --no-llama) LLAMA=0 ;;
        --build) BUILD="$2"; shift ;;
        -h | --help) usage; exit 0 ;;
        *) echo "gpu_check.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
      esac
      shift
    done
    run_check ;;
  -h | --help | "") usage; [[ -n "$cmd" ]] || exit 2 ;;
  *) echo "gpu_check.sh: unknown command '$cmd' (prepare or run)" >&2; exit 2 ;;
esac
