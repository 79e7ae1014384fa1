// wilson_interval against the published 95% Wilson score bounds (0/10: upper 0.2775; 5/10:
// 0.2366-0.7634) and values computed independently from the formula.
#include "eval/binomial_interval.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace hc::eval {
namespace {

TEST(WilsonInterval, KnownBounds) {
  Interval i = wilson_interval(0, 10);
  EXPECT_EQ(i.lo, 0.0);
  EXPECT_NEAR(i.hi, 0.27754, 1e-5);
  i = wilson_interval(5, 10);
  EXPECT_NEAR(i.lo, 0.23659, 1e-5);
  EXPECT_NEAR(i.hi, 0.76341, 1e-5);
  i = wilson_interval(10, 164);  // a small model's HumanEval
  EXPECT_NEAR(i.lo, 0.033454, 1e-6);
  EXPECT_NEAR(i.hi, 0.108594, 1e-6);
  i = wilson_interval(1, 500);
  EXPECT_NEAR(i.lo, 0.000353, 1e-6);
  EXPECT_NEAR(i.hi, 0.011241, 1e-6);
  i = wilson_interval(164, 164);
  EXPECT_NEAR(i.lo, 0.977112, 1e-6);
  EXPECT_EQ(i.hi, 1.0);
}

TEST(WilsonInterval, ContainsTheRateAndNarrowsWithN) {
  for (int n : {1, 7, 164, 500}) {
    for (int k = 0; k <= n; k += std::max(1, n / 9)) {
      const Interval i = wilson_interval(k, n);
      EXPECT_LE(i.lo, double(k) / n);
      EXPECT_GE(i.hi, double(k) / n);
      EXPECT_GE(i.lo, 0.0);
      EXPECT_LE(i.hi, 1.0);
    }
  }
  // Four times the problems at the same rate: about half the width.
  const Interval a = wilson_interval(20, 100), b = wilson_interval(80, 400);
  EXPECT_NEAR((b.hi - b.lo) / (a.hi - a.lo), 0.5, 0.03);
  EXPECT_EQ(wilson_interval(0, 0).lo, 0.0);
  EXPECT_EQ(wilson_interval(0, 0).hi, 1.0);
}

}  // namespace
}  // namespace hc::eval
