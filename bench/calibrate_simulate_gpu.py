#!/usr/bin/env python3
"""Fits `hotcold simulate`'s device side to the GPU measurements in docs/BENCHMARKS.md, shows its
error on every measured point, then projects LLaMA-33B / 70B ReLU twins on an RTX 4090 PC with
the fitted device costs (issue 36, item 3; docs/EXPERIMENTS.md "33B vs 70B on consumer GPUs").

  bench/calibrate_simulate_gpu.py [--bin build/hotcold] [--points bench/data/gpu_h100_2026-11-26.json]
                                  [--work DIR] [--json OUT.json]

The points file holds one GPU run's figures as docs/BENCHMARKS.md gives them: the model
(hc-synth-model's flags, rebuilt here byte for byte: its bytes depend on the seed only) and its
profile (rebuilt with the same flags on the same kind of text), the host-only decode, and per
device budget the hot/cold split's and the dense layer offload's decode tokens/s.

Fit, in order (each step on its own points, so later points are predictions):
  1. host read GB/s: simulate's dense-cpu equals the measured host-only dense decode;
  2. the host's sparse-row rate (one ratio to the dense rate, every firing share and the cold
     gate rows alike): sparse-cpu equals the measured host-only sparse decode;
  3. the device: op_us (one queued operation) and sync_us (one round trip) over the dense
     offload points (-ngl as measured), least squares on log(tok/s); dev_eff (achieved over the
     spec's bandwidth) is held at the catalog's 0.66 (llama.cpp on an RTX 4090): with 16
     operations per layer the layer's time does not separate bandwidth from launches, so op_us
     carries both (said in the report).
Then every point is predicted with the fitted figures, the hot/cold split's from the planner's
own plan for the measured budget (the simulate's "static" mode without drift): those points
were not fitted. The cost model alone misses what a layer split between host and device costs
beyond its two halves and its round trip; step 4 fits that as one figure:
  4. hybrid_layer_us (--hybrid-layer-us: extra us per split layer) on the hot/cold points,
     reported leave-one-out (each budget predicted from a fit on the other three).

The projection: llama-33b and llama2-70b, Q4_0 and Q8_0, on rtx4090 (its catalog host: DDR5
67.2 GB/s, the built-in host efficiencies measured on this 2-core machine) with op_us and
sync_us and hybrid_layer_us from the fit (and the cost model alone beside it), firing from the statistical twins relullama-7b (ReLU-fied LLaMA: 33%
firing) and prosparse-7b (89% sparse), dense layer offload against the hot/cold split with
thresholds and with predictors.
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_POINTS = ROOT / "bench/data/gpu_h100_2026-11-26.json"
DEV_EFF = 0.66       # the catalog's (llama.cpp tg128 on an RTX 4090), held fixed
H100_GBPS = 3352.0   # H100 SXM5 80GB HBM3 (the catalog's h100-sxm)
LINK_GBPS = 50.0     # the catalog's h100-sxm: PCIe 5.0 x16, an assumption (negligible here)


def log(msg: str) -> None:
    print(f"[calibrate-gpu] {msg}", file=sys.stderr, flush=True)


def run(cmd: list[str], **kw) -> str:
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        raise SystemExit(f"failed ({r.returncode}): {' '.join(cmd)}\n{r.stderr[-2000:]}")
    return r.stdout


class Sim:
    """hotcold simulate on the measured model with the host and device figures set."""

    def __init__(self, hc: str, model: Path, stats: Path, work: Path, pts: dict):
        self.hc, self.model, self.stats, self.work, self.pts = hc, model, stats, work, pts
        self.host_gbps = 100.0
        self.sparse_rel = 1.0
        self.op_us, self.sync_us = 1.0, 10.0
        self.hybrid_us = 0.0
        self.calls = 0

    def calibration(self) -> Path:
        """The host's efficiencies as a --calibration file (rewritten for the current ratio)."""
        path = self.work / "h100-host.calibration.json"
        r = self.sparse_rel
        path.write_text(json.dumps({
            "version": 1, "model": str(self.model), "date": self.pts["date"],
            "host": {"read_gbps": self.host_gbps},
            "efficiency": {"type": "q4_0", "dense": 1.0,
                           "sparse_rel": [[0.01, r], [1.0, r]], "gate_rows_rel": r}}))
        return path

    def modes(self, budget_mib: float, ngl: int | None = None) -> dict:
        cmd = [self.hc, "simulate", "-m", str(self.model), "--hw", "h100-sxm",
               "--calibration", str(self.calibration()), "--stats", str(self.stats),
               "--host-gbps", f"{self.host_gbps:.6f}", "--host-eff", "1",
               "--dev-gbps", str(H100_GBPS), "--dev-eff", str(DEV_EFF),
               "--link-gbps", str(LINK_GBPS), "--op-us", f"{self.op_us:.6f}",
               "--sync-us", f"{self.sync_us:.6f}", "--hybrid-layer-us", f"{self.hybrid_us:.6f}",
               "--dev-overhead-mib", str(self.pts["device_overhead_mib"]),
               "--vram-budget", f"{budget_mib / 1024:.6f}", "-c", str(self.pts["tokens"] + 1),
               "--drift", "0", "--json"]
        if ngl is not None:
            cmd += ["-ngl", str(ngl)]
        self.calls += 1
        res = json.loads(run(cmd))["results"][0]
        return {m["mode"]: m for m in res["modes"]}


