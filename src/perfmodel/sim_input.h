// What a projection takes (the model's bytes, the hardware, the host's efficiencies, firing
// statistics; options) and what it gives (one result per mode).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "perfmodel/hardware.h"
#include "perfmodel/model_bytes.h"
#include "sparse/placement_plan.h"

namespace hc::perfmodel {

struct SimOptions {
  uint64_t budget_bytes = 0;  // device budget (overhead, scratch and KV of device layers in)
  int n_ctx = 2048;           // context: KV bytes on the device, half of it read per token
  int n_gpu_layers = -1;      // dense-offload: -1 as many whole layers as fit, else exactly N
                              // (N > n_layer also offloads the output, as llama.cpp's -ngl)
  double drift = 0;           // share of neurons whose ranks the serving distribution permutes
  uint64_t drift_seed = 1;
  double drift_period_tokens = 1024;  // tokens between drifts: migration amortised over it
  bool use_ilp = false;       // plan_best (greedy + ILP) instead of greedy alone
  double ilp_time_limit_s = 10;
  int granule = 32;
  const sparse::PlacementPlan* plan = nullptr;  // static: evaluate this plan (output stays on host)
  bool output_on_device = true;  // planned modes may put the output matrix on the device
  bool predictor = false;        // predictor-driven sparse FFN (gate over the predicted set)
  // The executor's --sparse-union-max: a host-only layer whose firing share passes it runs its
  // FFN dense over the row layout (every up and down_t row, at the in-order row rate).
  double max_union_share = 0.5;
  int64_t predictor_rank = 0;    // 0: n_embd / 16 (docs/BENCHMARKS.md's advice)
  int n_cpu_moe = -1;  // llamacpp-cpu-moe: -1 the fewest leading layers whose experts must stay
                       // on the host for the rest to fit, else exactly N
};

struct ModeResult {
  std::string mode;
  double s_per_token = 0;
  double tok_s = 0;
  uint64_t device_bytes = 0;
  // Share of the FFN's firing mass computed on the device (dense-offload: share of layers).
  double device_mass = 0;
  int layers_on_device = 0;  // dense-offload: whole layers; hot/cold: layers with device work
  int attn_on_device = 0;
  int64_t hot_neurons = 0;
  bool output_on_device = false;
  int n_cpu_moe = -1;  // llamacpp-cpu-moe: leading layers whose experts run on the host
  double migration_s = 0;              // dynamic: per-token link time of migrated bytes
  double migration_bytes_per_token = 0;
  // Hot/cold modes: whose plan: "greedy", "ilp", "previous" (plan_best's), "file" (given),
  // "refill" (dynamic: the static capacities refilled with the serving top-k).
  std::string solver;
};

struct SimInput {
  ModelBytes model;
  HardwareSpec hw;
  HostEfficiency eff;
  // [n_layer][n_units] p_i of the profiling distribution: a neuron's firing probability, or
  // (MoE) the share of tokens routed to the expert.
  std::vector<std::vector<double>> profile;
  // MoE: share of a routed expert's neurons firing per token (TurboSparse-Mixtral's dReLU
  // experts: 0.15); 1: dense experts. Only the hot/cold modes use it: llama.cpp reads experts
  // whole.
  double expert_firing = 1;
};

struct SimResult {
  // dense-cpu, sparse-cpu, dense-offload, static, dynamic; MoE: dense-cpu, sparse-cpu (sparse
  // experts only), dense-offload, llamacpp-cpu-moe, hot-experts, dynamic.
  std::vector<ModeResult> modes;
  double firing_share = 0;        // mean p over layers (MoE: n_expert_used / n_expert)
  double cover80 = 0;             // mean share of units covering 80% of the firings (routings)
  double top20_overlap = 1;       // profile vs serving (drift)
  const ModeResult* find(const std::string& mode) const;
  // The llama.cpp mode the others compare with: llamacpp-cpu-moe, else dense-offload; null
  // when neither ran.
  const ModeResult* llamacpp() const;
};

Status validate_input(const SimInput& in);
Status validate_options(const SimOptions& opt);
// The host's achieved dense decode rate, bytes per second: its read bandwidth x eff.dense.
double host_dense_rate(const SimInput& in);

}  // namespace hc::perfmodel
