// Dynamic sparsity (docs/DYNAMIC.md): decayed firing counters against a naive O(n_ff) reference
// (through many renormalisations), the threshold controller on synthetic activation streams
// (converges to the offline quantile, settles without a limit cycle, re-converges after a 3x
// shift, holds a sparsity target, stays clamped under garbage, works on negative logits) and hot
// set migration (plans equal a brute-force pairing, apply_swaps rejects inconsistent swaps, a
// stationary stream does not thrash while the same stream without hysteresis does, the hot set
// follows a permutation of the distribution). All streams are seeded: results are deterministic.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <set>
#include <vector>

#include "sparse/firing_counters.h"
#include "sparse/migration.h"
#include "sparse/threshold_controller.h"

namespace hc::sparse {
namespace {

// splitmix64: fast, seeded, identical on every platform (std:: distributions are not).
struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed) {}
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1p-53; }  // [0, 1)
};

// exp(sigma * z), z standard normal (Box-Muller), tabulated: streams draw by random index.
const std::vector<double>& lognormal_table() {
  static const std::vector<double> table = [] {
    constexpr double kSigma = 1.0;
    std::vector<double> t(1 << 18);
    Rng rng(12345);
    for (size_t i = 0; i < t.size(); i += 2) {
      const double u1 = 1.0 - rng.uniform(), u2 = rng.uniform();
      const double r = std::sqrt(-2.0 * std::log(u1));
      t[i] = std::exp(kSigma * r * std::cos(2 * M_PI * u2));
      t[i + 1] = std::exp(kSigma * r * std::sin(2 * M_PI * u2));
    }
    return t;
  }();
  return table;
}

// ---------------------------------------------------------------------------------------------
// FiringCounters

// A firing stream: neuron i fires with probability p_i, a power law over a random permutation.
struct FireStream {
  std::vector<uint64_t> thr;  // fire iff rng.next() < thr[i]
  Rng rng;
  FireStream(int64_t n_ff, double p_max, double rank_scale, double beta, uint64_t seed)
      : thr(static_cast<size_t>(n_ff)), rng(seed) {
    set_ranks(p_max, rank_scale, beta);
  }
  // p(rank r) = min(p_max, p_max * ((r + 1) / rank_scale)^-beta), ranks a random permutation.
  void set_ranks(double p_max, double rank_scale, double beta) {
    std::vector<int32_t> perm(thr.size());
    std::iota(perm.begin(), perm.end(), 0);
    for (size_t i = perm.size(); i > 1; --i) std::swap(perm[i - 1], perm[rng.next() % i]);
    rank.assign(thr.size(), 0);
    p.assign(thr.size(), 0);
    for (size_t r = 0; r < perm.size(); ++r) {
      const double pr =
          std::min(p_max, p_max * std::pow((static_cast<double>(r) + 1) / rank_scale, -beta));
      const size_t i = static_cast<size_t>(perm[r]);
      rank[i] = static_cast<int32_t>(r);
      p[i] = pr;
      thr[i] = static_cast<uint64_t>(pr * 0x1p64);
    }
  }
  void next(std::vector<int32_t>* fired) {
    fired->clear();
    for (size_t i = 0; i < thr.size(); ++i)
      if (rng.next() < thr[i]) fired->push_back(static_cast<int32_t>(i));
  }
  std::vector<int32_t> rank;  // rank[i]: 0 = most frequent
  std::vector<double> p;
};

bool close_rel(double got, double want, double rel) {
  return std::fabs(got - want) <= rel * std::max(std::fabs(want), 1e-300);
}