def bisect(f, lo: float, hi: float, target: float, iters: int = 40) -> float:
    """x in [lo, hi] with f(x) = target, f increasing."""
    for _ in range(iters):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if f(mid) < target else (lo, mid)
    return math.sqrt(lo * hi)


def fit(sim: Sim, pts: dict) -> None:
    big = max(b["budget_mib"] for b in pts["budgets"])
    d = sim.modes(big)["dense-cpu"]["tok_s"]
    sim.host_gbps *= pts["host"]["dense_tok_s"] / d  # dense-cpu is bytes / host rate
    log(f"host read {sim.host_gbps:.1f} GB/s (dense-cpu = {pts['host']['dense_tok_s']} tok/s)")
    sim.sparse_rel = bisect(lambda r: (setattr(sim, "sparse_rel", r),
                                       sim.modes(big)["sparse-cpu"]["tok_s"])[1],
                            0.05, 4.0, pts["host"]["sparse_tok_s"], iters=24)
    log(f"host sparse rows x {sim.sparse_rel:.3f} of the dense rate "
        f"(sparse-cpu = {pts['host']['sparse_tok_s']} tok/s)")
    dense = [b for b in pts["budgets"] if b["dense_layers"] > 0]

    def loss(op: float, sync: float) -> float:
        sim.op_us, sim.sync_us = op, sync
        s = 0.0
        for b in dense:
            p = sim.modes(b["budget_mib"], ngl=b["dense_layers"])["dense-offload"]["tok_s"]
            s += math.log(p / b["dense_offload_tok_s"]) ** 2
        return s

    grid_op = [0.25, 0.5, 1, 2, 3, 4, 6, 8, 12, 16, 24]
    grid_sync = [5, 10, 20, 40, 80, 160, 320, 480, 640, 960]
    best = min(((loss(o, s), o, s) for o in grid_op for s in grid_sync))
    _, op, sync = best
    for _ in range(3):  # refine around the best grid point
        cands = [(loss(o, s), o, s) for o in (op * 0.8, op, op * 1.25)
                 for s in (sync * 0.8, sync, sync * 1.25)]
        _, op, sync = min(cands)
    sim.op_us, sim.sync_us = op, sync
    log(f"device: op {op:.2f} us, sync {sync:.1f} us (dev_eff held at {DEV_EFF})")


def fit_hybrid(sim: Sim, budgets: list[dict]) -> float:
    """hybrid_layer_us minimising the squared log error of the hot/cold split on `budgets`."""
    def loss(h: float) -> float:
        sim.hybrid_us = h
        return sum(math.log(sim.modes(b["budget_mib"])["static"]["tok_s"] / b["hot_cold_tok_s"]) ** 2
                   for b in budgets)
    grid = [0, 25, 50, 100, 150, 200, 300, 400, 500, 700, 1000, 1500, 2000]
    h = min(grid, key=loss)
    for _ in range(3):
        h = min((h * 0.85, h, h * 1.15), key=loss)
    sim.hybrid_us = 0.0
    return h


