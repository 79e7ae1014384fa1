"""Shared fixtures for the llama.cpp reference tests (tests/reference/test_*.py).

ctest runs each file as `$HC_PYTHON -m pytest -q -x FILE` from the repo root with
HOTCOLD_BIN (the hotcold binary) and HOTCOLD_ROOT (the repo root) set. Run one by hand with
    HOTCOLD_BIN=build/hotcold ~/.cache/hotcold/venv/bin/python -m pytest -q tests/reference

The reference is llama.cpp through llama-cpp-python (tools/ref/llamacpp_ref.py): greedy by
argmax, F32 KV cache, no flash attention. Contract checked against `hotcold run`, as in
llama.cpp's examples: generation stops *before* an end-of-generation token (it is neither
printed nor listed by --ids); text is the concatenation of token pieces with control tokens
rendered empty; `run` may end its text with one newline.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(os.environ.get("HOTCOLD_ROOT", Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(ROOT / "tools" / "ref"))

import llamacpp_ref  # noqa: E402

CACHE = Path(os.environ.get("HOTCOLD_CACHE", Path.home() / ".cache" / "hotcold"))
MODELS = CACHE / "models"
SHARED = Path(os.environ.get("HOTCOLD_SHARED", ROOT.parent / "shared"))
THREADS = 2  # `hotcold -t 2`, the CLI contract
# llama.cpp's threads. Results are bitwise identical for any count (each output row is computed
# by one thread), but ggml's spinning thread pool collapses when cores are oversubscribed
# (ctest -j2 on 2 cores): measured 3.6-14 tok/s with 2 threads vs 60-74 tok/s with 1.
REF_THREADS = int(os.environ.get("HOTCOLD_REF_THREADS", "1"))


def _sha256_file(path: Path, _memo: dict = {}) -> str:
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns)
    if key not in _memo:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
        _memo[key] = h.hexdigest()
    return _memo[key]


def cached_reference(kind: str, inputs: dict, files: list[Path], compute):
    """JSON-cache a llama.cpp result under $CACHE/ref, keyed by the content of `files`, the
    parameters in `inputs`, the llama-cpp-python version and the harness source."""
    key = {
        "kind": kind,
        "inputs": inputs,
        "files": [_sha256_file(Path(f)) for f in files],
        "llama_cpp_python": llamacpp_ref.llama_cpp_version(),
        "llama_cpp_build": llamacpp_ref.system_info(),
        "harness": _sha256_file(Path(llamacpp_ref.__file__)),
    }
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:24]
    path = CACHE / "ref" / f"{kind}-{digest}.json"
    if path.exists():
        try:
            return json.loads(path.read_text())["result"]
        except (ValueError, KeyError):
            pass  # corrupt entry: recompute
    result = compute()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")  # ctest -j2 may race on the same entry
    tmp.write_text(json.dumps({"key": key, "result": result}))
    tmp.replace(path)
    return result


# ---- the hotcold binary ------------------------------------------------------------------------

@pytest.fixture(scope="session")
def hotcold_bin() -> Path:
    b = Path(os.environ.get("HOTCOLD_BIN", ROOT / "build" / "hotcold"))
    if not b.is_file():
        pytest.fail(f"hotcold binary not found at {b} (build it, or set HOTCOLD_BIN)")
    return b


@pytest.fixture(scope="session")
def synth_bin(hotcold_bin) -> Path:
    """hc-synth-model is built beside hotcold (tools/synth/CMakeLists.txt)."""
    b = Path(os.environ.get("HC_SYNTH_BIN", hotcold_bin.parent / "hc-synth-model"))
    if not b.is_file():
        pytest.fail(f"{b} not found: build the hc-synth-model target (or set HC_SYNTH_BIN)")
    return b


class HotcoldError(AssertionError):
    pass


def hotcold_both(bin_path: Path, *args, timeout: float = 600) -> tuple[bytes, bytes]:
    """Run `hotcold ARGS`; return (stdout, stderr); fail with the command and stderr on error."""
    cmd = [str(bin_path), *map(str, args)]
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout,
                           stdin=subprocess.DEVNULL, cwd=ROOT)
    except subprocess.TimeoutExpired:
        raise HotcoldError(f"timed out after {timeout} s: {_show(cmd)}") from None
    if p.returncode != 0:
        err = p.stderr.decode("utf-8", "replace")[-3000:]
        raise HotcoldError(f"exit status {p.returncode}: {_show(cmd)}\n--- stderr ---\n{err}")
    return p.stdout, p.stderr


def hotcold(bin_path: Path, *args, timeout: float = 600) -> bytes:
    """Run `hotcold ARGS`; return stdout bytes."""
    return hotcold_both(bin_path, *args, timeout=timeout)[0]


def _show(cmd: list[str]) -> str:
    return " ".join(repr(c) if (not c or any(ch in c for ch in " \n\t'\"")) else c for c in cmd)


def parse_ids(out: bytes) -> list[int]:
    return [int(line) for line in out.decode().split()]


def hotcold_greedy_ids(bin_path: Path, model: Path, prompt: str, n: int,
                       n_batch: int = 512) -> list[int]:
    return parse_ids(hotcold(bin_path, "run", "-m", model, "-p", prompt, "-n", n,
                             "--temp", 0, "-t", THREADS, "-b", n_batch, "--ids"))


def hotcold_greedy_text(bin_path: Path, model: Path, prompt: str, n: int,
                        n_batch: int = 512) -> bytes:
    return hotcold(bin_path, "run", "-m", model, "-p", prompt, "-n", n,
                   "--temp", 0, "-t", THREADS, "-b", n_batch)


def hotcold_tokenize(bin_path: Path, model: Path, text: str, no_bos: bool) -> list[int]:
    args = ["tokenize", "-m", model, "-p", text] + (["--no-bos"] if no_bos else [])
    return parse_ids(hotcold(bin_path, *args))


def same_text(out: bytes, ref: bytes) -> bool:
    """hotcold may end the generated text with one newline."""
    return out == ref or out == ref + b"\n"


def first_difference(a: list[int], b: list[int]) -> str:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return f"first difference at index {i}: hotcold {x}, llama.cpp {y}"
    return f"lengths differ: hotcold {len(a)}, llama.cpp {len(b)}"


def greedy_divergence(ref, prompt: str, got: list[int], want: list[int]) -> str:
    """Explain where hotcold's greedy ids leave llama.cpp's: at the first differing step,
    llama.cpp's logit margin between its token and hotcold's (a margin of a few 1e-3 is a
    near-tie that rounding differences flip; a large one is a real discrepancy)."""
    msg = first_difference(got, want)
    i = next((k for k, (x, y) in enumerate(zip(got, want)) if x != y), None)
    if i is None:
        return msg
    lg = ref.last_logits(ids=ref.prompt_ids(prompt) + want[:i])
    top2 = sorted(lg.tolist(), reverse=True)[:2]
    rank = int((lg > lg[got[i]]).sum())
    return (f"{msg}; llama.cpp logits there: its token {lg[want[i]]:.5f}, hotcold's token "
            f"{lg[got[i]]:.5f} (margin {lg[want[i]] - lg[got[i]]:.5f}, rank {rank}; "
            f"top1-top2 gap {top2[0] - top2[1]:.5f}); "
            f"hotcold {ref.piece(got[i])!r} vs llama.cpp {ref.piece(want[i])!r}")


# ---- models ------------------------------------------------------------------------------------

def require_file(path: Path, how: str) -> Path:
    if not path.is_file():
        pytest.fail(f"{path} is missing: {how}")
    return path


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    if not SHARED.is_dir():
        pytest.fail(f"{SHARED} not found (../shared beside the repo, or set HOTCOLD_SHARED)")
    return SHARED
