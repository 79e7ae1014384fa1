"""Falcon (hc-synth-model --arch falcon, llama.cpp's layout): hotcold vs llama.cpp.

Fixtures: n_embd 256, n_ff 768, 4 heads, 2 layers, the synthetic 512-token SentencePiece
vocabulary (as test_synthetic.py), LayerNorm weights 1 +- 0.25 and biases 0.05 x N(0, 1); the
attention reads attn_norm(x) and its K/V heads are shared as
  gqa    4 query heads, 2 K/V heads (the tiny shape),
  mqa    1 K/V head (--n-head-kv 1: Falcon-7B's multi-query attention),
  norm2  2 K/V heads, a second LayerNorm attn_norm_2 for the attention (--falcon-norm2:
         Falcon-40B; the FFN still reads attn_norm(x)).
llama.cpp runs the very same files (llama-cpp-python, F16 KV cache as hotcold's; results
cached under $HOTCOLD_CACHE/ref).

Checks:
  reference  llama.cpp itself (no hotcold): with an F32 KV cache it computes a float64 NumPy
             Falcon (below: NEOX RoPE, fused QKV as Q heads | K heads | V heads, parallel
             attention and FFN) up to fp32 rounding, once GELU is ggml's: ggml's CPU GELU is a
             lookup in an fp16 table (input and output rounded to fp16). Measured <= 7e-6 of
             max|logit| with that GELU, <= 3e-4 with the exact tanh GELU. The norm2 file's
             logits move by ~0.9 (0.2-0.3 of max|logit|) when attn_norm_2 is ignored: the
             variant is live.
  logits     last-token logits of three prompts, F32 and F16 weights, each variant.
  perplexity WikiText-2 test (first 4096 bytes, ~3000 tokens; -c 256, all 11 chunks) of Q8_0 and
             Q4_0 files (written quantised by hc-synth-model with hotcold's reference
             quantisers, as test_powerinfer_parity.py's fixtures), within 0.1%.
  greedy     16 greedy tokens, F32 and F16 weights: identical to llama.cpp's on every prompt
             where llama.cpp's top-2 logit gap exceeds the near-tie level at every step
             (decisive; each model must have two such prompts), elsewhere up to the first
             near-tie step. Quantised files are not compared: with Q8_0 activations llama.cpp's
             own logits move by up to 0.03 between an F16 and an F32 KV cache, and no prompt
             keeps a gap of twice that for more than 14 steps (perplexity covers them).
  relu       `--act relu` (ReluFalcon: hotcold's key falcon.feed_forward_activation, which
             llama.cpp ignores) against the float64 Falcon with ReLU and ggml's F16-cache
             roundings (Q, K, V and the softmax rounded to fp16, as ggml's F16 KV products do;
             llama.cpp's F16-cache GELU logits are <= 9.3e-5 of max|logit| from this float64
             model with GELU), within 5e-4 (1 u16).

Logits tolerances, relative to max|logit| (~3.5 here), u16 = 2^-11 (~4.9e-4) as in
test_synthetic.py: F32 weights 1e-3 (2 u16: test_synthetic's one for flipped K/V cache
roundings, plus one for GELU, which ggml evaluates in fp16: an implementation with the exact
GELU is 2.0-3.2e-4 of max|logit| from llama.cpp on these files); F16 weights 2.5e-3 (test_
synthetic's 4 u16 for the fp16 rounding of activations before each product, plus GELU's).
Perplexity: 0.1%; llama.cpp's own spread on these files, over batch sizes 256 / 32 / 1 and F16 /
F32 KV caches, is <= 0.023%. Near-tie gaps: F32 0.01, F16 0.02 (about twice the largest logit
difference the tolerances allow).
Measured with hotcold's first falcon build (2026-11-25): logits <= 7.4e-5 (F32) and 4.1e-4
(F16) of max|logit|, perplexity within 0.011%, ReLU falcon <= 1.4e-5 from float64; greedy ids
identical on all decisive prompts.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import (REF_THREADS, THREADS, cached_reference, hotcold, hotcold_both,
                      hotcold_greedy_ids, hotcold_tokenize, llamacpp_ref, require_file)

COMMON = ["--arch", "falcon", "--shape", "tiny", "--layers", "2", "--norm-jitter", "0.25",
          "--seed", "1"]
VARIANTS = {"gqa": [], "mqa": ["--n-head-kv", "1"], "norm2": ["--falcon-norm2"]}
N_VOCAB = 512
REL_TOL = {"f32": 1e-3, "f16": 2.5e-3}
REF_F64_TOL = 5e-5  # llama.cpp (F32 KV) vs float64 with ggml's GELU; measured <= 7.2e-6
PPL_REL_TOL = 1e-3
NEAR_TIE = {"f32": 0.01, "f16": 0.02}
N_GREEDY = 16
TEXT_BYTES = 4096
PPL_CTX = 256

PROMPTS = {
    "bos": "",
    "short": "hello",
    "long": "Once upon a time, there was a little girl named Lily. She loved to play outside "
            "in the park, caf\u00e9 \u4f60\u597d.",
}
# Chosen so that each greedy case has 3-6 decisive prompts (llama-cpp-python 0.3.36).
GREEDY_PROMPTS = [
    "def fibonacci(n):",
    "It was a dark and stormy night",
    "The quick brown fox",
    "Valkyria Chronicles III",
    "In the beginning",
    "1, 2, 3, 4,",
    "Hello, my name is",
    "hello",
]


# ---- fixtures ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def model(synth_bin, tmp_path_factory):
    """model(variant, wtype, *extra) -> the fixture file, generated once per module."""
    work = tmp_path_factory.mktemp("falcon")
    made: dict[tuple, Path] = {}

    def get(variant: str, wtype: str, *extra: str) -> Path:
        key = (variant, wtype, *extra)
        if key not in made:
            path = work / f"falcon-{'-'.join(key)}.gguf"
            args = [*COMMON, *VARIANTS[variant], "--type", wtype, *extra]
            p = subprocess.run([str(synth_bin), *args, "-t", str(THREADS), "-o", str(path)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               stdin=subprocess.DEVNULL)
            assert p.returncode == 0, \
                f"hc-synth-model {' '.join(args)} failed:\n{p.stderr.decode()[-3000:]}"
            made[key] = path
        return made[key]
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


@pytest.fixture(scope="module")
def wiki_head(shared_dir, tmp_path_factory) -> Path:
    wiki = require_file(shared_dir / "data" / "wikitext-2" / "wiki.test.raw",
                        "../shared/data/wikitext-2 is needed")
    path = tmp_path_factory.mktemp("wiki") / "wiki.test.head.raw"
    path.write_bytes(wiki.read_bytes()[:TEXT_BYTES])
    return path


# ---- float64 Falcon ----------------------------------------------------------------------------

def _f16(a: np.ndarray) -> np.ndarray:
    return a.astype(np.float32).astype(np.float16).astype(np.float64)


class NpFalcon:
    """Float64 forward pass of a small falcon GGUF (F32 / F16 tensors), llama.cpp's graph:
    per layer a = LN(x; attn_norm), attention on LN(x; attn_norm_2) if present else a,
    x += attention + ffn_down(act(ffn_up(a))); logits = output(LN(x; output_norm))."""

    def __init__(self, path: Path):
        import gguf
        r = gguf.GGUFReader(str(path))

        def kv(key, default=None):
            f = r.fields.get("falcon." + key)
            return default if f is None else f.parts[f.data[0]].item()
        self.n_embd, self.n_layer = kv("embedding_length"), kv("block_count")
        self.n_head, self.n_head_kv = kv("attention.head_count"), kv("attention.head_count_kv")
        self.eps, self.rope_base = kv("attention.layer_norm_epsilon"), kv("rope.freq_base", 1e4)
        self.head_dim = self.n_embd // self.n_head
        self.w = {t.name: np.asarray(t.data).reshape([int(n) for n in reversed(t.shape)])
                  .astype(np.float64) for t in r.tensors}

    def _ln(self, x, name):
        m = x.mean(-1, keepdims=True)
        v = ((x - m) ** 2).mean(-1, keepdims=True)
        return (x - m) / np.sqrt(v + self.eps) * self.w[name + ".weight"] + self.w[name + ".bias"]

    def _rope(self, x, pos):  # NEOX: element i rotates with element i + head_dim / 2
        half = self.head_dim // 2
        theta = pos[:, None] * self.rope_base ** (-2.0 * np.arange(half) / self.head_dim)
        c, s = np.cos(theta)[:, None, :], np.sin(theta)[:, None, :]
        x0, x1 = x[..., :half], x[..., half:]
        return np.concatenate([x0 * c - x1 * s, x0 * s + x1 * c], axis=-1)

    @staticmethod
    def _act(u, act):
        if act == "relu":
            return np.maximum(u, 0.0)
        if act == "gelu_ggml":  # ggml's table: fp16 in, fp16 out; identity / 0 beyond +-10
            g = NpFalcon._act(_f16(u), "gelu")
            return np.where(u <= -10, 0.0, np.where(u >= 10, u, _f16(g)))
        return 0.5 * u * (1 + np.tanh(np.sqrt(2 / np.pi) * (u + 0.044715 * u ** 3)))

    def logits(self, tokens: list[int], act: str = "gelu_ggml", kv16: bool = False,
               norm2: bool = True) -> np.ndarray:
        """[n_tok, n_vocab]. kv16: ggml's rounding with an F16 KV cache (K, V, and Q and the
        softmax as the F16 products' other operand, to fp16). norm2=False ignores attn_norm_2."""
        w, n, hd = self.w, len(tokens), self.head_dim
        pos = np.arange(n, dtype=np.float64)
        x = w["token_embd.weight"][tokens]                                   # [n, n_embd]
        mask = np.triu(np.full((n, n), -np.inf), 1)
        group, kv_dim = self.n_head // self.n_head_kv, self.n_head_kv * hd
        for il in range(self.n_layer):
            p = f"blk.{il}."
            a = self._ln(x, p + "attn_norm")
            h = self._ln(x, p + "attn_norm_2") if norm2 and p + "attn_norm_2.weight" in w else a
            qkv = h @ w[p + "attn_qkv.weight"].T                             # [n, n_embd + 2 kv]
            q = self._rope(qkv[:, :self.n_embd].reshape(n, self.n_head, hd), pos)
            k = self._rope(qkv[:, self.n_embd:self.n_embd + kv_dim].reshape(n, -1, hd), pos)
            v = qkv[:, self.n_embd + kv_dim:].reshape(n, -1, hd)
            if kv16:
                q, k, v = _f16(q), _f16(k), _f16(v)
            out = np.empty_like(q)
            for head in range(self.n_head):
                s = q[:, head] @ k[:, head // group].T / np.sqrt(hd) + mask  # [n, n]
                s = np.exp(s - s.max(axis=1, keepdims=True))
                s = s / s.sum(axis=1, keepdims=True)
                out[:, head] = (_f16(s) if kv16 else s) @ v[:, head // group]
            ffn = self._act(a @ w[p + "ffn_up.weight"].T, act) @ w[p + "ffn_down.weight"].T
            x = x + out.reshape(n, -1) @ w[p + "attn_output.weight"].T + ffn
        return self._ln(x, "output_norm") @ w["output.weight"].T


def _rel_diff(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.abs(got - want).max() / np.abs(want).max())


# ---- llama.cpp alone ---------------------------------------------------------------------------

@pytest.mark.parametrize("variant", list(VARIANTS))
def test_reference_matches_float64(model, refs, variant):
    path = model(variant, "f32")
    ref = refs(path, "f32")
    exact = NpFalcon(path)
    for name, prompt in PROMPTS.items():
        ids = ref.prompt_ids(prompt)
        got = ref.last_logits(ids=ids).astype(np.float64)
        want = exact.logits(ids)[-1]
        assert np.isfinite(want).all() and 0.3 < want.std() < 3.0, \
            f"{variant}: degenerate logits (std {want.std():.3g})"
        rel = _rel_diff(got, want)
        rel_exact_gelu = _rel_diff(got, exact.logits(ids, act="gelu")[-1])
        print(f"\n{variant} {name}: llama.cpp vs float64 {rel:.2e} "
              f"(with the exact GELU {rel_exact_gelu:.2e})")
        assert rel <= REF_F64_TOL, (f"{variant} {name!r}: llama.cpp is {rel:.3g} of max|logit| "
                                    f"from the float64 Falcon (tolerance {REF_F64_TOL})")
        if variant == "norm2":
            moved = _rel_diff(exact.logits(ids, norm2=False)[-1], want)
            assert moved > 100 * REF_F64_TOL, f"attn_norm_2 barely matters ({moved:.3g})"


# ---- hotcold vs llama.cpp ----------------------------------------------------------------------

LOGIT_CASES = [(v, t) for v in VARIANTS for t in ("f32", "f16")]


@pytest.mark.parametrize("variant,wtype", LOGIT_CASES, ids=[f"{v}-{t}" for v, t in LOGIT_CASES])
def test_last_token_logits(hotcold_bin, model, refs, tmp_path, variant, wtype):
    path = model(variant, wtype)
    ref = refs(path)
    failures = []
    for name, prompt in PROMPTS.items():
        want = ref.last_logits(prompt).astype(np.float64)
        assert want.size == N_VOCAB and np.isfinite(want).all() and 0.3 < want.std() < 3.0, \
            f"degenerate reference logits: std {want.std():.3g}"
        out = tmp_path / f"{name}.f32"
        hotcold(hotcold_bin, "run", "-m", path, "-p", prompt, "-n", 0, "-t", THREADS,
                "--logits-out", out)
        got = np.fromfile(out, dtype="<f4").astype(np.float64)
        assert got.size == N_VOCAB, f"{got.size} logits written, expected {N_VOCAB}"
        rel = _rel_diff(got, want)
        worst = int(np.argmax(np.abs(got - want)))
        print(f"\n{variant}-{wtype} {name}: {rel:.2e} of max|logit|")
        if rel > REL_TOL[wtype]:
            failures.append(f"{name!r}: max |diff| {rel:.3g} of max|logit| > {REL_TOL[wtype]} at "
                            f"token {worst}: hotcold {got[worst]!r}, llama.cpp {want[worst]!r}")
    assert not failures, f"{variant}-{wtype}:\n" + "\n".join(failures)


_FINAL = re.compile(rb"Final estimate: PPL = ([0-9.eE+-]+) \+/- ([0-9.eE+-]+)")
PPL_CASES = [("gqa", "q8_0"), ("gqa", "q4_0"), ("mqa", "q4_0"), ("norm2", "q8_0")]


@pytest.mark.parametrize("variant,wtype", PPL_CASES, ids=[f"{v}-{t}" for v, t in PPL_CASES])
def test_perplexity(hotcold_bin, model, refs, wiki_head, variant, wtype):
    path = model(variant, wtype)
    ref = refs(path)
    text = wiki_head.read_bytes()
    text = text[:-1] if text.endswith(b"\n") else text  # as llama.cpp's -f (llamacpp_ref)
    n_chunks = len(ref.tokenize(text, add_special=True)) // PPL_CTX  # all of them

    def compute():
        r = ref.perplexity(wiki_head.read_bytes(), n_ctx=PPL_CTX, n_chunks=n_chunks)
        return {"ppl": r.ppl, "stderr": r.stderr, "chunk_ppl": r.chunk_ppl}
    want = cached_reference("falcon-perplexity", {"n_ctx": PPL_CTX, "chunks": n_chunks,
                                                  "kv": ref.kv_type}, [path, wiki_head], compute)
    out, err = hotcold_both(hotcold_bin, "perplexity", "-m", path, "-f", wiki_head,
                            "-c", PPL_CTX, "--chunks", n_chunks, "-t", THREADS, timeout=300)
    m = _FINAL.findall(out + b"\n" + err)
    assert m, f"no 'Final estimate: PPL = X +/- Y' in the output:\n{(out + err)[-2000:]!r}"
    ppl = float(m[-1][0])
    rel = abs(ppl - want["ppl"]) / want["ppl"]
    print(f"\n{variant}-{wtype}: hotcold {ppl:.4f}, llama.cpp {want['ppl']:.4f} "
          f"({100 * (ppl / want['ppl'] - 1):+.3f}%)")
    assert rel <= PPL_REL_TOL, (f"{variant}-{wtype}: PPL {ppl:.4f} vs llama.cpp "
                                f"{want['ppl']:.4f} ({100 * rel:.3f}% > {100 * PPL_REL_TOL}%)")


def ref_greedy(ref, path: Path, prompt: str) -> dict:
    """llama.cpp's greedy ids and its top-2 logit gap before each of them."""
    def compute():
        g = ref.greedy(prompt, N_GREEDY)
        gaps = []
        for i in range(len(g.ids)):
            top2 = np.sort(ref.last_logits(ids=g.prompt_ids + g.ids[:i]))[-2:]
            gaps.append(float(top2[1] - top2[0]))
        return {"prompt_ids": g.prompt_ids, "ids": g.ids, "gaps": gaps}
    return cached_reference("falcon-greedy", {"prompt": prompt, "n": N_GREEDY,
                                              "kv": ref.kv_type}, [path], compute)


GREEDY_CASES = [("gqa", "f32"), ("gqa", "f16"), ("mqa", "f16"), ("norm2", "f16")]
MIN_DECISIVE = 2


@pytest.mark.parametrize("variant,wtype", GREEDY_CASES,
                         ids=[f"{v}-{t}" for v, t in GREEDY_CASES])
def test_greedy(hotcold_bin, model, refs, variant, wtype):
    path = model(variant, wtype)
    ref = refs(path)
    near_tie = NEAR_TIE[wtype]
    want = {p: ref_greedy(ref, path, p) for p in GREEDY_PROMPTS}
    # The premise, on llama.cpp alone: prompts that decide every step.
    decisive = [p for p, w in want.items() if len(w["ids"]) == N_GREEDY
                and min(w["gaps"]) >= near_tie]
    assert len(decisive) >= MIN_DECISIVE, (
        f"{variant}-{wtype}: {len(decisive)} prompts decisive (top-2 gap >= {near_tie} at all "
        f"{N_GREEDY} steps), expected >= {MIN_DECISIVE}: pick other GREEDY_PROMPTS")
    report, failed = [], False
    for prompt, w in want.items():
        assert hotcold_tokenize(hotcold_bin, path, prompt, no_bos=False) == w["prompt_ids"], \
            f"{prompt!r}: hotcold tokenizes differently from llama.cpp"
        got = hotcold_greedy_ids(hotcold_bin, path, prompt, N_GREEDY)
        # Compared up to llama.cpp's first near-tie (all of it on decisive prompts).
        k = next((i for i, g in enumerate(w["gaps"]) if g < near_tie), len(w["ids"]))
        same = got[:k] == w["ids"][:k] and (k < len(w["ids"]) or len(got) == len(w["ids"]))
        failed |= not same
        i = next((j for j, (a, b) in enumerate(zip(got, w["ids"])) if a != b), None)
        report.append(f"  {prompt!r} ({'decisive' if prompt in decisive else f'first {k} steps'})"
                      f": {'ok' if same else 'FAILED'}" + (
                          "" if i is None else f", first difference at {i}: hotcold "
                          f"{got[i:i + 4]}, llama.cpp {w['ids'][i:i + 4]} (llama.cpp's gap "
                          f"{w['gaps'][i]:.4f})"))
    print(f"\n{variant}-{wtype}:\n" + "\n".join(report))
    assert not failed, f"{variant}-{wtype}: greedy ids differ from llama.cpp:\n" + "\n".join(report)


# ---- ReluFalcon: hotcold vs float64 (llama.cpp runs any falcon file with GELU) ------------------

def test_relu_falcon_matches_float64(hotcold_bin, model, tmp_path):
    path = model("gqa", "f32", "--act", "relu")
    exact = NpFalcon(path)
    for name, prompt in PROMPTS.items():
        ids = hotcold_tokenize(hotcold_bin, path, prompt, no_bos=False)
        want = exact.logits(ids, act="relu", kv16=True)[-1]
        out = tmp_path / f"{name}.f32"
        hotcold(hotcold_bin, "run", "-m", path, "-p", prompt, "-n", 0, "-t", THREADS,
                "--logits-out", out)
        got = np.fromfile(out, dtype="<f4").astype(np.float64)
        rel = _rel_diff(got, want)
        gelu = _rel_diff(exact.logits(ids, kv16=True)[-1], want)
        print(f"\nrelu {name}: {rel:.2e} of max|logit| (GELU's logits are {gelu:.2f} away)")
        assert rel <= REL_TOL["f32"] / 2, (f"{name!r}: hotcold's ReLU falcon is {rel:.3g} of "
                                           f"max|logit| from float64 (GELU would be {gelu:.3g})")
