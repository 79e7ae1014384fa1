// FiringCounters: decayed counts stored scaled by a growing per-layer factor (firing_counters.h).
#include "sparse/firing_counters.h"

#include <algorithm>
#include <cmath>

#include "core/status.h"

namespace hc::sparse {

namespace {
// Renormalisation point of the scale factor: 2^64 leaves > 2^900 of headroom below DBL_MAX for
// scaled counts (which are at most g / (1 - d)) whatever the half-life.
constexpr double kRenormScale = 18446744073709551616.0;  // 2^64
}  // namespace

FiringCounters::FiringCounters(int n_layer, int64_t n_ff, double half_life_tokens)
    : n_ff_(n_ff), half_life_(half_life_tokens) {
  HC_CHECK(n_layer >= 0);
  HC_CHECK(n_ff >= 0 && n_ff <= INT32_MAX);
  HC_CHECK(half_life_tokens > 0);  // NaN fails too
  decay_ = std::isinf(half_life_tokens) ? 1.0 : std::exp2(-1.0 / half_life_tokens);
  layers_.resize(static_cast<size_t>(n_layer));
  for (Layer& l : layers_) l.scaled.assign(static_cast<size_t>(n_ff), 0.0);
}

FiringCounters::Layer& FiringCounters::layer(int il) {
  HC_CHECK(il >= 0 && il < n_layer());
  return layers_[static_cast<size_t>(il)];
}

const FiringCounters::Layer& FiringCounters::layer(int il) const {
  HC_CHECK(il >= 0 && il < n_layer());
  return layers_[static_cast<size_t>(il)];
}

double FiringCounters::advance(Layer& l) {
  // Dividing g by d is the same as multiplying every (unscaled) count by d.
  l.scale /= decay_;
  if (l.scale > kRenormScale) {
    const double inv = 1.0 / l.scale;
    for (double& s : l.scaled) s *= inv;
    l.scaled_tokens *= inv;
    l.scale = 1;
    ++l.renorms;
  }
  ++l.raw;
  l.scaled_tokens += l.scale;
  return l.scale;
}

void FiringCounters::add_token(int il, const int32_t* fired, int64_t n_fired) {
  Layer& l = layer(il);
  HC_CHECK(n_fired >= 0 && n_fired <= n_ff_);
  HC_CHECK(n_fired == 0 || fired != nullptr);
  const double g = advance(l);
  for (int64_t k = 0; k < n_fired; ++k) {
    const int32_t i = fired[k];
    HC_CHECK(i >= 0 && i < n_ff_);
    l.scaled[static_cast<size_t>(i)] += g;
  }
}

void FiringCounters::add_token_mask(int il, const uint8_t* fire) {
  Layer& l = layer(il);
  HC_CHECK(n_ff_ == 0 || fire != nullptr);
  const double g = advance(l);
  for (int64_t i = 0; i < n_ff_; ++i)
    if (fire[i]) l.scaled[static_cast<size_t>(i)] += g;
}

double FiringCounters::count(int il, int64_t i) const {
  const Layer& l = layer(il);
  HC_CHECK(i >= 0 && i < n_ff_);
  return l.scaled[static_cast<size_t>(i)] / l.scale;
}

double FiringCounters::tokens(int il) const {
  const Layer& l = layer(il);
  return l.scaled_tokens / l.scale;
}

uint64_t FiringCounters::raw_tokens(int il) const { return layer(il).raw; }

void FiringCounters::probabilities(int il, std::vector<double>* p) const {
  const Layer& l = layer(il);
  p->assign(static_cast<size_t>(n_ff_), 0.0);
  if (l.raw == 0 || !(l.scaled_tokens > 0)) return;
  // Both scaled by the same g: the ratio needs no unscaling.
  for (size_t i = 0; i < l.scaled.size(); ++i)
    (*p)[i] = std::clamp(l.scaled[i] / l.scaled_tokens, 0.0, 1.0);
}

void FiringCounters::counts(int il, std::vector<double>* c) const {
  const Layer& l = layer(il);
  c->resize(static_cast<size_t>(n_ff_));
  for (size_t i = 0; i < l.scaled.size(); ++i) (*c)[i] = l.scaled[i] / l.scale;
}

void FiringCounters::seed(int il, const std::vector<double>& p, double tokens) {
  Layer& l = layer(il);
  HC_CHECK(static_cast<int64_t>(p.size()) == n_ff_);
  HC_CHECK(tokens >= 0);
  for (size_t i = 0; i < p.size(); ++i) l.scaled[i] = std::clamp(p[i], 0.0, 1.0) * tokens * l.scale;
  l.scaled_tokens = tokens * l.scale;
}

void FiringCounters::reset(int il) {
  Layer& l = layer(il);
  std::fill(l.scaled.begin(), l.scaled.end(), 0.0);
  l.scale = 1;
  l.scaled_tokens = 0;
  l.raw = 0;
}

uint64_t FiringCounters::renormalisations(int il) const { return layer(il).renorms; }

}  // namespace hc::sparse
