"""SmolLM2-135M-Instruct F16 and Q8_0, made from the Q4_1 file by `hotcold quantize` in
scripts/setup.sh, and Q4_K_M / Q5_K_M, made from the F16 file by llama.cpp's own quantiser
(llama-quantize's mixes: most tensors Q5_0 / Q5_1, its fallback for rows of 576, beside Q4_K /
Q5_K, Q6_K and Q8_0) (each skipped when absent): perplexity (first 4 chunks of WikiText-2 test,
-c 512, within 0.5%), then greedy ids identical to llama.cpp on the same file (the mixes:
near-ties allowed at batch 1 as well, their K-quant decode kernels sum in another order). Every
perplexity test runs before any greedy one, so that a greedy divergence (pytest -x stops there)
never hides a perplexity result. See smollm2_cases.py."""

from __future__ import annotations

import pytest

from smollm2_cases import check_greedy_ids, check_perplexity, model_refs

VARIANTS = ["F16", "Q8_0", "Q4_K_M", "Q5_K_M"]
EXACT_BATCH1 = {"F16", "Q8_0"}
# The mixes' perplexity is held to 1%, not 0.5%: a pure Q5_0 file's batch-1 last-token logits
# equal llama.cpp's bit for bit, yet its 4-chunk PPL is 23.757 against llama.cpp's 23.865 at
# batch 1 and 23.883 at batch 512 (0.45-0.52%); the Q8_0 file already sits 0.25% from llama.cpp
# (22.220 / 22.164), an offset of the longer contexts that is not the new types' (issue notes).
PPL_TOL = {"Q4_K_M": 0.01, "Q5_K_M": 0.01}


@pytest.fixture(scope="module")
def models():
    with model_refs() as get:
        yield get


@pytest.mark.parametrize("variant", VARIANTS)
def test_perplexity(hotcold_bin, models, variant):
    path, ref = models(variant)
    check_perplexity(hotcold_bin, ref, path, variant, chunks=4,
                     **({"rel_tol": PPL_TOL[variant]} if variant in PPL_TOL else {}))


@pytest.mark.parametrize("variant", VARIANTS)
def test_greedy_ids(hotcold_bin, models, variant):
    path, ref = models(variant)
    check_greedy_ids(hotcold_bin, ref, path, variant, batch1_exact=variant in EXACT_BATCH1)
