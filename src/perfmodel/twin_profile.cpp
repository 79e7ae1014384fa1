// The statistical twins' firing profiles (perfmodel/twin_profile.h).
#include "perfmodel/twin_profile.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "perfmodel/firing.h"

namespace hc::perfmodel {

const TwinSpec* find_twin(const std::string& name) {
  for (const TwinSpec& t : kTwins)
    if (name == t.name) return &t;
  return nullptr;
}

std::string twin_names() {
  std::string s;
  for (const TwinSpec& t : kTwins) s += (s.empty() ? "" : ", ") + std::string(t.name);
  return s;
}

double twin_top80(const TwinSpec& t, int il, int n_layer) {
  const double x = n_layer > 1 ? 2.0 * il / (n_layer - 1) - 1.0 : 0.0;  // -1 .. 1 over depth
  return t.top80_mid + (t.top80_ends - t.top80_mid) * x * x;
}

std::vector<double> twin_curve(int64_t n, double firing, double top80) {
  constexpr double kMaxP = 0.995;
  std::vector<double> p(static_cast<size_t>(n)), shape(p.size());
  double shape_g = -1;  // the exponent `shape` holds (1 - u)^g for
  const auto fill = [&](double a, double g) {
    if (g != shape_g) {  // the scale's bisection keeps g: the powers once per g
      for (int64_t k = 0; k < n; ++k) {
        const double u = (static_cast<double>(k) + 0.5) / static_cast<double>(n);
        shape[static_cast<size_t>(k)] = std::pow(1.0 - u, g);
      }
      shape_g = g;
    }
    for (size_t k = 0; k < p.size(); ++k) p[k] = std::min(kMaxP, a * shape[k]);
  };
  const auto mean = [&] {
    return std::accumulate(p.begin(), p.end(), 0.0) / static_cast<double>(n);
  };
  // For a shape g, the scale a giving the mean (bisection on log a; the mean grows with a).
  const auto fit_scale = [&](double g) {
    double lo = -30, hi = 30;
    for (int it = 0; it < 80; ++it) {
      const double mid = 0.5 * (lo + hi);
      fill(std::exp(mid), g);
      (mean() < firing ? lo : hi) = mid;
    }
    fill(std::exp(0.5 * (lo + hi)), g);
  };
  // The shape: a steeper fall (larger g) concentrates the firings in fewer neurons.
  double glo = 0, ghi = 64;
  for (int it = 0; it < 60; ++it) {
    const double g = 0.5 * (glo + ghi);
    fit_scale(g);
    (neurons_covering(p, 0.8) > top80 ? glo : ghi) = g;
  }
  fit_scale(0.5 * (glo + ghi));
  return p;
}

std::vector<float> twin_probabilities(int64_t n, double firing, double top80, uint64_t seed) {
  const std::vector<double> p = twin_curve(n, firing, top80);
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(seed);
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<float> out(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k)
    out[static_cast<size_t>(order[static_cast<size_t>(k)])] =
        static_cast<float>(p[static_cast<size_t>(k)]);
  return out;
}

}  // namespace hc::perfmodel
