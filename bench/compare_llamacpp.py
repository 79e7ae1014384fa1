#!/usr/bin/env python3
"""Side-by-side speed: hotcold vs llama.cpp (llama-cpp-python) on the same GGUF files.

For each model, alternates one hotcold round and one llama.cpp round, --rounds times, with the
same thread count, prompt length and generation length, and prints mean tokens/s (± sd over
rounds), the hotcold / llama.cpp ratio of the means and the range of the per-round ratios.
Run with the venv made by scripts/setup.sh:

  ~/.cache/hotcold/venv/bin/python bench/compare_llamacpp.py -t 2 MODEL.gguf [MODEL.gguf ...]

llama.cpp is driven through its Python binding (one eval call per generated token); the
binding's per-call overhead is part of its figure. With --native, llama.cpp's own llama-bench
from the same llama.cpp (built natively without AMX by scripts/build_llama_cpp.sh, cached) runs
a third round each time, and its column and ratio are printed too (no binding overhead).
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from llama_cpp import Llama


def hotcold_round(binary: str, model: str, t: int, n_p: int, n_g: int) -> tuple[float, float]:
    out = subprocess.run([binary, "bench", "-m", model, "-t", str(t), "-p", str(n_p),
                          "-n", str(n_g), "-r", "1", "--json"],
                         check=True, capture_output=True, text=True).stdout
    j = json.loads(out)
    return (j["pp"]["tps_mean"] if n_p else 0.0), (j["tg"]["tps_mean"] if n_g else 0.0)


def llamacpp_round(llm: Llama, n_p: int, n_g: int, rng: np.random.Generator) -> tuple[float, float]:
    vocab = llm.n_vocab()
    prompt = [int(x) for x in rng.integers(0, vocab, n_p)]
    llm.reset()
    pp = 0.0
    if n_p:  # -p 0: decode only
        t0 = time.perf_counter()
        llm.eval(prompt)
        pp = n_p / (time.perf_counter() - t0)
    llm.reset()
    gen = [int(x) for x in rng.integers(0, vocab, n_g)]
    t0 = time.perf_counter()
    for tok in gen:
        llm.eval([tok])
    return pp, n_g / (time.perf_counter() - t0)


def llamabench_round(binary: str, model: str, t: int, n_p: int, n_g: int) -> tuple[float, float]:
    """llama.cpp's llama-bench, one repetition of each test: (pp t/s, tg t/s)."""
    out = subprocess.run([binary, "-m", model, "-t", str(t), "-p", str(n_p), "-n", str(n_g),
                          "-r", "1", "-o", "json"], check=True, capture_output=True, text=True).stdout
    pp = tg = 0.0
    for test in json.loads(out):
        if test.get("n_prompt") and not test.get("n_gen"):
            pp = test["avg_ts"]
        elif test.get("n_gen") and not test.get("n_prompt"):
            tg = test["avg_ts"]
    return pp, tg


def native_llama_bench() -> str:
    root = Path(__file__).resolve().parent.parent
    d = subprocess.run(["bash", str(root / "scripts" / "build_llama_cpp.sh")], check=True,
                       capture_output=True, text=True).stdout.strip()
    return str(Path(d) / "bin" / "llama-bench")


def spread(xs: list[float]) -> str:
    """' ± sd' over rounds (the host's memory bandwidth moves from run to run), '' for one."""
    return f" ± {statistics.stdev(xs):.1f}" if len(xs) > 1 else ""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-p", "--n-prompt", type=int, default=512)
    ap.add_argument("-n", "--n-gen", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--hotcold", default=str(Path(__file__).resolve().parent.parent / "build" / "hotcold"))
    ap.add_argument("--native", action="store_true",
                    help="also llama.cpp's own llama-bench (scripts/build_llama_cpp.sh)")
    a = ap.parse_args()
    bench_bin = native_llama_bench() if a.native else None
    if a.n_prompt < 0 or a.n_gen < 0 or a.n_prompt + a.n_gen == 0 or a.rounds < 1:
        ap.error("expected -p >= 0, -n >= 0 (not both 0) and --rounds >= 1")
    if bench_bin:
        print("| model | test | hotcold t/s | llama.cpp t/s | ratio | per-round ratios "
              "| llama-bench t/s | ratio | per-round ratios |\n|---|---|---|---|---|---|---|---|---|")
    else:
        print("| model | test | hotcold t/s | llama.cpp t/s | ratio | per-round ratios |\n"
              "|---|---|---|---|---|---|")
    for model in a.models:
        llm = Llama(model_path=model, n_ctx=a.n_prompt + a.n_gen + 8, n_batch=max(a.n_prompt, 8),
                    n_threads=a.threads, n_threads_batch=a.threads, verbose=False)
        rng = np.random.default_rng(1)
        llamacpp_round(llm, a.n_prompt, a.n_gen, rng)  # warm-up: page in weights
        hc, lc, nb = [], [], []
        for r in range(a.rounds):
            hc.append(hotcold_round(a.hotcold, model, a.threads, a.n_prompt, a.n_gen))
            lc.append(llamacpp_round(llm, a.n_prompt, a.n_gen, rng))
            if bench_bin:
                nb.append(llamabench_round(bench_bin, model, a.threads, a.n_prompt, a.n_gen))
            print(f"  round {r + 1}/{a.rounds} done", file=sys.stderr)
        name = Path(model).name
        for i, test in enumerate((f"pp{a.n_prompt}", f"tg{a.n_gen}")):
            if (a.n_prompt, a.n_gen)[i] == 0:
                continue
            hs, ls = [x[i] for x in hc], [x[i] for x in lc]
            h, l = statistics.mean(hs), statistics.mean(ls)
            ratios = sorted(x / y for x, y in zip(hs, ls))
            row = (f"| {name} | {test} | {h:.1f}{spread(hs)} | {l:.1f}{spread(ls)} | {h / l:.2f}x "
                   f"| {ratios[0]:.2f}-{ratios[-1]:.2f} |")
            if bench_bin:
                ns = [x[i] for x in nb]
                n = statistics.mean(ns)
                nr = sorted(x / y for x, y in zip(hs, ns))
                row += f" {n:.1f}{spread(ns)} | {h / n:.2f}x | {nr[0]:.2f}-{nr[-1]:.2f} |"
            print(row)
        del llm
    return 0


if __name__ == "__main__":
    sys.exit(main())
