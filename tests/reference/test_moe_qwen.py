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
             written from llama.cpp's graphs (tools/ref/np_llama.py: NEOX RoPE for the Qwen
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

import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import (REF_THREADS, THREADS, check_greedy_decided, check_last_token_logits,
                      check_perplexity_all_chunks, hotcold_last_logits, hotcold_tokenize,
                      llamacpp_greedy_gaps, llamacpp_ref, llamacpp_vs_float64, rel_diff,
                      synth_models)
from np_llama import NpLlama

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
TEXT_BYTES = 4096  # of WikiText-2 test (conftest's wiki_head fixture)
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


@pytest.fixture(scope="module")
def model(synth_bin, tmp_path_factory):
    """model(variant, wtype, *extra) -> the fixture file, generated once per module;
    wtype "q8_0" / "q4_0" / "q4_k_m": quantised by llama.cpp from the F32 file."""
    return synth_models(synth_bin, tmp_path_factory.mktemp("moe_qwen"), COMMON, VARIANTS,
                        llamacpp_quantised=True)


# ---- float64 llama / qwen2 / qwen3 / qwen3moe: tools/ref/np_llama.py ----------------------------

_NP_MODELS: dict[str, NpLlama] = {}


def np_model(path: Path) -> NpLlama:
    """NpLlama(path), loaded once per file."""
    if str(path) not in _NP_MODELS:
        _NP_MODELS[str(path)] = NpLlama(path)
    return _NP_MODELS[str(path)]


# What each variant must show to be live: (label, NpLlama.logits keyword arguments).
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
    for name, ids, got, want in llamacpp_vs_float64(ref, exact, PROMPTS, variant):
        gap = exact.route_gap
        rel = rel_diff(got, want)
        # One token (BOS alone) sees no RoPE and attends to itself only: nothing to show there.
        moved = {label: rel_diff(exact.logits(ids, **kw)[-1], want)
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
        m = NpLlama(path)
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

    def premise(name, prompt):
        # No expert choice is a rounding coin-flip (else hotcold may rightly differ).
        exact.logits(ref.prompt_ids(prompt))
        assert exact.route_gap >= MIN_ROUTE_GAP[wtype], (
            f"{name!r}: a routing near-tie (router logit gap {exact.route_gap:.3g}): pick other "
            "PROMPTS")
    check_last_token_logits(hotcold_bin, ref, path, PROMPTS, N_VOCAB, REL_TOL[wtype],
                            f"{variant}-{wtype}", tmp_path, premise)


PPL_CASES = [("llamamoe", "q8_0"), ("llamamoe", "q4_0"), ("llamamoe", "q4_k_m"),
             ("qwen3moe", "q8_0"), ("qwen3moe", "q4_0"), ("qwen3moe", "q4_k_m"),
             ("qwen2", "q8_0"), ("qwen2", "q4_0"), ("qwen3", "q4_0"), ("qwen3", "q4_k_m")]


@pytest.mark.parametrize("variant,wtype", PPL_CASES, ids=[f"{v}-{t}" for v, t in PPL_CASES])
def test_perplexity(hotcold_bin, model, refs, wiki_head, variant, wtype):
    path = model(variant, wtype)
    check_perplexity_all_chunks(hotcold_bin, refs(path), path, wiki_head, PPL_CTX, PPL_REL_TOL,
                                "moe-qwen-perplexity", f"{variant}-{wtype}")


def ref_greedy(ref, path: Path, prompt: str, n_batch: int) -> dict:
    """llama.cpp's greedy ids (prompt in batches of n_batch, then one token at a time), its
    top-2 logit gap before each of them, and the float64 model's smallest router gap over the
    tokens each step depends on (inf for dense files)."""
    r = llamacpp_greedy_gaps(ref, path, prompt, N_GREEDY, "moe-qwen-greedy", n_batch=n_batch)
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
    """At batch sizes 1 and 512; a step is decided when llama.cpp's top-2 logit gap and every
    router gap it depends on are above the near-tie levels."""
    path = model(variant, wtype)
    ref = refs(path)
    wants = {n_batch: {p: ref_greedy(ref, path, p, n_batch) for p in GREEDY_PROMPTS}
             for n_batch in (1, 512)}
    check_greedy_decided(hotcold_bin, path, wants, N_GREEDY, NEAR_TIE[wtype], MIN_DECISIVE,
                         f"{variant}-{wtype}", route_tie=MIN_ROUTE_GAP[wtype])


# ---- ReLU experts: hotcold vs float64 (llama.cpp runs any llama file with SiLU) -----------------

RELU_TOL = 5e-4  # 1 u16; llama.cpp's F16-cache SwiGLU vs the kv16 float64 model: <= 4.5e-5


def test_relu_moe_matches_float64(hotcold_bin, model, refs, tmp_path):
    path = model("llamamoe", "f32", "--act", "relu")
    exact = np_model(path)
    ref = refs(path)  # F16 KV cache: the roundings the kv16 model reproduces
    for name, prompt in PROMPTS.items():
        ids = ref.prompt_ids(prompt)
        # The premise, on llama.cpp alone: the kv16 float64 model is ggml's F16-cache arithmetic.
        swiglu = rel_diff(ref.last_logits(ids=ids).astype(np.float64),
                           exact.logits(ids, kv16=True)[-1])
        assert swiglu <= RELU_TOL / 4, \
            f"{name!r}: llama.cpp (F16 KV) is {swiglu:.3g} from the kv16 float64 model"
        want = exact.logits(ids, act="relu", kv16=True)[-1]
        assert exact.route_gap >= MIN_ROUTE_GAP["f16"], f"{name!r}: a routing near-tie"
        assert hotcold_tokenize(hotcold_bin, path, prompt, no_bos=False) == ids
        got = hotcold_last_logits(hotcold_bin, path, prompt, tmp_path / f"{name}.f32")
        rel = rel_diff(got, want)
        silu = rel_diff(exact.logits(ids, kv16=True)[-1], want)
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
