#!/usr/bin/env python3
"""llama.cpp's own batch-size noise on the SmolLM2 reference prompts: for each file and prompt,
max |last-token logit difference| between a batch-512 and a batch-1 prefill, and whether its
greedy ids (64 tokens) agree between the two. Run with the venv of scripts/setup.sh:

  ~/.cache/hotcold/venv/bin/python tools/ref/batch_noise.py [VARIANT ...]   (default Q4_1 Q8_0 F16)
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools" / "ref"))
sys.path.insert(0, str(ROOT / "tests" / "reference"))

import llamacpp_ref  # noqa: E402
from smollm2_cases import N_GREEDY, PROMPTS, model_path  # noqa: E402


def main() -> int:
    for variant in sys.argv[1:] or ["Q4_1", "Q8_0", "F16"]:
        with llamacpp_ref.LlamaRef(model_path(variant), n_threads=2) as ref:
            for kind, prompt in PROMPTS.items():
                noise = float(abs(ref.last_logits(prompt, n_batch=512)
                                  - ref.last_logits(prompt, n_batch=1)).max())
                a = ref.greedy(prompt, N_GREEDY, n_batch=512).ids
                b = ref.greedy(prompt, N_GREEDY, n_batch=1).ids
                i = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), None)
                print(f"{variant} {kind}: max |logit diff| {noise:.4f}, greedy "
                      + ("same" if a == b else f"differs at {i}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
