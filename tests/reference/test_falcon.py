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

from pathlib import Path

import numpy as np
import pytest

from conftest import (check_greedy_decided, check_last_token_logits, check_perplexity_all_chunks,
                      hotcold_last_logits, hotcold_tokenize, llamacpp_greedy_gaps,
                      llamacpp_vs_float64, rel_diff, synth_models)
from np_llama import attention, f16, gguf_kv, read_gguf, rope

COMMON = ["--arch", "falcon", "--shape", "tiny", "--layers", "2", "--norm-jitter", "0.25",
          "--seed", "1"]
VARIANTS = {"gqa": [], "mqa": ["--n-head-kv", "1"], "norm2": ["--falcon-norm2"]}
N_VOCAB = 512
REL_TOL = {"f32": 1e-3, "f16": 2.5e-3}
# llama.cpp (F32 KV) vs float64 with ggml's GELU: measured <= 7.2e-6 on AVX-512 hosts, 7.6e-5 on
# an AVX2-only one (2026-12-02); the exact GELU is 1.7e-4 to 2.6e-4 away, so ggml's still tells.
REF_F64_TOL = 1e-4
PPL_REL_TOL = 1e-3
NEAR_TIE = {"f32": 0.01, "f16": 0.02}
N_GREEDY = 16
TEXT_BYTES = 4096  # of WikiText-2 test (conftest's wiki_head fixture)
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


@pytest.fixture(scope="module")
def model(synth_bin, tmp_path_factory):
    """model(variant, wtype, *extra) -> the fixture file, generated once per module."""
    return synth_models(synth_bin, tmp_path_factory.mktemp("falcon"), COMMON, VARIANTS,
                        prefix="falcon-")


# ---- float64 Falcon ----------------------------------------------------------------------------

class NpFalcon:
    """Float64 forward pass of a small falcon GGUF (F32 / F16 tensors), llama.cpp's graph:
    per layer a = LN(x; attn_norm), attention on LN(x; attn_norm_2) if present else a,
    x += attention + ffn_down(act(ffn_up(a))); logits = output(LN(x; output_norm)).
    RoPE, attention and the fp16 roundings are tools/ref/np_llama.py's."""

    def __init__(self, path: Path):
        r, self.w = read_gguf(path)

        def kv(key, default=None):
            return gguf_kv(r, "falcon." + key, default)
        self.n_embd, self.n_layer = kv("embedding_length"), kv("block_count")
        self.n_head, self.n_head_kv = kv("attention.head_count"), kv("attention.head_count_kv")
        self.eps, self.rope_base = kv("attention.layer_norm_epsilon"), kv("rope.freq_base", 1e4)
        self.head_dim = self.n_embd // self.n_head

    def _ln(self, x, name):
        m = x.mean(-1, keepdims=True)
        v = ((x - m) ** 2).mean(-1, keepdims=True)
        return (x - m) / np.sqrt(v + self.eps) * self.w[name + ".weight"] + self.w[name + ".bias"]

    @staticmethod
    def _act(u, act):
        if act == "relu":
            return np.maximum(u, 0.0)
        if act == "gelu_ggml":  # ggml's table: fp16 in, fp16 out; identity / 0 beyond +-10
            g = NpFalcon._act(f16(u), "gelu")
            return np.where(u <= -10, 0.0, np.where(u >= 10, u, f16(g)))
        return 0.5 * u * (1 + np.tanh(np.sqrt(2 / np.pi) * (u + 0.044715 * u ** 3)))

    def logits(self, tokens: list[int], act: str = "gelu_ggml", kv16: bool = False,
               norm2: bool = True) -> np.ndarray:
        """[n_tok, n_vocab]. kv16: ggml's rounding with an F16 KV cache (K, V, and Q and the
        softmax as the F16 products' other operand, to fp16). norm2=False ignores attn_norm_2."""
        w, n, hd = self.w, len(tokens), self.head_dim
        pos = np.arange(n, dtype=np.float64)
        x = w["token_embd.weight"][tokens]                                   # [n, n_embd]
        kv_dim = self.n_head_kv * hd
        for il in range(self.n_layer):
            p = f"blk.{il}."
            a = self._ln(x, p + "attn_norm")
            h = self._ln(x, p + "attn_norm_2") if norm2 and p + "attn_norm_2.weight" in w else a
            qkv = h @ w[p + "attn_qkv.weight"].T                             # [n, n_embd + 2 kv]
            # NEOX RoPE: element i rotates with element i + head_dim / 2
            q = rope(qkv[:, :self.n_embd].reshape(n, self.n_head, hd), pos, self.rope_base, hd,
                     neox=True)
            k = rope(qkv[:, self.n_embd:self.n_embd + kv_dim].reshape(n, -1, hd), pos,
                     self.rope_base, hd, neox=True)
            v = qkv[:, self.n_embd + kv_dim:].reshape(n, -1, hd)
            ffn = self._act(a @ w[p + "ffn_up.weight"].T, act) @ w[p + "ffn_down.weight"].T
            x = x + attention(q, k, v, kv16=kv16) @ w[p + "attn_output.weight"].T + ffn
        return self._ln(x, "output_norm") @ w["output.weight"].T


