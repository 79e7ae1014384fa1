// Projection of decode tokens/s for large models on named hardware (docs/SIMULATE.md): a pure
// performance model, no engine. It reuses the placement planner's cost model (sparse/planner.h:
// PlanInput, predict_plan, plan_greedy / plan_best) for the hot/cold modes and adds what that
// model lacks: whole-layer dense offload (llama.cpp's -ngl), the output matrix on the device,
// the host's dense gate in layers without device neurons, the migration of neurons over the
// link when the serving distribution drifts from the profile, and the efficiencies (achieved
// over peak bandwidth) that turn catalog figures into achieved ones.
//
// Inputs:
//   ModelBytes    byte sizes of every layer as the engine stores them: from a shape of the
//                 catalog (llama2-7b/13b/70b, llama-33b; MoE: qwen3-30b-a3b, mixtral-8x7b,
//                 turbosparse-mixtral) and a weight type, or from a real dense GGUF (the app
//                 fills it from the loaded model).
//   HardwareSpec  host peak bandwidth x read fraction, device memory / bandwidth x efficiency,
//                 link, per-operation and round-trip costs (catalog: rtx4090, a100-80g,
//                 a100-40g; "host" = this machine and its CPU device, from a calibration).
//   HostEfficiency  the engine's dense decode GB/s over the read probe, and its sparse-row
//                 kernels' GB/s over the dense decode's, by firing share (measured here).
//   firing        per layer p_i = P(neuron i fires) on the profiling distribution: a power law
//                 fitted to published statistics, or a measured statistics file resampled to
//                 the target n_ff by rank quantile. MoE: p_e = the share of tokens routed to
//                 expert e (expert_routing_probs, routing_from_counts).
//
// MoE shapes (ModelShape::n_expert > 0: Qwen3-30B-A3B, Mixtral-8x7B, TurboSparse-Mixtral) place
// whole experts: the planner's unit is an expert (moe_plan_input), its "firing probability" the
// share of tokens the router sends to it (the profile is [n_layer][n_expert], summing to
// n_expert_used per layer). Their modes: dense-cpu, sparse-cpu (experts with sparse neurons
// only), dense-offload, llamacpp-cpu-moe (llama.cpp's -ngl 99 --n-cpu-moe N: everything but the
// experts on the device, the experts of the first N layers on the host), hot-experts (static
// placement of the most routed experts) and dynamic (as below, moving whole experts).
//
// Modes (ModeResult::mode):
//   dense-cpu      every weight read on the host
//   sparse-cpu     the activation-sparse FFN on the host only (the planner's empty plan)
//   dense-offload  the last N whole layers (weights + KV) on the device, N as many as fit or
//                  given; host and device run one after the other; the output matrix too when
//                  every layer and it fit
//   static         hot/cold placement planned on the profiling distribution, run on the serving
//                  one (the profile with a share `drift` of its neurons' ranks permuted)
//   dynamic        placement planned on the serving distribution, or the static plan's per-layer
//                  capacities refilled with the serving top-k when that is faster (so it is
//                  never slower than static before migration), plus the migration term: bytes
//                  newly placed on the device / drift_period_tokens over the link, per token
// The planner charges a hybrid layer's cold gate rows at the row kernels' rate (as the executor
// reads them); a layer without device neurons runs its gate dense. Layers where the hybrid FFN
// comes out slower than the host alone are taken out of the plan and the planner re-run.
#pragma once
#include "core/status.h"
#include "perfmodel/dense_offload.h"
#include "perfmodel/firing.h"
#include "perfmodel/hardware.h"
#include "perfmodel/model_bytes.h"
#include "perfmodel/model_shape.h"
#include "perfmodel/moe_costs.h"
#include "perfmodel/planner_input.h"
#include "perfmodel/sim_input.h"

namespace hc::perfmodel {

// Every mode; each result's figures as documented above.
Result<SimResult> simulate(const SimInput& in, const SimOptions& opt);

}  // namespace hc::perfmodel
