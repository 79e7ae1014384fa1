"""SmolLM2-135M-Instruct Q4_1: greedy generation identical to llama.cpp (batch 1 on both sides;
batched prompts within llama.cpp's own batch-size noise: see smollm2_cases.py).

64 greedy tokens for prose, code and ChatML prompts (smollm2_cases.PROMPTS): ids from
`hotcold run --ids`, and the text `hotcold run` prints. Generation stops before an
end-of-generation token (<|im_end|>), as in llama.cpp's examples. See smollm2_cases.py.
"""

from __future__ import annotations

import pytest

from conftest import hotcold_greedy_text, same_text
from smollm2_cases import PROMPTS, N_GREEDY, check_greedy_ids, model_refs, ref_greedy


@pytest.fixture(scope="module")
def q41():
    with model_refs() as get:
        yield get("Q4_1")


def test_greedy_ids(hotcold_bin, q41):
    path, ref = q41
    check_greedy_ids(hotcold_bin, ref, path, "Q4_1")


def test_greedy_text(hotcold_bin, q41):
    path, ref = q41
    bad = []
    for kind in ("prose", "code-python", "chat"):
        _, want = ref_greedy(ref, path, PROMPTS[kind], n_batch=1)
        got = hotcold_greedy_text(hotcold_bin, path, PROMPTS[kind], N_GREEDY, n_batch=1)
        if not same_text(got, want):
            bad.append(f"{kind}:\n  hotcold   {got!r}\n  llama.cpp {want!r}")
    assert not bad, "generated text differs:\n" + "\n".join(bad)
