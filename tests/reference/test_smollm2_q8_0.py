"""SmolLM2-135M-Instruct Q8_0, made from the Q4_1 file by `hotcold quantize` in scripts/setup.sh
(skipped when absent): perplexity (first 4 chunks of WikiText-2 test, -c 512, within 0.5%),
then greedy ids identical to llama.cpp on the same file. Perplexity runs first so that a
greedy divergence (pytest -x stops there) never hides it. See smollm2_cases.py."""

from __future__ import annotations

import pytest

from smollm2_cases import check_greedy_ids, check_perplexity, load_ref, model_path


@pytest.fixture(scope="module")
def model():
    path = model_path("Q8_0")
    ref = load_ref(path)
    yield path, ref
    ref.close()


def test_perplexity(hotcold_bin, model):
    path, ref = model
    check_perplexity(hotcold_bin, ref, path, "Q8_0", chunks=4)


def test_greedy_ids(hotcold_bin, model):
    path, ref = model
    check_greedy_ids(hotcold_bin, ref, path, "Q8_0")
