// hotcold plan -m MODEL --stats STATS.gguf --vram-budget GiB -o PLAN.gguf: the placement of hot
// neurons and attention per layer on the device under a memory budget (sparse/planner.h),
// greedy and GLPK's ILP compared, the faster kept. The same planning runs at load under
// --vram-budget (app/device_setup.cpp); this command shows it and writes the file.
#include <cmath>
#include <cstdio>
#include <string>

#include "app/commands.h"
#include "app/common.h"
#include "app/device_setup.h"
#include "app/plan_input.h"
#include "core/log.h"
#include "model/act_stats.h"
#include "sparse/placement_plan.h"
#include "sparse/planner.h"

namespace hc {
namespace {

constexpr char kCmd[] = "plan";

struct PlanFlags {
  ModelFlags model;
  DeviceFlags device;
  std::string stats, out, solver = "best";
  float time_limit = 10;
  int granule = 32;
  bool predictor = false;
  float host_gbps = 0, dev_gbps = 0, link_gbps = 0;
  float op_us = -1, sync_us = -1;  // < 0: the device's profile
};

// "12.34 tok/s" from seconds per token, "none" when that solver found no plan (NaN).
std::string tok_s_text(double s_per_token) {
  if (!(s_per_token > 0)) return "none";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f tok/s", 1.0 / s_per_token);
  return buf;
}

Result<sparse::PlanResult> solve(const PlanFlags& f, const sparse::PlanInput& in,
                                 uint64_t budget) {
  sparse::PlannerOptions po;
  po.budget_bytes = budget;
  po.granule = f.granule;
  po.ilp_time_limit_s = f.time_limit;
  if (f.solver == "greedy") return sparse::plan_greedy(in, po);
  if (f.solver == "ilp") return sparse::plan_ilp(in, po);
  if (f.solver == "best") return sparse::plan_best(in, po);
  return Status::Error("--solver: expected best, greedy or ilp, found '" + f.solver + "'");
}

void print_plan(const sparse::PlanInput& in, const sparse::PlanResult& r, uint64_t budget) {
  std::printf("| layer | attention | hot %s | %s mass on device | device MiB | predicted ms |\n"
              "|---:|---|---:|---:|---:|---:|\n",
              r.plan.experts ? "experts" : "neurons", r.plan.experts ? "routing" : "firing");
  for (int il = 0; il < in.n_layer(); ++il) {
    const sparse::LayerTime& t = r.prediction.layers[static_cast<size_t>(il)];
    const sparse::LayerPlacement& lp = r.plan.layers[static_cast<size_t>(il)];
    std::printf("| %d | %s | %zu / %lld | %.1f%% | %.2f | %.3f |\n", il,
                lp.attn_on_device ? "device" : "host", lp.hot.size(),
                static_cast<long long>(in.n_ff()), 100.0 * t.device_mass,
                t.device_bytes / 1048576.0, 1e3 * t.total_s());
  }
  std::printf("\ndevice bytes: %.1f MiB of a %.1f MiB budget (%llu of %llu bytes)\n",
              r.prediction.device_bytes / 1048576.0, budget / 1048576.0,
              static_cast<unsigned long long>(r.prediction.device_bytes),
              static_cast<unsigned long long>(budget));
  std::printf("predicted: %.2f tok/s (solver %s; greedy %s, ilp %s%s%s)\n", r.prediction.tok_s,
              r.solver.c_str(), tok_s_text(r.greedy_s).c_str(), tok_s_text(r.ilp_s).c_str(),
              r.ilp_status.empty() ? "" : ": ", r.ilp_status.c_str());
}

Status plan(const PlanFlags& f) {
  if (f.stats.empty()) return Status::Error("no statistics given: expected --stats STATS.gguf");
  if (f.out.empty()) return Status::Error("no output given: expected -o PLAN.gguf");
  if (!(f.device.vram_budget_gib >= 0) || !std::isfinite(f.device.vram_budget_gib))
    return Status::Error("--vram-budget: expected GiB >= 0 (required)");
  if (f.granule < 1) return Status::Error("--granule: expected >= 1 neurons");
  // Loaded as run / bench load it for this kind of sparsity (SparseFlags::apply_to): which
  // matrices have the decode layout decides what a CPU device charges for their rows.
  ModelFlags mf = f.model;
  mf.sparse_ffn = true;
  mf.sparse_gate = f.predictor;
  HC_ASSIGN_OR_RETURN(auto model, load_model_logged(mf));
  const bool moe = model->hparams().is_moe();
  if (moe) {  // experts are placed whole and run as run loads them (no sparse FFN layouts)
    model.reset();
    mf.sparse_ffn = mf.sparse_gate = false;
    HC_ASSIGN_OR_RETURN(model, load_model_logged(mf));
  }
  HC_ASSIGN_OR_RETURN(ActStats stats, ActStats::read(f.stats));
  HC_TRY(stats.check_matches(model->hparams()).with_context("--stats '" + f.stats + "'"));
  const uint64_t budget = gib_to_bytes(f.device.vram_budget_gib);
  HC_ASSIGN_OR_RETURN(std::shared_ptr<ops::Device> dev, open_device_from_flags(f.device, 0));
  const int n_ctx = session_ctx(*model, f.model.ctx);
  HC_ASSIGN_OR_RETURN(sparse::HardwareProfile hw,
                      measure_hardware(*dev, *model, f.model.threads, f.host_gbps));
  if (f.dev_gbps > 0) hw.dev_gbps = f.dev_gbps;
  if (f.link_gbps > 0) hw.link_gbps = f.link_gbps;
  if (f.op_us >= 0) hw.op_us = f.op_us;
  if (f.sync_us >= 0) hw.sync_us = f.sync_us;
  HC_LOG_INFO("hardware: host %.1f GB/s, %s %.1f GB/s, link %.1f GB/s, op %.1f us, sync %.1f us",
              hw.host_gbps, dev->name().c_str(), hw.dev_gbps, hw.link_gbps, hw.op_us, hw.sync_us);
  sparse::PlanInput in;
  PlanFlags fs = f;
  if (moe) {
    if (f.predictor) return Status::Error("--predictor: a mixture-of-experts model places experts");
    HC_ASSIGN_OR_RETURN(in, moe_plan_input_for(*model, &stats, hw, *dev, n_ctx));
    fs.granule = 1;  // whole experts
  } else {
    HC_ASSIGN_OR_RETURN(in, plan_input_for(*model, stats, hw, *dev, n_ctx, f.predictor));
  }
  HC_LOG_INFO("plan: %d layers x %lld %s in granules of %d, solver %s (ILP time limit %.3g s)",
              in.n_layer(), static_cast<long long>(in.n_ff()), moe ? "experts" : "neurons",
              fs.granule, f.solver.c_str(), f.time_limit);
  HC_ASSIGN_OR_RETURN(sparse::PlanResult r, solve(fs, in, budget));
  r.plan.experts = moe;
  HC_ASSIGN_OR_RETURN(r.plan.model_id, sparse::file_identity(f.model.model));
  HC_ASSIGN_OR_RETURN(r.plan.stats_id, sparse::file_identity(f.stats));
  print_plan(in, r, budget);
  HC_TRY(write_then_rename(f.out, [&](const std::string& tmp) {
    return sparse::write_plan(tmp, r.plan);
  }));
  std::printf("wrote %s\n", f.out.c_str());
  return Status::Ok();
}

}  // namespace

int cmd_plan(const Args& args) {
  PlanFlags f;
  ArgParser p("hotcold plan",
              "place hot FFN neurons and attention on the device under a memory budget "
              "(greedy and GLPK ILP, the faster kept) and write the plan file");
  add_model_flags(p, &f.model);
  p.add_string("--stats", &f.stats, "activation statistics from hotcold profile (required)");
  p.add_string("-o,--output", &f.out, "plan file to write, GGUF (required)");
  p.add_float("--vram-budget", &f.device.vram_budget_gib, "device memory budget in GiB (required)");
  p.add_string("--device", &f.device.device, "device whose profile is used: auto, cuda or cpu");
  p.add_int("--device-threads", &f.device.device_threads, "CPU device: its threads");
  p.add_string("--solver", &f.solver, "best (greedy and ILP, the faster), greedy or ilp");
  p.add_float("--time-limit", &f.time_limit, "ILP time limit in seconds");
  p.add_int("--granule", &f.granule, "neurons per decision unit");
  p.add_flag("--predictor", &f.predictor,
             "plan for predictor-driven sparsity (the device computes only predicted neurons)");
  p.add_float("--host-gbps", &f.host_gbps, "host bandwidth instead of measuring it");
  p.add_float("--dev-gbps", &f.dev_gbps, "device bandwidth instead of its profile's");
  p.add_float("--link-gbps", &f.link_gbps, "host<->device bandwidth instead of its profile's");
  p.add_float("--op-us", &f.op_us, "cost of one device operation in us instead of its profile's");
  p.add_float("--sync-us", &f.sync_us, "one host/device round trip in us instead of its profile's");
  if (int rc = parse_or_exit(p, args, kCmd); rc >= 0) return rc;
  if (f.model.model.empty() || f.stats.empty() || f.out.empty() || f.device.vram_budget_gib < 0)
    return usage_error(kCmd, "expected -m MODEL.gguf --stats STATS.gguf --vram-budget GiB -o "
                             "PLAN.gguf (see hotcold plan --help)");
  return exit_code_for(kCmd, plan(f));
}

}  // namespace hc
