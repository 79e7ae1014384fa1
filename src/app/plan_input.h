// The placement planner's input (sparse/planner.h) for a real model: byte sizes of every
// layer's tensors as the executor stores them, this layer's firing probabilities from an
// activation profile, and the hardware profile (host bandwidth measured with the membw probe,
// the device's own profile). Shared by `hotcold plan` and the automatic planning at load.
#pragma once
#include <cstdint>

#include "core/status.h"
#include "model/act_stats.h"
#include "model/llama_model.h"
#include "ops/device.h"
#include "sparse/planner.h"

namespace hc {

// Bytes of layer il's attention weights (norm, wq, wk, wv, wo) and of its whole dense FFN.
uint64_t layer_attn_bytes(const LlamaModel& model, int il);
uint64_t layer_dense_bytes(const LlamaModel& model, int il);  // attention + FFN
// K and V of one layer for n_ctx positions (fp16).
uint64_t layer_kv_bytes(const LlamaModel& model, int n_ctx);
// What placing layer il's attention block / its whole dense layer on `dev` charges there
// (Device::weight_bytes of each tensor: allocation rounding, the CPU device's decode layout).
uint64_t layer_attn_store_bytes(const LlamaModel& model, const ops::Device& dev, int il);
uint64_t layer_dense_store_bytes(const LlamaModel& model, const ops::Device& dev, int il);

// Host read bandwidth (membw read probe, 64 MiB, on n_threads) unless host_gbps > 0, and the
// device's profile and overhead; dev_fixed_bytes = a session's device scratch.
Result<sparse::HardwareProfile> measure_hardware(const ops::Device& dev, const LlamaModel& model,
                                                 int n_threads = 2, double host_gbps = 0);

// Per-layer costs for the sparse FFN (predictor: the predicted set is read on both sides; else
// the device computes all its hot neurons and the host reads every cold gate row). Device
// bytes are what `dev` charges for them (its hot_store_bytes refer to dev: keep it alive while
// the input is used).
Result<sparse::PlanInput> plan_input_for(const LlamaModel& model, const ActStats& stats,
                                         const sparse::HardwareProfile& hw,
                                         const ops::Device& dev, int n_ctx, bool predictor);

// Per-layer routing probabilities of a mixture-of-experts model's experts: tokens routed to each
// / tokens, from a profile's expert counts; without statistics (null) uniform, n_expert_used /
// n_expert each.
Result<std::vector<double>> expert_probabilities(const LlamaHParams& hp, const ActStats* stats,
                                                 int il);

// The planner's input for a mixture-of-experts model, each expert one unit (whole experts on the
// device, `hot` lists of the plan are experts): fire_prob = expert_probabilities, neuron_bytes =
// an expert's gate, up and down (read whole when routed, on either side), the router on the host.
Result<sparse::PlanInput> moe_plan_input_for(const LlamaModel& model, const ActStats* stats,
                                             const sparse::HardwareProfile& hw,
                                             const ops::Device& dev, int n_ctx);

}  // namespace hc
