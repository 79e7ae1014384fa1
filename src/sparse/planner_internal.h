// Shared by the greedy and ILP planners (not part of the public API): each layer's cost model
// reduced to prefix sums over its granules in frequency order, so a layer's FFN time for any
// number of hot granules is O(1).
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/status.h"
#include "sparse/planner.h"

namespace hc::sparse::detail {

struct LayerModel {
  std::vector<int32_t> order;    // [n_ff] neurons by frequency (neurons_by_frequency)
  // [n_gran + 1] over the first g granules (index g): neurons, device seconds (hot reads),
  // host seconds saved, firing mass.
  std::vector<int64_t> n_hot;
  std::vector<double> dev_s;
  std::vector<double> host_saved_s;
  std::vector<double> mass;
  double host_all_s = 0;   // host part with every neuron cold
  // Host seconds the predictor leaves the host part when it follows the attention to the
  // device (LayerCosts::predictor_follows_attn; 0 otherwise). Its device time and bytes are
  // in attn_saved_s and attn_bytes.
  double pred_host_s = 0;
  double dev_const_s = 0;  // predictor read on the device
  double ops_s = 0;        // FFN device ops, paid when the device is used
  double trip_s = 0;       // round trip + copy of x and y
  double shared_trip_s = 0;  // trip_s when attention and hot neurons share it (shares_trip)
  bool pred_on_device = false;
  std::vector<uint64_t> ffn_store;  // [n_gran + 1] device bytes of the first g granules
  double attn_host_s = 0;    // attention on the host
  double attn_saved_s = 0;   // attention host time - device time (may be negative)
  bool attn_placeable = true;
  uint64_t attn_bytes = 0;   // attention weights + KV cache, as charged on the device

  int n_gran() const { return static_cast<int>(n_hot.size()) - 1; }
  uint64_t ffn_bytes(int g) const { return ffn_store[static_cast<size_t>(g)]; }
  // The layer's FFN time with the first g granules on the device (and the attention there or
  // not: a predictor that follows it leaves the host part).
  double ffn_s(int g, bool attn = false) const {
    const double host_s = host_all_s - (attn ? pred_host_s : 0.0);
    if (g == 0 && !pred_on_device) return host_s;
    const double host = std::max(0.0, host_s - host_saved_s[g]);
    return std::max(dev_s[g] + ops_s + dev_const_s, host) + trip_s;
  }
  bool uses(int g) const { return g > 0 || pred_on_device; }
  // The layer's time (attention + FFN) with g granules and attention on the device or not: one
  // trip saved when both use the device and share it.
  double layer_s(int g, bool attn) const {
    return (attn ? attn_host_s - attn_saved_s : attn_host_s) + ffn_s(g, attn) -
           (attn && uses(g) ? shared_trip_s : 0.0);
  }
};

std::vector<LayerModel> build_models(const PlanInput& in, int granule);

// Bytes charged as soon as anything is on the device: overhead, scratch, device predictors.
uint64_t base_bytes(const PlanInput& in);
// True when some layer's predictor must be on the device.
bool predictors_on_device(const PlanInput& in);

// Per layer: hot granules and attention placement -> the plan (top-k hot sets, ascending).
PlacementPlan plan_from_decisions(const PlanInput& in, const std::vector<LayerModel>& models,
                                  const std::vector<int>& gran, const std::vector<bool>& attn);

// Bytes of the decisions beyond base_bytes.
uint64_t decision_bytes(const std::vector<LayerModel>& models, const std::vector<int>& gran,
                        const std::vector<bool>& attn);

// The greedy planner's decisions within `room` bytes (none when room < 0).
void greedy_decisions(const std::vector<LayerModel>& models, int64_t room, std::vector<int>& gran,
                      std::vector<bool>& attn);

// Fills plan metadata and the prediction.
Result<PlanResult> finish(const PlanInput& in, const PlannerOptions& opt, PlacementPlan plan,
                          const char* solver);

// Checks input and options; the bytes available for decisions (budget - base_bytes), or -1
// when the budget cannot even hold the base (nothing can be placed). Errors when predictors
// must be on the device and do not fit.
Result<int64_t> available_bytes(const PlanInput& in, const PlannerOptions& opt);

}  // namespace hc::sparse::detail
