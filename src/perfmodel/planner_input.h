// The placement planner's input (sparse/planner.h) built from a projection's input: the bridge
// between the performance model and the planner's cost model, which the hot/cold modes share
// with the engine's own planning.
#pragma once
#include <vector>

#include "core/status.h"
#include "perfmodel/sim_input.h"
#include "sparse/planner.h"

namespace hc::perfmodel {

// The planner's hardware figures and the parts of a PlanInput common to dense and MoE models
// (no layers yet). Errors when p has not one curve per layer.
Result<sparse::PlanInput> plan_input_base(const SimInput& in,
                                          const std::vector<std::vector<double>>& p);
// The planner's input for the hybrid modes: per layer the attention, KV and neuron bytes, and
// the host's bytes in "dense-equivalent" units: host_gbps is the achieved dense rate
// (host read x eff.dense) and a sparse-row byte costs 1 / eff.sparse_at(share) of them (share:
// the layer's mean firing share for up / down rows, 1 for the cold gate rows read in order).
Result<sparse::PlanInput> hybrid_plan_input(const SimInput& in,
                                            const std::vector<std::vector<double>>& p,
                                            const SimOptions& opt);

}  // namespace hc::perfmodel
