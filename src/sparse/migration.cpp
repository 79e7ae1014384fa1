// plan_swaps / apply_swaps (migration.h).
#include "sparse/migration.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

namespace hc::sparse {

std::vector<Swap> plan_swaps(const std::vector<int32_t>& slot_neuron, const double* counts,
                             int64_t n_ff, const MigrationParams& p) {
  const int64_t cap = static_cast<int64_t>(slot_neuron.size());
  HC_CHECK(n_ff >= 0 && n_ff <= INT32_MAX && cap <= n_ff);
  if (p.max_swaps <= 0 || cap == 0 || cap == n_ff) return {};
  HC_CHECK(counts != nullptr);

  std::vector<int32_t> slot_of(static_cast<size_t>(n_ff), -1);
  for (int64_t s = 0; s < cap; ++s) {
    const int32_t n = slot_neuron[static_cast<size_t>(s)];
    HC_CHECK(n >= 0 && n < n_ff);
    HC_CHECK(slot_of[static_cast<size_t>(n)] < 0);  // unique
    slot_of[static_cast<size_t>(n)] = static_cast<int32_t>(s);
  }
  auto key = [&](int32_t n) {
    const double c = counts[n];
    return std::isnan(c) ? -std::numeric_limits<double>::infinity() : c;
  };
  // The planner's rank: count descending, then lower index first.
  auto ranks_before = [&](int32_t a, int32_t b) {
    const double ka = key(a), kb = key(b);
    if (ka != kb) return ka > kb;
    return a < b;
  };

  std::vector<int32_t> out;
  out.reserve(static_cast<size_t>(n_ff - cap));
  for (int64_t n = 0; n < n_ff; ++n)
    if (slot_of[static_cast<size_t>(n)] < 0) out.push_back(static_cast<int32_t>(n));
  std::vector<int32_t> in(slot_neuron);
  const size_t k = std::min({static_cast<size_t>(p.max_swaps), out.size(), in.size()});
  std::partial_sort(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(k), out.end(),
                    ranks_before);
  std::partial_sort(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(k), in.end(),
                    [&](int32_t a, int32_t b) { return ranks_before(b, a); });

  std::vector<Swap> swaps;
  for (size_t j = 0; j < k; ++j) {
    const double c_out = key(out[j]), c_in = key(in[j]);
    // Outsiders only get worse and insiders only better along j: the first failure ends it.
    if (!(c_out > (1.0 + p.hysteresis) * c_in + p.min_margin)) break;
    swaps.push_back(Swap{slot_of[static_cast<size_t>(in[j])], in[j], out[j]});
  }
  return swaps;
}

Status apply_swaps_to_map(std::vector<int32_t>& slot_of, int64_t capacity,
                          const std::vector<Swap>& swaps) {
  const auto n_ff = static_cast<int64_t>(slot_of.size());
  for (size_t k = 0; k < swaps.size(); ++k) {
    const Swap& w = swaps[k];
    // Built only on an error: this runs for every swap of every migration round.
    auto fail = [&](const std::string& what) {
      return Status::Error("swap " + std::to_string(k) + " (slot " + std::to_string(w.slot) +
                           ", evict " + std::to_string(w.evict) + ", admit " +
                           std::to_string(w.admit) + "): " + what);
    };
    if (w.slot < 0 || w.slot >= capacity)
      return fail("slot out of range (" + std::to_string(capacity) + " slots)");
    if (w.evict < 0 || w.evict >= n_ff || w.admit < 0 || w.admit >= n_ff)
      return fail("neuron out of range [0, " + std::to_string(n_ff) + ")");
    if (slot_of[static_cast<size_t>(w.evict)] != w.slot)
      return fail("expected neuron " + std::to_string(w.evict) + " there");
    if (slot_of[static_cast<size_t>(w.admit)] >= 0)
      return fail("neuron " + std::to_string(w.admit) + " is already on the device");
    slot_of[static_cast<size_t>(w.evict)] = -1;
    slot_of[static_cast<size_t>(w.admit)] = w.slot;
  }
  return Status::Ok();
}

Status apply_swaps(std::vector<int32_t>* slot_neuron, const std::vector<Swap>& swaps,
                   int64_t n_ff) {
  if (slot_neuron == nullptr) return Status::Error("apply_swaps: no slot table");
  // Without n_ff, the map reaches the largest neuron named (no upper bound to check).
  int64_t bound = n_ff;
  if (bound < 0) {
    bound = 0;
    for (int32_t n : *slot_neuron) bound = std::max<int64_t>(bound, int64_t{n} + 1);
    for (const Swap& w : swaps) bound = std::max<int64_t>(bound, int64_t{w.admit} + 1);
  }
  std::vector<int32_t> slot_of(static_cast<size_t>(bound), -1);
  for (size_t s = 0; s < slot_neuron->size(); ++s) {
    const int32_t n = (*slot_neuron)[s];
    if (n < 0 || n >= bound)
      return Status::Error("apply_swaps: slot table holds neuron " + std::to_string(n) +
                           ", expected [0, " + std::to_string(bound) + ")");
    if (slot_of[static_cast<size_t>(n)] >= 0)
      return Status::Error("apply_swaps: slot table holds neuron " + std::to_string(n) + " twice");
    slot_of[static_cast<size_t>(n)] = static_cast<int32_t>(s);
  }
  HC_TRY(apply_swaps_to_map(slot_of, static_cast<int64_t>(slot_neuron->size()), swaps)
             .with_context("apply_swaps"));
  for (const Swap& w : swaps) (*slot_neuron)[static_cast<size_t>(w.slot)] = w.admit;
  return Status::Ok();
}

Status apply_swaps(std::vector<int32_t>* slot_neuron, const std::vector<Swap>& swaps) {
  return apply_swaps(slot_neuron, swaps, -1);
}

}  // namespace hc::sparse
