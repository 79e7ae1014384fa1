"""hc-synth-model (tools/synth): its random-weight models load in llama.cpp, which tokenizes
them as hotcold does and computes the same logits.

A tiny model (n_embd 256, n_ff 768, 4/2 heads, 2 layers, synthetic SentencePiece vocabulary of
512 tokens) is generated with F32 and with F16 weights; both engines use an fp16 KV cache.

Logits tolerance, relative to max|logit| (~3.3 here; the logits' std is ~1 by construction).
With u16 = 2^-11 (~4.9e-4), fp16's relative rounding step:
  F32 weights: fp32 arithmetic summed in different orders (~1e-7), but K and V are rounded to
      the fp16 cache, and a last-bit difference can flip one of those roundings by u16 of that
      element. Measured up to 3.5e-5 (long prompt); tolerance 5e-4 (~1 u16).
  F16 weights: in addition, activations are rounded to fp16 before every matmul (ggml's
      vec_dot_type for F16), so flips happen at every layer's inputs. Measured up to 2.7e-4;
      tolerance 2e-3 (~4 u16).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import REF_THREADS, THREADS, hotcold, hotcold_tokenize, llamacpp_ref

REL_TOL = {"f32": 5e-4, "f16": 2e-3}
N_VOCAB = 512

TOKENIZE_TEXTS = [
    "hello world",
    "",
    " Leading and trailing spaces  ",
    "Once upon a time, there was a little girl named Lily.\nThe end.",
    "digits 0123456789 and punctuation: (a, b; c!) \"quoted\" it's",
    "caf\u00e9 \u4f60\u597d \U0001F600 tabs\tand\nnewlines",  # byte-fallback pieces
    "<s>not special</s>",
]

PROMPTS = {
    "bos": "",
    "short": "hello",
    "long": "Once upon a time, there was a little girl named Lily. She loved to play outside "
            "in the park, caf\u00e9 \u4f60\u597d.",
}


@pytest.fixture(scope="module", params=["f32", "f16"])
def model(request, synth_bin, tmp_path_factory) -> tuple[str, Path]:
    wtype = request.param
    out = tmp_path_factory.mktemp("synth") / f"tiny.{wtype}.gguf"
    p = subprocess.run([str(synth_bin), "--shape", "tiny", "--layers", "2", "--type", wtype,
                        "--seed", "1", "-t", str(THREADS), "-o", str(out)],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    assert p.returncode == 0, f"hc-synth-model failed:\n{p.stderr.decode()[-3000:]}"
    return wtype, out


@pytest.fixture(scope="module")
def ref(model):
    try:
        r = llamacpp_ref.LlamaRef(model[1], n_threads=REF_THREADS, kv_type="f16")
    except RuntimeError as e:
        pytest.fail(f"llama.cpp cannot load {model[1]}: {e}")
    yield r
    r.close()


def test_llamacpp_reads_metadata(ref):
    assert (ref.n_vocab, ref.bos, ref.eos, ref.add_bos, ref.add_eos, ref.n_ctx_train) == \
        (N_VOCAB, 1, 2, True, False, 2048)
    newline = 3 + 0x0A  # <0x0A>: byte tokens follow <unk> <s> </s>
    assert ref.tokenize("\n", add_special=False)[-1] == newline
    assert ref.piece(newline) == b"\n"


@pytest.mark.parametrize("no_bos", [False, True], ids=["special", "no-bos"])
def test_tokenize(hotcold_bin, model, ref, no_bos):
    for text in TOKENIZE_TEXTS:
        want = ref.tokenize(text, add_special=not no_bos, parse_special=not no_bos)
        got = hotcold_tokenize(hotcold_bin, model[1], text, no_bos)
        assert got == want, f"{text!r}: hotcold {got}, llama.cpp {want}"


@pytest.mark.parametrize("prompt", list(PROMPTS.values()), ids=list(PROMPTS))
def test_last_token_logits(hotcold_bin, model, ref, tmp_path, prompt):
    wtype, path = model
    want = ref.last_logits(prompt).astype(np.float64)
    out = tmp_path / "logits.f32"
    hotcold(hotcold_bin, "run", "-m", path, "-p", prompt, "-n", 0, "-t", THREADS,
            "--logits-out", out)
    got = np.fromfile(out, dtype="<f4").astype(np.float64)
    assert got.size == N_VOCAB
    assert np.isfinite(want).all() and 0.3 < want.std() < 3.0, \
        f"degenerate reference logits: std {want.std():.3g}"
    diff = np.abs(got - want)
    tol = REL_TOL[wtype] * float(np.abs(want).max())
    worst = int(np.argmax(diff))
    assert diff.max() <= tol, (f"{wtype}: max |diff| {diff.max():.3g} > tol {tol:.3g} at token "
                               f"{worst}: hotcold {got[worst]!r}, llama.cpp {want[worst]!r}")
