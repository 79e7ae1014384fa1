"""SmolLM2-135M-Instruct Q4_1: perplexity on WikiText-2 test, -c 512, first 20 chunks, within
0.5% of llama.cpp's (tools/ref/llamacpp_ref.py follows llama.cpp's perplexity tool exactly)."""

from __future__ import annotations

from smollm2_cases import check_perplexity, load_ref, model_path


def test_perplexity(hotcold_bin):
    path = model_path("Q4_1")
    with load_ref(path) as ref:
        check_perplexity(hotcold_bin, ref, path, "Q4_1", chunks=20)
