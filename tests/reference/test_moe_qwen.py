"""Qwen2, Qwen3 and Mixture-of-Experts (Mixtral-style llama, qwen3moe): hotcold vs llama.cpp.

Fixtures (hc-synth-model, tools/synth/README.md): the tiny shape (n_embd 256, 4/2 heads, 2
layers, the synthetic 512-token SentencePiece vocabulary), norm weights 1 +- 0.25, seed 1:
  qwen2     --arch qwen2: Q/K/V biases 0.5 x N(0, 1), NEOX RoPE, n_ff 768;
  qwen3     --arch qwen3 --head-dim 128 (!= n_embd / n_head = 64: attention.key_length),
            per-head Q/K RMS norms before RoPE, NEOX RoPE;
  qwen3moe  --arch qwen3moe, 4 of 16 experts of n_ff_exp 256 (head_dim 64), Q/K norms;
  llamamoe  --arch llama, 2 of 8 experts of n_ff 256 (Mixtral's layout), normal RoPE.
MoE files have the default --expert-skew 0.5 (router row e scaled by (1 + e)^-0.5).
llama.cpp runs the very same files (llama-cpp-python 0.3.36, flash attention off; results
cached under $HOTCOLD_CACHE/ref); quantised files come from llama.cpp's own quantiser.

Checks:
  reference  llama.cpp itself (no hotcold; these pass whatever hotcold supports): F32 weights,
             F32 KV cache, last-token logits of three prompts against a float64 NumPy model
             written from llama.cpp's graphs (NpModel below: NEOX RoPE for the Qwen
             architectures, QKV biases, per-head Q/K RMS norms before RoPE, and build_moe_ffn:
             router matmul, softmax over all experts, top-k by descending probability, the k
             probabilities divided by their sum (clamped below at 6.1e-5), SwiGLU experts,
             weighted sum in top-k order). Tolerance 5e-5 of max|logit|; measured <= 4.5e-7
             (fp32 rounding). Every feature is live: ignoring the Q/K norms (0.12-0.28 of
             max|logit|), the QKV biases (0.52-0.56) or the top-k normalisation (0.24-0.50), or
             rotating the other RoPE pairs (0.13-0.58), moves the logits by >= 2e5 x the
             measured agreement. Routing is skewed as tools/synth/README.md says: over
             WikiText-2 a 128-expert (8 used) file's top 10% of experts take 48-50% of the
             routings (>= 40% required), 25-29% with --expert-skew 0 (<= 35% required).
  logits     last-token logits of three prompts, F32 and F16 weights, F16 KV cache, each file.
  perplexity WikiText-2 test (first 4096 bytes, ~3000 tokens; -c 256, all 11 chunks) of files
             quantised by llama.cpp's own quantiser (llamacpp_ref.quantize: Q8_0, Q4_0,
             Q4_K_M, with its per-tensor rules: routers and norms F32, attn_k / attn_v Q8_0 in
             MoE files, output Q6_K), within 0.1%.
  greedy     16 greedy tokens, F32 and F16 weights, both one token per batch (-b 1 / n_batch 1)
             and the prompt in one batch (512): identical to llama.cpp's on every decisive
             prompt, elsewhere up to llama.cpp's first undecided step. A step is decided when
             llama.cpp's top-2 logit gap is above the near-tie level and, for MoE files, every
             router gap it depends on is above MIN_ROUTE_GAP; each case has 4-8 decisive
             prompts of the 8 at each batch size (llama-cpp-python 0.3.36).
  relu       --act relu on the Mixtral-layout file (hotcold's llama.feed_forward_activation =
             relu: ReGLU experts, which llama.cpp ignores) against the float64 model with ReLU
             and ggml's F16-cache roundings (Q, K, V and the softmax rounded to fp16), within
             5e-4 (1 u16); llama.cpp's F16-cache SwiGLU logits are <= 4.5e-5 of max|logit| from
             the float64 model with those roundings (checked first), and SwiGLU's logits are
             0.12-0.20 from ReLU's.
  bad files  hotcold exits non-zero naming what is wrong: ffn_gate_exps with one expert too few
             (the tensor and both counts), the router ffn_gate_inp missing (its name),
             expert_used_count > expert_count (the key). Written with the gguf package
             (rewrite_gguf: an unmodified copy gives llama.cpp identical logits).

Routing near-ties. An expert choice flips when the k-th and (k+1)-th router logits are closer
than the two implementations' difference, and a flip moves the logits by ~0.1-0.5 of max|logit|
(the features above), so the logits checks demand a router gap (float64 model, smallest over
tokens and layers) of 1e-4 with F32 weights (fp32 summation order and rare fp16 K/V-cache flips
move router logits by ~1e-6..1e-5) and 1e-3 with F16 weights (rounding every K/V cache element
to fp16 moves them by up to 7e-4, measured; two implementations differ by a few flipped
roundings). Most 60-token prompts hold a gap below 1e-3 somewhere (2 routings per token and
layer sit near the boundary), so PROMPTS["long"] was chosen for its margins (>= 1.4e-3).

Tolerances relative to max|logit| (~3-4 here), u16 = 2^-11 (~4.9e-4), as test_synthetic.py:
F32 weights 5e-4 (1 u16: a last-bit difference can flip the fp16 rounding of a K/V cache
element); F16 weights 2e-3 (4 u16: activations are rounded to fp16 before every F16 product).
llama.cpp's own spread on these files (measured): batch 512 vs batch 1 <= 6.6e-5 (F32) and
<= 3.2e-4 (F16); F16 vs F32 KV cache <= 3.3e-4 (F32) and <= 7.2e-4 (F16), a re-rounding of
every cache element, which hotcold (an F16 cache too) does not add. Perplexity 0.1% (test_
falcon's): llama.cpp's batch 256 vs 32 spread is <= 1e-6 relative, its F16 vs F32 KV cache
spread 0.001-0.12% (Q4_K_M the largest). Near-tie gaps: F32 0.01, F16 0.02 (about twice the
largest logit difference the tolerances allow).
Measured with a work-in-progress hotcold build of these architectures (2026-11-26): logits
<= 5.6e-5 (F32) and 4.2e-4 (F16) of max|logit|; perplexity within 0.03%, but qwen3 Q4_K_M
-0.082% (hotcold's K-quant products are close, not bit-exact, and this file is the most
sensitive: llama.cpp's own F16 vs F32 cache spread on it is 0.12%); ReLU experts <= 3.6e-5 from
float64; greedy ids identical on every decided step; cached runs take ~9 s on 2 cores.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import (REF_THREADS, THREADS, cached_reference, hotcold, hotcold_both,
                      hotcold_greedy_ids, hotcold_tokenize, llamacpp_ref, require_file)

COMMON = ["--shape", "tiny", "--layers", "2", "--norm-jitter", "0.25", "--seed", "1"]
VARIANTS = {
    "qwen2": ["--arch", "qwen2"],
    "qwen3": ["--arch", "qwen3", "--head-dim", "128"],
    "qwen3moe": ["--arch", "qwen3moe", "--experts", "16", "--experts-used", "4",
                 "--n-ff-exp", "256"],
    "llamamoe": ["--arch", "llama", "--experts", "8", "--experts-used", "2", "--n-ff-exp", "256"],
}
MOE = ("qwen3moe", "llamamoe")
N_VOCAB = 512
REF_F64_TOL = 5e-5       # llama.cpp (F32 weights, F32 KV) vs float64; measured <= 4.5e-7
# Smallest gap between the k-th and (k+1)-th router logit (float64 model) at which an expert
# choice counts as decided: F32 weights 1e-4 (fp32 summation order and fp16 K/V cache flips move
# router logits by ~1e-6..1e-5); F16 weights (and the F16-cache float64 model) 1e-3 (rounding
# every K/V cache element to fp16 moves them by up to 7e-4: measured; two implementations
# differ by a few flipped roundings, a fraction of that).
MIN_ROUTE_GAP = {"f32": 1e-4, "f16": 1e-3}
REL_TOL = {"f32": 5e-4, "f16": 2e-3}
PPL_REL_TOL = 1e-3
NEAR_TIE = {"f32": 0.01, "f16": 0.02}
N_GREEDY = 16
TEXT_BYTES = 4096
PPL_CTX = 256

PROMPTS = {
    "bos": "",
    "short": "hello",
    # 62 tokens; chosen for its router margins: >= 1.4e-3 in every MoE fixture (F32 / F16,
    # SwiGLU / ReLU), where most sentences of this length hold a near-tie somewhere.
    "long": "Over 50 homes were flooded , forcing about 150 people to evacuate, "
            "caf\u00e9 \u4f60\u597d.",
}
# Chosen so that each greedy case has 4-8 decisive prompts (llama-cpp-python 0.3.36).
GREEDY_PROMPTS = [
    "In the beginning",
    "Call me Ishmael.",
    "The cat sat on the mat",
    "All happy families are alike",
    "After the war they were scrapped",
    "Over 50 homes were flooded",
    "In December 759 , he briefly stayed",
    "It is a truth universally acknowledged",
]


# ---- fixtures ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def model(synth_bin, tmp_path_factory):
    """model(variant, wtype, *extra) -> the fixture file, generated once per module;
    wtype "q8_0" / "q4_0" / "q4_k_m": quantised by llama.cpp from the F32 file."""
    work = tmp_path_factory.mktemp("moe_qwen")
    made: dict[tuple, Path] = {}

    def get(variant: str, wtype: str, *extra: str) -> Path:
        key = (variant, wtype, *extra)
        if key in made:
            return made[key]
        path = work / f"{'-'.join(key)}.gguf"
        if wtype in ("f32", "f16"):
            args = [*COMMON, *VARIANTS[variant], "--type", wtype, *extra]
            p = subprocess.run([str(synth_bin), *args, "-t", str(THREADS), "-o", str(path)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               stdin=subprocess.DEVNULL)
            assert p.returncode == 0, \
                f"hc-synth-model {' '.join(args)} failed:\n{p.stderr.decode()[-3000:]}"
        else:
            llamacpp_ref.quantize(get(variant, "f32", *extra), path, wtype,
                                  n_threads=REF_THREADS)
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


@pytest.fixture(scope="module")
def wiki_head(shared_dir, tmp_path_factory) -> Path:
    wiki = require_file(shared_dir / "data" / "wikitext-2" / "wiki.test.raw",
                        "../shared/data/wikitext-2 is needed")
    path = tmp_path_factory.mktemp("wiki") / "wiki.test.head.raw"
    path.write_bytes(wiki.read_bytes()[:TEXT_BYTES])
    return path


# ---- float64 llama / qwen2 / qwen3 / qwen3moe ---------------------------------------------------

def _f16(a: np.ndarray) -> np.ndarray:
    return a.astype(np.float32).astype(np.float16).astype(np.float64)


class NpModel:
    """Float64 forward pass of a small llama-family GGUF (F32 / F16 tensors), llama.cpp's graphs
    (src/models/llama.cpp, qwen2.cpp, qwen3.cpp, qwen3moe.cpp; llm_graph_context::build_moe_ffn):
      x = token_embd[t]; per layer
        h = rms(x) * attn_norm
        q, k, v = h Wq^T (+ bq), h Wk^T (+ bk), h Wv^T (+ bv)            (biases: qwen2)
        q, k = rms_head(q) * attn_q_norm, rms_head(k) * attn_k_norm      (qwen3, qwen3moe)
        q, k = rope(q), rope(k): llama "normal" (pairs 2i, 2i + 1), qwen NEOX (i, i + d/2)
        x += softmax(q k^T / sqrt(head_dim) + causal) v Wo^T
        h = rms(x) * ffn_norm
        dense: x += (silu(h Wg^T) * (h Wu^T)) Wd^T
        MoE:   p = softmax(h Wr^T) over all experts; S = the k largest p, in descending order;
               w = p[S] / max(sum p[S], 6.103515625e-5); x += sum_{i in S} w_i expert_i(h)
      logits = (rms(x) * output_norm) output^T.
    After logits(), `token_gaps[t]` is the smallest gap between the k-th and (k+1)-th router
    logit of token t over the layers (inf for dense files), `route_gap` their minimum and
    `routes` the chosen experts [n_layer][n_tok, k]."""

    def __init__(self, path: Path):
        import gguf
        r = gguf.GGUFReader(str(path))
        f = r.fields["general.architecture"]
        self.arch = bytes(f.parts[f.data[0]]).decode()

        def kv(key, default=None):
            f = r.fields.get(f"{self.arch}.{key}")
            return default if f is None else f.parts[f.data[0]].item()
        self.n_embd, self.n_layer = kv("embedding_length"), kv("block_count")
        self.n_head, self.n_head_kv = kv("attention.head_count"), kv("attention.head_count_kv")
        self.eps, self.rope_base = kv("attention.layer_norm_rms_epsilon"), kv("rope.freq_base")
        self.head_dim = kv("attention.key_length", self.n_embd // self.n_head)
        self.n_expert, self.n_expert_used = kv("expert_count", 0), kv("expert_used_count", 0)
        self.neox = self.arch.startswith("qwen")
        self.w = {t.name: np.asarray(t.data).reshape([int(n) for n in reversed(t.shape)])
                  .astype(np.float64) for t in r.tensors}
        if "output.weight" not in self.w:
            self.w["output.weight"] = self.w["token_embd.weight"]
        self.route_gap, self.token_gaps, self.routes = np.inf, None, []

    def _rms(self, x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * w

    def _rope(self, x, pos, neox):  # x: [n_tok, n_heads, head_dim]
        d = self.head_dim
        theta = pos[:, None] * self.rope_base ** (-2.0 * np.arange(d // 2) / d)  # [n, d/2]
        c, s = np.cos(theta)[:, None, :], np.sin(theta)[:, None, :]
        if neox:  # element i rotates with element i + d/2
            x0, x1 = x[..., :d // 2], x[..., d // 2:]
            return np.concatenate([x0 * c - x1 * s, x0 * s + x1 * c], axis=-1)
        x0, x1 = x[..., 0::2], x[..., 1::2]  # "normal": adjacent pairs
        return np.stack([x0 * c - x1 * s, x0 * s + x1 * c], axis=-1).reshape(x.shape)

    @staticmethod
    def _glu(g, u, act):
        return (np.maximum(g, 0.0) if act == "relu" else g / (1 + np.exp(-g))) * u

    def _moe(self, h, p, il, act, norm_w):
        w, k = self.w, self.n_expert_used
        logits = h @ w[p + "ffn_gate_inp.weight"].T                          # [n, n_expert]
        probs = np.exp(logits - logits.max(axis=1, keepdims=True))
        probs /= probs.sum(axis=1, keepdims=True)
        order = np.argsort(-probs, axis=1, kind="stable")
        sel = order[:, :k]                                                   # [n, k]
        ranked = np.take_along_axis(logits, order, axis=1)
        self.token_gaps = np.minimum(self.token_gaps, ranked[:, k - 1] - ranked[:, k])
        self.routes.append(sel)
        wts = np.take_along_axis(probs, sel, axis=1)                         # [n, k]
        if norm_w:
            wts = wts / np.maximum(wts.sum(axis=1, keepdims=True), 6.103515625e-5)
        out = np.zeros_like(h)
        gate, up, down = (w[p + f"ffn_{t}_exps.weight"] for t in ("gate", "up", "down"))
        for t in range(h.shape[0]):
            for i in range(k):  # in top-k order, as ggml adds the expert views
                e = sel[t, i]
                a = self._glu(gate[e] @ h[t], up[e] @ h[t], act)            # [n_ff_exp]
                out[t] += wts[t, i] * (down[e] @ a)
        return out

    def logits(self, tokens: list[int], act: str = "silu", kv16: bool = False,
               qk_norm: bool = True, bias: bool = True, norm_w: bool = True,
               neox: bool | None = None) -> np.ndarray:
        """[n_tok, n_vocab]. kv16: ggml's roundings with an F16 KV cache (K, V, and Q and the
        softmax as the F16 products' other operand, to fp16). qk_norm / bias / norm_w = False
        drop the Q/K norms, the QKV biases, the top-k normalisation; neox overrides the RoPE."""
        w, n, hd = self.w, len(tokens), self.head_dim
        neox = self.neox if neox is None else neox
        self.token_gaps, self.routes = np.full(n, np.inf), []
        pos = np.arange(n, dtype=np.float64)
        x = w["token_embd.weight"][tokens]                                   # [n, n_embd]
        mask = np.triu(np.full((n, n), -np.inf), 1)
        group = self.n_head // self.n_head_kv
        for il in range(self.n_layer):
            p = f"blk.{il}."
            h = self._rms(x, w[p + "attn_norm.weight"])
            qkv = []
            for t, heads in (("q", self.n_head), ("k", self.n_head_kv), ("v", self.n_head_kv)):
                y = h @ w[p + f"attn_{t}.weight"].T
                if bias and p + f"attn_{t}.bias" in w:
                    y = y + w[p + f"attn_{t}.bias"]
                y = y.reshape(n, heads, hd)
                if t != "v" and qk_norm and p + f"attn_{t}_norm.weight" in w:
                    y = self._rms(y, w[p + f"attn_{t}_norm.weight"])
                qkv.append(self._rope(y, pos, neox) if t != "v" else y)
            q, k, v = qkv
            if kv16:
                q, k, v = _f16(q), _f16(k), _f16(v)
            out = np.empty_like(q)
            for head in range(self.n_head):
                s = q[:, head] @ k[:, head // group].T / np.sqrt(hd) + mask   # [n, n]
                s = np.exp(s - s.max(axis=1, keepdims=True))
                s = s / s.sum(axis=1, keepdims=True)
                out[:, head] = (_f16(s) if kv16 else s) @ v[:, head // group]
            x = x + out.reshape(n, -1) @ w[p + "attn_output.weight"].T
            h = self._rms(x, w[p + "ffn_norm.weight"])
            if p + "ffn_gate_inp.weight" in w:
                x = x + self._moe(h, p, il, act, norm_w)
            else:
                a = self._glu(h @ w[p + "ffn_gate.weight"].T, h @ w[p + "ffn_up.weight"].T, act)
                x = x + a @ w[p + "ffn_down.weight"].T
        self.route_gap = float(self.token_gaps.min())
        return self._rms(x, w["output_norm.weight"]) @ w["output.weight"].T


_NP_MODELS: dict[str, NpModel] = {}


def np_model(path: Path) -> NpModel:
    """NpModel(path), loaded once per file."""
    if str(path) not in _NP_MODELS:
        _NP_MODELS[str(path)] = NpModel(path)
    return _NP_MODELS[str(path)]


def _rel_diff(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.abs(got - want).max() / np.abs(want).max())


# What each variant must show to be live: (label, NpModel.logits keyword arguments).
LIVE = {
    "qwen2": [("no QKV biases", {"bias": False}), ("normal RoPE", {"neox": False})],
    "qwen3": [("no Q/K norms", {"qk_norm": False}), ("normal RoPE", {"neox": False})],
    "qwen3moe": [("no Q/K norms", {"qk_norm": False}), ("top-k not normalised",
                                                        {"norm_w": False}),
                 ("normal RoPE", {"neox": False})],
    "llamamoe": [("top-k not normalised", {"norm_w": False}), ("NEOX RoPE", {"neox": True})],
}


# ---- llama.cpp alone ---------------------------------------------------------------------------

@pytest.mark.parametrize("variant", list(VARIANTS))
def test_reference_matches_float64(model, refs, variant):
    path = model(variant, "f32")
    ref = refs(path, "f32")
    exact = np_model(path)
    for name, prompt in PROMPTS.items():
        ids = ref.prompt_ids(prompt)
        got = ref.last_logits(ids=ids).astype(np.float64)
        want = exact.logits(ids)[-1]
        gap = exact.route_gap
        assert np.isfinite(want).all() and 0.3 < want.std() < 3.0, \
            f"{variant}: degenerate logits (std {want.std():.3g})"
        rel = _rel_diff(got, want)
        # One token (BOS alone) sees no RoPE and attends to itself only: nothing to show there.
        moved = {label: _rel_diff(exact.logits(ids, **kw)[-1], want)
                 for label, kw in LIVE[variant]} if len(ids) > 1 else {}
        print(f"\n{variant} {name}: llama.cpp vs float64 {rel:.2e} of max|logit| "
              f"({np.abs(want).max():.2f}); router gap {gap:.3g}; features move "
              + ", ".join(f"{k} {v:.3g}" for k, v in moved.items()))
        assert rel <= REF_F64_TOL, (f"{variant} {name!r}: llama.cpp is {rel:.3g} of max|logit| "
                                    f"from the float64 model (tolerance {REF_F64_TOL})")
        assert gap >= MIN_ROUTE_GAP["f32"], (
            f"{variant} {name!r}: an expert choice is a near-tie (router logit gap {gap:.3g} < "
            f"{MIN_ROUTE_GAP['f32']}): pick other PROMPTS")
        for label, m in moved.items():
            assert m > 100 * REF_F64_TOL, f"{variant} {name!r}: {label} barely matters ({m:.3g})"


SKEW_EXPERTS = ["--experts", "128", "--experts-used", "8", "--n-ff-exp", "32"]


def test_reference_routing_is_skewed(model, wiki_head):
    """The float64 router over text (4 chunks of 256 tokens) of a qwen3moe with Qwen3-30B-A3B's
    128 experts, 8 per token (narrow ones: the FFN width does not change the routing): with the
    default --expert-skew 0.5 the top 10% of the experts take >= 40% of the routings (measured
    48-50%), with --expert-skew 0 <= 35% (measured 25-29%: the text's frequent tokens alone make
    the popularity uneven)."""
    skewed = model("qwen3moe", "f32", *SKEW_EXPERTS)
    flat = model("qwen3moe", "f32", *SKEW_EXPERTS, "--expert-skew", "0")
    ref_tok = llamacpp_ref.LlamaRef(skewed, n_threads=REF_THREADS)
    try:
        tokens = ref_tok.tokenize(wiki_head.read_bytes(), add_special=True)[:4 * PPL_CTX]
    finally:
        ref_tok.close()
    top = {}
    for label, path in (("skew 0.5", skewed), ("skew 0", flat)):
        m = NpModel(path)
        counts = np.zeros((m.n_layer, m.n_expert))
        for c in range(0, len(tokens), PPL_CTX):
            m.logits(tokens[c:c + PPL_CTX])
            for il, sel in enumerate(m.routes):
                counts[il] += np.bincount(sel.ravel(), minlength=m.n_expert)
        share = np.sort(counts / counts.sum(axis=1, keepdims=True), axis=1)[:, ::-1]
        top[label] = share[:, :round(0.1 * m.n_expert)].sum(axis=1)
        print(f"\n{label}: per layer, the top 10% of experts take {np.round(top[label], 3)} of "
              f"the routings, the busiest {np.round(share[:, 0] * m.n_expert, 1)} x uniform")
    assert (top["skew 0.5"] >= 0.4).all(), f"not skewed enough: {top}"
    assert (top["skew 0"] <= 0.35).all(), f"--expert-skew 0 is skewed: {top}"


# ---- hotcold vs llama.cpp ----------------------------------------------------------------------

LOGIT_CASES = [(v, t) for v in VARIANTS for t in ("f32", "f16")]


@pytest.mark.parametrize("variant,wtype", LOGIT_CASES, ids=[f"{v}-{t}" for v, t in LOGIT_CASES])
def test_last_token_logits(hotcold_bin, model, refs, tmp_path, variant, wtype):
    path = model(variant, wtype)
    ref = refs(path)
    exact = np_model(path)
    failures = []
    for name, prompt in PROMPTS.items():
        want = ref.last_logits(prompt).astype(np.float64)
        assert want.size == N_VOCAB and np.isfinite(want).all() and 0.3 < want.std() < 3.0, \
            f"degenerate reference logits: std {want.std():.3g}"
        # The premise: no expert choice is a rounding coin-flip (else hotcold may rightly differ).
        exact.logits(ref.prompt_ids(prompt))
        assert exact.route_gap >= MIN_ROUTE_GAP[wtype], (
            f"{name!r}: a routing near-tie (router logit gap {exact.route_gap:.3g}): pick other "
            "PROMPTS")
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
PPL_CASES = [("llamamoe", "q8_0"), ("llamamoe", "q4_0"), ("llamamoe", "q4_k_m"),
             ("qwen3moe", "q8_0"), ("qwen3moe", "q4_0"), ("qwen3moe", "q4_k_m"),
             ("qwen2", "q8_0"), ("qwen2", "q4_0"), ("qwen3", "q4_0"), ("qwen3", "q4_k_m")]


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
    want = cached_reference("moe-qwen-perplexity", {"n_ctx": PPL_CTX, "chunks": n_chunks,
                                                    "kv": ref.kv_type}, [path, wiki_head],
                            compute)
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


def ref_greedy(ref, path: Path, prompt: str, n_batch: int) -> dict:
    """llama.cpp's greedy ids (prompt in batches of n_batch, then one token at a time), its
    top-2 logit gap before each of them, and the float64 model's smallest router gap over the
    tokens each step depends on (inf for dense files)."""
    def compute():
        g = ref.greedy(prompt, N_GREEDY, n_batch=n_batch)
        gaps = []
        for i in range(len(g.ids)):
            top2 = np.sort(ref.last_logits(ids=g.prompt_ids + g.ids[:i], n_batch=n_batch))[-2:]
            gaps.append(float(top2[1] - top2[0]))
        return {"prompt_ids": g.prompt_ids, "ids": g.ids, "gaps": gaps}
    r = cached_reference("moe-qwen-greedy", {"prompt": prompt, "n": N_GREEDY,
                                             "kv": ref.kv_type, "n_batch": n_batch},
                         [path], compute)
    exact = np_model(path)
    exact.logits(r["prompt_ids"] + r["ids"])
    n_prompt = len(r["prompt_ids"])  # step i reads tokens [0, n_prompt + i)
    r["route_gaps"] = [float(exact.token_gaps[:n_prompt + i].min()) for i in range(len(r["ids"]))]
    return r


GREEDY_CASES = [(v, t) for v in VARIANTS for t in ("f32", "f16")]
MIN_DECISIVE = 2


@pytest.mark.parametrize("variant,wtype", GREEDY_CASES,
                         ids=[f"{v}-{t}" for v, t in GREEDY_CASES])
def test_greedy(hotcold_bin, model, refs, variant, wtype):
    path = model(variant, wtype)
    ref = refs(path)
    near_tie, route_tie = NEAR_TIE[wtype], MIN_ROUTE_GAP[wtype]
    report, failed = [], False
    for n_batch in (1, 512):
        want = {p: ref_greedy(ref, path, p, n_batch) for p in GREEDY_PROMPTS}
        # A step is decided when llama.cpp's top-2 logit gap and every router gap it depends on
        # are above the near-tie levels. The premise, on the references alone: prompts that
        # decide every step.
        ties = {p: next((i for i, (g, r) in enumerate(zip(w["gaps"], w["route_gaps"]))
                         if g < near_tie or r < route_tie), len(w["ids"])) for p, w in want.items()}
        decisive = [p for p, w in want.items() if len(w["ids"]) == N_GREEDY
                    and ties[p] == N_GREEDY]
        assert len(decisive) >= MIN_DECISIVE, (
            f"{variant}-{wtype} batch {n_batch}: {len(decisive)} prompts decisive (top-2 gap >= "
            f"{near_tie} and router gaps >= {route_tie} at all {N_GREEDY} steps), expected >= "
            f"{MIN_DECISIVE}: pick other GREEDY_PROMPTS")
        for prompt, w in want.items():
            if n_batch == 1:
                assert hotcold_tokenize(hotcold_bin, path, prompt, no_bos=False) == \
                    w["prompt_ids"], f"{prompt!r}: hotcold tokenizes differently from llama.cpp"
            got = hotcold_greedy_ids(hotcold_bin, path, prompt, N_GREEDY, n_batch=n_batch)
            # Compared up to the first undecided step (all of it on decisive prompts).
            k = ties[prompt]
            same = got[:k] == w["ids"][:k] and (k < len(w["ids"]) or len(got) == len(w["ids"]))
            failed |= not same
            i = next((j for j, (a, b) in enumerate(zip(got, w["ids"])) if a != b), None)
            report.append(
                f"  batch {n_batch} {prompt!r} "
                f"({'decisive' if prompt in decisive else f'first {k} steps'}): "
                f"{'ok' if same else 'FAILED'}" + (
                    "" if i is None else f", first difference at {i}: hotcold {got[i:i + 4]}, "
                    f"llama.cpp {w['ids'][i:i + 4]} (llama.cpp's gap {w['gaps'][i]:.4f}, "
                    f"router gap {w['route_gaps'][i]:.2g})"))
    print(f"\n{variant}-{wtype}:\n" + "\n".join(report))
    assert not failed, f"{variant}-{wtype}: greedy ids differ from llama.cpp:\n" + "\n".join(report)


# ---- ReLU experts: hotcold vs float64 (llama.cpp runs any llama file with SiLU) -----------------

RELU_TOL = 5e-4  # 1 u16; llama.cpp's F16-cache SwiGLU vs the kv16 float64 model: <= 4.5e-5


def test_relu_moe_matches_float64(hotcold_bin, model, refs, tmp_path):
    path = model("llamamoe", "f32", "--act", "relu")
    exact = np_model(path)
    ref = refs(path)  # F16 KV cache: the roundings the kv16 model reproduces
    for name, prompt in PROMPTS.items():
        ids = ref.prompt_ids(prompt)
        # The premise, on llama.cpp alone: the kv16 float64 model is ggml's F16-cache arithmetic.
        swiglu = _rel_diff(ref.last_logits(ids=ids).astype(np.float64),
                           exact.logits(ids, kv16=True)[-1])
        assert swiglu <= RELU_TOL / 4, \
            f"{name!r}: llama.cpp (F16 KV) is {swiglu:.3g} from the kv16 float64 model"
        want = exact.logits(ids, act="relu", kv16=True)[-1]
        assert exact.route_gap >= MIN_ROUTE_GAP["f16"], f"{name!r}: a routing near-tie"
        assert hotcold_tokenize(hotcold_bin, path, prompt, no_bos=False) == ids
        out = tmp_path / f"{name}.f32"
        hotcold(hotcold_bin, "run", "-m", path, "-p", prompt, "-n", 0, "-t", THREADS,
                "--logits-out", out)
        got = np.fromfile(out, dtype="<f4").astype(np.float64)
        rel = _rel_diff(got, want)
        silu = _rel_diff(exact.logits(ids, kv16=True)[-1], want)
        print(f"\nrelu {name}: {rel:.2e} of max|logit| (SwiGLU's logits are {silu:.2f} away; "
              f"llama.cpp vs kv16 float64 {swiglu:.2e})")
        assert rel <= RELU_TOL, (f"{name!r}: hotcold's ReLU experts are {rel:.3g} of max|logit| "
                                 f"from float64 (SwiGLU would be {silu:.3g})")


# ---- bad files ---------------------------------------------------------------------------------

def rewrite_gguf(src: Path, dst: Path, drop: str | None = None,
                 tensor: tuple[str, np.ndarray] | None = None,
                 key: tuple[str, int] | None = None) -> Path:
    """A copy of the F32 GGUF src without tensor `drop`, with `tensor` = (name, values) replaced
    (its shape from the values) and `key` = (name, u32 value) set."""
    import gguf
    r = gguf.GGUFReader(str(src))
    arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
    w = gguf.GGUFWriter(str(dst), arch)
    for name, f in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        vtype = f.types[0]
        if key is not None and name == key[0]:
            w.add_key_value(name, key[1], vtype)
        elif vtype == gguf.GGUFValueType.ARRAY:
            w.add_key_value(name, f.contents(), vtype, sub_type=f.types[-1])
        else:
            w.add_key_value(name, f.contents(), vtype)
    for t in r.tensors:
        if t.name == drop:
            continue
        data = tensor[1] if tensor is not None and t.name == tensor[0] else np.asarray(t.data)
        w.add_tensor(t.name, np.ascontiguousarray(data, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return dst


def _hotcold_fails(hotcold_bin: Path, path: Path) -> str:
    p = subprocess.run([str(hotcold_bin), "run", "-m", str(path), "-p", "hello", "-n", "1",
                        "-t", str(THREADS)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       stdin=subprocess.DEVNULL, timeout=120)
    err = p.stderr.decode("utf-8", "replace")
    assert p.returncode != 0, f"hotcold accepted the broken file {path.name}:\n{err[-2000:]}"
    assert "Traceback" not in err and p.returncode > 0, \
        f"hotcold crashed (status {p.returncode}) on {path.name}:\n{err[-2000:]}"
    return err


@pytest.mark.parametrize("variant", MOE)
def test_bad_expert_files(hotcold_bin, model, tmp_path, variant):
    import gguf
    src = model(variant, "f32")
    arch = "qwen3moe" if variant == "qwen3moe" else "llama"
    r = gguf.GGUFReader(str(src))
    n_expert = int(r.fields[f"{arch}.expert_count"].parts[-1][0])
    gate = next(t for t in r.tensors if t.name == "blk.0.ffn_gate_exps.weight")
    few = np.asarray(gate.data).reshape([int(n) for n in reversed(gate.shape)])[:-1]

    err = _hotcold_fails(hotcold_bin, rewrite_gguf(
        src, tmp_path / "few.gguf", tensor=("blk.0.ffn_gate_exps.weight", few)))
    assert "blk.0.ffn_gate_exps" in err and str(n_expert) in err and str(n_expert - 1) in err, \
        f"the message should name blk.0.ffn_gate_exps, {n_expert} and {n_expert - 1}:\n{err}"

    err = _hotcold_fails(hotcold_bin, rewrite_gguf(src, tmp_path / "norouter.gguf",
                                                   drop="blk.1.ffn_gate_inp.weight"))
    assert "ffn_gate_inp" in err, f"the message should name blk.1.ffn_gate_inp:\n{err}"

    err = _hotcold_fails(hotcold_bin, rewrite_gguf(
        src, tmp_path / "used.gguf", key=(f"{arch}.expert_used_count", n_expert + 1)))
    assert "expert_used_count" in err, f"the message should name expert_used_count:\n{err}"
