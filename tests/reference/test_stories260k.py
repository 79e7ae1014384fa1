"""stories260K (fp32, 260K params, SentencePiece vocab of 512): hotcold vs llama.cpp.

The model is converted with `hotcold convert` into a temporary directory, and llama.cpp runs
on that same GGUF. A second GGUF made by an independent Python converter
(tools/ref/llama2c_to_gguf.py, llama.cpp's convert-llama2c semantics) separates converter
bugs from inference bugs, and a float64 NumPy forward pass (tools/ref/np_llama.py) checks the
reference itself.

Logits tolerance. The reference for logits is llama.cpp with an F32 KV cache: plain fp32
arithmetic. With unit roundoff u32 = 2^-24 (~6.0e-8), a length-K dot product in fp32 carries a
relative error of about sqrt(K)*u32 for typical rounding (K <= 172 here: ~13 u32), at most
K*u32; the forward pass chains 5 layers of such products with RMS norms, softmax and SiLU in
between. Measured: llama.cpp (F32 KV) drifts from float64 by at most 5.8e-6, ~6 u32 *
max|logit| (max|logit| ~ 17). Two correct fp32 implementations may each drift that much in
different directions and sum in different orders, so the fp32 part of the tolerance is
    128 * u32 * max|logit_ref|            (~1.3e-4 here; 20x the measured drift).
hotcold stores K and V in fp16 (src/model/kv_cache.h, like llama.cpp's default), which the
fp32 bound cannot absorb: each of the 5 layers rounds K and V once more, each rounding a
relative error <= u16 = 2^-11 (~4.9e-4), and to first order these 10 roundings add up on the
residual stream, so for an fp16 cache we add
    10 * u16 * max|logit_ref|             (~0.083 here),
against a measured |hotcold - llama.cpp F32 KV| <= 2.2e-2 (~2.6 u16 * max|logit|) and
|llama.cpp F16 KV - llama.cpp F32 KV| <= 2.5e-2. Set HOTCOLD_KV_CACHE=f32 once hotcold keeps
fp32 K/V for F32 models: then only the fp32 term applies, and any half-precision shortcut
fails.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from conftest import (REF_THREADS, SHARED, THREADS, cached_reference, greedy_divergence,
                      hotcold, hotcold_greedy_ids, hotcold_greedy_text, hotcold_tokenize,
                      llamacpp_ref, require_file, same_text)

U32 = 2.0 ** -24
U16 = 2.0 ** -11
FP32_ULPS = 128
KV16_ROUNDINGS = 10  # 5 layers x (K, V)
HOTCOLD_KV_CACHE = os.environ.get("HOTCOLD_KV_CACHE", "f16")
N_GREEDY = 128

TOKENIZE_TEXTS = [
    "Once upon a time, there was a little girl named Lily.",
    "",
    " leading space and trailing space ",
    "Tom said, \"Let's play!\"\nThey ran to the park.\n\nThe end.",
    "multiple   spaces\tand\ttabs",
    "Numbers 123 and 4567, caf\u00e9, \u4f60\u597d, \U0001F600",  # byte-fallback pieces
    "<s>not special</s>",
]


def fp32_tol(ref_logits: np.ndarray) -> float:
    return FP32_ULPS * U32 * float(np.abs(ref_logits).max())


def hotcold_tol(ref_logits: np.ndarray) -> float:
    kv_term = KV16_ROUNDINGS * U16 if HOTCOLD_KV_CACHE == "f16" else 0.0
    return fp32_tol(ref_logits) + kv_term * float(np.abs(ref_logits).max())


@pytest.fixture(scope="module")
def llama2c_paths():
    d = SHARED / "models" / "stories260K"
    return (require_file(d / "stories260K.bin", "../shared/models/stories260K is needed"),
            require_file(d / "tok512.bin", "../shared/models/stories260K is needed"))


@pytest.fixture(scope="module")
def hc_gguf(hotcold_bin, llama2c_paths, tmp_path_factory):
    out = tmp_path_factory.mktemp("hc") / "stories260K.gguf"
    hotcold(hotcold_bin, "convert", "--llama2c", llama2c_paths[0], "--tokenizer",
            llama2c_paths[1], "-o", out)
    assert out.is_file() and out.stat().st_size > 0, "hotcold convert wrote no file"
    return out


@pytest.fixture(scope="module")
def py_gguf(llama2c_paths, tmp_path_factory):
    import llama2c_to_gguf
    out = tmp_path_factory.mktemp("py") / "stories260K.gguf"
    llama2c_to_gguf.convert(*llama2c_paths, out)
    return out


def _load(path, kv_type):
    try:
        return llamacpp_ref.LlamaRef(path, n_threads=REF_THREADS, kv_type=kv_type)
    except RuntimeError as e:
        pytest.fail(f"llama.cpp cannot load {path}: {e}")


@pytest.fixture(scope="module")
def ref(hc_gguf):
    """llama.cpp on hotcold's GGUF, default F16 KV cache: for ids and tokens."""
    r = _load(hc_gguf, "f16")
    yield r
    r.close()


@pytest.fixture(scope="module")
def ref32(hc_gguf):
    """llama.cpp on hotcold's GGUF, F32 KV cache: plain fp32, for logits."""
    r = _load(hc_gguf, "f32")
    yield r
    r.close()


@pytest.fixture(scope="module")
def py_ref32(py_gguf):
    r = _load(py_gguf, "f32")
    yield r
    r.close()


