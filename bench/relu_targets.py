#!/usr/bin/env python3
"""Issue 36's targets for a ReLU model beside its SiLU original, with hotcold's own tools only.

    ~/.cache/hotcold/venv/bin/python bench/relu_targets.py \\
        --base ~/.cache/hotcold/models/SmolLM2-135M-Instruct.F16.gguf \\
        --relu ~/.cache/hotcold/models/SmolLM2-135M-ReLU.F16.gguf --out relu-targets

What it runs (every command is printed as it starts; -t threads everywhere):
  1. accuracy: `hotcold eval --tasks wikitext2,code-ppl --ppl-ctx 512 --ppl-chunks C` on both
     models: WikiText-2 test perplexity and code-ppl (HumanEval's reference solutions given their
     prompts), and their ratios ReLU / SiLU (targets <= 1.25).
  2. sparsity and the power law: `hotcold profile -c 512 --chunks C` of the ReLU model on
     WikiText-2 test: per layer the exact zeros of h (1 - firing; target >= 85% averaged over the
     layers) and the share of neurons covering 80% of the firings; then the same on TinyStories
     with `--compare` the WikiText profile: the per-layer Jaccard of the two hot sets.
  3. predictors: `hotcold train-predictor` on --predictor-corpus (not the evaluation text), then
     `hotcold profile` of the file with predictors on WikiText-2 test: per layer recall and the
     share of neurons predicted (target: recall >= 0.99 at <= 20% predicted).
  4. speed: `hotcold bench -p 0 -n N -r 1 --json --no-membw` of the file with predictors, dense,
     `--sparse` (exact) and `--predictor`, in --rounds rounds whose order rotates; medians,
     ranges and the ratios to dense of the same round (target >= 1.5x).
  5. greedy text: `hotcold run --temp 0 --ids -n N` dense, `--sparse` and `--predictor` on a few
     prompts; --sparse must give dense's tokens (exact for ReLU), the predictor where it recalls
     every firing neuron: the first differing step is reported.

Writes OUT/targets.json (every figure) and OUT/targets.md (the tables), and prints the tables.
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROMPTS = [
    "The history of the city begins",
    "def fibonacci(n):",
    "Once upon a time, in a small village,",
    "The theory of relativity explains",
]


def run(cmd: list, **kw) -> str:
    cmd = [str(c) for c in cmd]
    print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
    p = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL, **kw)
    if p.returncode != 0:
        sys.exit(f"relu_targets: {cmd[1]} failed (exit {p.returncode}):\n{p.stderr[-3000:]}")
    return p.stdout


def profile_rows(out: str) -> list[dict]:
    """The per-layer rows of `hotcold profile`'s table: layer threshold firing% top50..top99%."""
    rows = []
    for line in out.splitlines():
        m = re.match(r"^\s*(\d+)\s+(\S+)\s+([\d.]+)%\s+([\d.]+)%\s+([\d.]+)%\s+([\d.]+)%\s+([\d.]+)%$",
                     line)
        if m:
            rows.append({"layer": int(m[1]), "firing": float(m[3]) / 100,
                         "top50": float(m[4]) / 100, "top80": float(m[5]) / 100,
                         "top90": float(m[6]) / 100, "top99": float(m[7]) / 100})
    return rows


def table_after(out: str, header: str, pattern: str) -> list[re.Match]:
    """The rows matching `pattern` right after a `header` line and its column line."""
    start = out.find(header)
    rows = []
    for line in out[start:].splitlines()[2:] if start >= 0 else []:
        m = re.match(pattern, line)
        if not m:
            break
        rows.append(m)
    return rows


def overlap_rows(out: str) -> list[dict]:
    """`profile --compare`'s rows: layer hot% hot'% jaccard."""
    return [{"layer": int(m[1]), "hot": float(m[2]) / 100, "hot_other": float(m[3]) / 100,
             "jaccard": float(m[4])}
            for m in table_after(out, "# hot-set overlap", r"^\s*(\d+)\s+([\d.]+)%\s+([\d.]+)%\s+([\d.]+)$")]


def predictor_rows(out: str) -> list[dict]:
    """`profile`'s predictor audit rows: layer threshold recall% precision% predicted%."""
    return [{"layer": int(m[1]), "threshold": float(m[2]), "recall": float(m[3]) / 100,
             "precision": float(m[4]) / 100, "predicted": float(m[5]) / 100}
            for m in table_after(out, "# predictor:",
                                 r"^\s*(\d+)\s+(\S+)\s+([\d.]+)%\s+([\d.]+)%\s+([\d.]+)%$")]