TEST(FiringCounters, MatchesNaiveDecayedReference) {
  constexpr int64_t kNff = 257;
  constexpr int kLayers = 2;
  constexpr int kTokens = 10000;
  // 2: the scale passes 2^64 every 128 tokens (78 renormalisations); 37.5: 4; 1024: none.
  for (double half_life : {2.0, 37.5, 1024.0}) {
    SCOPED_TRACE(half_life);
    FiringCounters fc(kLayers, kNff, half_life);
    ASSERT_EQ(fc.n_layer(), kLayers);
    ASSERT_EQ(fc.n_ff(), kNff);
    ASSERT_EQ(fc.half_life(), half_life);
    const double d = std::exp2(-1.0 / half_life);
    std::vector<std::vector<double>> ref(kLayers, std::vector<double>(kNff, 0.0));
    std::vector<double> ref_tokens(kLayers, 0.0);
    std::vector<FireStream> streams;
    for (int il = 0; il < kLayers; ++il) streams.emplace_back(kNff, 0.9, 2.0, 1.2, 100 + il);
    std::vector<int32_t> fired;
    std::vector<double> p, c;
    int checks = 0;
    for (int tok = 1; tok <= kTokens; ++tok) {
      for (int il = 0; il < kLayers; ++il) {
        streams[static_cast<size_t>(il)].next(&fired);
        std::reverse(fired.begin(), fired.end());  // any order
        fc.add_token(il, fired.data(), static_cast<int64_t>(fired.size()));
        for (double& v : ref[static_cast<size_t>(il)]) v *= d;
        for (int32_t i : fired) ref[static_cast<size_t>(il)][static_cast<size_t>(i)] += 1;
        ref_tokens[static_cast<size_t>(il)] = ref_tokens[static_cast<size_t>(il)] * d + 1;
      }
      if (tok % 97 != 0 && tok != kTokens) continue;
      for (int il = 0; il < kLayers; ++il) {
        const auto& r = ref[static_cast<size_t>(il)];
        ASSERT_EQ(fc.raw_tokens(il), static_cast<uint64_t>(tok));
        // The geometric sum, closed form.
        const double geo = -std::expm1(-tok / half_life * std::log(2.0)) /
                           -std::expm1(-1.0 / half_life * std::log(2.0));
        ASSERT_TRUE(close_rel(fc.tokens(il), geo, 1e-9)) << fc.tokens(il) << " vs " << geo;
        ASSERT_TRUE(close_rel(fc.tokens(il), ref_tokens[static_cast<size_t>(il)], 1e-9));
        fc.counts(il, &c);
        fc.probabilities(il, &p);
        ASSERT_EQ(c.size(), static_cast<size_t>(kNff));
        ASSERT_EQ(p.size(), static_cast<size_t>(kNff));
        for (int64_t i = 0; i < kNff; ++i) {
          const size_t k = static_cast<size_t>(i);
          ASSERT_TRUE(close_rel(fc.count(il, i), r[k], 1e-9))
              << "token " << tok << " layer " << il << " neuron " << i << ": " << fc.count(il, i)
              << " vs " << r[k];
          ASSERT_EQ(c[k], fc.count(il, i));
          ASSERT_GE(p[k], 0.0);
          ASSERT_LE(p[k], 1.0);
          ASSERT_TRUE(close_rel(p[k], r[k] / ref_tokens[static_cast<size_t>(il)], 1e-9));
          ++checks;
        }
      }
    }
    EXPECT_EQ(checks, kLayers * kNff * (kTokens / 97 + 1));
    // The scale passes 2^64 every 64 half-lives: ~78 times for 2, 4 for 37.5, never for 1024.
    const uint64_t want = static_cast<uint64_t>(kTokens / (64 * half_life));
    for (int il = 0; il < kLayers; ++il) {
      EXPECT_GE(fc.renormalisations(il) + 1, want);
      EXPECT_LE(fc.renormalisations(il), want);
    }
  }
}

TEST(FiringCounters, MaskAndIndexFormsAgree) {
  constexpr int64_t kNff = 300;
  FiringCounters by_index(1, kNff, 3.0), by_mask(1, kNff, 3.0);
  FireStream stream(kNff, 0.8, 4.0, 1.0, 7);
  Rng shuffle(8);
  std::vector<int32_t> fired;
  std::vector<uint8_t> mask(kNff);
  for (int tok = 0; tok < 3000; ++tok) {
    stream.next(&fired);
    for (size_t i = fired.size(); i > 1; --i) std::swap(fired[i - 1], fired[shuffle.next() % i]);
    std::fill(mask.begin(), mask.end(), 0);
    for (int32_t i : fired) mask[static_cast<size_t>(i)] = static_cast<uint8_t>(1 + (i % 7));
    by_index.add_token(0, fired.data(), static_cast<int64_t>(fired.size()));
    by_mask.add_token_mask(0, mask.data());
  }
  EXPECT_GT(by_index.renormalisations(0), 0u);
  for (int64_t i = 0; i < kNff; ++i) ASSERT_EQ(by_index.count(0, i), by_mask.count(0, i)) << i;
  EXPECT_EQ(by_index.tokens(0), by_mask.tokens(0));
}

TEST(FiringCounters, HalfLifeNoDecayResetAndEmpty) {
  FiringCounters fc(2, 4, 8.0);
  std::vector<double> p;
  fc.probabilities(0, &p);
  EXPECT_EQ(p, std::vector<double>(4, 0.0));  // no token yet
  EXPECT_EQ(fc.tokens(0), 0.0);
  const int32_t one[] = {2};
  fc.add_token(0, one, 1);
  for (int k = 0; k < 8; ++k) fc.add_token(0, nullptr, 0);
  EXPECT_NEAR(fc.count(0, 2), 0.5, 1e-12);  // one half-life later
  EXPECT_EQ(fc.count(1, 2), 0.0);           // layers are independent
  EXPECT_EQ(fc.raw_tokens(1), 0u);
  fc.reset(0);
  EXPECT_EQ(fc.count(0, 2), 0.0);
  EXPECT_EQ(fc.raw_tokens(0), 0u);

  FiringCounters plain(1, 3, INFINITY);  // no decay: exact integer counts
  const int32_t f01[] = {0, 1};
  for (int k = 0; k < 1000; ++k) plain.add_token(0, f01, k % 3 == 0 ? 2 : 1);
  EXPECT_EQ(plain.count(0, 0), 1000.0);
  EXPECT_EQ(plain.count(0, 1), 334.0);
  EXPECT_EQ(plain.count(0, 2), 0.0);
  EXPECT_EQ(plain.tokens(0), 1000.0);
}

// ---------------------------------------------------------------------------------------------
// ThresholdController

