// Firing statistics for the projection: power laws, routing skew, resampling, drift
// (perfmodel/firing.h; docs/SIMULATE.md "Firing statistics" and "Routing skew").
#include "perfmodel/firing.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include "perfmodel/detail.h"
#include "sparse/planner.h"

namespace hc::perfmodel {

using detail::fmt;
using detail::in_layer;
using sparse::fire_probabilities;
using sparse::neurons_by_frequency;

double mean_firing(const std::vector<double>& p) {
  if (p.empty()) return 0.0;
  return std::accumulate(p.begin(), p.end(), 0.0) / static_cast<double>(p.size());
}

namespace {

// Coverage of a descending curve (no sort).
double covering_sorted(const std::vector<double>& desc, double mass) {
  const double total = std::accumulate(desc.begin(), desc.end(), 0.0);
  if (total <= 0 || mass <= 0 || desc.empty()) return 0.0;
  const double need = std::min(mass, 1.0) * total;
  double cum = 0;
  for (size_t k = 0; k < desc.size(); ++k) {
    cum += desc[k];
    if (cum >= need) return static_cast<double>(k + 1) / static_cast<double>(desc.size());
  }
  return 1.0;
}

// The power law's fit for one exponent: log c such that the mean of min(1, c x_r^-a) is f.
struct PowerLawFitter {
  int64_t n;
  double f;
  std::vector<double> lx;  // log x_r, ascending in r (x_r = (r + 0.5) / n)

