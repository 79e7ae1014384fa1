// Exponentially decayed per-neuron firing counts, per layer: the statistics that dynamic
// migration (sparse/migration.h) ranks neurons by while the model runs (docs/DYNAMIC.md).
//
// Contract: after each token of layer il, every count of il is multiplied by
// d = 2^(-1/half_life_tokens) and the fired neurons get +1; tokens(il) gets the same treatment
// with every token "firing", so tokens(il) = sum_{k < raw_tokens} d^k and
// count(il, i) / tokens(il) is a firing probability in [0, 1].
//
// Cost O(fired) per token: counts are stored scaled by a per-layer factor g that grows by 1/d per
// token (count = scaled / g); decay is the one multiply of g, a firing adds g to its neuron.
// When g passes 2^64 the layer is renormalised (every scaled count divided by g, g = 1): O(n_ff)
// once every 64 half-lives, amortised O(n_ff / (64 * half_life)) per token. Counts of neurons that
// have not fired for ~1000 half-lives underflow to 0 (they are below 2^-1000 anyway).
// half_life_tokens = +inf disables decay (plain counts). Layers are independent; a
// FiringCounters is not thread-safe, but distinct layers may be updated from distinct threads.
#pragma once
#include <cstdint>
#include <vector>

namespace hc::sparse {

// A half-life for migration statistics (docs/DYNAMIC.md: long enough that the rank of a neuron
// near the hot-set boundary is not noise, short enough to follow a change of topic).
constexpr double kDefaultFiringHalfLife = 1024;

class FiringCounters {
 public:
  FiringCounters() = default;
  // n_layer >= 0, n_ff >= 0, half_life_tokens > 0 (+inf: no decay); HC_CHECKed.
  FiringCounters(int n_layer, int64_t n_ff, double half_life_tokens);

  int n_layer() const { return static_cast<int>(layers_.size()); }
  int64_t n_ff() const { return n_ff_; }
  double half_life() const { return half_life_; }
  double decay() const { return decay_; }  // d

  // One token of layer il: n_fired neuron indices (any order, unique, in [0, n_ff)). An index
  // out of range is a programming bug (HC_CHECK); a duplicate counts twice (not checked).
  void add_token(int il, const int32_t* fired, int64_t n_fired);
  // Same, from a mask [n_ff] (nonzero = fired). O(n_ff).
  void add_token_mask(int il, const uint8_t* fire);

  double count(int il, int64_t i) const;  // decayed firings of neuron i
  double tokens(int il) const;            // decayed token count (sum of d^age), the denominator
  uint64_t raw_tokens(int il) const;      // tokens seen, undecayed
  // p[i] = count / tokens for every neuron of il, clamped to [0, 1] (0 when no token yet).
  void probabilities(int il, std::vector<double>* p) const;
  // c[i] = count(il, i) for every neuron of il (resized to n_ff).
  void counts(int il, std::vector<double>* c) const;

  // Sets layer il as if `tokens` tokens had fired neuron i with probability p[i] each (p: [n_ff],
  // values in [0, 1]): a prior, e.g. an offline profile, that online firings then age out.
  // Keeps raw_tokens; errors (HC_CHECK) on a size mismatch or tokens < 0.
  void seed(int il, const std::vector<double>& p, double tokens);
  // Forgets layer il (counts and tokens to 0), e.g. after a new placement was loaded.
  void reset(int il);
  // Renormalisations of layer il so far (diagnostics; the tests check they happen).
  uint64_t renormalisations(int il) const;

 private:
  struct Layer {
    std::vector<double> scaled;  // [n_ff] count * scale
    double scale = 1;            // g: grows by 1/d per token, back to 1 at renormalisation
    double scaled_tokens = 0;    // tokens * scale
    uint64_t raw = 0;
    uint64_t renorms = 0;
  };
  Layer& layer(int il);
  const Layer& layer(int il) const;
  // Applies one token's decay to layer l (g /= d, renormalising past the limit) and returns the
  // amount a firing adds to a scaled count (the new g).
  double advance(Layer& l);

  int64_t n_ff_ = 0;
  double half_life_ = 0;
  double decay_ = 1;
  std::vector<Layer> layers_;
};

}  // namespace hc::sparse
