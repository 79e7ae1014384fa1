#!/usr/bin/env python3
"""Compare hotcold with relufy's torch forward on one GGUF (ReGLU or SwiGLU, as hotcold picks it).

    check_engine.py --gguf MODEL.gguf --hotcold build/hotcold [--prompt TEXT] [-n 24]

Prints one JSON object:
  act              the activation used on the torch side (hotcold's rule: hotcold.ffn_activation
                   or llama.feed_forward_activation, else general.name containing relu/prosparse)
  logits_max_abs_diff / logits_max_abs   last prompt token, torch vs `hotcold run --logits-out`
  greedy_torch / greedy_engine           greedy continuations (ids), stopping before EOS
  greedy_match     True if identical, or if they part at a near-tie (torch's logit margin
                   between the two tokens below --tie, which fp32 rounding can flip)
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import relufy  # noqa: E402


def activation_of(reader) -> str:
    """hotcold's detect_activation (src/model/llama_model.cpp) for arch llama."""
    for key in ("llama.feed_forward_activation", "hotcold.ffn_activation"):
        f = reader.fields.get(key)
        if f is not None:
            return "relu" if f.contents().lower() == "relu" else "silu"
    f = reader.fields.get("general.name")
    name = f.contents().lower() if f is not None else ""
    return "relu" if any(s in name for s in ("relu", "prosparse", "bamboo")) else "silu"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gguf", type=Path, required=True)
    p.add_argument("--hotcold", type=Path, required=True)
    p.add_argument("--prompt", default="Once upon a time, there was a little")
    p.add_argument("-n", type=int, default=24, help="greedy tokens to compare")
    p.add_argument("--tie", type=float, default=1e-3, help="logit margin counted as a near-tie")
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()
    torch.set_num_threads(a.threads)

    cfg, w, reader = relufy.read_gguf(a.gguf)
    act = activation_of(reader)
    model = relufy.Llama(cfg, w, act).eval()
    ids = [int(s) for s in relufy.run_engine(
        [a.hotcold, "tokenize", "-m", a.gguf, "-p", a.prompt]).split()]
    eos = reader.fields["tokenizer.ggml.eos_token_id"].contents() \
        if "tokenizer.ggml.eos_token_id" in reader.fields else -1

    with tempfile.TemporaryDirectory() as td:
        lpath = Path(td) / "logits.f32"
        relufy.run_engine([a.hotcold, "run", "-m", a.gguf, "-p", a.prompt, "-n", 1, "--temp", 0,
                           "-t", a.threads, "--logits-out", lpath])
        eng_logits = np.fromfile(lpath, dtype="<f4")
    eng_ids = [int(s) for s in relufy.run_engine(
        [a.hotcold, "run", "-m", a.gguf, "-p", a.prompt, "-n", a.n, "--temp", 0, "-t", a.threads,
         "--ids"]).split()]

    with torch.no_grad():
        t_logits = model(torch.tensor([ids]))[0, -1].numpy()
        seq, got, verdict = list(ids), [], "identical"
        for i in range(a.n):
            lg = model(torch.tensor([seq]))[0, -1]
            tok = int(lg.argmax())
            if i < len(eng_ids) and eng_ids[i] != tok:
                margin = float(lg[tok] - lg[eng_ids[i]])
                verdict = (f"near-tie at {i}: margin {margin:.2e}" if margin < a.tie
                           else f"differ at {i}: torch {tok}, engine {eng_ids[i]}, margin {margin:.4f}")
                break
            if tok == eos:
                break
            got.append(tok)
            seq.append(tok)
    out = {
        "gguf": str(a.gguf), "act": act, "prompt_ids": ids,
        "logits_max_abs_diff": float(np.abs(t_logits - eng_logits).max()),
        "logits_max_abs": float(np.abs(t_logits).max()),
        "greedy_torch": got, "greedy_engine": eng_ids, "greedy_verdict": verdict,
        "greedy_match": verdict == "identical" and got == eng_ids[:len(got)]
        and len(got) == len(eng_ids) or verdict.startswith("near-tie"),
    }
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
