// MoE layers in the planner's units and llama.cpp's --n-cpu-moe split (perfmodel/moe_costs.h).
#include "perfmodel/moe_costs.h"

#include <algorithm>
#include <cmath>

#include "perfmodel/detail.h"
#include "perfmodel/device_ops.h"
#include "perfmodel/planner_input.h"

namespace hc::perfmodel {

using detail::kGB;
using detail::kUs;
using detail::round_bytes;
using sparse::LayerCosts;
using sparse::PlanInput;

LayerCosts moe_layer_costs(const MoeLayerBytes& b, std::vector<double> routing) {
  LayerCosts c;
  c.attn_bytes = b.attn;
  c.kv_bytes = b.kv;
  c.kv_read_bytes = b.kv_read;
  c.neuron_bytes = b.expert_device;
  const uint64_t store = b.expert_store;
  c.hot_store_bytes = [store](int64_t n) { return static_cast<uint64_t>(n) * store; };
  c.host_neuron_bytes = b.expert_host;
  c.host_cold_bytes = 0;  // a cold expert the router did not pick costs nothing
  c.host_fixed_bytes = b.router;
  c.fire_prob = std::move(routing);
  return c;
}

namespace {

// Layer l's expert figures for moe_layer_costs (see moe_plan_input).
MoeLayerBytes moe_layer_bytes(const SimInput& in, int l, uint64_t kv) {
  const ModelBytes& m = in.model;
  const LayerBytes& b = m.layers[static_cast<size_t>(l)];
  MoeLayerBytes mb;
  mb.attn = b.attn;
  mb.kv = kv;
  mb.kv_read = kv / 2;  // a half-full context on average
  mb.router = b.ffn_dense - static_cast<uint64_t>(m.n_expert) * b.expert;  // norm + router
  const double f = in.expert_firing;
  if (f >= 1) {  // dense experts: read whole on either side
    mb.expert_store = mb.expert_device = mb.expert_host = b.expert;
    return mb;
  }
  // Sparse experts in the sparse layout (gate, up, down_t rows) with their predictor.
  const auto n_ff = static_cast<double>(m.n_ff);
  const double rel = in.eff.sparse_at(f), pred = static_cast<double>(b.expert_predictor);
  const double gate = n_ff * static_cast<double>(b.gate_row);
  const double up_down = n_ff * static_cast<double>(b.up_row + b.down_t_row);
  mb.expert_store = round_bytes(gate + up_down + pred);
  if (b.expert_predictor > 0) {  // the predictor, then the firing rows of gate, up and down_t
    mb.expert_device = round_bytes(pred + f * (gate + up_down));
    mb.expert_host = round_bytes(pred + f * (gate + up_down) / rel);
  } else {  // every gate row (the host: decode layout, dense rate), then the firing rows
    mb.expert_device = round_bytes(gate + f * up_down);
    mb.expert_host = round_bytes(gate + f * up_down / rel);
  }
  return mb;
}

}  // namespace

Result<PlanInput> moe_plan_input(const SimInput& in, const std::vector<std::vector<double>>& p,
                                 const SimOptions& opt) {
  const ModelBytes& m = in.model;
  if (!m.moe()) return Status::Error("model '" + m.name + "' has no experts");
  HC_ASSIGN_OR_RETURN(PlanInput pin, plan_input_base(in, p));
  pin.device_reads_all_hot = false;  // the device computes only its routed experts
  pin.ffn_device_ops = kMoeHybridFfnOps;
  const uint64_t kv = m.kv_bytes_per_pos * static_cast<uint64_t>(opt.n_ctx);
  for (int l = 0; l < m.n_layer(); ++l)
    pin.layers.push_back(moe_layer_costs(moe_layer_bytes(in, l, kv), p[static_cast<size_t>(l)]));
  HC_TRY(pin.validate());
  return pin;
}

double cpu_moe_seconds(const SimInput& in, const SimOptions& opt, const CpuMoeSplit& split,
                       uint64_t* device_bytes) {
  const ModelBytes& m = in.model;
  const double host = host_dense_rate(in);
  const double dev = in.hw.has_device ? in.hw.dev_gbps() * kGB : host;
  const uint64_t kv = m.kv_bytes_per_pos * static_cast<uint64_t>(opt.n_ctx);
  const int n_layer = m.n_layer(), n_dev = std::clamp(split.n_gpu_layers, 0, n_layer);
  double s = 0;
  uint64_t bytes = 0;
  int ops = 0, paced = 0, trips = 0;
  for (int l = 0; l < n_layer; ++l) {
    const LayerBytes& b = m.layers[static_cast<size_t>(l)];
    const uint64_t experts = static_cast<uint64_t>(m.n_expert) * b.expert;
    const uint64_t rest = b.attn + b.ffn_dense - experts;  // attention, norms, router
    const bool on_dev = l >= n_layer - n_dev, experts_dev = on_dev && l >= split.n_cpu_moe;
    s += static_cast<double>(rest + kv / 2) / (on_dev ? dev : host) +
         static_cast<double>(static_cast<uint64_t>(m.n_expert_used) * b.expert) /
             (experts_dev ? dev : host);
    if (on_dev) {
      bytes += rest + kv;
      ops += kAttnOps + kMoeRouterOps;
      paced += kPacedMoeRestOps;
    }
    if (experts_dev) {
      bytes += experts;
      ops += kMoeExpertOps + m.n_expert_used;
      paced += kPacedMoeExpertOps;
    } else if (on_dev) {  // the normed x to the host's experts and their sum back, then the add
      ++trips;
      ops += kTransferOps + 1;
      paced += kTransferOps;
    }
  }
  if (n_dev > 0 || split.output) {
    const double back = static_cast<double>(split.output ? m.n_vocab : m.n_embd) * 4;
    ops += kTransferOps + (split.output ? kOutputOps : 0);
    paced += kTransferOps + (split.output ? 1 : 0);
    s += ops * in.hw.op_us * kUs + paced * in.hw.paced_op_us * kUs +
         (1 + trips) * in.hw.sync_us * kUs +
         (static_cast<double>(m.n_embd) * 4 * (1 + 2 * trips) + back) / (in.hw.link_gbps * kGB);
    bytes += in.hw.dev_overhead_bytes + in.hw.dev_fixed_bytes;
  }
  s += static_cast<double>(m.output) / (split.output ? dev : host);
  if (split.output) bytes += m.output;
  if (device_bytes) *device_bytes = bytes;
  return s;
}

CpuMoeSplit cpu_moe_split_that_fits(const SimInput& in, const SimOptions& opt) {
  const ModelBytes& m = in.model;
  const uint64_t kv = m.kv_bytes_per_pos * static_cast<uint64_t>(opt.n_ctx);
  const int n_layer = m.n_layer();
  CpuMoeSplit sp;
  sp.n_cpu_moe = n_layer;
  if (!in.hw.has_device) return sp;
  if (opt.n_cpu_moe >= 0) return {n_layer, true, std::min(opt.n_cpu_moe, n_layer)};
  std::vector<uint64_t> rest(static_cast<size_t>(n_layer)), experts(rest.size());
  uint64_t used = in.hw.dev_overhead_bytes + in.hw.dev_fixed_bytes;
  for (int l = n_layer - 1; l >= 0; --l) {  // -ngl: trailing layers' non-expert tensors
    const LayerBytes& b = m.layers[static_cast<size_t>(l)];
    experts[static_cast<size_t>(l)] = static_cast<uint64_t>(m.n_expert) * b.expert;
    rest[static_cast<size_t>(l)] = b.attn + b.ffn_dense - experts[static_cast<size_t>(l)] + kv;
    if (used + rest[static_cast<size_t>(l)] > opt.budget_bytes) return sp;
    used += rest[static_cast<size_t>(l)];
    ++sp.n_gpu_layers;
  }
  if (used + m.output > opt.budget_bytes) return sp;
  sp.output = true;
  used += m.output;
  // --n-cpu-moe: the fewest leading layers whose experts stay on the host.
  for (int l = n_layer - 1; l >= 0 && used + experts[static_cast<size_t>(l)] <= opt.budget_bytes;
       --l) {
    used += experts[static_cast<size_t>(l)];
    sp.n_cpu_moe = l;
  }
  return sp;
}

}  // namespace hc::perfmodel
