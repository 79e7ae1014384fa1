#include "app/device_setup.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <optional>

#include "app/model_cache.h"
#include "app/plan_input.h"
#include "core/log.h"
#include "core/thread_pool.h"
#include "model/act_stats.h"
#include "sparse/placement_plan.h"
#include "sparse/planner.h"

namespace hc {

void add_device_flags(ArgParser& p, DeviceFlags* f) {
  p.add_int("-ngl,--n-gpu-layers", &f->n_gpu_layers,
            "offload the last N layers wholly to the device (llama.cpp's meaning; N > layers "
            "also offloads the output layer)");
  p.add_string("--device", &f->device,
               "second device: auto (a CUDA GPU, else a Vulkan GPU, else the CPU device), cuda, "
               "vulkan[:N] (device N of hotcold --version's list; a CPU implementation such as "
               "lavapipe only when named), or cpu (a device on its own CPU threads: the "
               "stand-in used without a GPU)");
  p.add_float("--vram-budget", &f->vram_budget_gib,
              "device memory budget in GiB; with a sparse FFN and --stats (or --plan), hot "
              "neurons and attention are placed by the planner (cached); dense: as many layers "
              "as fit are offloaded");
  p.add_string("--plan", &f->plan,
               "placement plan from hotcold plan (or a PowerInfer .gpuidx file) for the "
               "sparse FFN");
  p.add_int("--device-threads", &f->device_threads, "CPU device: its own threads");
  p.add_float("--device-emulate-gbps", &f->device_emulate_gbps,
              "CPU device: pace its weight reads to this bandwidth (GB/s) to emulate a slower "
              "device (default: unpaced)");
  p.add_string("--plan-cache", &f->plan_cache,
               "directory of cached plans (default $HOTCOLD_CACHE/plans, ~/.cache/hotcold/plans)");
  p.add_int("-ncmoe,--n-cpu-moe", &f->n_cpu_moe,
            "mixture of experts with -ngl: keep the experts of the first N layers on the host "
            "(llama.cpp's meaning)");
  p.add_flag("-cmoe,--cpu-moe", &f->cpu_moe,
             "mixture of experts with -ngl: keep every layer's experts on the host");
}

namespace {

std::string default_plan_cache() { return (hotcold_cache_dir() / "plans").string(); }

// llama.cpp's automatic offload under a budget: the most trailing layers whose weights, KV
// cache and the session's buffers fit.
int dense_layers_that_fit(const LlamaModel& model, const ops::Device& dev, int n_ctx,
                          uint64_t budget) {
  const LlamaHParams& hp = model.hparams();
  uint64_t used = dev.overhead_bytes() +
                  DeviceSession::scratch_bytes(dev, model, kForwardUbatch, /*attn=*/true,
                                               /*dense=*/true, /*hot=*/false, /*output=*/false);
  int n = 0;
  for (int il = hp.n_layer - 1; il >= 0; --il) {
    used += layer_dense_store_bytes(model, dev, il) + DeviceSession::kv_layer_bytes(dev, hp, n_ctx);
    if (used > budget) break;
    ++n;
  }
  return n;
}

// The plan under a budget: --plan, or the planner's (cached) for --stats: hot neurons of a sparse
// FFN, or whole experts of a mixture-of-experts model (sparse null; without --stats planned for
// uniform routing).
Result<sparse::PlacementPlan> plan_for(const DeviceFlags& f, const SparseFlags& sf,
                                       const std::string& model_path,
                                       const LlamaModel& model, const SparseFfn* sparse,
                                       ops::Device& dev, int n_ctx, uint64_t budget) {
  const LlamaHParams& hp = model.hparams();
  const bool moe = hp.is_moe();
  const int64_t units = moe ? hp.n_expert : hp.n_ff;
  if (!f.plan.empty()) {
    HC_ASSIGN_OR_RETURN(sparse::PlacementPlan plan, sparse::read_plan(f.plan));
    HC_TRY(plan.check_matches(hp.n_layer, units, moe).with_context("--plan '" + f.plan + "'"));
    return plan;
  }
  if (sf.stats.empty() && !moe)
    return Status::Error("--vram-budget with a sparse FFN needs --stats STATS.gguf (activation "
                         "statistics from hotcold profile) or --plan PLAN.gguf");
  HC_ASSIGN_OR_RETURN(std::string model_id, sparse::file_identity(model_path));
  std::string stats_id = "uniform routing";
  if (!sf.stats.empty()) {
    HC_ASSIGN_OR_RETURN(stats_id, sparse::file_identity(sf.stats));
  }
  const std::string extra = "ctx=" + std::to_string(n_ctx) + ";device=" + dev.name() +
                            (moe                       ? ";experts"
                             : sparse->use_predictor() ? ";predictor"
                                                       : ";thresholds");
  const std::string dir = f.plan_cache.empty() ? default_plan_cache() : f.plan_cache;
  const std::string path = sparse::plan_cache_path(dir, model_id, stats_id, budget, extra);
  auto cached = sparse::read_plan(path);
  if (cached.ok() && cached->check_matches(hp.n_layer, units, moe).ok() &&
      sparse::check_plan_identity(*cached, model_id, stats_id, budget).ok()) {
    HC_LOG_INFO("placement plan: cached %s (%s, predicted %.1f tok/s)", path.c_str(),
                cached->solver.c_str(), cached->predicted_tok_s);
    return std::move(*cached);
  }
  std::optional<ActStats> stats;
  if (!sf.stats.empty()) {
    HC_ASSIGN_OR_RETURN(ActStats st, ActStats::read(sf.stats));
    HC_TRY(st.check_matches(hp).with_context("--stats '" + sf.stats + "'"));
    stats = std::move(st);
  }
  HC_ASSIGN_OR_RETURN(sparse::HardwareProfile hw, measure_hardware(dev, model));
  sparse::PlanInput in;
  if (moe) {
    HC_ASSIGN_OR_RETURN(in, moe_plan_input_for(model, stats ? &*stats : nullptr, hw, dev, n_ctx));
  } else {
    HC_ASSIGN_OR_RETURN(in, plan_input_for(model, *stats, hw, dev, n_ctx, sparse->use_predictor()));
  }
  sparse::PlannerOptions po;
  po.budget_bytes = budget;
  if (moe) po.granule = 1;  // one expert is already a large unit
  HC_ASSIGN_OR_RETURN(sparse::PlanResult r, sparse::plan_best(in, po));
  r.plan.experts = moe;
  r.plan.model_id = model_id;
  r.plan.stats_id = stats_id;
  HC_LOG_INFO("placement plan: %s won (predicted %.1f tok/s)", r.solver.c_str(),
              r.prediction.tok_s);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const Status st = ec ? Status::Error("cannot create '" + dir + "': " + ec.message())
                       : write_then_rename(path, [&](const std::string& tmp) {
                           return sparse::write_plan(tmp, r.plan);
                         });
  if (st.ok()) HC_LOG_INFO("placement plan cached as %s", path.c_str());
  else HC_LOG_WARN("placement plan not cached: %s", st.message().c_str());
  return std::move(r.plan);
}

}  // namespace

Result<std::shared_ptr<ops::Device>> open_device_from_flags(const DeviceFlags& f,
                                                            uint64_t budget_bytes) {
  ops::DeviceOptions o;
  o.budget_bytes = budget_bytes;
  o.n_threads = f.device_threads;
  o.emulate_gbps = f.device_emulate_gbps;
  if (f.device == "cuda") {
    o.kind = ops::DeviceKind::kCuda;
  } else if (f.device == "cpu") {
    o.kind = ops::DeviceKind::kCpu;
  } else if (f.device == "vulkan" || f.device.rfind("vulkan:", 0) == 0) {
    o.kind = ops::DeviceKind::kVulkan;
    if (f.device.size() > 7) {
      const std::string n = f.device.substr(7);
      char* end = nullptr;
      const long v = std::strtol(n.c_str(), &end, 10);
      if (n.empty() || *end != '\0' || v < 0 || v > 1000)
        return Status::Error("--device: expected vulkan:N with N a device index (hotcold "
                             "--version lists them), found '" + f.device + "'");
      o.vulkan_index = static_cast<int>(v);
    }
  } else if (f.device == "auto") {
    if (ops::cuda_device_count() > 0) {
      o.kind = ops::DeviceKind::kCuda;
    } else if (const int vk = ops::vulkan_gpu_index(); vk >= 0) {
      o.kind = ops::DeviceKind::kVulkan;
      o.vulkan_index = vk;
    } else {
      o.kind = ops::DeviceKind::kCpu;
      HC_LOG_WARN("no CUDA device%s and no Vulkan GPU: the offloaded work runs on the CPU device "
                  "(its own %d thread(s))",
                  ops::cuda_compiled() ? " visible" : " (built without CUDA)", f.device_threads);
    }
  } else {
    return Status::Error("--device: expected auto, cuda, vulkan[:N] or cpu, found '" + f.device +
                         "'");
  }
  HC_ASSIGN_OR_RETURN(std::unique_ptr<ops::Device> dev, ops::open_device(o));
  return std::shared_ptr<ops::Device>(std::move(dev));
}

Result<std::shared_ptr<DeviceModel>> device_from_flags(const DeviceFlags& f,
                                                             const SparseFlags& sf,
                                                             const std::string& model_path,
                                                             const LlamaModel& model,
                                                             const SparseFfn* sparse, int n_ctx,
                                                             int n_sessions) {
  if (!f.enabled()) return std::shared_ptr<DeviceModel>();
  if (f.n_gpu_layers < 0)
    return Status::Error("-ngl: expected a non-negative layer count, found " +
                         std::to_string(f.n_gpu_layers));
  if (f.vram_budget_gib >= 0 && !std::isfinite(f.vram_budget_gib))
    return Status::Error("--vram-budget: expected GiB >= 0");
  const bool moe = model.hparams().is_moe();
  if (!f.plan.empty() && !sparse && !moe)
    return Status::Error("--plan places hot neurons of the sparse FFN: add --sparse (or "
                         "--predictor / --sparsity)");
  if ((f.n_cpu_moe != 0 || f.cpu_moe) && !moe)
    return Status::Error("--n-cpu-moe / --cpu-moe keep experts on the host: " +
                         model.hparams().arch + " has no experts (a dense FFN)");
  if ((f.n_cpu_moe != 0 || f.cpu_moe) && f.n_gpu_layers == 0)
    return Status::Error("--n-cpu-moe / --cpu-moe go with -ngl (the layers offloaded, whose "
                         "experts they keep on the host); with --vram-budget the planner "
                         "chooses the experts");
  if (f.n_cpu_moe < 0)
    return Status::Error("--n-cpu-moe: expected a non-negative layer count, found " +
                         std::to_string(f.n_cpu_moe));
  if (f.device_threads < 1 || f.device_threads > 512)
    return Status::Error("--device-threads: expected 1..512, found " +
                         std::to_string(f.device_threads));
  const uint64_t budget = f.vram_budget_gib >= 0 ? gib_to_bytes(f.vram_budget_gib) : 0;
  HC_ASSIGN_OR_RETURN(std::shared_ptr<ops::Device> dev, open_device_from_flags(f, budget));
  // More than one session (serve's slots): the others' buffers come off what the placement may
  // use (each session's KV is in n_ctx already); an upper bound, whatever goes where.
  const uint64_t full_budget = budget ? budget : dev->budget_bytes();
  uint64_t place_budget = full_budget;
  if (n_sessions > 1 && place_budget > 0) {
    const LlamaHParams& hp = model.hparams();
    const uint64_t one =
        moe ? DeviceSession::moe_scratch_bytes(*dev, model, forward_ubatch(hp), true, true)
            : DeviceSession::scratch_bytes(*dev, model, forward_ubatch(hp), true, !sparse,
                                           sparse != nullptr, true);
    const uint64_t extra = one * static_cast<uint64_t>(n_sessions - 1);
    if (extra >= place_budget)
      return Status::Error("the device budget (" + std::to_string(place_budget >> 20) +
                           " MiB) does not hold the buffers of " + std::to_string(n_sessions) +
                           " sessions (" + std::to_string((extra + one) >> 20) +
                           " MiB): fewer slots (-np) or a larger --vram-budget");
    place_budget -= extra;
  }
  DevicePlacement p;
  p.n_gpu_layers = f.n_gpu_layers;
  p.n_cpu_moe = f.cpu_moe ? model.hparams().n_layer : f.n_cpu_moe;
  if ((sparse || moe) && (f.vram_budget_gib >= 0 || !f.plan.empty()) && f.n_gpu_layers == 0) {
    HC_ASSIGN_OR_RETURN(sparse::PlacementPlan plan,
                        plan_for(f, sf, model_path, model, sparse, *dev, n_ctx, place_budget));
    for (const sparse::LayerPlacement& lp : plan.layers) {
      p.attn.push_back(lp.attn_on_device);
      (moe ? p.experts : p.hot).push_back(lp.hot);
    }
  } else if (!sparse && f.vram_budget_gib >= 0 && f.n_gpu_layers == 0) {
    p.n_gpu_layers =
        dense_layers_that_fit(model, *dev, n_ctx,
                              budget > full_budget - place_budget
                                  ? budget - (full_budget - place_budget)
                                  : 0);
  }
  const double t0 = now_seconds();
  HC_ASSIGN_OR_RETURN(std::unique_ptr<DeviceModel> dm,
                      DeviceModel::build(model, sparse, dev, p));
  HC_LOG_INFO("device: %s, %.2f s; %.1f MiB charged of %s", dm->summary().c_str(),
              now_seconds() - t0, dev->charged_bytes() / 1048576.0,
              budget ? (std::to_string(budget >> 20) + " MiB").c_str() : "no budget");
  return std::shared_ptr<DeviceModel>(std::move(dm));
}

Status attach_device(Session& session, const DeviceFlags& f, const SparseFlags& sf,
                     const std::string& model_path, const std::shared_ptr<const SparseFfn>& sparse,
                     DeviceModel** placed) {
  if (placed) *placed = nullptr;
  HC_ASSIGN_OR_RETURN(std::shared_ptr<DeviceModel> dm,
                      device_from_flags(f, sf, model_path, session.model(), sparse.get(),
                                        session.n_ctx()));
  if (!dm) return Status::Ok();
  if (placed) *placed = dm.get();
  HC_TRY(session.set_device(std::move(dm)));
  HC_LOG_INFO("device: KV cache %.1f MiB on the device", session.device_kv_bytes() / 1048576.0);
  return Status::Ok();
}

}  // namespace hc
