"""SmolLM2-135M-ReLU, the committed ReGLU adapter merged by scripts/setup.sh (issue 36).

setup merges adapters/SmolLM2-135M-ReLU (LoRA shards + manifest) into the SmolLM2 F16 file with
tools/relu/lora.py, checks the merge against SHA256SUMS and quantises it to Q8_0 / Q4_0. Checked
here, on the files setup made:
  * the F16 file is the committed merge (sha256), and all three carry hotcold.ffn_activation =
    relu, so hotcold runs them as ReGLU;
  * the adapter did its work: most of h is exactly 0 (the SiLU weights with ReLU swapped in
    give ~64%), and WikiText-2 perplexity stays within a bound of the SiLU original's (with ReLU
    swapped in untrained it is thousands);
  * the sparse FFN is exact on it: `run --sparse` gives the dense run's greedy tokens (F16).
The bounds are the interim adapter's measured figures (adapters/SmolLM2-135M-ReLU/README.md) with
a margin for the quantised files; the issue's targets are checked by bench/relu_targets.py.
"""

from __future__ import annotations

import re

import pytest

from conftest import (MODELS, ROOT, THREADS, _sha256_file, hotcold, hotcold_greedy_ids,
                      parse_ids, require_file)

ADAPTER = ROOT / "adapters" / "SmolLM2-135M-ReLU"
HOW = "scripts/setup.sh merges adapters/SmolLM2-135M-ReLU into it"
TEXT_BYTES = 60_000   # WikiText-2's first ~14k tokens: 4 chunks of 512 and more
CHUNKS = 4
MIN_ZEROS = 0.88      # measured 0.925 on 40 chunks (F16); ReLU swapped in untrained: 0.64
MAX_PPL_RATIO = 8.0   # ReLU / SiLU perplexity on these chunks: measured 6.60 (F16); untrained > 100


def relu_file(kind: str):
    return require_file(MODELS / f"SmolLM2-135M-ReLU.{kind}.gguf", HOW)


def test_f16_is_the_committed_merge():
    sums = {}
    for line in (ADAPTER / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split()
        sums[name.lstrip("*")] = digest
    f16 = relu_file("F16")
    assert _sha256_file(f16) == sums["SmolLM2-135M-ReLU.F16.gguf"]
    for name, digest in sums.items():
        if name.endswith(".gguf") and (ADAPTER / name).exists():
            assert _sha256_file(ADAPTER / name) == digest, f"{name}: shard changed"


@pytest.mark.parametrize("kind", ["F16", "Q8_0", "Q4_0"])
def test_every_file_runs_as_relu(hotcold_bin, kind):
    out = hotcold(hotcold_bin, "inspect", relu_file(kind)).decode()
    assert re.search(r'hotcold\.ffn_activation\s+string\s+"relu"', out), out[:3000]


@pytest.mark.parametrize("kind", ["F16", "Q8_0"])
def test_sparse_and_close_to_the_original(hotcold_bin, wiki_head, tmp_path, kind):
    model = relu_file(kind)
    out = hotcold(hotcold_bin, "profile", "-m", model, "-f", wiki_head, "-o", tmp_path / "s.gguf",
                  "-c", 512, "--chunks", CHUNKS, "-t", THREADS).decode()
    assert "relu activations, fires when act != 0" in out, out
    m = re.search(r"^\s*mean\s+([\d.]+)%", out, re.M)
    assert m, out
    zeros = 1 - float(m[1]) / 100
    assert zeros >= MIN_ZEROS, f"{kind}: exact zeros of h {zeros:.4f} < {MIN_ZEROS}\n{out}"

    def ppl(path) -> float:
        o = hotcold(hotcold_bin, "perplexity", "-m", path, "-f", wiki_head, "-c", 512,
                    "--chunks", CHUNKS, "-t", THREADS).decode()
        return float(re.search(r"Final estimate: PPL = ([\d.]+)", o)[1])

    base = require_file(MODELS / f"SmolLM2-135M-Instruct.{kind}.gguf", "scripts/setup.sh makes it")
    ratio = ppl(model) / ppl(base)
    print(f"{kind}: exact zeros of h {zeros:.4f}, perplexity {ratio:.3f}x the SiLU original's")
    assert ratio <= MAX_PPL_RATIO, f"{kind}: perplexity {ratio:.3f}x the SiLU original's"


def test_sparse_ffn_gives_the_dense_tokens(hotcold_bin):
    # F16: the transposed down matrix keeps the file's type, so only the zero terms are skipped.
    # Block types re-quantise it to Q8_0 (sparse_ffn.h), a second rounding: on the Q8_0 file
    # "def fibonacci(n):" leaves the dense tokens at step 6 (measured 2026-12-03).
    model = relu_file("F16")
    for prompt in ("The history of the city begins", "def fibonacci(n):"):
        dense = hotcold_greedy_ids(hotcold_bin, model, prompt, 32)
        sparse = parse_ids(hotcold(hotcold_bin, "run", "-m", model, "-p", prompt, "-n", 32,
                                   "--temp", 0, "-t", THREADS, "--ids", "--sparse"))
        assert len(dense) == 32
        assert sparse == dense, prompt
