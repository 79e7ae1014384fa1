"""SmolLM2-135M-Instruct F16 and Q8_0, made from the Q4_1 file by `hotcold quantize` in
scripts/setup.sh (each skipped when absent): perplexity (first 4 chunks of WikiText-2 test,
-c 512, within 0.5%), then greedy ids identical to llama.cpp on the same file. Every
perplexity test runs before any greedy one, so that a greedy divergence (pytest -x stops there)
never hides a perplexity result. See smollm2_cases.py."""

from __future__ import annotations

import pytest

from smollm2_cases import check_greedy_ids, check_perplexity, model_refs

VARIANTS = ["F16", "Q8_0"]


@pytest.fixture(scope="module")
def models():
    with model_refs() as get:
        yield get


@pytest.mark.parametrize("variant", VARIANTS)
def test_perplexity(hotcold_bin, models, variant):
    path, ref = models(variant)
    check_perplexity(hotcold_bin, ref, path, variant, chunks=4)


@pytest.mark.parametrize("variant", VARIANTS)
def test_greedy_ids(hotcold_bin, models, variant):
    path, ref = models(variant)
    check_greedy_ids(hotcold_bin, ref, path, variant)