def first_difference(a: list[str], b: list[str]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base", required=True, help="the SiLU original (GGUF)")
    p.add_argument("--relu", required=True, help="the ReLU model (GGUF)")
    p.add_argument("--hotcold", default=str(ROOT / "build/hotcold"))
    p.add_argument("--data", default=str(ROOT.parent / "shared/data"))
    p.add_argument("--out", default="relu-targets")
    p.add_argument("-t", "--threads", type=int, default=2)
    p.add_argument("--chunks", type=int, default=40, help="WikiText-2 chunks of 512 (default 40)")
    p.add_argument("--predictor-corpus", default=None,
                   help="text the predictors train on (default: TinyStories + tiny Shakespeare)")
    p.add_argument("--predictor-chunks", type=int, default=60)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("-n", "--n-gen", type=int, default=64)
    a = p.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    hc, data, t = a.hotcold, Path(a.data), str(a.threads)
    wiki = data / "wikitext-2/wiki.test.raw"
    stories = data / "tinystories/tinystories_val_head.txt"
    res: dict = {"base": a.base, "relu": a.relu, "threads": a.threads, "chunks": a.chunks,
                 "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    t0 = time.time()

    # 1. accuracy
    acc = {}
    for label, model in (("silu", a.base), ("relu", a.relu)):
        run([hc, "eval", "-m", model, "-t", t, "--tasks", "wikitext2,code-ppl", "--ppl-ctx", "512",
             "--ppl-chunks", a.chunks, "-o", out / "eval", "--label", label])
    for r in json.loads((out / "eval/results.json").read_text()):
        acc[r["label"]] = {"wikitext2": r["tasks"]["wikitext2"]["ppl"],
                           "wikitext2_err": r["tasks"]["wikitext2"]["err"],
                           "code_ppl": r["tasks"]["code-ppl"]["ppl"]}
    acc["ratio"] = {k: acc["relu"][k] / acc["silu"][k] for k in ("wikitext2", "code_ppl")}
    res["accuracy"] = acc

    # 2. sparsity, power law, hot-set overlap
    wiki_stats = out / "relu.wiki.stats.gguf"
    prof = run([hc, "profile", "-m", a.relu, "-f", wiki, "-o", wiki_stats, "-c", "512",
                "--chunks", a.chunks, "-t", t])
    rows = profile_rows(prof)
    comp = run([hc, "profile", "-m", a.relu, "-f", stories, "-o", out / "relu.stories.stats.gguf",
                "-c", "512", "--chunks", a.chunks, "-t", t, "--compare", wiki_stats])
    ov = overlap_rows(comp)
    for r, o in zip(rows, ov):
        r["sparsity"] = 1 - r["firing"]
        r["jaccard_tinystories"] = o["jaccard"]
    res["layers"] = rows
    res["sparsity_mean"] = statistics.mean(r["sparsity"] for r in rows)
    res["top80_mean"] = statistics.mean(r["top80"] for r in rows)
    res["jaccard_mean"] = statistics.mean(o["jaccard"] for o in ov) if ov else None

    # 3. predictors
    corpus = a.predictor_corpus
    if corpus is None:
        corpus = out / "predictor_corpus.txt"
        corpus.write_text(stories.read_text() + "\n\n" +
                          (data / "tinyshakespeare/input.txt").read_text())
    pred = out / (Path(a.relu).stem + ".pred.gguf")
    tp = run([hc, "train-predictor", "-m", a.relu, "-f", corpus, "-o", pred, "-c", "512",
              "--chunks", a.predictor_chunks, "-t", t])
    (out / "train_predictor.txt").write_text(tp)
    audit = predictor_rows(run([hc, "profile", "-m", pred, "-f", wiki, "-o", out / "pred.stats.gguf",
                                "-c", "512", "--chunks", a.chunks, "-t", t]))
    for r, q in zip(rows, audit):
        r["pred_recall"], r["pred_predicted"] = q["recall"], q["predicted"]
    res["predictor"] = {"recall_min": min(q["recall"] for q in audit),
                        "recall_mean": statistics.mean(q["recall"] for q in audit),
                        "predicted_mean": statistics.mean(q["predicted"] for q in audit),
                        "predicted_max": max(q["predicted"] for q in audit)}

    # 4. speed: dense / --sparse / --predictor, order rotating per round
    modes = {"dense": [], "sparse": ["--sparse"], "predictor": ["--predictor"]}
    tps: dict[str, list[float]] = {m: [] for m in modes}
    ratios: dict[str, list[float]] = {"sparse": [], "predictor": []}
    names = list(modes)
    for rnd in range(a.rounds):
        got = {}
        for m in names[rnd % 3:] + names[:rnd % 3]:
            j = json.loads(run([hc, "bench", "-m", pred, "-t", t, "-p", "0", "-n", a.n_gen, "-r", "1",
                                "--json", "--no-membw"] + modes[m]))
            got[m] = j["tg"]["tps_mean"]
            tps[m].append(got[m])
        for m in ratios:
            ratios[m].append(got[m] / got["dense"])
    res["speed"] = {m: {"median": statistics.median(v), "min": min(v), "max": max(v)}
                    for m, v in tps.items()}
    res["speed_ratio"] = {m: {"median": statistics.median(v), "min": min(v), "max": max(v)}
                          for m, v in ratios.items()}

    # 5. greedy text
    greedy = []
    for prompt in PROMPTS:
        ids = {m: run([hc, "run", "-m", pred, "-t", t, "-p", prompt, "-n", a.n_gen, "--temp", "0",
                       "--ids"] + modes[m]).split() for m in modes}
        greedy.append({"prompt": prompt,
                       "sparse_first_diff": first_difference(ids["dense"], ids["sparse"]),
                       "predictor_first_diff": first_difference(ids["dense"], ids["predictor"])})
    res["greedy"] = greedy
    res["seconds"] = round(time.time() - t0, 1)
    (out / "targets.json").write_text(json.dumps(res, indent=1) + "\n")

    md = [f"ReLU `{Path(a.relu).name}` vs SiLU `{Path(a.base).name}`, {res['date']}, -t {a.threads}, "
          f"WikiText-2 test {a.chunks} chunks of 512",
          "",
          "| target | measured | goal |", "|---|---|---|",
          f"| exact zeros of h, mean of layers | {100 * res['sparsity_mean']:.2f}% | >= 85% |",
          f"| WikiText-2 PPL ReLU / SiLU | {acc['relu']['wikitext2']:.3f} / {acc['silu']['wikitext2']:.3f} "
          f"= {acc['ratio']['wikitext2']:.3f}x | <= 1.25x |",
          f"| code-ppl ReLU / SiLU | {acc['relu']['code_ppl']:.3f} / {acc['silu']['code_ppl']:.3f} "
          f"= {acc['ratio']['code_ppl']:.3f}x | <= 1.25x |",
          f"| neurons covering 80% of firings, mean of layers | {100 * res['top80_mean']:.2f}% | (power law) |",
          f"| hot-set Jaccard WikiText-2 vs TinyStories, mean | {res['jaccard_mean']:.4f} | (report) |",
          f"| predictor recall, lowest layer / mean | {res['predictor']['recall_min']:.4f} / "
          f"{res['predictor']['recall_mean']:.4f} | >= 0.99 |",
          f"| neurons predicted, mean / largest layer | {100 * res['predictor']['predicted_mean']:.2f}% / "
          f"{100 * res['predictor']['predicted_max']:.2f}% | <= 20% |"]
    for m in ("sparse", "predictor"):
        s = res["speed_ratio"][m]
        md.append(f"| decode `--{m}` / dense (tok/s {res['speed'][m]['median']:.1f} vs "
                  f"{res['speed']['dense']['median']:.1f}) | {s['median']:.2f}x ({s['min']:.2f}-{s['max']:.2f}) "
                  f"| >= 1.5x |")
    same = sum(g["sparse_first_diff"] is None for g in greedy)
    samep = sum(g["predictor_first_diff"] is None for g in greedy)
    md.append(f"| greedy {a.n_gen} tokens = dense's: --sparse / --predictor | {same}/{len(greedy)} / "
              f"{samep}/{len(greedy)} prompts | every prompt (predictor: where it recalls all) |")
    md += ["", "| layer | zeros of h | top80% | Jaccard | pred. recall | predicted |", "|---|---|---|---|---|---|"]
    for r in rows:
        md.append(f"| {r['layer']} | {100 * r['sparsity']:.2f}% | {100 * r['top80']:.2f}% | "
                  f"{r.get('jaccard_tinystories', float('nan')):.4f} | {r.get('pred_recall', float('nan')):.4f} | "
                  f"{100 * r.get('pred_predicted', float('nan')):.2f}% |")
    text = "\n".join(md) + "\n"
    (out / "targets.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
