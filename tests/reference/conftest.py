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
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
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


@pytest.fixture(scope="module")
def wiki_head(request, shared_dir, tmp_path_factory) -> Path:
    """The first TEXT_BYTES bytes (a constant of the requesting test module) of WikiText-2's
    test set, as a file."""
    n_bytes = getattr(request.module, "TEXT_BYTES", None)
    if n_bytes is None:
        pytest.fail(f"{request.module.__name__} asks for wiki_head but sets no TEXT_BYTES")
    wiki = require_file(shared_dir / "data" / "wikitext-2" / "wiki.test.raw",
                        "../shared/data/wikitext-2 is needed")
    path = tmp_path_factory.mktemp("wiki") / "wiki.test.head.raw"
    path.write_bytes(wiki.read_bytes()[:n_bytes])
    return path


# ---- hc-synth-model fixtures against llama.cpp (test_falcon.py, test_moe_qwen.py) ---------------

def synth_models(synth_bin: Path, work: Path, common: list[str], variants: dict[str, list[str]],
                 prefix: str = "", llamacpp_quantised: bool = False):
    """The body of a module-scoped `model` fixture: model(variant, wtype, *extra) -> the file
    `hc-synth-model COMMON VARIANTS[variant] --type WTYPE EXTRA`, generated once, in `work`.
    llamacpp_quantised: wtypes other than f32 / f16 are quantised by llama.cpp's own quantiser
    (llamacpp_ref.quantize) from the F32 file instead of by hc-synth-model."""
    made: dict[tuple, Path] = {}

    def get(variant: str, wtype: str, *extra: str) -> Path:
        key = (variant, wtype, *extra)
        if key in made:
            return made[key]
        path = work / f"{prefix}{'-'.join(key)}.gguf"
        if llamacpp_quantised and wtype not in ("f32", "f16"):
            llamacpp_ref.quantize(get(variant, "f32", *extra), path, wtype,
                                  n_threads=REF_THREADS)
        else:
            args = [*common, *variants[variant], "--type", wtype, *extra]
            p = subprocess.run([str(synth_bin), *args, "-t", str(THREADS), "-o", str(path)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               stdin=subprocess.DEVNULL)
            assert p.returncode == 0, \
                f"hc-synth-model {' '.join(args)} failed:\n{p.stderr.decode()[-3000:]}"
        made[key] = path
        return path
    return get


@pytest.fixture(scope="module")
def refs():
    """ref(path, kv_type="f16") -> llama.cpp on the file, loaded once per module."""
    opened: dict[tuple, llamacpp_ref.LlamaRef] = {}

    def get(path: Path, kv_type: str = "f16") -> llamacpp_ref.LlamaRef:
        key = (str(path), kv_type)
        if key not in opened:
            try:
                opened[key] = llamacpp_ref.LlamaRef(path, n_threads=REF_THREADS, kv_type=kv_type)
            except RuntimeError as e:
                pytest.fail(f"llama.cpp cannot load {path}: {e}")
        return opened[key]
    yield get
    for r in opened.values():
        r.close()


def rel_diff(got: np.ndarray, want: np.ndarray) -> float:
    """max |got - want| relative to max |want|."""
    return float(np.abs(got - want).max() / np.abs(want).max())


def llamacpp_vs_float64(ref, exact, prompts: dict[str, str], label: str):
    """For each prompt: (name, ids, llama.cpp's last-token logits, the float64 model's), the
    latter exact.logits(ids)[-1], computed last (the model's state is that call's), checked
    not degenerate."""
    for name, prompt in prompts.items():
        ids = ref.prompt_ids(prompt)
        got = ref.last_logits(ids=ids).astype(np.float64)
        want = exact.logits(ids)[-1]
        assert np.isfinite(want).all() and 0.3 < want.std() < 3.0, \
            f"{label}: degenerate logits (std {want.std():.3g})"
        yield name, ids, got, want


def hotcold_last_logits(bin_path: Path, model: Path, prompt: str, out: Path) -> np.ndarray:
    """`hotcold run -n 0 --logits-out OUT`: the prompt's last-token logits, as float64."""
    hotcold(bin_path, "run", "-m", model, "-p", prompt, "-n", 0, "-t", THREADS,
            "--logits-out", out)
    return np.fromfile(out, dtype="<f4").astype(np.float64)


def check_last_token_logits(bin_path: Path, ref, model: Path, prompts: dict[str, str],
                            n_vocab: int, tol: float, label: str, work: Path,
                            premise=None) -> None:
    """hotcold's last-token logits of each prompt within tol x max|logit| of llama.cpp's (ref);
    all prompts are run, then every failure is reported. premise(name, prompt), if given,
    asserts what must hold for the prompt before hotcold is compared (after the check that
    llama.cpp's logits are not degenerate)."""
    failures = []
    for name, prompt in prompts.items():
        want = ref.last_logits(prompt).astype(np.float64)
        assert want.size == n_vocab and np.isfinite(want).all() and 0.3 < want.std() < 3.0, \
            f"degenerate reference logits: std {want.std():.3g}"
        if premise is not None:
            premise(name, prompt)
        got = hotcold_last_logits(bin_path, model, prompt, work / f"{name}.f32")
        assert got.size == n_vocab, f"{got.size} logits written, expected {n_vocab}"
        rel = rel_diff(got, want)
        worst = int(np.argmax(np.abs(got - want)))
        print(f"\n{label} {name}: {rel:.2e} of max|logit|")
        if rel > tol:
            failures.append(f"{name!r}: max |diff| {rel:.3g} of max|logit| > {tol} at "
                            f"token {worst}: hotcold {got[worst]!r}, llama.cpp {want[worst]!r}")
    assert not failures, f"{label}:\n" + "\n".join(failures)


_FINAL = re.compile(rb"Final estimate: PPL = ([0-9.eE+-]+) \+/- ([0-9.eE+-]+)")


def check_perplexity_all_chunks(bin_path: Path, ref, model: Path, text: Path, n_ctx: int,
                                rel_tol: float, kind: str, label: str) -> None:
    """hotcold's perplexity over all n_ctx-token chunks of `text` within rel_tol of llama.cpp's
    (ref; cached as `kind`)."""
    raw = text.read_bytes()
    raw = raw[:-1] if raw.endswith(b"\n") else raw  # as llama.cpp's -f (llamacpp_ref)
    n_chunks = len(ref.tokenize(raw, add_special=True)) // n_ctx  # all of them

    def compute():
        r = ref.perplexity(text.read_bytes(), n_ctx=n_ctx, n_chunks=n_chunks)
        return {"ppl": r.ppl, "stderr": r.stderr, "chunk_ppl": r.chunk_ppl}
    want = cached_reference(kind, {"n_ctx": n_ctx, "chunks": n_chunks, "kv": ref.kv_type},
                            [model, text], compute)
    out, err = hotcold_both(bin_path, "perplexity", "-m", model, "-f", text,
                            "-c", n_ctx, "--chunks", n_chunks, "-t", THREADS, timeout=300)
    m = _FINAL.findall(out + b"\n" + err)
    assert m, f"no 'Final estimate: PPL = X +/- Y' in the output:\n{(out + err)[-2000:]!r}"
    ppl = float(m[-1][0])
    rel = abs(ppl - want["ppl"]) / want["ppl"]
    print(f"\n{label}: hotcold {ppl:.4f}, llama.cpp {want['ppl']:.4f} "
          f"({100 * (ppl / want['ppl'] - 1):+.3f}%)")
    assert rel <= rel_tol, (f"{label}: PPL {ppl:.4f} vs llama.cpp "
                            f"{want['ppl']:.4f} ({100 * rel:.3f}% > {100 * rel_tol}%)")


def llamacpp_greedy_gaps(ref, model: Path, prompt: str, n: int, kind: str,
                         n_batch: int | None = None) -> dict:
    """llama.cpp's n greedy ids and its top-2 logit gap before each of them (cached as `kind`):
    {"prompt_ids", "ids", "gaps"}. n_batch: the prompt in batches of n_batch, then one token
    at a time (None: llamacpp_ref's default, 512, and no n_batch in the cache key)."""
    batch = {} if n_batch is None else {"n_batch": n_batch}

    def compute():
        g = ref.greedy(prompt, n, **batch)
        gaps = []
        for i in range(len(g.ids)):
            top2 = np.sort(ref.last_logits(ids=g.prompt_ids + g.ids[:i], **batch))[-2:]
            gaps.append(float(top2[1] - top2[0]))
        return {"prompt_ids": g.prompt_ids, "ids": g.ids, "gaps": gaps}
    return cached_reference(kind, {"prompt": prompt, "n": n, "kv": ref.kv_type, **batch},
                            [model], compute)


def check_greedy_decided(bin_path: Path, model: Path, wants: dict[int, dict[str, dict]],
                         n: int, near_tie: float, min_decisive: int, label: str,
                         route_tie: float | None = None) -> None:
    """hotcold's n greedy ids against llama.cpp's, for each batch size n_batch of `wants`
    (n_batch -> prompt -> llamacpp_greedy_gaps(), plus "route_gaps" when route_tie is given):
    identical up to llama.cpp's first undecided step (all of it on decisive prompts). A step
    is decided when llama.cpp's top-2 logit gap is >= near_tie and, with route_tie, every
    router gap it depends on is >= route_tie. The premise, on the references alone, first: at
    each batch size >= min_decisive prompts decide all n steps. hotcold's tokenization of each
    prompt is checked at the first batch size. All prompts are run, then the test fails."""
    crit = f"top-2 gap >= {near_tie}" + ("" if route_tie is None else
                                           f" and router gaps >= {route_tie}")
    report, failed, first_batch = [], False, next(iter(wants))
    for n_batch, want in wants.items():
        ties = {p: next((i for i, g in enumerate(w["gaps"]) if g < near_tie or (
            route_tie is not None and w["route_gaps"][i] < route_tie)), len(w["ids"]))
            for p, w in want.items()}
        decisive = [p for p, w in want.items() if len(w["ids"]) == n and ties[p] == n]
        assert len(decisive) >= min_decisive, (
            f"{label} batch {n_batch}: {len(decisive)} prompts decisive ({crit} at all {n} "
            f"steps), expected >= {min_decisive}: pick other GREEDY_PROMPTS")
        for prompt, w in want.items():
            if n_batch == first_batch:
                assert hotcold_tokenize(bin_path, model, prompt, no_bos=False) == \
                    w["prompt_ids"], f"{prompt!r}: hotcold tokenizes differently from llama.cpp"
            got = hotcold_greedy_ids(bin_path, model, prompt, n, n_batch=n_batch)
            k = ties[prompt]
            same = got[:k] == w["ids"][:k] and (k < len(w["ids"]) or len(got) == len(w["ids"]))
            failed |= not same
            i = next((j for j, (a, b) in enumerate(zip(got, w["ids"])) if a != b), None)
            report.append(
                f"  batch {n_batch} {prompt!r} "
                f"({'decisive' if prompt in decisive else f'first {k} steps'}): "
                f"{'ok' if same else 'FAILED'}" + (
                    "" if i is None else f", first difference at {i}: hotcold {got[i:i + 4]}, "
                    f"llama.cpp {w['ids'][i:i + 4]} (llama.cpp's gap {w['gaps'][i]:.4f}" + (
                        "" if route_tie is None else f", router gap {w['route_gaps'][i]:.2g}")
                    + ")"))
    print(f"\n{label}:\n" + "\n".join(report))
    assert not failed, f"{label}: greedy ids differ from llama.cpp:\n" + "\n".join(report)
