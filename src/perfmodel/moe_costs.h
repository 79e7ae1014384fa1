// MoE models in the performance model (docs/SIMULATE.md "MoE models"): a layer's experts as the
// planner's placement units, and llama.cpp's -ngl / --n-cpu-moe split.
#pragma once
#include <cstdint>
#include <vector>

#include "core/status.h"
#include "perfmodel/sim_input.h"
#include "sparse/planner.h"

namespace hc::perfmodel {

// One MoE layer in the planner's units, one per expert (docs/SIMULATE.md, "MoE"). Host bytes are
// dense-equivalent (what the host reads in the same time at its dense decode rate).
struct MoeLayerBytes {
  uint64_t attn = 0, kv = 0, kv_read = 0;  // attention; KV charged; KV read per token
  uint64_t router = 0;                     // router + FFN norm: read on the host every token
  uint64_t expert_store = 0;               // device bytes one hot expert takes
  uint64_t expert_device = 0;  // bytes the device reads per routing to one of its experts
  uint64_t expert_host = 0;    // host bytes per routing to a cold expert
};
// The planner's LayerCosts: fire_prob = routing [n_expert], neuron_bytes = expert_device,
// hot_store_bytes(n) = n x expert_store, host_neuron_bytes = expert_host, host_cold_bytes = 0,
// host_fixed_bytes = router. The engine's planning for MoE models can take it as is.
sparse::LayerCosts moe_layer_costs(const MoeLayerBytes& b, std::vector<double> routing);
// The whole PlanInput of an MoE model (device_reads_all_hot false: the device computes its
// routed experts only). Per routing, a dense expert is read whole on either side; a sparse one
// (in.expert_firing < 1) reads its predictor and its firing share f of gate, up and down_t rows
// (the host at the sparse-row rate rel(f)); without a predictor the whole gate (at the dense
// rate) and f of the up and down_t rows.
Result<sparse::PlanInput> moe_plan_input(const SimInput& in,
                                         const std::vector<std::vector<double>>& p,
                                         const SimOptions& opt);

// llama.cpp's MoE split on one device (-ngl, --n-cpu-moe): the trailing n_gpu_layers layers'
// attention, norms, router and KV on the device (the output matrix too when `output`), and the
// experts of layer l there when l >= n_cpu_moe and the layer is on the device; every other
// tensor is computed by the host, one side after the other.
struct CpuMoeSplit {
  int n_gpu_layers = 0;
  bool output = false;
  int n_cpu_moe = 0;
};
// Seconds per token of that split (device bytes in *device_bytes when not null).
double cpu_moe_seconds(const SimInput& in, const SimOptions& opt, const CpuMoeSplit& split,
                       uint64_t* device_bytes);
// Every layer and the output on the device and the fewest leading layers' experts on the host
// that fit opt.budget_bytes (opt.n_cpu_moe >= 0: exactly that many); when even the non-expert
// tensors do not all fit, the most trailing layers whose non-expert tensors fit, and every
// expert on the host.
CpuMoeSplit cpu_moe_split_that_fits(const SimInput& in, const SimOptions& opt);

}  // namespace hc::perfmodel