// Synthetic FFN activations: |a_i| = gain * (i + 1)^-0.8 * lognormal(0, 1), independent per token:
// a few large neurons and a long tail of small ones, as after a ReLU-family activation.
struct ActStream {
  std::vector<double> scale;
  double gain = 1;
  Rng rng;
  ActStream(int64_t n, uint64_t seed) : scale(static_cast<size_t>(n)), rng(seed) {
    for (size_t i = 0; i < scale.size(); ++i) scale[i] = std::pow(static_cast<double>(i) + 1, -0.8);
  }
  void next(std::vector<double>* a) {
    const auto& ln = lognormal_table();
    a->resize(scale.size());
    for (size_t i = 0; i < scale.size(); ++i)
      (*a)[i] = gain * scale[i] * ln[rng.next() & (ln.size() - 1)];
  }
};

struct Measure {
  double fired_mass = 0, total_mass = 0, n_fired = 0, n_seen = 0;
  void add(const std::vector<double>& a, float t) {
    for (double v : a) {
      total_mass += v;
      n_seen += 1;
      if (v > t) {
        fired_mass += v;
        n_fired += 1;
      }
    }
  }
  double recall() const { return fired_mass / total_mass; }
  double sparsity() const { return 1 - n_fired / n_seen; }
};

// The offline exact answer on a pooled sample of `tokens` tokens: the threshold whose pooled
// recall is `recall` (kRecall) or whose share of values not above it is `sparsity`.
double offline_threshold(ActStream s, int tokens, ControllerParams::Target target, double value) {
  std::vector<double> all, a;
  for (int k = 0; k < tokens; ++k) {
    s.next(&a);
    all.insert(all.end(), a.begin(), a.end());
  }
  std::sort(all.begin(), all.end());
  if (target == ControllerParams::Target::kSparsity)
    return all[static_cast<size_t>(value * static_cast<double>(all.size()))];
  const double total = std::accumulate(all.begin(), all.end(), 0.0);
  double missed = 0;  // mass of the values at or below all[k]
  for (size_t k = 0; k < all.size(); ++k) {
    missed += all[k];
    if (missed > (1 - value) * total) return all[k];
  }
  return all.back();
}

// Runs `tokens` tokens with per-token updates; returns the thresholds after each.
std::vector<float> run_controller(ThresholdController* c, ActStream* s, int tokens,
                                  Measure* window = nullptr) {
  std::vector<float> ts;
  std::vector<double> a;
  for (int k = 0; k < tokens; ++k) {
    s->next(&a);
    Measure m;
    m.add(a, c->threshold(0));
    if (window) window->add(a, c->threshold(0));
    ts.push_back(c->update(0, m.fired_mass, m.total_mass, m.n_fired, m.n_seen));
  }
  return ts;
}

double mean_log(const std::vector<float>& ts, size_t from, size_t to) {
  double s = 0;
  for (size_t k = from; k < to; ++k) s += std::log(ts[k]);
  return s / static_cast<double>(to - from);
}

// First index from which every later value lies within rel of want (ts.size() if none).
size_t settled_at(const std::vector<float>& ts, double want, double rel) {
  size_t k = ts.size();
  while (k > 0 && std::fabs(ts[k - 1] / want - 1) <= rel) --k;
  return k;
}

// The law of threshold_controller.h step by step, against a hand computation.
TEST(ThresholdController, ExactLaw) {
  ControllerParams p;  // gain 0.02, max_step 0.05, deadband 0.02, smoothing 0.2, recall 0.99
  ThresholdController c({1.0f, 1.0f, 1.0f}, p);
  ASSERT_EQ(c.n_layer(), 3);
  // Layer 0. First measurement sets the EMA: q = 0.015, e = ln 1.5, u = 0 - 0.02 ln 1.5.
  double u = -0.02 * std::log(1.5);
  EXPECT_FLOAT_EQ(c.update(0, 0.985, 1.0, 0, 0), static_cast<float>(std::exp(u)));
  EXPECT_NEAR(c.error(0), std::log(1.5), 1e-12);
  EXPECT_NEAR(c.smoothed(0), 0.985, 1e-12);
  // Mass-weighted EMA of missed and total mass (fired 0.48 of 0.5: missed 0.02):
  // N = 0.015 + 0.2 (0.02 - 0.015), D = 1 + 0.2 (0.5 - 1); q = N / D.
  const double n = 0.015 + 0.2 * (0.02 - 0.015), d = 1 + 0.2 * (0.5 - 1);
  u += -0.02 * std::log(n / d / 0.01);
  EXPECT_FLOAT_EQ(c.update(0, 0.48, 0.5, 0, 0), static_cast<float>(std::exp(u)));
  EXPECT_NEAR(c.smoothed(0), 1 - n / d, 1e-12);
  // Inside the deadband (q = 0.0101: e = ln 1.01 < 0.02): no change.
  EXPECT_EQ(c.update(1, 0.9899, 1.0, 0, 0), 1.0f);
  EXPECT_NEAR(c.error(1), std::log(1.01), 1e-12);
  // A huge error is cut to max_step: q = 1, gain e = 0.092 -> 0.05.
  EXPECT_FLOAT_EQ(c.update(2, 0.0, 1.0, 0, 0), static_cast<float>(std::exp(-0.05)));
  // Sparsity: q is the fired share and the sign flips (too many fired: raise t).
  ControllerParams ps = p;
  ps.target = ControllerParams::Target::kSparsity;
  ps.target_value = 0.8;
  ThresholdController cs({2.0f}, ps);
  EXPECT_FLOAT_EQ(cs.update(0, 0, 0, 30, 100),
                  static_cast<float>(2.0 * std::exp(0.02 * std::log(0.3 / 0.2))));
  EXPECT_NEAR(cs.smoothed(0), 0.7, 1e-12);
  // Nothing fired: q = 0 is floored at q* / 1000 (e = ln 1e-3), the step cut to max_step.
  ThresholdController cz({2.0f}, ps);
  EXPECT_FLOAT_EQ(cz.update(0, 0, 0, 0, 100), static_cast<float>(2.0 * std::exp(-0.05)));
  EXPECT_NEAR(cz.error(0), std::log(1e-3), 1e-12);
  // Linear domain: u is t itself.
  ControllerParams pl = ps;
  pl.log_domain = false;
  pl.t_min = -5;
  ThresholdController cl({-1.0f}, pl);
  EXPECT_FLOAT_EQ(cl.update(0, 0, 0, 30, 100),
                  static_cast<float>(-1.0 + 0.02 * std::log(0.3 / 0.2)));
}

