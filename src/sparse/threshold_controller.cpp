// ThresholdController: the control law of threshold_controller.h.
#include "sparse/threshold_controller.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

namespace hc::sparse {

namespace {
// e is computed from max(q, q* * kFloor): q = 0 (nothing missed / nothing fired) is a finite,
// large error (ln 1e-3 = -6.9) rather than -inf.
constexpr double kFloor = 1e-3;
}  // namespace

Status ControllerParams::validate() const {
  auto bad = [](const std::string& what) { return Status::Error("controller params: " + what); };
  if (!(target_value > 0 && target_value < 1))
    return bad("target_value must be in (0, 1), found " + std::to_string(target_value));
  if (!(std::isfinite(gain) && gain >= 0)) return bad("gain must be finite and >= 0");
  if (!(std::isfinite(max_step) && max_step >= 0)) return bad("max_step must be finite and >= 0");
  if (!(std::isfinite(deadband) && deadband >= 0)) return bad("deadband must be finite and >= 0");
  if (!(smoothing > 0 && smoothing <= 1)) return bad("smoothing must be in (0, 1]");
  if (!(std::isfinite(t_min) && std::isfinite(t_max) && t_min <= t_max))
    return bad("t_min and t_max must be finite with t_min <= t_max, found " +
               std::to_string(t_min) + " and " + std::to_string(t_max));
  if (log_domain && !(t_min > 0))
    return bad("log_domain needs t_min > 0, found " + std::to_string(t_min));
  return Status::Ok();
}

ThresholdController::ThresholdController(std::vector<float> initial, const ControllerParams& p)
    : p_(p) {
  HC_CHECK(p.validate().ok());
  u_min_ = to_u(p_.t_min);
  u_max_ = to_u(p_.t_max);
  layers_.resize(initial.size());
  t_.resize(initial.size());
  for (size_t il = 0; il < initial.size(); ++il) reset(static_cast<int>(il), initial[il]);
}

double ThresholdController::to_u(float t) const {
  return p_.log_domain ? std::log(static_cast<double>(t)) : static_cast<double>(t);
}

float ThresholdController::to_t(double u) const {
  const float t = static_cast<float>(p_.log_domain ? std::exp(u) : u);
  return std::clamp(t, p_.t_min, p_.t_max);  // exp(ln t_min) may round just below t_min
}

void ThresholdController::reset(int il, float t) {
  HC_CHECK(il >= 0 && il < n_layer());
  if (std::isnan(t)) t = p_.t_min;
  t = std::clamp(t, p_.t_min, p_.t_max);
  Layer& l = layers_[static_cast<size_t>(il)];
  l = Layer();
  l.u = std::clamp(to_u(t), u_min_, u_max_);
  t_[static_cast<size_t>(il)] = to_t(l.u);
}

float ThresholdController::update(int il, double fired_mass, double total_mass, double n_fired,
                                  double n_seen) {
  HC_CHECK(il >= 0 && il < n_layer());
  Layer& l = layers_[static_cast<size_t>(il)];
  float& t = t_[static_cast<size_t>(il)];
  const bool recall = p_.target == ControllerParams::Target::kRecall;
  const double den = recall ? total_mass : n_seen;
  const double fired = recall ? fired_mass : n_fired;
  if (!(std::isfinite(den) && std::isfinite(fired) && den > 0)) return t;
  const double f = std::clamp(fired, 0.0, den);
  const double num = recall ? den - f : f;  // the small side: missed mass, or neurons fired

  if (!l.measured) {
    l.num = num;
    l.den = den;
    l.measured = true;
  } else {
    l.num += p_.smoothing * (num - l.num);
    l.den += p_.smoothing * (den - l.den);
  }
  // l.den > 0: a convex combination of positive numbers. q in [0, 1].
  const double q_star = 1.0 - p_.target_value;
  const double q = std::clamp(l.num / l.den, 0.0, 1.0);
  l.e = std::log(std::max(q, q_star * kFloor) / q_star);
  if (!(std::fabs(l.e) >= p_.deadband)) return t;

  const double sign = recall ? -1.0 : 1.0;
  const double step = std::clamp(p_.gain * l.e, -p_.max_step, p_.max_step);
  l.u = std::clamp(l.u + sign * step, u_min_, u_max_);
  t = to_t(l.u);
  return t;
}

float ThresholdController::threshold(int il) const {
  HC_CHECK(il >= 0 && il < n_layer());
  return t_[static_cast<size_t>(il)];
}

double ThresholdController::smoothed(int il) const {
  HC_CHECK(il >= 0 && il < n_layer());
  const Layer& l = layers_[static_cast<size_t>(il)];
  if (!l.measured) return std::numeric_limits<double>::quiet_NaN();
  return 1.0 - std::clamp(l.num / l.den, 0.0, 1.0);
}

double ThresholdController::error(int il) const {
  HC_CHECK(il >= 0 && il < n_layer());
  return layers_[static_cast<size_t>(il)].e;
}

}  // namespace hc::sparse
