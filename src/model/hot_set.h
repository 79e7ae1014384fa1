// A layer's hot set, and how much two of them overlap: the power-law report of `hotcold profile`
// (its topN% columns are hot-set sizes; `--compare`: "the hot-set overlap between two corpora
// (Jaccard)", issue 36).
//
// The hot set of a layer is the fewest neurons, most frequent first (ties: the lower index), whose
// firings cover `mass` of all the layer's firings (ActStats::neurons_covering is its size over
// n_ff). Two profiles of one model on two corpora agree on their hot neurons to the extent their
// sets overlap: Jaccard |A n B| / |A u B| (1 for two empty sets).
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

namespace hc {

// Indices of the hot set of one layer's counts (firings per neuron, or routings per expert),
// ascending; empty when nothing was counted or mass <= 0.
template <class Count>
std::vector<int32_t> hot_set(const std::vector<Count>& counts, double mass) {
  std::vector<int32_t> order(counts.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return counts[static_cast<size_t>(a)] > counts[static_cast<size_t>(b)];
  });
  double total = 0;
  for (Count c : counts) total += static_cast<double>(c);
  std::vector<int32_t> out;
  if (total <= 0 || mass <= 0) return out;
  const double need = std::min(mass, 1.0) * total;
  double cum = 0;
  for (int32_t i : order) {
    out.push_back(i);
    cum += static_cast<double>(counts[static_cast<size_t>(i)]);
    if (cum >= need) break;
  }
  std::sort(out.begin(), out.end());
  return out;
}

// |a n b| / |a u b| of two ascending index sets.
double jaccard(const std::vector<int32_t>& a, const std::vector<int32_t>& b);

}  // namespace hc