constexpr int64_t kActNeurons = 1024;

TEST(ThresholdController, RecallConvergesToOfflineQuantileAndStaysThere) {
  ActStream s(kActNeurons, 21);
  const double t_star = offline_threshold(ActStream(kActNeurons, 99), 1000,
                                          ControllerParams::Target::kRecall, 0.99);
  ControllerParams p;  // the defaults: recall 0.99, log domain
  for (double start : {4.0, 0.25}) {  // from above and from below
    SCOPED_TRACE(start);
    ThresholdController c({static_cast<float>(start * t_star)}, p);
    std::vector<float> ts = run_controller(&c, &s, 400);  // convergence
    Measure win;
    const std::vector<float> st = run_controller(&c, &s, 4000, &win);  // stationary
    std::printf("recall start %.2f: t* %.5f settled(5%%) at %zu, window recall %.5f, mean t %.5f, "
                "min %.5f max %.5f\n",
                start, t_star, settled_at(ts, t_star, 0.05), win.recall(),
                std::exp(mean_log(st, 0, st.size())), *std::min_element(st.begin(), st.end()),
                *std::max_element(st.begin(), st.end()));
    EXPECT_NEAR(win.recall(), 0.99, 0.005);
    EXPECT_NEAR(c.smoothed(0), 0.99, 0.005);
    // The threshold: the offline quantile to within 3%, no drift, bounded excursion.
    EXPECT_NEAR(std::exp(mean_log(st, 0, st.size())) / t_star, 1.0, 0.03);
    EXPECT_NEAR(mean_log(st, 0, st.size() / 2), mean_log(st, st.size() / 2, st.size()), 0.02);
    for (float t : st) ASSERT_NEAR(t / t_star, 1.0, 0.08);
  }
}

TEST(ThresholdController, ReconvergesAfterThreefoldShift) {
  ActStream s(kActNeurons, 22);
  const double t_star = offline_threshold(ActStream(kActNeurons, 98), 1000,
                                          ControllerParams::Target::kRecall, 0.99);
  ThresholdController c({static_cast<float>(t_star)}, ControllerParams{});
  run_controller(&c, &s, 1000);
  s.gain = 3;  // every activation x3: the right threshold is 3 t*
  const std::vector<float> ts = run_controller(&c, &s, 1500);
  const size_t settled = settled_at(ts, 3 * t_star, 0.10);
  std::printf("shift: settled within 10%% of 3 t* after %zu tokens, final mean %.5f (3 t* %.5f)\n",
              settled, std::exp(mean_log(ts, 1000, 1500)), 3 * t_star);
  EXPECT_LE(settled, 150u);
  EXPECT_NEAR(std::exp(mean_log(ts, 1000, 1500)) / (3 * t_star), 1.0, 0.03);
}

// The population recall of lognormal(0, 1) activations, a smooth function of t: a stream whose
// every measurement is the same for the same threshold. The integral law must settle at a fixed
// point (with the deadband: exactly; without: to float resolution), not cycle.
TEST(ThresholdController, DeterministicStreamSettlesWithoutLimitCycle) {
  auto recall_at = [](double t) { return 0.5 * std::erfc(-(1 - std::log(t)) / std::sqrt(2.0)); };
  const double t_star = std::exp(1 - 2.3263478740408408);  // ln t* = mu + sigma^2 - z_0.99
  for (double deadband : {0.02, 0.0}) {
    for (double start : {100.0, 0.01}) {
      SCOPED_TRACE(testing::Message() << "deadband " << deadband << " start " << start);
      ControllerParams p;
      p.deadband = deadband;
      ThresholdController c({static_cast<float>(start * t_star)}, p);
      std::vector<float> ts;
      for (int k = 0; k < 6000; ++k)
        ts.push_back(c.update(0, recall_at(c.threshold(0)), 1.0, 0, 0));
      const auto [lo, hi] = std::minmax_element(ts.begin() + 3000, ts.end());
      const auto [all_lo, all_hi] = std::minmax_element(ts.begin(), ts.end());
      std::printf("deterministic deadband %.2f start %g: settled(1%%) at %zu, range [%.4f, %.4f] "
                  "t*, last 3000: [%.7g, %.7g], error %.4f\n",
                  deadband, start, settled_at(ts, t_star, 0.01), *all_lo / t_star,
                  *all_hi / t_star, *lo, *hi, c.error(0));
      EXPECT_LE(settled_at(ts, t_star, 0.05), 150u);  // 100x off: >= 92 tokens at max_step
      // The approach from 100x off does not overshoot (by more than 2%).
      if (start > 1) {
        EXPECT_GT(*all_lo / t_star, 0.98);
      } else {
        EXPECT_LT(*all_hi / t_star, 1.02);
      }
      if (deadband > 0) {
        EXPECT_EQ(*lo, *hi);  // no motion at all: the fixed point is inside the deadband
        EXPECT_LT(std::fabs(c.error(0)), deadband);
      } else {
        EXPECT_LT(*hi / *lo - 1, 1e-5);
        EXPECT_LT(std::fabs(c.error(0)), 1e-3);
      }
      EXPECT_NEAR(c.smoothed(0), 0.99, 0.0003);
    }
  }
}