def predict(sim: Sim, pts: dict) -> list[dict]:
    rows = []
    big = max(b["budget_mib"] for b in pts["budgets"])
    m = sim.modes(big)
    rows.append({"config": "host only, dense", "measured": pts["host"]["dense_tok_s"],
                 "predicted": m["dense-cpu"]["tok_s"], "fitted": "host read GB/s"})
    rows.append({"config": "host only, sparse FFN", "measured": pts["host"]["sparse_tok_s"],
                 "predicted": m["sparse-cpu"]["tok_s"], "fitted": "sparse-row ratio"})
    for b in pts["budgets"]:
        ngl = b["dense_layers"]
        d = sim.modes(b["budget_mib"], ngl=ngl)["dense-offload"]
        rows.append({"config": f"dense offload -ngl {ngl} ({b['label']}, {b['budget_mib']} MiB)",
                     "measured": b["dense_offload_tok_s"], "predicted": d["tok_s"],
                     "fitted": "op_us, sync_us" if ngl > 0 else "no (0 layers: host only)"})
    sim.hybrid_us = 0.0
    for b in pts["budgets"]:
        s = sim.modes(b["budget_mib"])["static"]
        rows.append({"config": f"hot/cold split, {b['label']} ({b['budget_mib']} MiB), cost model alone",
                     "measured": b["hot_cold_tok_s"], "predicted": s["tok_s"],
                     "engine_planner": b["planner_predicted_tok_s"],
                     "sim_device_mib": s["device_bytes"] / 2**20, "charged_mib": b["charged_mib"],
                     "fitted": "no (prediction)"})
    # The split layer's extra cost, fitted on the other three budgets (leave one out).
    for i, b in enumerate(pts["budgets"]):
        h = fit_hybrid(sim, [o for j, o in enumerate(pts["budgets"]) if j != i])
        sim.hybrid_us = h
        s = sim.modes(b["budget_mib"])["static"]
        rows.append({"config": f"hot/cold split, {b['label']} ({b['budget_mib']} MiB), "
                               f"+{h:.0f} us a split layer (fitted on the other 3)",
                     "measured": b["hot_cold_tok_s"], "predicted": s["tok_s"],
                     "fitted": "no (leave one out)", "hybrid_layer_us": h})
    sim.hybrid_us = fit_hybrid(sim, pts["budgets"])
    log(f"a split layer's extra: {sim.hybrid_us:.0f} us (all 4 budgets)")
    for r in rows:
        r["error"] = r["predicted"] / r["measured"] - 1
    return rows


