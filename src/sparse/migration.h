// Incremental migration of a layer's hot set: which device neurons to replace by which host
// neurons as the firing statistics (sparse/firing_counters.h) drift (docs/DYNAMIC.md).
//
// The hot set lives in fixed slots: slot_neuron[s] is the neuron whose rows occupy device slot s.
// The capacity (slot_neuron.size()) never changes, so device memory never grows; a swap rewrites
// one slot's rows in place. Hysteresis keeps a stationary stream from thrashing: an outsider
// replaces an insider only when clearly more frequent, so two neurons of nearly equal frequency
// do not trade places back and forth on noise.
#pragma once
#include <cstdint>
#include <vector>

#include "core/status.h"

namespace hc::sparse {

struct MigrationParams {
  double hysteresis = 0.25;  // an outsider replaces an insider only if
  double min_margin = 1.0;   //   count_out > (1 + hysteresis) * count_in + min_margin
  int max_swaps = 64;        // per plan_swaps call (per layer): incremental migration
};

struct Swap {
  int32_t slot;   // the device slot rewritten
  int32_t evict;  // the neuron it held (goes back to the host set)
  int32_t admit;  // the neuron it holds after the swap
};

// Swaps for one layer. Pairs the k-th most-counted outsider with the k-th least-counted insider
// (k = 0, 1, ...) while the hysteresis rule holds and k < max_swaps; the list is most beneficial
// first and stops at the first pair that fails the rule (later pairs would fail too). Ranking
// is the planner's: count descending, ties by lower neuron index first; so among insiders of
// equal count the higher index is evicted first, among outsiders of equal count the lower index
// is admitted first. A NaN count ranks below everything. Deterministic.
// counts: [n_ff]. slot_neuron must hold unique neurons in [0, n_ff) (HC_CHECK: a bug otherwise).
// O(n_ff + max_swaps log n_ff).
std::vector<Swap> plan_swaps(const std::vector<int32_t>& slot_neuron, const double* counts,
                             int64_t n_ff, const MigrationParams& p);

// The one check of a swap sequence (apply_swaps and DeviceModel::migrate both run it): applies
// swaps in order to slot_of ([n_ff] neuron -> its slot, -1 when not held) of a layer with
// `capacity` slots. Errors name the swap: its slot out of range, a neuron outside [0, n_ff),
// its evict not the neuron in that slot at that point of the sequence, its admit already held.
// On an error slot_of is partly updated: callers run it on a copy.
Status apply_swaps_to_map(std::vector<int32_t>& slot_of, int64_t capacity,
                          const std::vector<Swap>& swaps);

// Applies swaps to slot_neuron in order, all or nothing: errors (leaving slot_neuron untouched)
// when slot_neuron holds a neuron twice or a negative one, a swap's slot is out of range, its
// evict is not the neuron in that slot (at that point of the sequence), or its admit is negative,
// >= n_ff (when n_ff >= 0 is given) or already held.
Status apply_swaps(std::vector<int32_t>* slot_neuron, const std::vector<Swap>& swaps);
Status apply_swaps(std::vector<int32_t>* slot_neuron, const std::vector<Swap>& swaps,
                   int64_t n_ff);

}  // namespace hc::sparse