TEST(ThresholdController, HoldsSparsityTarget) {
  ActStream s(kActNeurons, 23);
  ControllerParams p;
  p.target = ControllerParams::Target::kSparsity;
  p.target_value = 0.8;
  const double t_star = offline_threshold(ActStream(kActNeurons, 97), 300, p.target, 0.8);
  ThresholdController c({1.0f}, p);
  const std::vector<float> ts = run_controller(&c, &s, 400);
  Measure win;
  const std::vector<float> st = run_controller(&c, &s, 3000, &win);
  std::printf("sparsity: t* %.5f settled(5%%) at %zu, window sparsity %.5f, mean t %.5f\n", t_star,
              settled_at(ts, t_star, 0.05), win.sparsity(),
              std::exp(mean_log(st, 0, st.size())));
  EXPECT_NEAR(win.sparsity(), 0.8, 0.005);
  EXPECT_NEAR(std::exp(mean_log(st, 0, st.size())) / t_star, 1.0, 0.03);
  for (float t : st) ASSERT_NEAR(t / t_star, 1.0, 0.08);
}

TEST(ThresholdController, ClampedAndUnmovedByGarbage) {
  ControllerParams p;
  p.t_min = 0.01f;
  p.t_max = 10.0f;
  // Initial values are clamped (NaN to t_min).
  ThresholdController c({1e-9f, 1e9f, NAN, 0.5f}, p);
  EXPECT_EQ(c.threshold(0), 0.01f);
  EXPECT_EQ(c.threshold(1), 10.0f);
  EXPECT_EQ(c.threshold(2), 0.01f);
  EXPECT_EQ(c.threshold(3), 0.5f);
  EXPECT_TRUE(std::isnan(c.smoothed(3)));
  // Measurements that carry no information change nothing.
  const double nan = std::nan(""), inf = INFINITY;
  for (auto [fired, total] : {std::pair{0.0, 0.0}, {1.0, 0.0}, {-1.0, -5.0}, {nan, 1.0},
                              {1.0, nan}, {inf, inf}, {1.0, inf}, {nan, nan}}) {
    EXPECT_EQ(c.update(3, fired, total, 0, 0), 0.5f) << fired << " / " << total;
  }
  EXPECT_TRUE(std::isnan(c.smoothed(3)));
  // Recall always 0 drives the threshold to t_min, always 1 (or fired > total) to t_max; never
  // past them, and a bounded step per update.
  float prev = c.threshold(3);
  for (int k = 0; k < 2000; ++k) {
    const float t = c.update(3, 0.0, 1.0, 0, 0);
    ASSERT_GE(t, p.t_min);
    ASSERT_LE(std::log(prev) - std::log(t), p.max_step + 1e-6);
    prev = t;
  }
  EXPECT_EQ(c.threshold(3), p.t_min);
  EXPECT_NEAR(c.smoothed(3), 0.0, 1e-12);
  for (int k = 0; k < 2000; ++k) {
    const float t = c.update(3, k % 2 ? 5.0 : 1.0, 1.0, 0, 0);
    ASSERT_LE(t, p.t_max);
    ASSERT_TRUE(std::isfinite(t));
    ASSERT_LE(std::log(t) - std::log(prev), p.max_step + 1e-6);
    prev = t;
  }
  EXPECT_EQ(c.threshold(3), p.t_max);
  EXPECT_EQ(c.thresholds()[3], p.t_max);
  EXPECT_EQ(c.thresholds()[0], 0.01f);  // other layers untouched
  // Sparsity mode reads the counts, not the masses.
  ControllerParams ps = p;
  ps.target = ControllerParams::Target::kSparsity;
  ThresholdController cs({1.0f}, ps);
  EXPECT_EQ(cs.update(0, 1.0, 1.0, 5, 0), 1.0f);      // n_seen 0: ignored
  EXPECT_EQ(cs.update(0, 1.0, 1.0, nan, 10), 1.0f);   // NaN: ignored
  EXPECT_GT(cs.update(0, nan, nan, 10, 10), 1.0f);    // all fired: raise
  EXPECT_NEAR(cs.smoothed(0), 0.0, 1e-12);
}

