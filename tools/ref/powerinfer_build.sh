#!/usr/bin/env bash
# Builds PowerInfer (SJTU-IPADS/PowerInfer) CPU-only, as the reference of
# tests/reference/test_powerinfer_parity.py (tools/ref/powerinfer_goldens.py runs it).
#
#   tools/ref/powerinfer_build.sh [GIT_DIR]
#
# GIT_DIR: a git repository holding PowerInfer's commit (a bare mirror is enough; default
# /work/.mirror/SJTU-IPADS+PowerInfer/repo, or $POWERINFER_GIT). Nothing is downloaded.
# Exports commit $POWERINFER_COMMIT (default d3ebd7c, the one the goldens were made with) into
# ${HOTCOLD_CACHE:-$HOME/.cache/hotcold}/powerinfer/src, builds it there (Release, no CUDA,
# -j${POWERINFER_JOBS:-2}) and leaves `main` and `perplexity` in .../powerinfer/bin, with
# .../powerinfer/bin/COMMIT naming the full commit they were built from, and beside them
# powerinfer_margins (tools/ref/powerinfer_margins.cpp compiled against the libllama built
# here). A second run for the same commit does nothing (but recompile a changed margins tool).
#
# The export leaves out what the goldens do not need and a shallow mirror may lack: the
# smallthinker/ tree (another engine with git submodules) and any file whose blob is absent
# from GIT_DIR (e.g. models/ggml-vocab-*.gguf, test vocabularies).
# -march=native is kept (PowerInfer's default, LLAMA_NATIVE=ON): the goldens record the
# machine's features (system_info) next to the numbers.
set -euo pipefail

GIT_DIR_IN="${1:-${POWERINFER_GIT:-/work/.mirror/SJTU-IPADS+PowerInfer/repo}}"
COMMIT="${POWERINFER_COMMIT:-d3ebd7c}"
JOBS="${POWERINFER_JOBS:-2}"
CACHE="${HOTCOLD_CACHE:-$HOME/.cache/hotcold}"
ROOT="$CACHE/powerinfer"
SRC="$ROOT/src"
BUILD="$ROOT/build"
BIN="$ROOT/bin"

say() { printf 'powerinfer_build: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

[ -d "$GIT_DIR_IN" ] || die "no git directory at '$GIT_DIR_IN' (pass one, or set POWERINFER_GIT)"
FULL="$(git --git-dir="$GIT_DIR_IN" rev-parse --verify --quiet "$COMMIT^{commit}")" ||
  die "commit $COMMIT not found in $GIT_DIR_IN"
say "PowerInfer commit $FULL (from $GIT_DIR_IN)"

# powerinfer_margins (tools/ref/powerinfer_margins.cpp, beside this script): PowerInfer's logits
# along a greedy continuation, compiled against the libllama built here.
MARGINS_SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/powerinfer_margins.cpp"
build_margins() {
  say "compiling powerinfer_margins against libllama"
  "${CXX:-g++}" -O2 -std=c++11 -march=native -I"$SRC" "$MARGINS_SRC" "$BUILD/libllama.a" \
    "$BUILD/libggml_static.a" -lpthread -o "$BIN/powerinfer_margins" ||
    die "cannot compile $MARGINS_SRC"
  sha256sum "$MARGINS_SRC" | cut -d' ' -f1 > "$BIN/MARGINS_SHA"
}

built_commit="$(cat "$BIN/COMMIT" 2>/dev/null || true)"
if [ -x "$BIN/main" ] && [ -x "$BIN/perplexity" ] && [ "$built_commit" = "$FULL" ]; then
  margins_sha="$(sha256sum "$MARGINS_SRC" | cut -d' ' -f1)"
  if [ ! -x "$BIN/powerinfer_margins" ] ||
     [ "$(cat "$BIN/MARGINS_SHA" 2>/dev/null || true)" != "$margins_sha" ]; then
    build_margins
  fi
  say "already built: $BIN/{main,perplexity,powerinfer_margins} (commit $FULL)"
  exit 0
fi

# ---- export -------------------------------------------------------------------------------
say "exporting into $SRC"
rm -rf "$SRC" "$BUILD" "$BIN"
mkdir -p "$SRC" "$BUILD" "$BIN"
# Paths whose objects the mirror lacks (large files and submodules it was cloned without).
excludes=(":(exclude)smallthinker")
while read -r path; do
  excludes+=(":(exclude)$path")
  say "  skipping $path (not in the mirror)"
done < <(git --git-dir="$GIT_DIR_IN" ls-tree -r "$FULL" |
           awk -F'\t' '$2 !~ /^smallthinker\// {split($1, a, " "); print a[3] "\t" $2}' |
           while IFS=$'\t' read -r obj path; do
             git --git-dir="$GIT_DIR_IN" cat-file -e "$obj" 2>/dev/null || printf '%s\n' "$path"
           done)
# (git archive still names an excluded missing blob on stderr while it walks the tree; it is
# not read, and the archive is complete: keep that message out of the log.)
git --git-dir="$GIT_DIR_IN" archive --format=tar "$FULL" -- . "${excludes[@]}" \
  2> >(grep -v -e '^error: invalid object' -e "^error: cannot read" >&2) | tar -x -C "$SRC"
printf '%s\n' "$FULL" > "$SRC/COMMIT"

# ---- build --------------------------------------------------------------------------------
say "configuring (Release, LLAMA_CUBLAS=OFF) in $BUILD"
generator="Unix Makefiles"
command -v ninja >/dev/null && generator=Ninja
if ! cmake -S "$SRC" -B "$BUILD" -G "$generator" -DCMAKE_BUILD_TYPE=Release -DLLAMA_CUBLAS=OFF \
     -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DBUILD_SHARED_LIBS=OFF \
     >"$BUILD/configure.log" 2>&1; then
  tail -n 40 "$BUILD/configure.log" >&2
  die "cmake configure failed (log: $BUILD/configure.log)"
fi
say "building main, perplexity and libllama with -j$JOBS (a few minutes on 2 cores)"
t0=$(date +%s)
set +e
cmake --build "$BUILD" --target main perplexity llama ggml_static -j "$JOBS" 2>&1 |
  tee "$BUILD/build.log" | grep --line-buffered -E '^\[[0-9]+/[0-9]+\]' |
  sed -u 's/^/powerinfer_build:   /' >&2
status="${PIPESTATUS[0]}"
set -e
if [ "$status" != 0 ]; then
  tail -n 40 "$BUILD/build.log" >&2
  die "build failed (log: $BUILD/build.log)"
fi
for exe in main perplexity; do
  f="$(find "$BUILD" -type f -name "$exe" -perm -u+x | head -n 1)"
  [ -n "$f" ] || die "built, but no '$exe' executable under $BUILD"
  cp "$f" "$BIN/$exe"
done
build_margins
printf '%s\n' "$FULL" > "$BIN/COMMIT"
say "done in $(( $(date +%s) - t0 )) s: $BIN/{main,perplexity,powerinfer_margins} (commit $FULL)"
