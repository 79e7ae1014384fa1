// plan_swaps / apply_swaps (migration.h).
#include "sparse/migration.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <unordered_set>

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

Status apply_swaps(std::vector<int32_t>* slot_neuron, const std::vector<Swap>& swaps,
                   int64_t n_ff) {
  if (slot_neuron == nullptr) return Status::Error("apply_swaps: no slot table");
  std::vector<int32_t> next = *slot_neuron;
  std::unordered_set<int32_t> held;
  held.reserve(next.size() * 2);
  for (int32_t n : next) {
    if (n < 0) return Status::Error("apply_swaps: slot table holds negative neuron " +
                                    std::to_string(n));
    if (!held.insert(n).second)
      return Status::Error("apply_swaps: slot table holds neuron " + std::to_string(n) + " twice");
  }
  for (size_t k = 0; k < swaps.size(); ++k) {
    const Swap& sw = swaps[k];
    const std::string where = "apply_swaps: swap " + std::to_string(k) + " (slot " +
                              std::to_string(sw.slot) + ", evict " + std::to_string(sw.evict) +
                              ", admit " + std::to_string(sw.admit) + "): ";
    if (sw.slot < 0 || static_cast<size_t>(sw.slot) >= next.size())
      return Status::Error(where + "slot out of range (capacity " + std::to_string(next.size()) +
                           ")");
    if (next[static_cast<size_t>(sw.slot)] != sw.evict)
      return Status::Error(where + "the slot holds neuron " +
                           std::to_string(next[static_cast<size_t>(sw.slot)]));
    if (sw.admit < 0 || (n_ff >= 0 && sw.admit >= n_ff))
      return Status::Error(where + "admitted neuron out of range");
    if (held.count(sw.admit)) return Status::Error(where + "admitted neuron is already held");
    held.erase(sw.evict);
    held.insert(sw.admit);
    next[static_cast<size_t>(sw.slot)] = sw.admit;
  }
  *slot_neuron = std::move(next);
  return Status::Ok();
}

Status apply_swaps(std::vector<int32_t>* slot_neuron, const std::vector<Swap>& swaps) {
  return apply_swaps(slot_neuron, swaps, -1);
}

}  // namespace hc::sparse
