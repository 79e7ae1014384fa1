// The uncertainty of a pass rate: HumanEval's 164 and MBPP's 500 problems are small samples, so
// a pass@1 is reported with its 95% Wilson score interval (issue 36: "report the binomial
// interval"). Wilson's interval stays inside [0, 1] and is sensible at 0 or n passes, where the
// normal approximation collapses to a point.
#pragma once

namespace hc::eval {

struct Interval {
  double lo = 0, hi = 0;
};

// The Wilson score interval of `passed` successes in `n` trials at z standard deviations
// (1.96: 95%); n = 0 gives [0, 1].
Interval wilson_interval(int passed, int n, double z = 1.96);

}  // namespace hc::eval