# ---- llama.cpp alone ---------------------------------------------------------------------------

@pytest.mark.parametrize("variant", list(VARIANTS))
def test_reference_matches_float64(model, refs, variant):
    path = model(variant, "f32")
    ref = refs(path, "f32")
    exact = NpFalcon(path)
    for name, ids, got, want in llamacpp_vs_float64(ref, exact, PROMPTS, variant):
        rel = rel_diff(got, want)
        rel_exact_gelu = rel_diff(got, exact.logits(ids, act="gelu")[-1])
        print(f"\n{variant} {name}: llama.cpp vs float64 {rel:.2e} "
              f"(with the exact GELU {rel_exact_gelu:.2e})")
        assert rel <= REF_F64_TOL, (f"{variant} {name!r}: llama.cpp is {rel:.3g} of max|logit| "
                                    f"from the float64 Falcon (tolerance {REF_F64_TOL})")
        if variant == "norm2":
            moved = rel_diff(exact.logits(ids, norm2=False)[-1], want)
            assert moved > 100 * REF_F64_TOL, f"attn_norm_2 barely matters ({moved:.3g})"


# ---- hotcold vs llama.cpp ----------------------------------------------------------------------

LOGIT_CASES = [(v, t) for v in VARIANTS for t in ("f32", "f16")]


@pytest.mark.parametrize("variant,wtype", LOGIT_CASES, ids=[f"{v}-{t}" for v, t in LOGIT_CASES])
def test_last_token_logits(hotcold_bin, model, refs, tmp_path, variant, wtype):
    path = model(variant, wtype)
    check_last_token_logits(hotcold_bin, refs(path), path, PROMPTS, N_VOCAB, REL_TOL[wtype],
                            f"{variant}-{wtype}", tmp_path)


PPL_CASES = [("gqa", "q8_0"), ("gqa", "q4_0"), ("mqa", "q4_0"), ("norm2", "q8_0")]


@pytest.mark.parametrize("variant,wtype", PPL_CASES, ids=[f"{v}-{t}" for v, t in PPL_CASES])
def test_perplexity(hotcold_bin, model, refs, wiki_head, variant, wtype):
    path = model(variant, wtype)
    check_perplexity_all_chunks(hotcold_bin, refs(path), path, wiki_head, PPL_CTX, PPL_REL_TOL,
                                "falcon-perplexity", f"{variant}-{wtype}")


GREEDY_CASES = [("gqa", "f32"), ("gqa", "f16"), ("mqa", "f16"), ("norm2", "f16")]
MIN_DECISIVE = 2


@pytest.mark.parametrize("variant,wtype", GREEDY_CASES,
                         ids=[f"{v}-{t}" for v, t in GREEDY_CASES])
def test_greedy(hotcold_bin, model, refs, variant, wtype):
    path = model(variant, wtype)
    ref = refs(path)
    want = {p: llamacpp_greedy_gaps(ref, path, p, N_GREEDY, "falcon-greedy")
            for p in GREEDY_PROMPTS}
    check_greedy_decided(hotcold_bin, path, {512: want}, N_GREEDY, NEAR_TIE[wtype],
                         MIN_DECISIVE, f"{variant}-{wtype}")


# ---- ReluFalcon: hotcold vs float64 (llama.cpp runs any falcon file with GELU) ------------------

def test_relu_falcon_matches_float64(hotcold_bin, model, tmp_path):
    path = model("gqa", "f32", "--act", "relu")
    exact = NpFalcon(path)
    for name, prompt in PROMPTS.items():
        ids = hotcold_tokenize(hotcold_bin, path, prompt, no_bos=False)
        want = exact.logits(ids, act="relu", kv16=True)[-1]
        got = hotcold_last_logits(hotcold_bin, path, prompt, tmp_path / f"{name}.f32")
        rel = rel_diff(got, want)
        gelu = rel_diff(exact.logits(ids, kv16=True)[-1], want)
        print(f"\nrelu {name}: {rel:.2e} of max|logit| (GELU's logits are {gelu:.2f} away)")
        assert rel <= REL_TOL["f32"] / 2, (f"{name!r}: hotcold's ReLU falcon is {rel:.3g} of "
                                           f"max|logit| from float64 (GELU would be {gelu:.3g})")
