// The neuron placement planner: which FFN neurons and which attention blocks of each layer go on
// the device, under a device memory budget, to minimise the predicted time of one decode token.
//
// Cost model (one decode token, seconds; bandwidths in 1e9 bytes/s; docs/PLANNER.md):
//   Per layer il, with H the layer's device neurons, C the rest, p_i = fire_count[i] / n_tokens
//   from THIS layer's statistics (never another layer's: PowerInfer's solver reads the wrong
//   layer's file for models with 11+ layers), xfer = 2 * n_embd * 4 / link:
//     attention on host:   (attn_bytes + kv_read_bytes) / host_gbps
//     attention on device: (attn_bytes + kv_read_bytes) / dev_gbps + attn_device_ops * op_us
//                          + sync_us + xfer
//                          (+ predictor_bytes / dev_gbps + predictor_device_ops * op_us when
//                          the predictor follows the attention)
//     FFN device part:     (device_reads_all_hot ? |H| : sum_{i in H} p_i) * neuron_bytes
//                          / dev_gbps
//                          + (uses device ? ffn_device_ops * op_us : 0)
//                          + (predictor_on_device ? predictor_bytes / dev_gbps : 0)
//     FFN host part:       (sum_{i in C} (p_i * host_neuron_bytes + host_cold_bytes)
//                           + host_fixed_bytes + (predictor on host ? predictor_bytes : 0))
//                          (the predictor is on the host unless predictor_on_device, or
//                          predictor_follows_attn with the attention on the device)
//                          / host_gbps
//     FFN:                 max(device part, host part) + (uses device ? sync_us + xfer : 0)
//   where "uses device" = H non-empty or predictor_on_device. Host and device halves run
//   concurrently (max); each device excursion pays one round trip and the copy of x and y.
//   Total = sum over layers + other_s (embeddings, output layer: host). tok/s = 1 / total.
//   Device bytes = 0 when nothing is on the device, else dev_overhead_bytes + dev_fixed_bytes
//   (less dev_attn_fixed_bytes when no attention is on the device)
//   + sum(attention on device: attn_store_bytes + kv_bytes) + sum hot_store_bytes(|H|)
//   + sum(predictor on the device: predictor_bytes), the store figures being what the device
//   charges (by default attn_bytes and |H| * neuron_bytes).
//
// Decisions: per layer, attention on device or not and k, the number of hot neurons; for a given
// k the best hot set is the k most frequent neurons (ties: lower index first). Neurons are taken
// in granules of `granule` neurons in that order (the last granule of a layer may be smaller).
//   plan_greedy: lazy greedy on time saved per byte (attention blocks and granules as items;
//                a layer's first FFN item may span several granules, because the round trip
//                makes the first granule alone look useless).
//   plan_ilp:    GLPK branch and bound on the exact formulation (docs/PLANNER.md), started
//                from the greedy plan, under a time limit.
//   plan_best:   both (and an optional earlier plan), keeps the fastest by predict_plan.
#pragma once
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "core/status.h"
#include "sparse/placement_plan.h"

namespace hc::sparse {

struct HardwareProfile {
  double host_gbps = 0;   // host memory read bandwidth
  double dev_gbps = 0;    // device memory read bandwidth
  double link_gbps = 0;   // host <-> device copy bandwidth
  double op_us = 0;       // cost of one queued device operation
  double sync_us = 0;     // one host/device round trip
  uint64_t dev_overhead_bytes = 0;  // charged at open (CUDA context, cuBLAS workspace)
  uint64_t dev_fixed_bytes = 0;     // what the executor needs on the device regardless (scratch)
  // The part of dev_fixed_bytes a session allocates only with some attention on the device (its
  // q, k, v, attention and position buffers, the predictors' and the attention's operation
  // scratch): the planners keep room for it; a prediction without attention does not count it.
  uint64_t dev_attn_fixed_bytes = 0;
};

struct LayerCosts {
  uint64_t attn_bytes = 0;     // wq, wk, wv, wo + norms (read per token)
  uint64_t kv_bytes = 0;       // the layer's KV cache for the context (device bytes charged)
  uint64_t kv_read_bytes = 0;  // KV bytes attention reads per token (e.g. half-full context)
  uint64_t neuron_bytes = 0;   // bytes of one neuron read on the device: gate + up + down_t row
  // Device bytes charged, where they differ from the bytes read (allocation rounding; the CPU
  // device keeps the decode layout beside ggml's): the attention block (0 = attn_bytes) and n
  // hot neurons (empty = n * neuron_bytes; must be 0 for n = 0 and non-decreasing).
  uint64_t attn_store_bytes = 0;
  std::function<uint64_t(int64_t n)> hot_store_bytes;
  uint64_t host_neuron_bytes = 0;  // host bytes read per firing cold neuron (sparse rows)
  uint64_t host_cold_bytes = 0;    // host bytes read per cold neuron, firing or not (the gate
                                   // row when the gate runs dense over the cold set)
  uint64_t host_fixed_bytes = 0;   // host FFN bytes independent of placement
  uint64_t predictor_bytes = 0;    // the layer's activation predictor
  bool predictor_on_device = false;  // charged to the device (bytes and read time)
  // The predictor runs on the device whenever the layer's attention does (DeviceModel places
  // it there: model/device_model.h), its mask coming back with the host's copy of x: attention
  // on the device then also charges predictor_bytes there and reads them there (with
  // predictor_device_ops), and the host no longer reads them.
  bool predictor_follows_attn = false;
  uint64_t predictor_store_bytes = 0;  // device bytes charged for it (0 = predictor_bytes)
  bool attn_placeable = true;  // false: attention stays on the host (devices lack its ops)
  // Attention and hot neurons both on the device pay one round trip, not two: the residual
  // stream stays on the device, the host reads x once for its cold half (model/hybrid_forward.h
  // can_merge_on_device: RMSNorm, no parallel block, no down bias).
  bool shares_trip = false;
  std::vector<double> fire_prob;     // [n_ff] p_i of THIS layer, in [0, 1]
};

struct PlanInput {
  HardwareProfile hw;
  int64_t n_embd = 0;
  std::vector<LayerCosts> layers;  // [n_layer], all with the same n_ff
  double other_s = 0;              // per-token time outside the layers (host)
  bool device_reads_all_hot = true;  // threshold mode: the device computes every hot neuron
  int attn_device_ops = 10;  // rmsnorm, q/k/v, rope, kv store, attention, wo, add, copy
  int ffn_device_ops = 3;    // copy x in, ffn_threshold, copy y out
  int predictor_device_ops = 6;  // fc1, relu, fc2, the hot and the full mask, the copy back

