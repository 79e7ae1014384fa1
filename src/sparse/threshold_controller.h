// Per-layer sparsity thresholds steered online toward a target recall or sparsity
// (docs/DYNAMIC.md has the law, its stability argument and the defaults' reasons).
//
// The law, per layer, on every valid measurement (num, den) — recall: num = total - fired mass,
// den = total mass; sparsity: num = neurons fired, den = neurons seen:
//   N <- N + a * (num - N),  D <- D + a * (den - D)     (a = smoothing; the first measurement
//                                                         sets N, D)
//   q = N / D   the smoothed "small side": missed mass share (recall = 1 - q) or fired share
//               (sparsity = 1 - q);  q* = 1 - target_value
//   e = ln(max(q, q* / 1000) / q*)                       (relative error, scale free)
//   if |e| >= deadband:  u <- clamp(u + s * clamp(gain * e, -max_step, max_step), u_min, u_max)
//   u = ln t (log_domain) or t; s = -1 for recall (q rises with t), +1 for sparsity (q falls
//   with t); [u_min, u_max] = the image of [t_min, t_max].
// An integral controller on a smoothed, log-scaled error: its fixed point is q = q* (to within
// the deadband), u never leaves [u_min, u_max] (bounded by construction: no windup), one update
// moves u by at most max_step, and a measurement that is not finite or has den <= 0 changes
// nothing. Raising t lowers recall and raises sparsity for any activation distribution, so the
// sign s is right without knowing the distribution; the gain only sets the speed.
#pragma once
#include <cstdint>
#include <vector>

#include "core/status.h"

namespace hc::sparse {

struct ControllerParams {
  // What the controller holds: kRecall = share of activation mass (sum |a| of fired / sum |a| of
  // all) at target_value; kSparsity = share of neurons NOT fired at target_value. Both are the
  // smoothed (mass- or count-weighted) value over the recent tokens; individual tokens scatter
  // around it, so hold a recall floor by setting the target a little above it.
  enum class Target { kRecall, kSparsity };
  Target target = Target::kRecall;
  double target_value = 0.99;  // in (0, 1)
  bool log_domain = true;      // magnitude thresholds (>0): control ln t; predictor logits: linear
  // Step of u per unit of e (ln t per unit of relative error). With S = |d ln q / d ln t| (0.5..3
  // for the activation distributions we see; 2.6 for lognormal(0, 1) at recall 0.99) the
  // linearised loop has poles z^2 - (2 - a - a gain S) z + (1 - a) = 0 (a = smoothing): stable
  // for gain S < 2 (2 - a) / a, critically damped at gain S = (1 - sqrt(1 - a))^2 / a = 0.056
  // (S = 2.8), and overdamped below with time constant ~1 / (gain S) tokens: 50 at S = 1, 100 at
  // S = 0.5. The steady-state jitter of u on a noisy stream grows like sqrt(gain).
  double gain = 0.02;
  // Bound on one update's |change| of u (ln units: 5% per token, so 100x off takes ~92 tokens).
  // max_step / smoothing (slew rate x filter lag) bounds the overshoot of a large transient.
  double max_step = 0.05;
  double deadband = 0.02;  // |e| below this (q within 2% of q*: recall 0.99 +- 0.0002): no change
  // EMA weight of the new measurement (0..1]: a ~5-token window. Short, because the filter's lag
  // is what makes a slewing integrator overshoot; the integrator (gain) does the averaging of
  // noise, whose steady-state jitter depends on gain, hardly on smoothing.
  double smoothing = 0.2;
  float t_min = 1e-6f, t_max = 1e6f;  // clamp (linear units; in log_domain both must be > 0)

  // Ok when every figure is finite and in range (target in (0, 1), gain, max_step, deadband >= 0,
  // smoothing in (0, 1], t_min <= t_max, t_min > 0 in log domain).
  Status validate() const;
};

// Per-layer thresholds steered online toward the target (the law above).
class ThresholdController {
 public:
  ThresholdController() = default;
  // One layer per initial threshold; initial values are clamped to [t_min, t_max] (NaN becomes
  // t_min). Invalid params are a programming bug (HC_CHECK on validate()).
  ThresholdController(std::vector<float> initial, const ControllerParams& p);

  // One measurement of layer il (over one or more tokens): mass of the fired activations, mass of
  // all activations, neurons fired and neurons seen. Returns the layer's new threshold.
  // kRecall reads the masses, kSparsity the counts; a measurement whose relevant figures are not
  // finite or whose total is <= 0 is ignored. fired is clamped to [0, total].
  float update(int il, double fired_mass, double total_mass, double n_fired, double n_seen);
  float threshold(int il) const;
  const std::vector<float>& thresholds() const { return t_; }
  // The EMA of the controlled quantity (recall or sparsity, 1 - q); NaN before any measurement.
  double smoothed(int il) const;
  // The current error e of layer il (0 before any measurement).
  double error(int il) const;
  int n_layer() const { return static_cast<int>(t_.size()); }
  const ControllerParams& params() const { return p_; }
  // Sets layer il's threshold (clamped) and forgets its measurements (e.g. a new plan).
  void reset(int il, float t);

 private:
  struct Layer {
    double u = 0;      // ln t or t
    double num = 0;    // EMA of the small side's numerator
    double den = 0;    // EMA of the denominator
    bool measured = false;
    double e = 0;
  };
  double to_u(float t) const;
  float to_t(double u) const;

  ControllerParams p_;
  double u_min_ = 0, u_max_ = 0;
  std::vector<Layer> layers_;
  std::vector<float> t_;
};

}  // namespace hc::sparse