# ---- the reference itself (needs no hotcold) ----------------------------------------------------

def test_reference_agrees_with_float64(py_ref32, py_gguf):
    """llama.cpp (F32 KV) stays within a quarter of the fp32 tolerance of a float64 forward
    pass, and its greedy tokens are the float64 argmaxes: the reference is exact up to fp32
    rounding."""
    py_ref = py_ref32
    import np_llama
    exact = np_llama.NpLlama(str(py_gguf))
    gen = py_ref.greedy("", 64)
    ids = [py_ref.bos] + gen.ids
    full = exact.logits(ids)
    assert np.argmax(full[:-1], axis=1).tolist() == gen.ids
    for n in (1, 7, len(ids)):
        got = py_ref.last_logits(ids=ids[:n]).astype(np.float64)
        diff = float(np.abs(got - full[n - 1]).max())
        assert diff <= fp32_tol(full[n - 1]) / 4, f"prefix {n}: llama.cpp vs float64 {diff:.3g}"


# ---- converter ----------------------------------------------------------------------------------

def test_convert_matches_reference_converter(ref32, py_ref32):
    """llama.cpp sees the same model in hotcold's GGUF and in the reference converter's:
    same vocabulary behaviour, same special tokens, same logits."""
    ref, py_ref = ref32, py_ref32
    assert (ref.n_vocab, ref.bos, ref.eos, ref.add_bos) == \
        (py_ref.n_vocab, py_ref.bos, py_ref.eos, py_ref.add_bos)
    for text in TOKENIZE_TEXTS:
        for special in (True, False):
            assert ref.tokenize(text, special, special) == py_ref.tokenize(text, special, special), \
                f"tokenization of {text!r} (add_special={special})"
    ids = py_ref.prompt_ids("Once upon a time, there was a little")
    a, b = ref.last_logits(ids=ids), py_ref.last_logits(ids=ids)
    assert float(np.abs(a - b).max()) <= fp32_tol(b)


# ---- hotcold vs llama.cpp ---------------------------------------------------------------------

@pytest.mark.parametrize("no_bos", [False, True], ids=["special", "no-bos"])
def test_tokenize(hotcold_bin, hc_gguf, ref, no_bos):
    """SentencePiece tokenization (space prefix, byte fallback) identical to llama.cpp."""
    for text in TOKENIZE_TEXTS:
        want = ref.tokenize(text, add_special=not no_bos, parse_special=not no_bos)
        got = hotcold_tokenize(hotcold_bin, hc_gguf, text, no_bos)
        assert got == want, f"{text!r}: hotcold {got}, llama.cpp {want}"


@pytest.mark.parametrize("prompt", [
    "",
    "Once upon a time, there was a little",
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
    "park. One day, she saw a big, red ball. She wanted to play with it, but it was too high.",
], ids=["bos", "short", "long"])
def test_last_token_logits(hotcold_bin, hc_gguf, ref32, tmp_path, prompt):
    """--logits-out (float32 [n_vocab], little-endian) within the tolerance of llama.cpp."""
    ref = ref32
    want = ref.last_logits(prompt).astype(np.float64)
    out = tmp_path / "logits.f32"
    hotcold(hotcold_bin, "run", "-m", hc_gguf, "-p", prompt, "-n", 1, "--temp", 0,
            "-t", THREADS, "--logits-out", out)
    got = np.fromfile(out, dtype="<f4")
    assert got.size == ref.n_vocab, f"{got.size} floats written, expected n_vocab={ref.n_vocab}"
    diff = np.abs(got.astype(np.float64) - want)
    tol = hotcold_tol(want)
    worst = int(np.argmax(diff))
    assert diff.max() <= tol, (f"max |diff| {diff.max():.3g} > tol {tol:.3g} (KV cache "
                               f"{HOTCOLD_KV_CACHE}) at token {worst}: hotcold {got[worst]!r}, "
                               f"llama.cpp {want[worst]!r}")


@pytest.fixture(scope="module")
def ref_greedy(ref, hc_gguf):
    def compute():
        g = ref.greedy("", N_GREEDY)
        return {"ids": g.ids, "text": g.text_bytes.decode("latin-1")}
    r = cached_reference("stories-greedy", {"prompt": "", "n": N_GREEDY, "kv": ref.kv_type},
                         [hc_gguf], compute)
    return r["ids"], r["text"].encode("latin-1")


def test_greedy_ids_from_empty_prompt(hotcold_bin, hc_gguf, ref, ref_greedy):
    """128 greedy tokens from the empty prompt (BOS only): ids identical to llama.cpp."""
    want, _ = ref_greedy
    got = hotcold_greedy_ids(hotcold_bin, hc_gguf, "", N_GREEDY)
    assert got == want, greedy_divergence(ref, "", got, want)


def test_greedy_text_from_empty_prompt(hotcold_bin, hc_gguf, ref_greedy):
    _, want = ref_greedy
    got = hotcold_greedy_text(hotcold_bin, hc_gguf, "", N_GREEDY)
    assert same_text(got, want), f"hotcold: {got[:200]!r}\nllama.cpp: {want[:200]!r}"


def test_greedy_ids_with_prompt(hotcold_bin, hc_gguf, ref):
    prompt = "Lily and Ben went to the"
    want = ref.greedy(prompt, 64).ids
    got = hotcold_greedy_ids(hotcold_bin, hc_gguf, prompt, 64)
    assert got == want, greedy_divergence(ref, prompt, got, want)
