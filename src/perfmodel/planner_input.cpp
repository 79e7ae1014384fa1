// The planner's input for the hot/cold modes (perfmodel/planner_input.h).
#include "perfmodel/planner_input.h"

#include <algorithm>
#include <cmath>

#include "perfmodel/detail.h"
#include "perfmodel/firing.h"

namespace hc::perfmodel {

using detail::kGB;
using sparse::LayerCosts;
using sparse::PlanInput;

// The planner's hardware figures and the parts of a PlanInput common to dense and MoE models.
Result<PlanInput> plan_input_base(const SimInput& in, const std::vector<std::vector<double>>& p) {
  const ModelBytes& m = in.model;
  if (p.size() != m.layers.size())
    return Status::Error("firing statistics: " + std::to_string(p.size()) + " layers, the model " +
                         std::to_string(m.layers.size()));
  PlanInput pin;
  pin.hw.host_gbps = in.hw.host_read_gbps() * in.eff.dense;
  // Without a device the hot/cold modes are not run; the planner still wants positive figures.
  pin.hw.dev_gbps = in.hw.has_device ? in.hw.dev_gbps() : 1;
  pin.hw.link_gbps = in.hw.has_device ? in.hw.link_gbps : 1;
  pin.hw.op_us = in.hw.op_us;
  pin.hw.sync_us = in.hw.sync_us;
  pin.hw.dev_overhead_bytes = in.hw.dev_overhead_bytes;
  pin.hw.dev_fixed_bytes = in.hw.dev_fixed_bytes;
  pin.n_embd = m.n_embd;
  pin.other_s = static_cast<double>(m.output) / (pin.hw.host_gbps * kGB);
  return pin;
}

Result<PlanInput> hybrid_plan_input(const SimInput& in, const std::vector<std::vector<double>>& p,
                                    const SimOptions& opt) {
  const ModelBytes& m = in.model;
  if (m.moe())
    return Status::Error("model '" + m.name +
                         "' has experts: its planner input is moe_plan_input's");
  HC_ASSIGN_OR_RETURN(PlanInput pin, plan_input_base(in, p));
  pin.device_reads_all_hot = !opt.predictor;
  const int64_t rank =
      opt.predictor_rank > 0 ? opt.predictor_rank : std::max<int64_t>(1, m.n_embd / 16);
  const double rel_gate_rows = in.eff.gate_rows();
  const uint64_t kv = m.kv_bytes_per_pos * static_cast<uint64_t>(opt.n_ctx);
  for (size_t l = 0; l < m.layers.size(); ++l) {
    const LayerBytes& b = m.layers[l];
    LayerCosts c;
    c.attn_bytes = b.attn;
    c.kv_bytes = kv;
    c.kv_read_bytes = kv / 2;  // a half-full context on average
    c.neuron_bytes = b.neuron();
    const double rel = in.eff.sparse_at(std::max(1e-6, mean_firing(p[l])));
    const double rows =
        static_cast<double>(b.up_row + b.down_t_row + (opt.predictor ? b.gate_row : 0));
    c.host_neuron_bytes = static_cast<uint64_t>(std::llround(rows / rel));
    c.host_cold_bytes = opt.predictor ? 0 : static_cast<uint64_t>(std::llround(
                                                static_cast<double>(b.gate_row) / rel_gate_rows));
    if (opt.predictor) c.predictor_bytes = 2 * static_cast<uint64_t>(rank * (m.n_embd + m.n_ff));
    c.predictor_follows_attn = opt.predictor;  // as DeviceModel places it (planner.h)
    c.fire_prob = p[l];
    pin.layers.push_back(std::move(c));
  }
  HC_TRY(pin.validate());
  return pin;
}

}  // namespace hc::perfmodel