// Predictor logits: a linear-domain threshold on scores around -2, so the answer is negative.
TEST(ThresholdController, LinearDomainNegativeThresholds) {
  constexpr int64_t kN = 1024;
  std::vector<double> bias(kN);
  Rng rng(31);
  for (double& b : bias) b = -2.0 + 0.5 * (rng.uniform() - 0.5);
  const auto& ln = lognormal_table();
  auto scores = [&](std::vector<double>* z) {  // N(bias, 1): ln of a lognormal(0, 1) draw
    z->resize(kN);
    for (size_t i = 0; i < bias.size(); ++i)
      (*z)[i] = bias[i] + std::log(ln[rng.next() & (ln.size() - 1)]);
  };
  ControllerParams p;
  p.target = ControllerParams::Target::kSparsity;
  p.target_value = 0.9;
  p.log_domain = false;
  p.t_min = -10;
  p.t_max = 10;
  std::vector<double> all, z;
  for (int k = 0; k < 300; ++k) {
    scores(&z);
    all.insert(all.end(), z.begin(), z.end());
  }
  std::sort(all.begin(), all.end());
  const double t_star = all[static_cast<size_t>(0.9 * static_cast<double>(all.size()))];
  ASSERT_LT(t_star, -0.3);
  ThresholdController c({3.0f}, p);
  std::vector<float> ts;
  double fired = 0, seen = 0;
  for (int k = 0; k < 3400; ++k) {
    scores(&z);
    const float t = c.threshold(0);
    double n = 0;
    for (double v : z) n += v > t;
    if (k >= 400) {
      fired += n;
      seen += kN;
    }
    ts.push_back(c.update(0, 0, 0, n, kN));
  }
  double mean = 0;
  for (size_t k = 400; k < ts.size(); ++k) mean += ts[k];
  mean /= static_cast<double>(ts.size() - 400);
  std::printf("linear: t* %.4f mean t %.4f sparsity %.5f\n", t_star, mean, 1 - fired / seen);
  EXPECT_NEAR(mean, t_star, 0.03);
  EXPECT_NEAR(1 - fired / seen, 0.9, 0.005);
  for (size_t k = 400; k < ts.size(); ++k) ASSERT_NEAR(ts[k], t_star, 0.15);
}

TEST(ControllerParams, Validate) {
  EXPECT_TRUE(ControllerParams{}.validate().ok());
  auto bad = [](auto mutate) {
    ControllerParams p;
    mutate(p);
    return !p.validate().ok();
  };
  EXPECT_TRUE(bad([](ControllerParams& p) { p.target_value = 1.0; }));
  EXPECT_TRUE(bad([](ControllerParams& p) { p.target_value = 0.0; }));
  EXPECT_TRUE(bad([](ControllerParams& p) { p.smoothing = 0.0; }));
  EXPECT_TRUE(bad([](ControllerParams& p) { p.smoothing = 1.5; }));
  EXPECT_TRUE(bad([](ControllerParams& p) { p.gain = NAN; }));
  EXPECT_TRUE(bad([](ControllerParams& p) { p.max_step = -1; }));
  EXPECT_TRUE(bad([](ControllerParams& p) { p.deadband = -1; }));
  EXPECT_TRUE(bad([](ControllerParams& p) { p.t_min = 2, p.t_max = 1; }));
  EXPECT_TRUE(bad([](ControllerParams& p) { p.t_min = -1; }));  // log domain
  EXPECT_FALSE(bad([](ControllerParams& p) { p.t_min = -1, p.log_domain = false; }));
}

// ---------------------------------------------------------------------------------------------
// Migration

// The pairing by full sorts, for comparison with plan_swaps' partial sorts.
std::vector<Swap> brute_force_swaps(const std::vector<int32_t>& slots, const std::vector<double>& c,
                                    const MigrationParams& p) {
  std::vector<int32_t> in = slots, out;
  std::set<int32_t> held(slots.begin(), slots.end());
  for (int32_t n = 0; n < static_cast<int32_t>(c.size()); ++n)
    if (!held.count(n)) out.push_back(n);
  auto before = [&](int32_t a, int32_t b) {
    return c[static_cast<size_t>(a)] != c[static_cast<size_t>(b)]
               ? c[static_cast<size_t>(a)] > c[static_cast<size_t>(b)]
               : a < b;
  };
  std::sort(out.begin(), out.end(), before);
  std::sort(in.begin(), in.end(), [&](int32_t a, int32_t b) { return before(b, a); });
  std::vector<Swap> swaps;
  for (size_t k = 0; k < std::min(out.size(), in.size()); ++k) {
    if (static_cast<int>(k) >= p.max_swaps) break;
    const double co = c[static_cast<size_t>(out[k])], ci = c[static_cast<size_t>(in[k])];
    if (!(co > (1 + p.hysteresis) * ci + p.min_margin)) break;
    const int32_t slot = static_cast<int32_t>(std::find(slots.begin(), slots.end(), in[k]) -
                                              slots.begin());
    swaps.push_back({slot, in[k], out[k]});
  }
  return swaps;
}

bool same(const std::vector<Swap>& a, const std::vector<Swap>& b) {
  if (a.size() != b.size()) return false;
  for (size_t k = 0; k < a.size(); ++k)
    if (a[k].slot != b[k].slot || a[k].evict != b[k].evict || a[k].admit != b[k].admit)
      return false;
  return true;
}

