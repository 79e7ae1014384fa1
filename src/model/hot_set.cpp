#include "model/hot_set.h"

namespace hc {

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
