#!/usr/bin/env bash
# Builds llama.cpp's own tools from the llama.cpp that the reference package (llama-cpp-python,
# scripts/setup.sh) vendors, for side-by-side benchmarks: llama-bench (bench/compare_llamacpp.py
# --llama-bench) and llama-server (bench/serve_load.py --llama-server), and keeps ggml's
# static libraries and headers (ggml/lib, ggml/include) for bench/ggml_kernel_compare.sh. Native
# instruction sets but no AMX, as setup builds the reference (its AMX path crashes on some hosts
# of this machine kind). Not part of CI: the build takes ~6-10 minutes on 2 cores.
#
#   scripts/build_llama_cpp.sh          prints the directory holding bin/llama-bench and
#                                       bin/llama-server (building them first if need be)
#
# Cached under $HOTCOLD_CACHE/llama.cpp/<key> (HOTCOLD_CACHE defaults to ~/.cache/hotcold), the
# key a hash of the version, the flags and this CPU's feature list; the source is the sdist
# setup.sh keeps in $HOTCOLD_CACHE/wheels (downloaded with pip when missing). Progress goes to
# stderr, the directory to stdout. Exit status: 0 built (or cached); 1 a step failed.
set -euo pipefail

VERSION=0.3.36  # scripts/setup.sh's LLAMA_CPP_PYTHON_VERSION
CACHE="${HOTCOLD_CACHE:-$HOME/.cache/hotcold}"
PY="$CACHE/venv/bin/python"
JOBS="${JOBS:-$(nproc)}"
NO_AMX="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
ARGS=(-DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=ON -DGGML_CUDA=OFF -DGGML_VULKAN=OFF
      -DGGML_METAL=OFF -DGGML_BLAS=OFF -DGGML_RPC=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF
      -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON
      -DLLAMA_BUILD_APP=OFF "-DCMAKE_C_FLAGS=$NO_AMX" "-DCMAKE_CXX_FLAGS=$NO_AMX")
KEY="$(printf '%s\n%s\n%s\n' "$VERSION" "${ARGS[*]}" "$(grep -m1 '^flags' /proc/cpuinfo || true)" |
       sha256sum | cut -c1-12)"
DIR="$CACHE/llama.cpp/$KEY"
log() { echo "[build_llama_cpp] $*" >&2; }

if [[ -x "$DIR/bin/llama-bench" && -x "$DIR/bin/llama-server" && -s "$DIR/ggml/lib/libggml-cpu.a" ]]; then
  log "cached: $DIR"
  echo "$DIR"
  exit 0
fi
SDIST="$CACHE/wheels/llama_cpp_python-$VERSION.tar.gz"
if [[ ! -s "$SDIST" ]]; then
  [[ -x "$PY" ]] || { log "error: $PY not found: run scripts/setup.sh first"; exit 1; }
  log "pip download llama-cpp-python==$VERSION (sdist)"
  mkdir -p "$CACHE/wheels"
  "$PY" -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d "$CACHE/wheels"
fi
rm -rf "$DIR.tmp"
mkdir -p "$DIR.tmp/src"
log "unpacking $SDIST"
tar -C "$DIR.tmp/src" -xzf "$SDIST" --strip-components=3 "llama_cpp_python-$VERSION/vendor/llama.cpp"
log "configuring (native, no AMX)"
cmake -S "$DIR.tmp/src" -B "$DIR.tmp/build" -G Ninja "${ARGS[@]}" > "$DIR.tmp/cmake.log" 2>&1 ||
  { log "error: configure failed (see $DIR.tmp/cmake.log)"; exit 1; }
log "building llama-bench and llama-server with $JOBS jobs (~10 min on 2 cores)"
start=$SECONDS
cmake --build "$DIR.tmp/build" -j "$JOBS" --target llama-bench llama-server ggml ggml-base ggml-cpu 2>&1 |
  awk 'NR % 25 == 0 { print "[build_llama_cpp]   " $0 > "/dev/stderr" }' ||
  { log "error: build failed"; exit 1; }
[[ -x "$DIR.tmp/build/bin/llama-bench" && -x "$DIR.tmp/build/bin/llama-server" ]] ||
  { log "error: the build did not produce bin/llama-bench and bin/llama-server"; exit 1; }
mkdir -p "$DIR/bin"
cp "$DIR.tmp/build/bin/llama-bench" "$DIR.tmp/build/bin/llama-server" "$DIR/bin/"  # static
# ggml's static libraries and headers, for kernel references built against them
# (bench/ggml_kernel_compare.sh); link.txt: the extra link flags they need.
mkdir -p "$DIR/ggml/lib" "$DIR/ggml/include"
find "$DIR.tmp/build/ggml/src" -maxdepth 2 -name 'libggml*.a' -exec cp {} "$DIR/ggml/lib/" \;
cp "$DIR.tmp/src/ggml/include/"*.h "$DIR/ggml/include/"
# (grep -c, not -q: under pipefail -q would stop nm with SIGPIPE and fail the test)
if nm "$DIR/ggml/lib/libggml-cpu.a" 2>/dev/null | grep -c 'U GOMP_' > /dev/null; then  # OpenMP
  echo "-fopenmp -pthread" > "$DIR/ggml/link.txt"
else
  echo "-pthread" > "$DIR/ggml/link.txt"
fi
rm -rf "$DIR.tmp"
log "built in $((SECONDS - start)) s: $DIR/bin"
echo "$DIR"