TEST(Migration, PlanMatchesBruteForceAndRespectsMaxSwaps) {
  Rng rng(41);
  int with_swaps = 0, capped = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const int64_t n_ff = 1 + static_cast<int64_t>(rng.next() % 200);
    const size_t cap = static_cast<size_t>(rng.next() % static_cast<uint64_t>(n_ff + 1));
    std::vector<double> c(static_cast<size_t>(n_ff));
    for (double& v : c) v = static_cast<double>(rng.next() % 20);  // many ties
    std::vector<int32_t> perm(static_cast<size_t>(n_ff));
    std::iota(perm.begin(), perm.end(), 0);
    for (size_t i = perm.size(); i > 1; --i) std::swap(perm[i - 1], perm[rng.next() % i]);
    std::vector<int32_t> slots(perm.begin(), perm.begin() + static_cast<std::ptrdiff_t>(cap));
    MigrationParams p;
    p.hysteresis = (rng.next() % 3) * 0.25;
    p.min_margin = static_cast<double>(rng.next() % 3);
    p.max_swaps = static_cast<int>(rng.next() % 12);
    const std::vector<Swap> swaps = plan_swaps(slots, c.data(), n_ff, p);
    ASSERT_TRUE(same(swaps, brute_force_swaps(slots, c, p))) << "trial " << trial;
    ASSERT_LE(static_cast<int>(swaps.size()), p.max_swaps);
    with_swaps += !swaps.empty();
    capped += static_cast<int>(swaps.size()) == p.max_swaps && p.max_swaps > 0;
    auto gain = [&](const Swap& sw) {
      return c[static_cast<size_t>(sw.admit)] - c[static_cast<size_t>(sw.evict)];
    };
    for (size_t k = 1; k < swaps.size(); ++k)  // most beneficial first
      ASSERT_GE(gain(swaps[k - 1]), gain(swaps[k]));
    std::vector<int32_t> after = slots;
    ASSERT_TRUE(apply_swaps(&after, swaps, n_ff).ok());
    ASSERT_EQ(after.size(), cap);
    ASSERT_EQ(std::set<int32_t>(after.begin(), after.end()).size(), cap);
  }
  EXPECT_GT(with_swaps, 100);
  EXPECT_GT(capped, 30);
}

TEST(Migration, HysteresisRuleAndTies) {
  // Neurons 0..5; slots hold 0, 1, 2.
  const std::vector<int32_t> slots = {2, 0, 1};
  MigrationParams p;  // out > 1.25 in + 1
  {
    const std::vector<double> c = {4, 8, 4, 6, 6, 0};
    // Outsiders by rank: 3 (6), 4 (6), 5 (0); insiders worst first: 2 (4, higher index of the
    // tie), 0 (4), 1 (8). 6 > 1.25 * 4 + 1 = 6? No: nothing moves.
    EXPECT_TRUE(plan_swaps(slots, c.data(), 6, p).empty());
    MigrationParams loose = p;
    loose.min_margin = 0.5;  // 6 > 5.5: 3 replaces 2 (slot 0), then 4 replaces 0 (slot 1)
    EXPECT_TRUE(same(plan_swaps(slots, c.data(), 6, loose), {{0, 2, 3}, {1, 0, 4}}));
    loose.max_swaps = 1;
    EXPECT_TRUE(same(plan_swaps(slots, c.data(), 6, loose), {{0, 2, 3}}));
    loose.max_swaps = 0;
    EXPECT_TRUE(plan_swaps(slots, c.data(), 6, loose).empty());
  }
  {
    // Without hysteresis a strictly larger count is enough; equal counts never swap.
    const std::vector<double> c = {3, 3, 1, 3, 3, 100};
    MigrationParams zero;
    zero.hysteresis = 0;
    zero.min_margin = 0;
    EXPECT_TRUE(same(plan_swaps(slots, c.data(), 6, zero), {{0, 2, 5}}));
  }
  {
    const std::vector<double> c = {NAN, 2, 3, 9, 1, 1};  // a NaN count ranks last
    EXPECT_TRUE(same(plan_swaps(slots, c.data(), 6, p), {{1, 0, 3}}));
  }
  // Everything hot, or nothing: no swaps.
  const std::vector<double> c = {1, 2, 3};
  EXPECT_TRUE(plan_swaps({0, 1, 2}, c.data(), 3, p).empty());
  EXPECT_TRUE(plan_swaps({}, c.data(), 3, p).empty());
}

