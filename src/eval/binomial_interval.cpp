#include "eval/binomial_interval.h"

#include <algorithm>
#include <cmath>

#include "core/status.h"

namespace hc::eval {

Interval wilson_interval(int passed, int n, double z) {
  HC_CHECK(n >= 0 && passed >= 0 && passed <= n && z > 0);
  if (n == 0) return {0.0, 1.0};
  const double nn = n, p = passed / nn, z2 = z * z;
  const double centre = (p + z2 / (2 * nn)) / (1 + z2 / nn);
  const double half = z / (1 + z2 / nn) * std::sqrt(p * (1 - p) / nn + z2 / (4 * nn * nn));
  // At 0 and n passes the bound is exactly 0 / 1; the formula gives it up to rounding.
  return {passed == 0 ? 0.0 : std::max(0.0, centre - half),
          passed == n ? 1.0 : std::min(1.0, centre + half)};
}

}  // namespace hc::eval
