#!/usr/bin/env python3
"""Side-by-side speed: hotcold vs llama.cpp (llama-cpp-python) on the same GGUF files.

For each model, runs --rounds rounds (default 5), each one hotcold round and one llama.cpp round
(the order alternating from round to round) with the same thread count, prompt length and
generation length, and the host's read bandwidth probed before each round (`hotcold bench
--membw`): these hosts' bandwidth moves by tens of percent from minute to minute, so a ratio is
only taken within a round, where both engines saw the same bandwidth. It prints per test the
median tokens/s of each engine with its range, the ratio of the medians, the median and range
of the per-round ratios, flagged "crosses 1.0" when that range includes both a win and a loss,
and the bandwidth's median and range. --json writes every round too.
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


def membw_round(binary: str, t: int) -> float:
    """The host's read bandwidth now (GB/s, median of the probe's passes)."""
    out = subprocess.run([binary, "bench", "--membw", "--json", "-t", str(t)], check=True,
                         capture_output=True, text=True).stdout
    return float(json.loads(out)["membw"]["read_gbps_median"])


def med_range(xs: list[float], fmt: str = ".1f") -> str:
    """'median [min-max]' over rounds."""
    return f"{statistics.median(xs):{fmt}} [{min(xs):{fmt}}-{max(xs):{fmt}}]"


def ratio_cells(hs: list[float], ls: list[float]) -> tuple[str, dict]:
    """The ratio of the medians, and the per-round ratios' median and range, flagged when the
    range crosses 1.0 (the comparison is not decided on this host)."""
    rs = [x / y for x, y in zip(hs, ls)]
    crosses = min(rs) < 1.0 < max(rs)
    cell = (f"{statistics.median(hs) / statistics.median(ls):.2f}x | {med_range(rs, '.2f')}"
            f"{' crosses 1.0' if crosses else ''}")
    return cell, {"ratio_of_medians": statistics.median(hs) / statistics.median(ls),
                  "ratio_median": statistics.median(rs), "ratio_min": min(rs),
                  "ratio_max": max(rs), "crosses_1": crosses, "ratios": rs}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-p", "--n-prompt", type=int, default=512)
    ap.add_argument("-n", "--n-gen", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", type=Path, default=None, help="write every round here too")
    ap.add_argument("--hotcold", default=str(Path(__file__).resolve().parent.parent / "build" / "hotcold"))
    ap.add_argument("--native", action="store_true",
                    help="also llama.cpp's own llama-bench (scripts/build_llama_cpp.sh)")
    a = ap.parse_args()
    bench_bin = native_llama_bench() if a.native else None
    if a.n_prompt < 0 or a.n_gen < 0 or a.n_prompt + a.n_gen == 0 or a.rounds < 1:
        ap.error("expected -p >= 0, -n >= 0 (not both 0) and --rounds >= 1")
    if a.rounds < 5:
        print(f"compare_llamacpp: {a.rounds} rounds: ratios on a host whose bandwidth moves need "
              ">= 5", file=sys.stderr)
    head = ("| model | test | read GB/s | hotcold t/s | llama.cpp t/s | ratio | per-round ratios |")
    if bench_bin:
        head += " llama-bench t/s | ratio | per-round ratios |"
    print(head + "\n" + "|---" * (head.count("|") - 1) + "|")
    report = []
    for model in a.models:
        llm = Llama(model_path=model, n_ctx=a.n_prompt + a.n_gen + 8, n_batch=max(a.n_prompt, 8),
                    n_threads=a.threads, n_threads_batch=a.threads, verbose=False)
        rng = np.random.default_rng(1)
        llamacpp_round(llm, a.n_prompt, a.n_gen, rng)  # warm-up: page in weights
        hc, lc, nb, bw = [], [], [], []
        for r in range(a.rounds):
            bw.append(membw_round(a.hotcold, a.threads))
            # Alternate who goes first, so neither engine always meets the host warmer.
            runs = [lambda: hc.append(hotcold_round(a.hotcold, model, a.threads, a.n_prompt, a.n_gen)),
                    lambda: lc.append(llamacpp_round(llm, a.n_prompt, a.n_gen, rng))]
            if bench_bin:
                runs.append(lambda: nb.append(llamabench_round(bench_bin, model, a.threads,
                                                               a.n_prompt, a.n_gen)))
            for run in (runs if r % 2 == 0 else runs[::-1]):
                run()
            print(f"  round {r + 1}/{a.rounds} done (read {bw[-1]:.1f} GB/s)", file=sys.stderr)
        name = Path(model).name
        for i, test in enumerate((f"pp{a.n_prompt}", f"tg{a.n_gen}")):
            if (a.n_prompt, a.n_gen)[i] == 0:
                continue
            hs, ls = [x[i] for x in hc], [x[i] for x in lc]
            cell, rep = ratio_cells(hs, ls)
            row = f"| {name} | {test} | {med_range(bw)} | {med_range(hs)} | {med_range(ls)} | {cell} |"
            entry = {"model": name, "test": test, "read_gbps": bw, "hotcold_tps": hs,
                     "llamacpp_tps": ls, "vs_binding": rep}
            if bench_bin:
                ns = [x[i] for x in nb]
                ncell, nrep = ratio_cells(hs, ns)
                row += f" {med_range(ns)} | {ncell} |"
                entry["llama_bench_tps"], entry["vs_llama_bench"] = ns, nrep
            print(row)
            report.append(entry)
        del llm
    if a.json:
        a.json.write_text(json.dumps({"threads": a.threads, "n_prompt": a.n_prompt,
                                      "n_gen": a.n_gen, "rounds": a.rounds, "results": report},
                                     indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
