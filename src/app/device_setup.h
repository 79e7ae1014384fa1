// The second device for run, chat, bench and perplexity: llama.cpp's -ngl (dense layer
// offload) and hotcold's hybrid placement (hot neurons and attention per layer from a plan
// file, or planned at load under --vram-budget and cached).
#pragma once
#include <memory>
#include <string>

#include "app/args.h"
#include "app/common.h"
#include "model/device_model.h"

namespace hc {

struct DeviceFlags {
  int n_gpu_layers = 0;        // -ngl, --n-gpu-layers
  std::string device = "auto";  // --device auto|cuda|cpu
  float vram_budget_gib = -1;  // --vram-budget GiB
  std::string plan;            // --plan PLAN.gguf
  int device_threads = 1;      // --device-threads (CPU device)
  float device_emulate_gbps = 0;  // --device-emulate-gbps (CPU device)
  std::string plan_cache;      // --plan-cache DIR (default hotcold_cache_dir()/plans)
  int n_cpu_moe = 0;           // --n-cpu-moe N: with -ngl, the first N layers' experts on the host
  bool cpu_moe = false;        // --cpu-moe: every layer's experts on the host
  bool enabled() const { return n_gpu_layers != 0 || vram_budget_gib >= 0 || !plan.empty(); }
};

void add_device_flags(ArgParser& p, DeviceFlags* f);

inline uint64_t gib_to_bytes(float gib) {
  return static_cast<uint64_t>(static_cast<double>(gib) * 1024.0 * 1024.0 * 1024.0);
}

// Opens the device the flags name (auto: CUDA when a GPU is visible, else the CPU device).
Result<std::shared_ptr<ops::Device>> open_device_from_flags(const DeviceFlags& f,
                                                            uint64_t budget_bytes);

// The device placement the flags ask for, built (weights uploaded), or null when they ask for
// none. sparse: the session's sparse FFN or null; n_ctx: the session's context (KV on device).
// Logs one line saying what went where. Mutable: dynamic placement migrates its hot neurons.
// n_sessions: sessions that will run on it (serve's slots; n_ctx is then their total context):
// the placement leaves room for each one's device buffers.
Result<std::shared_ptr<DeviceModel>> device_from_flags(const DeviceFlags& f,
                                                             const SparseFlags& sf,
                                                             const std::string& model_path,
                                                             const LlamaModel& model,
                                                             const SparseFfn* sparse, int n_ctx,
                                                             int n_sessions = 1);

// device_from_flags for a session's model and context, attached to the session. *placed (when
// given) receives the device model (null when none), which the session keeps alive.
Status attach_device(Session& session, const DeviceFlags& f, const SparseFlags& sf,
                     const std::string& model_path, const std::shared_ptr<const SparseFfn>& sparse,
                     DeviceModel** placed = nullptr);

}  // namespace hc
