#include "model/hot_set.h"

#include <algorithm>
#include <numeric>

namespace hc {

std::vector<int32_t> hot_set(const std::vector<float>& fire_count, double mass) {
  const auto n = static_cast<int32_t>(fire_count.size());
  std::vector<int32_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return fire_count[static_cast<size_t>(a)] > fire_count[static_cast<size_t>(b)];
  });
  double total = 0;
  for (float c : fire_count) total += c;
  std::vector<int32_t> out;
  if (total <= 0 || mass <= 0) return out;
  const double need = std::min(mass, 1.0) * total;
  double cum = 0;
  for (int32_t i : order) {
    out.push_back(i);
    cum += fire_count[static_cast<size_t>(i)];
    if (cum >= need) break;
  }
  std::sort(out.begin(), out.end());
  return out;
}

double jaccard(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t i = 0, j = 0, both = 0;
  while (i < a.size() && j < b.size()) {
    if (a[i] == b[j]) {
      ++both, ++i, ++j;
    } else if (a[i] < b[j]) {
      ++i;
    } else {
      ++j;
    }
  }
  const size_t any = a.size() + b.size() - both;
  return any == 0 ? 1.0 : static_cast<double>(both) / static_cast<double>(any);
}

}  // namespace hc
