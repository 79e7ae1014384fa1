#!/usr/bin/env python3
"""Decode speed: hotcold vs PowerInfer's CPU engine on the same PowerInfer-layout (PWRI) files.

For each weight type, hc-synth-model writes a model of --arch at its real shape (llama
llama2-7b, falcon falcon-7b, opt opt-6.7b) in PowerInfer's sparse
layout (--layers layers, ffn_down_t, random rank --rank predictors; PowerInfer's CPU sparse
kernels take F16 and Q4_0 only). The predictor threshold is calibrated with hotcold so that the
predictors mark --share of the neurons, and both engines then run with it
(hotcold --pred-threshold, PowerInfer LLAMA_SPARSE_PRED_THRESHOLD). Then, --rounds times,
alternating, each engine generates -n tokens greedily after the same prompt with -t threads:
PowerInfer's `main` (its "eval time" line) and `hotcold run --predictor` (its "generated" line).
Prints the median tok/s of each and the ratio, plus hotcold's share of the memory-bandwidth
roofline for the bytes it reads per token (hotcold bench --json: the weight bytes the sparse
FFN read, attention, output and predictors, against its read-bandwidth probe).

PowerInfer comes from tools/ref/powerinfer_build.sh (it needs the fetched source; CI has none):

  tools/ref/powerinfer_build.sh
  python3 bench/compare_powerinfer.py [--types f16,q4_0] [--layers 4] [--rounds 3]

--pred-type T has hotcold convert the predictors to T at load (its own option; PowerInfer reads
them as the file stores them, F16). Files go to $HOTCOLD_CACHE/models/pwri (about 2 GB for F16, 0.6 GB for Q4_0 at 4 layers).
PowerInfer's sparse down projection races with more than one thread (its results move by
~0.1%); that does not matter for speed.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("HOTCOLD_CACHE", Path.home() / ".cache" / "hotcold"))
PROMPT = "Once upon a time, in a land far away, there lived a"


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# The real shape each architecture is measured at (hc-synth-model --shape).
SHAPES = {"llama": "llama2-7b", "bamboo": "llama2-7b", "falcon": "falcon-7b", "opt": "opt-6.7b"}


def make_model(synth: Path, arch: str, wtype: str, layers: int, rank: int, out: Path) -> None:
    if out.exists():
        return
    log(f"writing {out.name} (hc-synth-model, {arch} {SHAPES[arch]}, {wtype}, {layers} layers, "
        f"predictor rank {rank})")
    subprocess.run([str(synth), "--shape", SHAPES[arch], "--arch", arch, "--layers", str(layers),
                    "--type", wtype, "--powerinfer", "--pred-kind", "random", "--pred-rank",
                    str(rank), "--pred-type", "f16", "--seed", "1", "-o", str(out)], check=True)


HOTCOLD_EXTRA: list[str] = []  # --pred-type: hotcold's own predictor storage


def hotcold_run(hc: Path, model: Path, thr: float, t: int, n: int) -> tuple[float, float]:
    """(decode tok/s, share of activations skipped) of one greedy run."""
    r = subprocess.run([str(hc), "run", "-m", str(model), "--predictor", "--pred-threshold",
                        repr(thr), "-t", str(t), "-n", str(n), "--temp", "0", "--ignore-eos",
                        "-p", PROMPT] + HOTCOLD_EXTRA, check=True, capture_output=True, text=True,
                       errors="replace")
    tps = re.search(r"generated: \d+ tokens in [0-9.]+ s \(([0-9.]+) tok/s\)", r.stderr)
    skip = re.search(r"sparse FFN: ([0-9.]+)% of activations skipped", r.stderr)
    if not tps or not skip:
        raise RuntimeError("unexpected hotcold output:\n" + r.stderr[-2000:])
    return float(tps.group(1)), float(skip.group(1)) / 100


def calibrate(hc: Path, model: Path, share: float, t: int) -> tuple[float, float]:
    """A threshold at which the predictors mark about `share` of the neurons (bisection)."""
    lo, hi = -1.0, 1.0
    while hotcold_run(hc, model, hi, t, 4)[1] < 1 - share:
        lo, hi = hi, 2 * hi
    while hotcold_run(hc, model, lo, t, 4)[1] > 1 - share:
        hi, lo = lo, 2 * lo if lo < 0 else -1.0
    skipped = 0.0
    for _ in range(12):
        mid = (lo + hi) / 2
        skipped = hotcold_run(hc, model, mid, t, 4)[1]
        if abs(skipped - (1 - share)) < 0.005:
            return mid, skipped
        lo, hi = (mid, hi) if skipped < 1 - share else (lo, mid)
    return (lo + hi) / 2, skipped


def powerinfer_run(main: Path, model: Path, thr: float, t: int, n: int) -> float:
    env = dict(os.environ, LLAMA_SPARSE_PRED_THRESHOLD=repr(thr))
    with tempfile.TemporaryDirectory() as cwd:  # main writes main.log where it runs
        r = subprocess.run([str(main), "-m", str(model), "-p", " " + PROMPT, "-n", str(n),
                            "--temp", "0", "--ignore-eos", "-t", str(t), "-c", "512", "-b", "512",
                            "-s", "1"], env=env, cwd=cwd, check=True, capture_output=True,
                           text=True, errors="replace")
    m = re.search(r"eval time =\s*[0-9.]+ ms /\s*\d+ runs\s*\(\s*[0-9.]+ ms per token,\s*"
                  r"([0-9.]+) tokens per second\)", r.stderr)
    if not m:
        raise RuntimeError("unexpected PowerInfer output:\n" + r.stderr[-2000:])
    return float(m.group(1))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--types", default="f16,q4_0")
    ap.add_argument("--arch", default="llama", choices=sorted(SHAPES),
                    help="architecture, at its real shape: llama / bamboo llama2-7b, falcon "
                         "falcon-7b, opt opt-6.7b")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--rank", type=int, default=1024)
    ap.add_argument("--share", type=float, default=0.1, help="share of neurons predicted")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-n", type=int, default=32, help="tokens generated per round")
    ap.add_argument("--hotcold", type=Path, default=ROOT / "build" / "hotcold")
    ap.add_argument("--synth", type=Path, default=ROOT / "build" / "hc-synth-model")
    ap.add_argument("--powerinfer", type=Path, default=CACHE / "powerinfer" / "bin",
                    help="PowerInfer's bin directory (tools/ref/powerinfer_build.sh)")
    ap.add_argument("--json", type=Path, help="also write the results here")
    ap.add_argument("--pred-type", help="hotcold only: convert the predictors at load (q8_0, ...);"
                    " the threshold is calibrated with the file's predictors")
    a = ap.parse_args()
    pi_main = a.powerinfer / "main"
    if not pi_main.exists():
        sys.exit(f"{pi_main} not found: build PowerInfer with tools/ref/powerinfer_build.sh")
    commit = (a.powerinfer / "COMMIT").read_text().strip() if (a.powerinfer / "COMMIT").exists() else "?"
    out_dir = CACHE / "models" / "pwri"
    out_dir.mkdir(parents=True, exist_ok=True)
    results = []
    for wtype in a.types.split(","):
        prefix = SHAPES[a.arch] + ("" if a.arch in ("llama", "falcon", "opt") else f"-{a.arch}")
        model = out_dir / f"{prefix}-{a.layers}L-pwri-r{a.rank}.{wtype.upper()}.gguf"
        make_model(a.synth, a.arch, wtype, a.layers, a.rank, model)
        HOTCOLD_EXTRA.clear()
        thr, skipped = calibrate(a.hotcold, model, a.share, a.threads)
        if a.pred_type:
            HOTCOLD_EXTRA.extend(["--pred-type", a.pred_type])
        log(f"{model.name}: threshold {thr:.5g} skips {100 * skipped:.1f}% of activations")
        hc, pi = [], []
        for r in range(a.rounds):
            pi.append(powerinfer_run(pi_main, model, thr, a.threads, a.n))
            hc.append(hotcold_run(a.hotcold, model, thr, a.threads, a.n)[0])
            log(f"  round {r + 1}: PowerInfer {pi[-1]:.2f} tok/s, hotcold {hc[-1]:.2f} tok/s")
        b = json.loads(subprocess.run(
            [str(a.hotcold), "bench", "-m", str(model), "--predictor", "--pred-threshold",
             repr(thr), "-t", str(a.threads), "-p", "0", "-n", str(a.n), "-r", "1", "--json"]
            + HOTCOLD_EXTRA,
            check=True, capture_output=True, text=True, errors="replace").stdout)
        tg = b["tg"]
        results.append({
            "file": model.name, "type": wtype, "threshold": thr, "skipped": skipped,
            "powerinfer_tok_s": statistics.median(pi), "hotcold_tok_s": statistics.median(hc),
            "ratio": statistics.median(hc) / statistics.median(pi),
            "ratios": [h / p for h, p in zip(hc, pi)],
            "hotcold_gb_per_token": tg["weight_gb_per_token"], "hotcold_bench_tok_s": tg["tps_mean"],
            "hotcold_gb_s": tg["gbps"], "membw_gb_s": b["membw"]["read_gbps"],
            "roofline_share": tg["roofline_share_pct"] / 100,
        })
    print(f"\nhotcold vs PowerInfer {commit} (CPU), {a.layers}-layer {a.arch} {SHAPES[a.arch]} PWRI, rank-{a.rank} "
          f"predictors marking ~{100 * a.share:.0f}%, -t {a.threads}, -n {a.n}, median of {a.rounds} "
          f"alternating rounds" + (f", hotcold --pred-type {a.pred_type}" if a.pred_type else "") +
          "\n")
    print("| type | skipped | PowerInfer tok/s | hotcold tok/s | ratio (range) | hotcold GB/token | "
          "hotcold GB/s | roofline share |")
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        share = f"{100 * r['roofline_share']:.0f}% of {r['membw_gb_s']:.1f} GB/s" if r["roofline_share"] else "-"
        print(f"| {r['type']} | {100 * r['skipped']:.1f}% | {r['powerinfer_tok_s']:.2f} | "
              f"{r['hotcold_tok_s']:.2f} | {r['ratio']:.2f}x ({min(r['ratios']):.2f}-"
              f"{max(r['ratios']):.2f}) | {r['hotcold_gb_per_token']:.3f} | {r['hotcold_gb_s']:.1f} | "
              f"{share} |")
    if a.json:
        a.json.write_text(json.dumps({"powerinfer": commit, "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