  PowerLawFitter(int64_t n_, double f_) : n(n_), f(f_), lx(static_cast<size_t>(n_)) {
    for (int64_t r = 0; r < n; ++r)
      lx[static_cast<size_t>(r)] =
          std::log((static_cast<double>(r) + 0.5) / static_cast<double>(n));
  }
  // log c for exponent a (bisection; the mean rises with c).
  double log_c(double a) const {
    if (a == 0) return std::log(f);
    // suffix[r] = sum_{s >= r} exp(-a lx_s), for the unclipped tail.
    std::vector<double> suffix(static_cast<size_t>(n) + 1, 0.0);
    for (int64_t r = n - 1; r >= 0; --r)
      suffix[static_cast<size_t>(r)] = suffix[static_cast<size_t>(r) + 1] +
                                       std::exp(-a * lx[static_cast<size_t>(r)]);
    double lo = -800, hi = 800;
    for (int it = 0; it < 200; ++it) {
      const double mid = 0.5 * (lo + hi);
      // Clipped prefix: ranks with mid - a lx_r >= 0, i.e. lx_r <= mid / a (lx ascending).
      const auto clip = static_cast<int64_t>(
          std::upper_bound(lx.begin(), lx.end(), mid / a) - lx.begin());
      const double sum = static_cast<double>(clip) +
                         std::exp(mid) * suffix[static_cast<size_t>(clip)];
      if (sum / static_cast<double>(n) < f) lo = mid;
      else hi = mid;
    }
    return 0.5 * (lo + hi);
  }
  std::vector<double> probs(double a, double lc) const {
    std::vector<double> p(static_cast<size_t>(n));
    for (int64_t r = 0; r < n; ++r)
      p[static_cast<size_t>(r)] = std::min(1.0, std::exp(lc - a * lx[static_cast<size_t>(r)]));
    return p;
  }
};

constexpr double kMaxExponent = 20;  // past this the law is a step: the top f*n neurons at 1

}  // namespace

Result<PowerLaw> fit_power_law(int64_t n, double firing_share, double cover_share,
                               double cover_mass) {
  if (n < 1) return Status::Error("power law: expected n >= 1 neurons, found " + std::to_string(n));
  if (!(firing_share > 0 && firing_share < 1))
    return Status::Error("power law: expected a firing share in (0, 1) (1 - sparsity), found " +
                         fmt(firing_share));
  if (!(cover_mass > 0 && cover_mass < 1))
    return Status::Error("power law: expected a covered mass in (0, 1), found " + fmt(cover_mass));
  if (!(cover_share > 0 && cover_share <= 1))
    return Status::Error("power law: expected a covering share in (0, 1], found " +
                         fmt(cover_share));
  PowerLawFitter fit(n, firing_share);
  auto coverage = [&](double a) {
    return covering_sorted(fit.probs(a, fit.log_c(a)), cover_mass);
  };
  if (coverage(0) <= cover_share) return PowerLaw{0, firing_share};  // uniform already covers
  const double steepest = coverage(kMaxExponent);
  if (steepest > cover_share)
    return Status::Error("power law: the top " + fmt(100 * cover_share) + "% of neurons cannot "
                         "carry " + fmt(100 * cover_mass) + "% of the firings at a firing share "
                         "of " + fmt(firing_share) + " (the steepest law needs " +
                         fmt(100 * steepest) + "%)");
  double lo = 0, hi = kMaxExponent;  // coverage falls as a rises
  for (int it = 0; it < 60; ++it) {
    const double mid = 0.5 * (lo + hi);
    if (coverage(mid) > cover_share) lo = mid;
    else hi = mid;
  }
  return PowerLaw{hi, std::exp(fit.log_c(hi))};
}

std::vector<double> power_law_probs(const PowerLaw& pl, int64_t n) {
  std::vector<double> p(static_cast<size_t>(std::max<int64_t>(n, 0)));
  const double lc = std::log(pl.c);
  for (int64_t r = 0; r < n; ++r) {
    const double lx = std::log((static_cast<double>(r) + 0.5) / static_cast<double>(n));
    p[static_cast<size_t>(r)] = std::min(1.0, std::exp(lc - pl.a * lx));
  }
  return p;
}

Result<std::vector<double>> expert_routing_probs(int n_expert, int n_expert_used, double skew) {
  if (!(n_expert_used > 0 && n_expert_used < n_expert))
    return Status::Error("routing: expected 0 < experts used < experts, found " +
                         std::to_string(n_expert_used) + " of " + std::to_string(n_expert));
  if (!(skew >= 0 && skew <= kMaxExponent))
    return Status::Error("routing: expected a skew exponent in [0, " + fmt(kMaxExponent) +
                         "], found " + fmt(skew));
  // Mean p = n_expert_used / n_expert: the p sum to the experts each token is routed to.
  const PowerLawFitter fit(n_expert, static_cast<double>(n_expert_used) / n_expert);
  return fit.probs(skew, fit.log_c(skew));
}

namespace {

// p scaled to sum to `total`, none above 1 (those at 1 stay there, the rest take the remainder).
void scale_capped(std::vector<double>& p, double total) {
  for (int it = 0; it < 64; ++it) {
    double capped = 0, free = 0;
    for (double v : p) {
      if (v >= 1)
        capped += 1;
      else
        free += v;
    }
    if (free <= 0 || std::abs(capped + free - total) <= 1e-12 * total) return;
    const double k = (total - capped) / free;
    for (double& v : p)
      if (v < 1) v = std::min(1.0, v * k);
  }
}

}  // namespace

Result<std::vector<std::vector<double>>> routing_from_counts(
    const std::vector<std::vector<double>>& counts, uint64_t n_tokens, int n_layer, int n_expert,
    int n_expert_used) {
  std::vector<std::vector<double>> src;
  for (size_t l = 0; l < counts.size(); ++l) {
    std::vector<float> c(counts[l].begin(), counts[l].end());
    HC_ASSIGN_OR_RETURN(std::vector<double> p,
                        in_layer(fire_probabilities(c, n_tokens), "routing", l));
    if (std::accumulate(p.begin(), p.end(), 0.0) <= 0)
      return Status::Error("routing: layer " + std::to_string(l) + " has no routings");
    src.push_back(std::move(p));
  }
  HC_ASSIGN_OR_RETURN(std::vector<std::vector<double>> out, rescale_firing(src, n_layer, n_expert));
  if (static_cast<int>(src.size()) == n_layer && static_cast<int>(src[0].size()) == n_expert)
    return out;
  for (std::vector<double>& p : out) scale_capped(p, n_expert_used);
  return out;
}

double neurons_covering(const std::vector<double>& p, double mass) {
  std::vector<double> d = p;
  std::sort(d.begin(), d.end(), std::greater<>());
  return covering_sorted(d, mass);
}

Result<std::vector<std::vector<double>>> rescale_firing(
    const std::vector<std::vector<double>>& src, int n_layer, int64_t n_ff) {
  if (src.empty() || src[0].empty())
    return Status::Error("firing statistics: no layers or no neurons to rescale");
  if (n_layer < 1 || n_ff < 1)
    return Status::Error("firing statistics: expected a target of >= 1 layer and neuron, found " +
                         std::to_string(n_layer) + " x " + std::to_string(n_ff));
  const size_t n_src = src[0].size();
  for (size_t l = 0; l < src.size(); ++l)
    if (src[l].size() != n_src)
      return Status::Error("firing statistics: layer " + std::to_string(l) + " has " +
                           std::to_string(src[l].size()) + " neurons, layer 0 has " +
                           std::to_string(n_src));
  if (static_cast<int>(src.size()) == n_layer && static_cast<int64_t>(n_src) == n_ff) return src;
  std::vector<std::vector<double>> out(static_cast<size_t>(n_layer));
  const double ls = static_cast<double>(src.size());
  for (int l = 0; l < n_layer; ++l) {
    const auto sl = std::min(src.size() - 1,
                             static_cast<size_t>((l + 0.5) * ls / static_cast<double>(n_layer)));
    std::vector<double> d = src[sl];
    std::sort(d.begin(), d.end(), std::greater<>());
    std::vector<double>& o = out[static_cast<size_t>(l)];
    o.resize(static_cast<size_t>(n_ff));
    for (int64_t j = 0; j < n_ff; ++j) {
      double u = (static_cast<double>(j) + 0.5) / static_cast<double>(n_ff) *
                     static_cast<double>(n_src) - 0.5;
      u = std::clamp(u, 0.0, static_cast<double>(n_src - 1));
      const auto i0 = static_cast<size_t>(u);
      const size_t i1 = std::min(i0 + 1, n_src - 1);
      const double w = u - static_cast<double>(i0);
      o[static_cast<size_t>(j)] = (1 - w) * d[i0] + w * d[i1];
    }
  }
  return out;
}

std::vector<std::vector<double>> drift_firing(const std::vector<std::vector<double>>& p,
                                              double share, uint64_t seed) {
  std::vector<std::vector<double>> out = p;
  if (!(share > 0)) return out;
  for (size_t l = 0; l < p.size(); ++l) {
    const size_t n = p[l].size();
    const auto m = static_cast<size_t>(std::llround(std::min(share, 1.0) * static_cast<double>(n)));
    if (m < 2) continue;
    std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + l + 1);
    std::vector<uint32_t> idx(n);
    std::iota(idx.begin(), idx.end(), 0u);
    for (size_t i = 0; i < m; ++i) {  // partial Fisher-Yates: m chosen, in random order
      std::uniform_int_distribution<size_t> pick(i, n - 1);
      std::swap(idx[i], idx[pick(rng)]);
    }
    for (size_t i = 0; i < m; ++i) out[l][idx[i]] = p[l][idx[(i + 1) % m]];
  }
  return out;
}

double top_overlap(const std::vector<std::vector<double>>& a,
                   const std::vector<std::vector<double>>& b, double top_share) {
  if (a.empty() || a.size() != b.size()) return 0.0;
  double sum = 0;
  for (size_t l = 0; l < a.size(); ++l) {
    const size_t n = a[l].size();
    if (n == 0 || b[l].size() != n) return 0.0;
    const auto k = std::max<size_t>(
        1, static_cast<size_t>(std::ceil(top_share * static_cast<double>(n))));
    const std::vector<int32_t> oa = neurons_by_frequency(a[l]), ob = neurons_by_frequency(b[l]);
    std::vector<char> in_a(n, 0);
    for (size_t i = 0; i < k && i < n; ++i) in_a[static_cast<size_t>(oa[i])] = 1;
    size_t both = 0;
    for (size_t i = 0; i < k && i < n; ++i) both += in_a[static_cast<size_t>(ob[i])];
    sum += static_cast<double>(both) / static_cast<double>(std::min(k, n));
  }
  return sum / static_cast<double>(a.size());
}

}  // namespace hc::perfmodel
