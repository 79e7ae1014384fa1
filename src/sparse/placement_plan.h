// A placement plan: which FFN neurons ("hot") and which attention blocks of each layer live on
// the device; everything else runs on the host. Produced by the planner (sparse/planner.h),
// stored as a GGUF file, read back by the executor at load.
//
// File (GGUF; docs/PLANNER.md):
//   general.architecture = "hotcold-plan"
//   hotcold.plan.version (u32 1), .model (string: identity of the model file), .stats (identity
//   of the statistics file), .budget_bytes (u64), .predicted_tok_s (f32), .solver (string),
//   .n_layer, .n_ff (u32), .unit (string, optional: "expert" for a mixture-of-experts model's
//   plan, whose units are whole experts, n_ff = experts per layer; absent: neurons)
//   per layer N, all I32:
//     blk.N.gpu_idx     [n_ff]   1 when neuron i is on the device, else 0 (PowerInfer's meaning)
//     blk.N.gpu_bucket  [n_hot]  the device's neurons, ascending (PowerInfer's meaning)
//     blk.N.attn_gpu    [1]      1 when the layer's attention runs on the device
// read_plan also reads PowerInfer's `*.generated.gpuidx` files (magic "PWRI" or "GGUF",
// general.architecture "generic.gpu_index", the same two I32 tensors per layer, gpu_bucket
// sometimes absent): their attention stays on the host. Every tensor is found by name.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "format/gguf.h"

namespace hc::sparse {

struct LayerPlacement {
  bool attn_on_device = false;
  std::vector<int32_t> hot;  // [n_hot] ascending neuron indices on the device (gpu_bucket)
};

struct PlacementPlan {
  int64_t n_ff = 0;      // units per layer: FFN neurons, or experts (experts = true)
  bool experts = false;  // a mixture-of-experts model's plan: `hot` lists whole experts
  std::vector<LayerPlacement> layers;  // [n_layer]
  // Provenance, stored in the file.
  std::string model_id;    // identity of the model file (file_identity)
  std::string stats_id;    // identity of the statistics file
  std::string solver;      // "greedy", "ilp", "previous", "powerinfer" (read from a gpuidx file)
  uint64_t budget_bytes = 0;
  float predicted_tok_s = 0;

  int n_layer() const { return static_cast<int>(layers.size()); }
  int64_t n_hot_total() const;
  // [n_ff] 1 for the layer's device neurons, 0 otherwise (PowerInfer's gpu_idx).
  std::vector<int32_t> gpu_idx(int il) const;
  // Ok when every layer's hot list is ascending, unique and within [0, n_ff).
  Status validate() const;
  // Ok when the plan has this model's n_layer and n_ff (or n_expert, for a plan of experts).
  Status check_matches(int n_layer, int64_t n_ff, bool experts = false) const;
};

// An all-host plan of the given shape.
PlacementPlan empty_plan(int n_layer, int64_t n_ff);

// GGUF bytes of the plan file (layout above); errors when validate() fails.
Result<std::vector<uint8_t>> serialize_plan(const PlacementPlan& plan);
// Writes the plan file at `path` (directly; atomic replacement is the caller's choice).
Status write_plan(const std::string& path, const PlacementPlan& plan);
// Parses a plan file or a PowerInfer gpuidx file from bytes; `name` is used in errors.
Result<PlacementPlan> parse_plan(std::span<const uint8_t> bytes, const std::string& name);
Result<PlacementPlan> plan_from_gguf(const GgufFile& g);
Result<PlacementPlan> read_plan(const std::string& path);

// Ok when a cached plan was made for this model, statistics and budget (the file name of
// plan_cache_path is a hash: this rules out collisions and stale files).
Status check_plan_identity(const PlacementPlan& plan, const std::string& model_id,
                           const std::string& stats_id, uint64_t budget_bytes);

// "NAME:SIZE:MTIME_NS" of a file (its last path component, byte size and modification time):
// changes whenever the file is replaced or rewritten. Errors when the file cannot be stat'ed.
Result<std::string> file_identity(const std::string& path);

// dir/plan-<16 hex digits>.gguf, the digits a hash (FNV-1a 64) of the model and statistics
// identities, the budget and `extra` (anything else the plan depends on, e.g. the context
// size): a different key gives a different file, the same key always the same file.
std::string plan_cache_path(const std::string& dir, const std::string& model_id,
                            const std::string& stats_id, uint64_t budget_bytes,
                            const std::string& extra = "");

}  // namespace hc::sparse
