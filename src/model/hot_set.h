// A layer's hot set, and how much two of them overlap: the power-law report of `hotcold profile
// --compare` (issue 36: "the hot-set overlap between two corpora (Jaccard)").
//
// The hot set of a layer is the fewest neurons, most frequent first (ties: the lower index), whose
// firings cover `mass` of all the layer's firings: the k of ActStats::neurons_covering, as neuron
// indices. Two profiles of one model on two corpora agree on their hot neurons to the extent their
// sets overlap: Jaccard |A n B| / |A u B| (1 for two empty sets).
#pragma once

#include <cstdint>
#include <vector>

namespace hc {

// Indices of the hot set of one layer's firing counts, ascending; empty when nothing fired.
std::vector<int32_t> hot_set(const std::vector<float>& fire_count, double mass);

// |a n b| / |a u b| of two ascending index sets.
double jaccard(const std::vector<int32_t>& a, const std::vector<int32_t>& b);

}  // namespace hc