def project(hc: str, op: float, sync: float, hybrid: float) -> list[dict]:
    out = []
    for shape in ("llama-33b", "llama2-70b"):
        for typ in ("q4_0", "q8_0"):
            for twin in ("relullama-7b", "prosparse-7b"):
                for pred in (False, True):
                    cmd = [hc, "simulate", "--model-shape", shape, "--hw", "rtx4090", "--type", typ,
                           "--twin", twin, "--op-us", f"{op:.4f}", "--sync-us", f"{sync:.4f}",
                           "--json"] + (["--predictor"] if pred else [])
                    res = json.loads(run(cmd + ["--hybrid-layer-us", f"{hybrid:.4f}"]))["results"][0]
                    modes = {m["mode"]: m for m in res["modes"]}
                    alone = json.loads(run(cmd + ["--hybrid-layer-us", "0"]))["results"][0]
                    static_alone = {m["mode"]: m for m in alone["modes"]}["static"]["tok_s"]
                    out.append({"shape": shape, "type": typ, "twin": twin, "predictor": pred,
                                "weight_gib": res["weight_bytes"] / 2**30,
                                "budget_gib": res["budget_bytes"] / 2**30,
                                "firing": res["firing_share"], "cover80": res["cover80"],
                                "static_cost_model_alone": static_alone,
                                "modes": {k: {"tok_s": v["tok_s"], "device_gib": v["device_bytes"] / 2**30}
                                          for k, v in modes.items()}})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default=str(ROOT / "build/hotcold"))
    ap.add_argument("--synth", default=None, help="hc-synth-model (default: beside --bin)")
    ap.add_argument("--points", default=str(DEFAULT_POINTS))
    ap.add_argument("--work", default=str(Path.home() / ".cache/hotcold/calibrate_simulate_gpu"))
    ap.add_argument("--json", default=None, help="write every figure here")
    ap.add_argument("-t", "--threads", type=int, default=2)
    a = ap.parse_args()
    pts = json.loads(Path(a.points).read_text())
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    synth = a.synth or str(Path(a.bin).parent / "hc-synth-model")
    model = work / "synth-relu.q4_0.gguf"
    stats = work / "synth-relu.q4_0.stats.gguf"
    if not model.exists():
        log(f"writing the measured model: hc-synth-model {' '.join(pts['model']['synth'])}")
        run([synth, *pts["model"]["synth"], "-t", str(a.threads), "-o", str(model)])
    mib = model.stat().st_size / 2**20
    if round(mib) != pts["model"]["file_mib"]:
        raise SystemExit(f"{model}: {mib:.1f} MiB, the measured file was {pts['model']['file_mib']} MiB")
    if not stats.exists():
        log("profiling it on the same kind of text (the repository's docs), as the GPU run did")
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
            for p in sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]:
                f.write(p.read_text())
        run([a.bin, "profile", "-m", str(model), "-f", f.name, "-o", str(stats),
             *pts["model"]["profile"], "-t", str(a.threads)])
    sim = Sim(a.bin, model, stats, work, pts)
    fit(sim, pts)
    rows = predict(sim, pts)
    log("projecting llama-33b / llama2-70b twins on rtx4090 with the fitted device costs")
    proj = project(a.bin, sim.op_us, sim.sync_us, sim.hybrid_us)

    print(f"## Fitted to {pts['device']} ({pts['date']}, docs/BENCHMARKS.md)\n")
    print(f"Host: read {sim.host_gbps:.1f} GB/s at the dense rate, sparse rows x {sim.sparse_rel:.3f}"
          f" of it. Device: {H100_GBPS:g} GB/s x {DEV_EFF} (held), op {sim.op_us:.2f} us, "
          f"sync {sim.sync_us:.1f} us, a split layer +{sim.hybrid_us:.0f} us (all 4 budgets), "
          f"overhead {pts['device_overhead_mib']} MiB (measured). "
          f"{sim.calls} simulate runs.\n")
    print("| configuration | measured tok/s | predicted tok/s | error | fitted on it |")
    print("|---|---:|---:|---:|---|")
    for r in rows:
        extra = ""
        if "engine_planner" in r:
            extra = (f" (engine's planner said {r['engine_planner']}; placed {r['sim_device_mib']:.0f}"
                     f" MiB, engine charged {r['charged_mib']})")
        print(f"| {r['config']}{extra} | {r['measured']:.1f} | {r['predicted']:.1f} | "
              f"{100 * r['error']:+.1f}% | {r['fitted']} |")
    errs = [abs(r["error"]) for r in rows if r["fitted"] != "no (prediction)"]
    for kind in ("no (prediction)", "no (leave one out)"):
        e = [abs(r["error"]) for r in rows if r["fitted"] == kind]
        print(f"\nhot/cold, {kind[4:-1]}: mean |error| {100 * sum(e) / len(e):.1f}%, max "
              f"{100 * max(e):.1f}%")
    print(f"every point (leave-one-out rows for the split): mean |error| "
          f"{100 * sum(errs) / len(errs):.1f}%, max {100 * max(errs):.1f}%\n")
    print("## Projected: RTX 4090 PC, fitted device costs\n")
    print("| shape | type | twin | FFN | weights GiB | dense offload tok/s | hot/cold static | "
          "dynamic | static / dense offload | static, cost model alone | host only, sparse |")
    print("|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for p in proj:
        m = p["modes"]
        d, s, y = m["dense-offload"]["tok_s"], m["static"]["tok_s"], m["dynamic"]["tok_s"]
        print(f"| {p['shape']} | {p['type']} | {p['twin']} ({100 * p['firing']:.0f}% firing) | "
              f"{'predictors' if p['predictor'] else 'thresholds'} | {p['weight_gib']:.1f} | "
              f"{d:.2f} | {s:.2f} | {y:.2f} | {s / d:.2f}x | {p['static_cost_model_alone']:.2f} | "
              f"{m['sparse-cpu']['tok_s']:.2f} |")
    if a.json:
        Path(a.json).write_text(json.dumps({
            "date": datetime.date.today().isoformat(), "points_file": a.points,
            "fit": {"host_gbps": sim.host_gbps, "sparse_rel": sim.sparse_rel, "dev_eff": DEV_EFF,
                    "dev_gbps": H100_GBPS, "op_us": sim.op_us, "sync_us": sim.sync_us,
                    "hybrid_layer_us": sim.hybrid_us},
            "points": rows, "projection": proj}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
