// Firing statistics for the projection (docs/SIMULATE.md "Firing statistics", "Routing skew"):
// per layer p_i = P(neuron i fires) on the profiling distribution, as a power law fitted to
// published statistics or a measured profile resampled to the shape; MoE: p_e = the share of
// tokens routed to expert e. Plus the serving distribution's drift and the hot sets' overlap.
#pragma once
#include <cstdint>
#include <vector>

#include "core/status.h"

namespace hc::perfmodel {

// Published statistics the power law is fitted to (docs/SIMULATE.md, "Firing statistics").
// PowerInfer (Song et al., SOSP '24, section 3.1): in a single MLP block of LLaMA2(ReGLU)-70B,
// 43% of the neurons account for 80% of the activations.
constexpr double kReluLlamaCoverShare = 0.43;
constexpr double kReluLlamaCoverMass = 0.80;
// PowerInfer's footnote 3: "only about 10% of its neurons are activated" per iteration.
constexpr double kPowerInferFiringShare = 0.10;

// p(rank r of n) = min(1, c * x^-a), x = (r + 0.5) / n: most frequent first.
struct PowerLaw {
  double a = 0;  // exponent (0: uniform)
  double c = 0;  // scale
};
// The power law whose mean p is firing_share and whose most frequent cover_share of the n
// neurons carry cover_mass of the firings (as neurons_covering measures it). Errors when the
// targets cannot be met (cover_share must lie in (cover_mass * firing_share, cover_mass]).
Result<PowerLaw> fit_power_law(int64_t n, double firing_share, double cover_share,
                               double cover_mass = kReluLlamaCoverMass);
// [n] p by rank (descending).
std::vector<double> power_law_probs(const PowerLaw& pl, int64_t n);

// MoE routing without statistics (docs/SIMULATE.md, "Routing skew"): every layer's experts by
// rank follow p(x) = min(1, c x^-skew), x = (rank + 0.5) / n_expert, c such that the p sum to
// n_expert_used (each token routes to that many distinct experts). skew 0: uniform,
// n_expert_used / n_expert each. Errors unless 0 < n_expert_used < n_expert and skew in [0, 20].
Result<std::vector<double>> expert_routing_probs(int n_expert, int n_expert_used, double skew);
// Routing from measured counts: counts[l][e] tokens routed to expert e of source layer l over
// n_tokens tokens (hotcold profile's expert_count). The same shape: count / n_tokens as is.
// Another: resampled as rescale_firing does (layers by position, experts by rank quantile),
// then each layer scaled to sum to n_expert_used, no p above 1. Errors on empty or ragged
// counts, counts above n_tokens, or a layer with no routings.
Result<std::vector<std::vector<double>>> routing_from_counts(
    const std::vector<std::vector<double>>& counts, uint64_t n_tokens, int n_layer, int n_expert,
    int n_expert_used);
// The default skew (an assumption, docs/SIMULATE.md "Routing skew").
constexpr double kDefaultExpertSkew = 0.3;

// Mean of p (the share of neurons firing per token).
double mean_firing(const std::vector<double>& p);
// Smallest k / n such that the k most frequent neurons carry >= mass of sum(p) (ActStats'
// neurons_covering on probabilities). 0 when sum(p) is 0.
double neurons_covering(const std::vector<double>& p, double mass);
// Per-layer firing curves resampled to n_layer x n_ff: target layer l takes source layer
// floor((l + 0.5) * L_src / n_layer); its sorted (descending) curve is sampled at rank quantile
// (j + 0.5) / n_ff with linear interpolation, and rank j is neuron j. Same shape: returned as is
// (neuron identities kept, so plan files still apply). Errors on empty or ragged input.
Result<std::vector<std::vector<double>>> rescale_firing(
    const std::vector<std::vector<double>>& src, int n_layer, int64_t n_ff);
// The serving distribution: per layer, round(share * n_ff) neurons chosen at random (seeded
// per layer) pass their p on to the next of them in a random cycle (every chosen neuron gets
// another's p). Each layer keeps its multiset of p (sparsity and coverage unchanged); only
// which neurons are hot changes. share 0: identical.
std::vector<std::vector<double>> drift_firing(const std::vector<std::vector<double>>& p,
                                              double share, uint64_t seed);
// Mean over layers of |top-k(a) & top-k(b)| / k, k = ceil(top_share * n_ff) (PowerInfer reports
// over 90% overlap of the top 20% across tasks).
double top_overlap(const std::vector<std::vector<double>>& a,
                   const std::vector<std::vector<double>>& b, double top_share);

}  // namespace hc::perfmodel
