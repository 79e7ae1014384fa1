#!/usr/bin/env python3
"""Validates `hotcold simulate` against every configuration measurable on this machine.

For each model: calibrates this machine on it (`hotcold simulate --calibrate`), profiles firing
statistics at 50/80/90% sparsity (`hotcold profile`, cached), then for each configuration runs
`hotcold bench --json` (decode only: -p 0 -n N -r R) and `hotcold simulate --hw host
--calibration CAL.json -m MODEL --json` for the same configuration, and prints predicted vs
measured tok/s and the relative error as a Markdown table (docs/SIMULATE.md, "Validation"):

  dense host                    bench                          simulate: dense-cpu
  sparse host at S              bench --sparsity S --stats     simulate --stats: sparse-cpu
  dense -ngl N on the CPU device  bench -ngl N --device cpu    simulate -ngl N: dense-offload
  ... paced to G GB/s           + --device-emulate-gbps G      + --device-emulate-gbps G
  hybrid plan on the CPU device bench --plan P --device cpu    simulate --plan P: static

Each bench also runs the read probe: its figure is printed next to the calibration's, so a
row measured while the machine was busy shows as such. Plus a cross-calibration row: the first model's dense decode predicted from the calibration of
another model of the same weight type (the dense rows of a model's own calibration reproduce the
calibration run itself: their error is run-to-run noise).

  bench/validate_simulate.py [--bin build/hotcold] [--models A.gguf B.gguf] [-t 2]

Everything it makes (calibrations, statistics, plans) goes to --work (default
~/.cache/hotcold/validate_simulate); statistics and plans are reused when present.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODELS = Path.home() / ".cache/hotcold/models"
DEFAULT_MODELS = [MODELS / "SmolLM2-135M-Instruct.Q8_0.gguf",
                  MODELS / "synth/llama2-7b-4L.Q8_0.gguf"]
CORPUS = ROOT.parent / "shared/data/tinystories/tinystories_val_head.txt"


def run(cmd: list[str], log: Path | None = None) -> str:
    """Runs cmd, returns stdout; on failure prints its stderr and exits."""
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
    if log is not None:
        log.write_text(p.stderr)
    if p.returncode != 0:
        sys.exit(f"validate_simulate: {' '.join(map(str, cmd))} failed ({p.returncode}):\n{p.stderr}")
    return p.stdout


def bench(args, model: Path, extra: list[str]) -> dict:
    out = run([args.bin, "bench", "-m", model, "-t", args.threads, "-p", "0", "-n", args.n_gen,
               "-r", args.reps, "--json", *extra])
    main = json.loads(out)  # one object; "sparse" / "device" / "dynamic" members when they apply
    res = {"tok_s": main["tg"]["tps_mean"], "sd": main["tg"]["tps_sd"],
           "probe": main["membw"]["read_gbps"]}
    if "sparse" in main:
        res["sparsity"] = main["sparse"]["ffn_sparsity"]
    return res


def simulate(args, model: Path, cal: Path, extra: list[str]) -> dict:
    out = run([args.bin, "simulate", "-m", model, "--hw", "host", "--calibration", cal,
               "-c", str(int(args.n_gen) + 1), "--drift", "0", "--json", *extra])
    return json.loads(out)["results"][0]


def mode_of(result: dict, mode: str) -> float:
    for m in result["modes"]:
        if m["mode"] == mode:
            return m["tok_s"]
    raise KeyError(mode)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=str(ROOT / "build/hotcold"), help="the hotcold binary")
    ap.add_argument("--models", nargs="+", default=[str(m) for m in DEFAULT_MODELS])
    ap.add_argument("-t", "--threads", default="2")
    ap.add_argument("--reps", default="3", help="bench repetitions")
    ap.add_argument("--n-gen", default="64", help="decode tokens per repetition")
    ap.add_argument("--sparsities", nargs="+", default=["0.5", "0.8", "0.9"])
    ap.add_argument("--emulate-gbps", default="10", help="CPU device pacing for the paced -ngl row")
    ap.add_argument("--corpus", default=str(CORPUS))
    ap.add_argument("--work", default=str(Path.home() / ".cache/hotcold/validate_simulate"))
    ap.add_argument("--json", help="also write the rows as JSON here")
    args = ap.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    if not Path(args.bin).exists():
        sys.exit(f"validate_simulate: no binary at {args.bin} (--bin)")

    rows = []
    cals: dict[str, tuple[Path, str]] = {}  # model -> (calibration, weight type)
    for m in args.models:
        model = Path(m).expanduser()
        if not model.exists():
            sys.exit(f"validate_simulate: no model at {model}")
        name = model.stem
        print(f"== {name}", file=sys.stderr)
        cal = work / f"{name}.cal.json"
        run([args.bin, "simulate", "--calibrate", "-m", model, "-t", args.threads, "-o", cal],
            log=work / f"{name}.cal.log")
        cal_j = json.loads(cal.read_text())
        cals[str(model)] = (cal, cal_j["efficiency"]["type"])
        shape = simulate(args, model, cal, [])
        n_layer = shape["n_layer"]
        stats = {}
        for s in args.sparsities:
            st = work / f"{name}.s{s}.stats.gguf"
            if not st.exists():
                run([args.bin, "profile", "-m", model, "-f", args.corpus, "-o", st, "--chunks", "8",
                     "-c", "256", "--sparsity", s, "-t", args.threads], log=work / f"{st.name}.log")
            stats[s] = st
        # A hybrid plan on the CPU device: the planner given a fast device so that it places
        # neurons and attention within a quarter of the file's size.
        s_plan = "0.8" if "0.8" in stats else args.sparsities[0]
        plan = work / f"{name}.s{s_plan}.plan.gguf"
        budget = f"{model.stat().st_size / 4 / 2**30:.4f}"
        if not plan.exists():
            run([args.bin, "plan", "-m", model, "--stats", stats[s_plan], "--vram-budget", budget,
                 "-o", plan, "--device", "cpu", "--dev-gbps", "200", "--link-gbps", "16",
                 "--op-us", "1", "--sync-us", "10", "--solver", "greedy", "-c",
                 str(int(args.n_gen) + 1), "-t", args.threads], log=work / f"{plan.name}.log")
        half = max(1, n_layer // 2)
        configs = [("dense, host", [], [], "dense-cpu")]
        for s in args.sparsities:
            configs.append((f"sparse {float(s):.0%}, host", ["--sparsity", s, "--stats", stats[s]],
                            ["--stats", stats[s]], "sparse-cpu"))
        configs += [
            (f"dense, -ngl {half} on the CPU device", ["-ngl", str(half), "--device", "cpu"],
             ["-ngl", str(half)], "dense-offload"),
            (f"dense, -ngl {n_layer + 1} (all + output) on the CPU device",
             ["-ngl", str(n_layer + 1), "--device", "cpu"], ["-ngl", str(n_layer + 1)],
             "dense-offload"),
            (f"dense, -ngl {half}, CPU device paced to {args.emulate_gbps} GB/s",
             ["-ngl", str(half), "--device", "cpu", "--device-emulate-gbps", args.emulate_gbps],
             ["-ngl", str(half), "--device-emulate-gbps", args.emulate_gbps], "dense-offload"),
            (f"sparse {float(s_plan):.0%} + hybrid plan ({budget} GiB) on the CPU device",
             ["--sparsity", s_plan, "--stats", stats[s_plan], "--plan", plan, "--device", "cpu"],
             ["--stats", stats[s_plan], "--plan", plan], "static"),
        ]
        for label, b_args, s_args, mode in configs:
            print(f"   {label}", file=sys.stderr)
            meas = bench(args, model, b_args)
            sim = simulate(args, model, cal, s_args)
            pred = mode_of(sim, mode)
            rows.append({"model": name, "config": label, "measured": meas["tok_s"], "sd": meas["sd"],
                         "predicted": pred, "error": pred / meas["tok_s"] - 1,
                         "sparsity": meas.get("sparsity"), "probe": meas["probe"],
                         "cal_probe": cal_j["host"]["read_gbps"], "calibration": cal.name})

    # Cross-calibration: a model's dense decode from another same-type model's calibration.
    models = [str(Path(m).expanduser()) for m in args.models]
    for a in models:
        for b in models:
            if a == b or cals[a][1] != cals[b][1]:
                continue
            name = Path(a).stem
            own = next(r for r in rows if r["model"] == name and r["config"] == "dense, host")
            sim = simulate(args, Path(a), cals[b][0], [])
            pred = mode_of(sim, "dense-cpu")
            rows.append({"model": name, "config": f"dense, host, calibrated on {Path(b).stem}",
                         "measured": own["measured"], "sd": own["sd"], "predicted": pred,
                         "error": pred / own["measured"] - 1, "sparsity": None,
                         "probe": own["probe"],
                         "cal_probe": json.loads(cals[b][0].read_text())["host"]["read_gbps"],
                         "calibration": cals[b][0].name})
            break

    print(f"Validation of hotcold simulate, {datetime.date.today()}, {args.threads} threads, "
          f"tg{args.n_gen} x {args.reps} (bench) against --hw host predictions\n")
    print("| model | configuration | measured tok/s | predicted tok/s | error | read probe GB/s: "
          "bench / calibration |")
    print("|---|---|---:|---:|---:|---:|")
    for r in rows:
        note = f" (measured sparsity {r['sparsity']:.1%})" if r.get("sparsity") is not None else ""
        print(f"| {r['model']} | {r['config']}{note} | {r['measured']:.2f} ± {r['sd']:.2f} | "
              f"{r['predicted']:.2f} | {100 * r['error']:+.1f}% | {r['probe']:.1f} / "
              f"{r['cal_probe']:.1f} |")
    errs = [abs(r["error"]) for r in rows]
    print(f"\nmean |error| {100 * statistics.mean(errs):.1f}%, median {100 * statistics.median(errs):.1f}%, "
          f"max {100 * max(errs):.1f}% over {len(rows)} configurations")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