TEST(Migration, ApplySwapsRejectsInconsistentSwaps) {
  const std::vector<int32_t> slots = {5, 7, 9};
  auto rejects = [&](const std::vector<Swap>& swaps) {
    std::vector<int32_t> s = slots;
    const Status st = apply_swaps(&s, swaps, 16);
    EXPECT_EQ(s, slots) << "a failed apply must leave the slots untouched";
    return !st.ok();
  };
  EXPECT_TRUE(rejects({{0, 7, 1}}));             // evict not in that slot
  EXPECT_TRUE(rejects({{1, 7, 9}}));             // admit already held
  EXPECT_TRUE(rejects({{1, 7, 7}}));             // admit == evict: still held
  EXPECT_TRUE(rejects({{3, 7, 1}}));             // slot out of range
  EXPECT_TRUE(rejects({{-1, 7, 1}}));
  EXPECT_TRUE(rejects({{1, 7, -2}}));            // negative neuron
  EXPECT_TRUE(rejects({{1, 7, 16}}));            // >= n_ff
  EXPECT_TRUE(rejects({{0, 5, 1}, {1, 7, 1}}));  // the second admit is held by then
  EXPECT_TRUE(rejects({{0, 5, 1}, {0, 5, 2}}));  // slot 0 holds 1 by then
  std::vector<int32_t> dup = {1, 1};
  EXPECT_FALSE(apply_swaps(&dup, {}).ok());
  EXPECT_FALSE(apply_swaps(nullptr, {}).ok());

  std::vector<int32_t> s = slots;
  ASSERT_TRUE(apply_swaps(&s, {{0, 5, 1}, {2, 9, 5}, {0, 1, 3}}).ok());  // sequential semantics
  EXPECT_EQ(s, (std::vector<int32_t>{3, 7, 5}));
  ASSERT_TRUE(apply_swaps(&s, {{1, 7, 1000}}).ok());  // no n_ff given: no upper bound
}

// A migration loop: FiringCounters fed by a power-law firing stream, plan_swaps + apply_swaps
// every 16 tokens. Checks the slot invariants after every apply.
struct MigrationSim {
  static constexpr int64_t kNff = 2048;
  static constexpr size_t kCap = 128;
  static constexpr int kEvery = 16;
  FireStream stream{kNff, 0.9, 32.0, 1.0, 51};
  FiringCounters counters{1, kNff, kDefaultFiringHalfLife};
  std::vector<int32_t> slots;
  MigrationParams params;
  std::vector<int32_t> fired;
  std::vector<double> c;
  int64_t swaps = 0;
  MigrationSim() {
    // Start from the least frequent neurons: the worst possible placement.
    std::vector<int32_t> by_rank(kNff);
    for (int32_t i = 0; i < kNff; ++i)
      by_rank[static_cast<size_t>(stream.rank[static_cast<size_t>(i)])] = i;
    slots.assign(by_rank.end() - static_cast<std::ptrdiff_t>(kCap), by_rank.end());
  }
  void run(int tokens) {
    for (int k = 0; k < tokens; ++k) {
      stream.next(&fired);
      counters.add_token(0, fired.data(), static_cast<int64_t>(fired.size()));
      if (counters.raw_tokens(0) % kEvery != 0) continue;
      counters.counts(0, &c);
      const std::vector<Swap> sw = plan_swaps(slots, c.data(), kNff, params);
      ASSERT_LE(static_cast<int>(sw.size()), params.max_swaps);
      ASSERT_TRUE(apply_swaps(&slots, sw, kNff).ok());
      ASSERT_EQ(slots.size(), kCap);
      swaps += static_cast<int64_t>(sw.size());
    }
    ASSERT_EQ(std::set<int32_t>(slots.begin(), slots.end()).size(), kCap);
  }
  // Share of the true top-kCap neurons (by the stream's current ranks) that are hot.
  double overlap() const {
    size_t n = 0;
    for (int32_t i : slots) n += stream.rank[static_cast<size_t>(i)] < static_cast<int32_t>(kCap);
    return static_cast<double>(n) / kCap;
  }
};

TEST(Migration, StationaryStreamDoesNotThrash) {
  MigrationSim with;  // the default hysteresis
  MigrationSim without;
  without.params.hysteresis = 0;
  without.params.min_margin = 0;
  for (MigrationSim* sim : {&with, &without}) {
    sim->run(6000);  // warm-up: from the worst placement to a converged one
    if (HasFatalFailure()) return;
    EXPECT_GE(sim->overlap(), 0.95);
    sim->swaps = 0;
    sim->run(20000);
    if (HasFatalFailure()) return;
  }
  std::printf("stationary: %lld swaps in 20k tokens with hysteresis (overlap %.3f), %lld without "
              "(overlap %.3f)\n",
              static_cast<long long>(with.swaps), with.overlap(),
              static_cast<long long>(without.swaps), without.overlap());
  EXPECT_LT(with.swaps, static_cast<int64_t>(MigrationSim::kCap) * 2 / 100);
  EXPECT_GE(with.overlap(), 0.95);
  EXPECT_GT(without.swaps, 20 * std::max<int64_t>(with.swaps, 1));
}

TEST(Migration, HotSetFollowsAShift) {
  MigrationSim sim;
  sim.run(6000);
  if (HasFatalFailure()) return;
  ASSERT_GE(sim.overlap(), 0.95);
  sim.stream.set_ranks(0.9, 32.0, 1.0);  // a new random permutation of the same law
  const double before = sim.overlap();
  int tokens = 0;
  while (sim.overlap() < 0.95 && tokens < 20000) {
    sim.run(256);
    if (HasFatalFailure()) return;
    tokens += 256;
  }
  std::printf("shift: overlap %.3f right after, >= 0.95 after %d tokens\n", before, tokens);
  EXPECT_LT(before, 0.3);
  EXPECT_LE(tokens, 4096);
  sim.run(4096);  // and it stays there
  EXPECT_GE(sim.overlap(), 0.95);
}

}  // namespace
}  // namespace hc::sparse
