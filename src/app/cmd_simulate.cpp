// hotcold simulate: projected decode tokens/s of LLaMA-shaped and MoE models on named hardware
// for dense layer offload, llama.cpp's experts-on-CPU split, static and dynamic hot/cold
// placement of neurons or whole experts (perfmodel/simulate.h, docs/SIMULATE.md).
// --calibrate measures this machine instead (read probe, the engine's dense decode and sparse
// row kernels on a model, the CPU device's bandwidth and per-operation costs) and writes the
// JSON that --calibration reads back (--hw host projects this machine itself).
#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "app/commands.h"
#include "app/common.h"
#include "app/simulate_calibration.h"
#include "app/simulate_flags.h"
#include "app/simulate_inputs.h"
#include "perfmodel/simulate.h"
#include "perfmodel/twin_profile.h"

namespace hc {
namespace {

using json = nlohmann::json;
using simcmd::fmt;
using simcmd::in_context;
using simcmd::calibrate;
using simcmd::Calibration;
using simcmd::Firing;
using simcmd::firing_for;
using simcmd::hardware_from_flags;
using simcmd::lower;
using simcmd::read_calibration;
using simcmd::ShapeJob;
using simcmd::shapes_from_flags;
using simcmd::SimFlags;
constexpr char kCmd[] = "simulate";
constexpr double kGiBd = 1073741824.0;

struct Run {
  ShapeJob shape;
  perfmodel::HardwareSpec hw;
  perfmodel::HostEfficiency eff;
  uint64_t budget = 0;
  double expert_firing = 1;
  perfmodel::SimResult result;
};

std::string on_device_text(const perfmodel::ModeResult& r, const perfmodel::ModelBytes& m) {
  if (r.mode == "dense-cpu" || r.mode == "sparse-cpu") return "-";
  const std::string n_layer = std::to_string(m.n_layer());
  std::string s;
  if (r.mode == "dense-offload") {
    s = std::to_string(r.layers_on_device) + "/" + n_layer + " layers";
  } else if (r.mode == "llamacpp-cpu-moe") {
    s = std::to_string(r.attn_on_device) + " attention, experts of " +
        std::to_string(r.layers_on_device) + "/" + n_layer + " layers (--n-cpu-moe " +
        std::to_string(r.n_cpu_moe) + ")";
  } else {
    s = std::to_string(r.attn_on_device) + " attention, " + std::to_string(r.hot_neurons) +
        (m.moe() ? " experts in " : " neurons in ") + std::to_string(r.layers_on_device) +
        " layers";
  }
  if (r.output_on_device) s += ", output";
  if (r.mode == "dynamic")
    s += "; migration " + fmt("%.3f", r.migration_s * 1e3) + " ms/token (" +
         fmt("%.1f", r.migration_bytes_per_token / 1024) + " KiB/token)";
  return s;
}

json mode_json(const perfmodel::ModeResult& r) {
  return {{"mode", r.mode},
          {"tok_s", r.tok_s},
          {"ms_per_token", r.s_per_token * 1e3},
          {"device_bytes", r.device_bytes},
          {"device_mass", r.device_mass},
          {"layers_on_device", r.layers_on_device},
          {"attn_on_device", r.attn_on_device},
          {"hot_neurons", r.hot_neurons},
          {"output_on_device", r.output_on_device},
          {"migration_ms", r.migration_s * 1e3},
          {"migration_bytes_per_token", r.migration_bytes_per_token},
          {"n_cpu_moe", r.n_cpu_moe},
          {"solver", r.solver}};
}

// tok/s over the llama.cpp mode's (llamacpp-cpu-moe, else dense-offload); 0 when none ran.
double vs_llamacpp(const perfmodel::SimResult& res, const perfmodel::ModeResult& m) {
  const perfmodel::ModeResult* base = res.llamacpp();
  return base && base->tok_s > 0 ? m.tok_s / base->tok_s : 0.0;
}

Status project(const SimFlags& f) {
  std::optional<Calibration> cal;
  if (!f.calibration.empty()) {
    HC_ASSIGN_OR_RETURN(Calibration c, read_calibration(f.calibration));
    cal = std::move(c);
  }
  HC_ASSIGN_OR_RETURN(std::vector<perfmodel::HardwareSpec> hws,
                      hardware_from_flags(f, cal ? &*cal : nullptr));
  HC_ASSIGN_OR_RETURN(std::vector<ShapeJob> shapes, shapes_from_flags(f));
  std::optional<ActStats> stats;
  if (!f.stats.empty()) {
    HC_ASSIGN_OR_RETURN(ActStats s, ActStats::read(f.stats));
    stats = std::move(s);
  }
  std::optional<sparse::PlacementPlan> plan;
  if (!f.plan.empty()) {
    HC_ASSIGN_OR_RETURN(sparse::PlacementPlan p, sparse::read_plan(f.plan));
    plan = std::move(p);
  }
  perfmodel::SimOptions opt;
  opt.n_ctx = f.ctx;
  opt.n_gpu_layers = f.ngl;
  opt.drift = f.drift;
  opt.drift_seed = static_cast<uint64_t>(f.seed);
  opt.drift_period_tokens = f.drift_period;
  opt.use_ilp = f.solver == "best";
  opt.ilp_time_limit_s = f.time_limit;
  opt.granule = f.granule;
  opt.plan = plan ? &*plan : nullptr;
  opt.output_on_device = !f.no_output_on_device;
  opt.predictor = f.predictor;
  opt.predictor_rank = f.predictor_rank;
  opt.max_union_share = f.union_max;

  std::vector<Run> runs;
  std::vector<std::string> firing_notes;
  opt.n_cpu_moe = f.n_cpu_moe;
  for (const ShapeJob& sj : shapes) {
    HC_ASSIGN_OR_RETURN(Firing fr, firing_for(f, sj, stats ? &*stats : nullptr));
    firing_notes.push_back((sj.bytes.moe() ? "routing: " : "firing: ") + sj.bytes.name + ": " +
                           fr.description);
    for (const perfmodel::HardwareSpec& hw : hws) {
      Run run;
      run.shape = sj;
      run.hw = hw;
      run.eff = cal && cal->eff.type == lower(dtype_name(sj.type))
                    ? cal->eff
                    : perfmodel::builtin_host_efficiency(sj.type);
      if (f.host_eff > 0) {
        run.eff.dense = f.host_eff;
        run.eff.source += ", dense efficiency given";
      }
      run.budget = f.vram_gib >= 0 ? static_cast<uint64_t>(static_cast<double>(f.vram_gib) * kGiBd)
                                   : hw.default_budget();
      perfmodel::SimInput in{sj.bytes, hw, run.eff, fr.profile, fr.expert_firing};
      opt.budget_bytes = run.budget;
      run.expert_firing = fr.expert_firing;
      HC_ASSIGN_OR_RETURN(
          run.result, in_context(perfmodel::simulate(in, opt), sj.bytes.name + " on " + hw.key));
      runs.push_back(std::move(run));
    }
  }

  if (f.json) {
    json out;
    out["results"] = json::array();
    for (const Run& r : runs) {
      json modes = json::array();
      for (const perfmodel::ModeResult& m : r.result.modes) {
        json mj = mode_json(m);
        mj["vs_llamacpp"] = vs_llamacpp(r.result, m);
        modes.push_back(std::move(mj));
      }
      const perfmodel::ModeResult* base = r.result.llamacpp();
      out["results"].push_back({{"model", r.shape.bytes.name},
                                {"type", r.shape.bytes.type},
                                {"n_layer", r.shape.bytes.n_layer()},
                                {"n_ff", r.shape.bytes.n_ff},
                                {"n_expert", r.shape.bytes.n_expert},
                                {"n_expert_used", r.shape.bytes.n_expert_used},
                                {"unit", r.shape.bytes.moe() ? "expert" : "neuron"},
                                {"expert_firing", r.expert_firing},
                                {"llamacpp_mode", base ? base->mode : ""},
                                {"weight_bytes", r.shape.bytes.weight_bytes()},
                                {"hw", r.hw.key},
                                {"hw_description", r.hw.description},
                                {"budget_bytes", r.budget},
                                {"n_ctx", f.ctx},
                                {"host_gbps", r.hw.host_read_gbps() * r.eff.dense},
                                {"dev_gbps", r.hw.dev_gbps()},
                                {"link_gbps", r.hw.link_gbps},
                                {"overlap", r.hw.overlap},
                                {"efficiency_source", r.eff.source},
                                {"firing_share", r.result.firing_share},
                                {"cover80", r.result.cover80},
                                {"drift", f.drift},
                                {"top20_overlap", r.result.top20_overlap},
                                {"modes", modes}});
    }
    std::printf("%s\n", out.dump(2).c_str());
    return Status::Ok();
  }
  for (const std::string& n : firing_notes) std::printf("# %s\n", n.c_str());
  std::printf("# drift %.2f (top-20%% overlap between profile and serving %.1f%%), migration "
              "amortised over %g tokens; context %d\n",
              f.drift, 100 * (runs.empty() ? 1.0 : runs[0].result.top20_overlap), f.drift_period,
              f.ctx);
  std::vector<std::string> seen;
  for (const Run& r : runs) {
    const std::string key = r.hw.key + "|" + r.eff.source;
    if (std::find(seen.begin(), seen.end(), key) != seen.end()) continue;
    seen.push_back(key);
    std::printf("# %s: %s; host %.1f GB/s x %.2f read x %.3f dense = %.1f GB/s achieved (sparse "
                "rows x %.2f at 10%% firing, cold gate rows x %.2f; %s); device %.0f x %.2f = "
                "%.0f GB/s, link %.1f GB/s, "
                "op %.2f us, sync %.2f us\n",
                r.hw.key.c_str(), r.hw.description.c_str(), r.hw.host_peak_gbps,
                r.hw.host_read_fraction, r.eff.dense, r.hw.host_read_gbps() * r.eff.dense,
                r.eff.sparse_at(0.1), r.eff.gate_rows(), r.eff.source.c_str(), r.hw.dev_peak_gbps,
                r.hw.dev_eff,
                r.hw.dev_gbps(), r.hw.link_gbps, r.hw.op_us, r.hw.sync_us);
  }
  std::printf(
      "\n| model | hw | budget GiB | mode | tok/s | ms/token | x llama.cpp | device GiB "
      "| FFN firing mass on device | on device | solver |\n"
      "|---|---|---:|---|---:|---:|---:|---:|---:|---|---|\n");
  for (const Run& r : runs)
    for (const perfmodel::ModeResult& m : r.result.modes) {
      const double ratio = vs_llamacpp(r.result, m);
      std::printf("| %s %s | %s | %.2f | %s | %.2f | %.2f | %s | %.2f | %.1f%% | %s | %s |\n",
                  r.shape.bytes.name.c_str(), r.shape.bytes.type.c_str(), r.hw.key.c_str(),
                  r.budget >= (uint64_t{1} << 60) ? INFINITY : r.budget / kGiBd, m.mode.c_str(),
                  m.tok_s, m.s_per_token * 1e3, ratio > 0 ? fmt("%.2f", ratio).c_str() : "-",
                  m.device_bytes / kGiBd, 100 * m.device_mass,
                  on_device_text(m, r.shape.bytes).c_str(), m.solver.c_str());
    }
  return Status::Ok();
}

}  // namespace

int cmd_simulate(const Args& args) {
  SimFlags f;
  ArgParser p(kCmd,
              "project decode tokens/s of LLaMA-shaped and MoE models on named hardware "
              "for dense layer offload, llama.cpp's experts-on-CPU split, static and "
              "dynamic hot/cold placement (docs/SIMULATE.md)");
  p.add_string("--model-shape", &f.shape,
               "llama2-7b, llama2-13b, llama-33b, llama2-70b (or 7b/13b/33b/70b), the MoE shapes "
               "qwen3-30b-a3b, mixtral-8x7b, turbosparse-mixtral, all, or file:PATH.gguf for a "
               "real model's shape and types (\"\": llama2-7b)");
  p.add_string("-m,--model", &f.model,
               "a real GGUF: its shape (as file:PATH), or the model --calibrate measures");
  p.add_string("--hw", &f.hw, "rtx4090, a100-80g, a100-40g, h100-sxm, host (this machine, needs "
                              "--calibration) or all");
  p.add_string("--type", &f.type, "weight type of a catalog shape: f16, q8_0, q4_0, q4_k, ... "
                                  "(\"\": q4_0)");
  p.add_float("--sparsity", &f.sparsity,
              "power law: share of neurons not firing per token "
              "(-1: 0.9, PowerInfer's ~10% firing); MoE: share of a "
              "routed expert's neurons not firing (-1: the shape's)");
  p.add_float("--expert-skew", &f.expert_skew,
              "MoE: exponent a of the routing power law p(x) = min(1, c x^-a) over expert ranks "
              "(0: uniform routing)");
  p.add_int("--expert-predictor-rank", &f.expert_pred_rank,
            "MoE with sparse experts: rank of each expert's F16 predictor (0: none, every gate "
            "row read; -1: the shape's)");
  p.add_int("--n-cpu-moe", &f.n_cpu_moe,
            "llamacpp-cpu-moe: experts of the first N layers on "
            "the host (-1: the fewest that let the rest fit)");
  p.add_float("--cover80", &f.cover, "power law: share of neurons carrying 80% of the firings "
                                     "(LLaMA2(ReGLU)-70B's in PowerInfer)");
  p.add_string("--stats", &f.stats, "measured statistics (hotcold profile) instead of the power "
                                    "law, resampled to the shape by rank quantile");
  p.add_string("--twin", &f.twin,
               "a statistical twin's firing profile (" + perfmodel::twin_names() +
                   ") on the shape's layers, instead of the power law");
  p.add_float("--vram-budget", &f.vram_gib, "device budget in GiB (-1: its memory minus the "
                                            "reserve)");
  p.add_float("--drift", &f.drift, "share of neurons whose ranks the serving distribution "
                                   "permutes against the profile");
  p.add_float("--drift-period", &f.drift_period, "tokens between drifts: the dynamic mode's "
                                                 "migration is amortised over them");
  p.add_int("--seed", &f.seed, "seed of the drift permutation");
  p.add_int("-c,--ctx-size", &f.ctx, "context: KV on the device, half of it read per token");
  p.add_int("-ngl,--n-gpu-layers", &f.ngl, "dense-offload: exactly N trailing layers (N > layers "
                                           "also the output); -1: as many as fit");
  p.add_string("--plan", &f.plan, "static: evaluate this plan file instead of planning");
  p.add_string("--solver", &f.solver, "greedy, or best (greedy and the ILP)");
  p.add_float("--time-limit", &f.time_limit, "ILP time limit in seconds with --solver best");
  p.add_int("--granule", &f.granule, "planner granule in neurons");
  p.add_flag("--predictor", &f.predictor, "predictor-driven sparse FFN (the gate only over the "
                                          "predicted set; predictors on the host)");
  p.add_int("--predictor-rank", &f.predictor_rank, "predictor rank (0: n_embd / 16)");
  p.add_flag("--no-output-on-device", &f.no_output_on_device,
             "hot/cold modes keep the output matrix on the host (as the executor does)");
  p.add_float("--sparse-union-max", &f.union_max,
              "the executor's limit: a host layer firing more than this share runs its FFN over "
              "every row");
  p.add_string("--calibration", &f.calibration, "this machine's figures from --calibrate "
                                                "(efficiencies; --hw host)");
  p.add_float("--host-gbps", &f.host_gbps, "host read bandwidth in GB/s, replacing peak x read "
                                           "fraction (0: the hardware's)");
  p.add_float("--host-eff", &f.host_eff,
              "host dense decode efficiency, achieved / read (0: calibrated or built-in)");
  p.add_float("--dev-gbps", &f.dev_gbps, "device memory bandwidth in GB/s (0: the hardware's)");
  p.add_float("--dev-eff", &f.dev_eff,
              "device efficiency, achieved / bandwidth, (0, 1] (0: the hardware's)");
  p.add_float("--link-gbps", &f.link_gbps, "host <-> device bandwidth in GB/s (0: the hardware's)");
  p.add_float("--op-us", &f.op_us, "cost of one device operation in us (-1: the hardware's)");
  p.add_float("--sync-us", &f.sync_us, "one host/device round trip in us (-1: the hardware's)");
  p.add_float("--hybrid-layer-us", &f.hybrid_layer_us,
              "extra us per layer split between host and device, beyond the cost model "
              "(h100-sxm: fitted to its run; -1: the hardware's)");
  p.add_float("--dev-overhead-mib", &f.dev_overhead_mib,
              "device MiB charged at open before any weight (CUDA context, cuBLAS; -1: the "
              "hardware's)");
  p.add_float("--device-emulate-gbps", &f.emulate_gbps,
              "--hw host: the CPU device paced to this bandwidth, as bench's flag of that name "
              "(each paced operation also pays the calibrated sleep overshoot)");
  p.add_flag("--json", &f.json, "print JSON instead of tables");
  p.add_flag("--calibrate", &f.calibrate,
             "measure this machine on -m MODEL and write -o FILE.json");
  p.add_string("-o,--output", &f.out, "--calibrate: the JSON file to write");
  p.add_int("-t,--threads", &f.threads, "--calibrate: host threads");
  p.add_int("--device-threads", &f.device_threads, "--calibrate: CPU device threads");
  p.add_int("--calib-tokens", &f.calib_tokens, "--calibrate: decode tokens per pass");
  if (int rc = parse_or_exit(p, args, kCmd); rc >= 0) return rc;
  if (f.calibrate) {
    if (f.model.empty() || f.out.empty())
      return usage_error(kCmd, "--calibrate: expected -m MODEL.gguf -o FILE.json");
    if (f.threads < 1 || f.threads > 512 || f.device_threads < 1 || f.device_threads > 512)
      return usage_error(kCmd, "-t / --device-threads: expected 1..512, found " +
                                   std::to_string(f.threads) + " / " +
                                   std::to_string(f.device_threads));
    if (f.calib_tokens < 1)
      return usage_error(kCmd,
                         "--calib-tokens: expected >= 1, found " + std::to_string(f.calib_tokens));
    return exit_code_for(kCmd, calibrate(f));
  }
  if (f.sparsity >= 0 && !(f.sparsity < 1))
    return usage_error(kCmd,
                       "--sparsity: expected a share in [0, 1), found " + fmt("%g", f.sparsity));
  if (f.sparsity >= 0 && !f.stats.empty())
    return usage_error(kCmd, "--sparsity shapes the power law; --stats brings its own firing: give "
                             "one of them");
  if (!f.twin.empty() && (f.sparsity >= 0 || !f.stats.empty()))
    return usage_error(kCmd, "--twin brings its own firing; --sparsity and --stats too: give one "
                             "of them");
  if (!f.twin.empty() && !perfmodel::find_twin(f.twin))
    return usage_error(kCmd, "--twin: expected one of " + perfmodel::twin_names() + ", found '" +
                                 f.twin + "'");
  if (!(f.union_max >= 0 && f.union_max <= 1))
    return usage_error(kCmd, "--sparse-union-max: expected a share in [0, 1], found " +
                                 fmt("%g", f.union_max));
  if (!(f.cover > 0 && f.cover <= 1))
    return usage_error(kCmd, "--cover80: expected a share in (0, 1], found " + fmt("%g", f.cover));
  if (!(f.drift >= 0 && f.drift <= 1))
    return usage_error(kCmd, "--drift: expected a share in [0, 1], found " + fmt("%g", f.drift));
  if (!(f.drift_period > 0))
    return usage_error(kCmd,
                       "--drift-period: expected > 0 tokens, found " + fmt("%g", f.drift_period));
  if (f.vram_gib != -1 && !(f.vram_gib >= 0 && std::isfinite(f.vram_gib)))
    return usage_error(kCmd, "--vram-budget: expected GiB >= 0, found " + fmt("%g", f.vram_gib));
  if (f.ctx < 1)
    return usage_error(kCmd, "-c: expected >= 1 positions, found " + std::to_string(f.ctx));
  if (f.ngl < -1)
    return usage_error(kCmd, "-ngl: expected >= 0 layers, found " + std::to_string(f.ngl));
  if (f.granule < 1)
    return usage_error(kCmd, "--granule: expected >= 1, found " + std::to_string(f.granule));
  if (f.solver != "greedy" && f.solver != "best")
    return usage_error(kCmd, "--solver: expected greedy or best, found '" + f.solver + "'");
  if (f.dev_eff < 0 || f.dev_eff > 1)
    return usage_error(kCmd, "--dev-eff: expected (0, 1], found " + fmt("%g", f.dev_eff));
  if (f.host_gbps < 0 || f.host_eff < 0 || f.dev_gbps < 0 || f.link_gbps < 0)
    return usage_error(kCmd, "--host-gbps, --host-eff, --dev-gbps, --link-gbps: expected > 0");
  if (f.emulate_gbps < 0 || (f.emulate_gbps > 0 && f.hw != "host"))
    return usage_error(kCmd,
                       "--device-emulate-gbps: expected GB/s > 0 with --hw host (the paced "
                       "CPU device), found " +
                           fmt("%g", f.emulate_gbps) + " with --hw " + f.hw);
  if (f.predictor_rank < 0)
    return usage_error(
        kCmd, "--predictor-rank: expected >= 0, found " + std::to_string(f.predictor_rank));
  if (!(f.expert_skew >= 0 && f.expert_skew <= 20))
    return usage_error(kCmd,
                       "--expert-skew: expected an exponent in [0, 20] (0: uniform routing), "
                       "found " +
                           fmt("%g", f.expert_skew));
  if (f.expert_pred_rank < -1 || f.n_cpu_moe < -1)
    return usage_error(
        kCmd, "--expert-predictor-rank / --n-cpu-moe: expected >= 0 (or -1), found " +
                  std::to_string(f.expert_pred_rank) + " / " + std::to_string(f.n_cpu_moe));
  const bool file_shape = !f.model.empty() || f.shape.rfind("file:", 0) == 0;
  if (!f.model.empty() && !f.shape.empty())
    return usage_error(kCmd, "-m names the model whose shape is simulated: drop --model-shape (or "
                             "use --model-shape file:PATH)");
  if (file_shape && !f.type.empty())
    return usage_error(kCmd,
                       "--type applies to catalog shapes; a file's own weight types are used");
  if (GgmlType t;
      !f.type.empty() && (!dtype_from_name(f.type, &t) || perfmodel::bytes_per_weight(t) <= 0))
    return usage_error(
        kCmd,
        "--type: expected a weight type such as f16, q8_0, q4_0, q4_k, found '" + f.type + "'");
  if (f.hw != "all" && f.hw != "host") {
    if (auto h = perfmodel::find_hardware(f.hw); !h.ok())
      return usage_error(kCmd, "--hw: " + h.message());
  }
  if (!file_shape && !f.shape.empty() && f.shape != "all") {
    if (auto s = perfmodel::find_shape(f.shape); !s.ok())
      return usage_error(kCmd, "--model-shape: " + s.message());
  }
  if (f.hw == "host" && f.calibration.empty())
    return usage_error(kCmd, "--hw host: this machine's figures come from --calibration FILE.json "
                             "(make one with --calibrate -m MODEL.gguf -o FILE.json)");
  return exit_code_for(kCmd, project(f));
}

}  // namespace hc