  int n_layer() const { return static_cast<int>(layers.size()); }
  int64_t n_ff() const {
    return layers.empty() ? 0 : static_cast<int64_t>(layers[0].fire_prob.size());
  }
  // Ok when every figure is finite and in range and the layers agree on n_ff.
  Status validate() const;
};

// p_i = count_i / n_tokens for one layer; errors when n_tokens is 0 or a count is out of range.
Result<std::vector<double>> fire_probabilities(const std::vector<float>& fire_count,
                                               uint64_t n_tokens);

// Neuron indices by p descending, ties by lower index first.
std::vector<int32_t> neurons_by_frequency(const std::vector<double>& p);

struct LayerTime {
  double attn_s = 0;
  double ffn_device_s = 0;  // device part (before the max)
  double ffn_host_s = 0;    // host part
  double ffn_s = 0;         // max(parts) + round trip
  double device_mass = 0;   // share of the layer's firings (sum of p) on the device, 0..1
  uint64_t device_bytes = 0;  // attention + KV when on device, hot neurons, predictor
  double total_s() const { return attn_s + ffn_s; }
};

struct Prediction {
  std::vector<LayerTime> layers;  // [n_layer]
  double seconds_per_token = 0;
  double tok_s = 0;
  uint64_t device_bytes = 0;  // everything charged to the device (0: device unused)
};

// The cost model above for any plan of the input's shape (hot sets need not be top-k).
Result<Prediction> predict_plan(const PlanInput& in, const PlacementPlan& plan);
Result<double> predict_seconds_per_token(const PlanInput& in, const PlacementPlan& plan);

struct PlannerOptions {
  uint64_t budget_bytes = 0;   // device memory budget, overhead and scratch included
  int granule = 32;            // neurons per decision unit
  double ilp_time_limit_s = 10;
  double ilp_mip_gap = 1e-4;   // relative gap (of the predicted time) at which the ILP stops
  // GLPK's MIP presolver instead of starting branch and bound from the greedy plan (the two
  // exclude each other; measured slower here: docs/PLANNER.md).
  bool ilp_presolve = false;
  bool log_progress = true;    // HC_LOG_INFO lines while a solve takes long
};

struct PlanResult {
  PlacementPlan plan;  // solver, budget_bytes and predicted_tok_s filled in
  Prediction prediction;
  std::string solver;  // "greedy", "ilp", or "previous" (plan_best kept the earlier plan)
  // Each solver's prediction (seconds per token); NaN when it did not run or found no plan.
  double greedy_s = std::numeric_limits<double>::quiet_NaN();
  double ilp_s = std::numeric_limits<double>::quiet_NaN();
  std::string ilp_status;  // "optimal", "time limit: gap 0.12%", "failed: ...", "" (not run)
  double greedy_seconds = 0, ilp_seconds = 0;  // solver wall time
};

Result<PlanResult> plan_greedy(const PlanInput& in, const PlannerOptions& opt);
// Errors when GLPK fails or stops (time limit) without an integer solution.
Result<PlanResult> plan_ilp(const PlanInput& in, const PlannerOptions& opt);
// Greedy and ILP (an ILP failure is recorded in ilp_status, not returned), plus `previous`
// when given and within this budget: the fastest prediction wins (ties: greedy, ilp, previous).
// Passing the plan of a smaller budget makes a sweep monotone even when the ILP hits its time
// limit (plan_sweep does).
Result<PlanResult> plan_best(const PlanInput& in, const PlannerOptions& opt,
                             const PlacementPlan* previous = nullptr);
// plan_best over ascending budgets, each given the previous plan: predicted time is
// non-increasing along the sweep.
Result<std::vector<PlanResult>> plan_sweep(const PlanInput& in, const PlannerOptions& opt,
                                           const std::vector<uint64_t>& budgets);

}  // namespace hc::sparse
