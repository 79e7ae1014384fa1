#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <vector>

namespace hc {
namespace {

SamplerParams plain(float temp, uint64_t seed = 1234) {
  SamplerParams p;
  p.temp = temp;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.repeat_penalty = 1.0f;
  p.seed = seed;
  return p;
}

std::set<int32_t> ids(const CandidateList& c) {
  std::set<int32_t> s;
  for (const TokenCandidate& t : c.data) s.insert(t.id);
  return s;
}

// Logits whose softmax is exactly `probs` (up to rounding).
std::vector<float> logits_for(const std::vector<double>& probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(static_cast<float>(std::log(p)));
  return l;
}

TEST(Sampler, GreedyPicksArgmaxLowestIdOnTies) {
  Sampler s(plain(0.0f));
  std::vector<float> logits = {0.5f, 3.0f, -1.0f, 3.0f, 2.9f};
  EXPECT_EQ(s.sample(logits, {}), 1);
  std::vector<float> neg = {-5.0f, -2.0f, -2.0f};
  EXPECT_EQ(s.sample(neg, {}), 1);
  // Logits are not modified.
  EXPECT_EQ(logits, (std::vector<float>{0.5f, 3.0f, -1.0f, 3.0f, 2.9f}));
}

TEST(Sampler, GreedyAppliesRepetitionPenaltyFirst) {
  SamplerParams p = plain(0.0f);
  p.repeat_penalty = 2.0f;
  Sampler s(p);
  std::vector<float> logits = {1.0f, 3.0f, 2.0f};
  const std::vector<int32_t> recent = {1};
  EXPECT_EQ(s.sample(logits, recent), 2);  // 3/2 = 1.5 < 2
}

TEST(Sampler, TopKOneEqualsGreedy) {
  std::mt19937 gen(7);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  SamplerParams p;  // default chain, only k = 1
  p.temp = 1.5f;
  p.top_k = 1;
  p.seed = 99;
  Sampler topk(p);
  Sampler greedy(plain(0.0f));
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<float> logits(257);
    for (float& l : logits) l = nd(gen);
    EXPECT_EQ(topk.sample(logits, {}), greedy.sample(logits, {})) << "trial " << trial;
  }
}

TEST(Sampler, RepetitionPenaltyDividesPositiveMultipliesNegative) {
  CandidateList c;
  const std::vector<float> logits = {2.0f, -2.0f, 1.0f, 0.0f, 4.0f};
  c.assign(logits);
  const std::vector<int32_t> recent = {0, 1, 1, 3};
  apply_penalties(&c, recent, 64, 2.0f, 0.0f, 0.0f);
  EXPECT_FLOAT_EQ(c.data[0].logit, 1.0f);   // positive: divided
  EXPECT_FLOAT_EQ(c.data[1].logit, -4.0f);  // negative: multiplied, once despite 2 repeats
  EXPECT_FLOAT_EQ(c.data[2].logit, 1.0f);   // not recent
  EXPECT_FLOAT_EQ(c.data[3].logit, 0.0f);   // zero stays zero
  EXPECT_FLOAT_EQ(c.data[4].logit, 4.0f);

  // Only the last `last_n` tokens count.
  c.assign(logits);
  apply_penalties(&c, recent, 2, 2.0f, 0.0f, 0.0f);
  EXPECT_FLOAT_EQ(c.data[0].logit, 2.0f);
  EXPECT_FLOAT_EQ(c.data[1].logit, -4.0f);

  // last_n == 0 disables; frequency/presence are subtracted as in llama.cpp.
  c.assign(logits);
  apply_penalties(&c, recent, 0, 2.0f, 0.0f, 0.0f);
  EXPECT_FLOAT_EQ(c.data[0].logit, 2.0f);
  c.assign(logits);
  apply_penalties(&c, recent, -1, 1.0f, 0.5f, 0.25f);
  EXPECT_FLOAT_EQ(c.data[1].logit, -2.0f - 2 * 0.5f - 0.25f);
  EXPECT_FLOAT_EQ(c.data[3].logit, 0.0f - 0.5f - 0.25f);

  // Works on a list that is no longer in id order, and ignores out-of-range ids.
  c.assign(logits);
  c.sort();
  const std::vector<int32_t> odd = {4, 77, -3};
  apply_penalties(&c, odd, 64, 2.0f, 0.0f, 0.0f);
  for (const TokenCandidate& t : c.data) {
    EXPECT_FLOAT_EQ(t.logit, t.id == 4 ? 2.0f : logits[t.id]);
  }
}

TEST(Sampler, TopKKeepsTheKLargest) {
  CandidateList c;
  c.assign(std::vector<float>{0.1f, 5.0f, 3.0f, 3.0f, -1.0f, 4.0f});
  apply_top_k(&c, 3);
  ASSERT_EQ(c.data.size(), 3u);
  EXPECT_EQ(c.data[0].id, 1);
  EXPECT_EQ(c.data[1].id, 5);
  EXPECT_EQ(c.data[2].id, 2);  // tie with id 3 broken towards the lower id
  apply_top_k(&c, 0);          // off
  EXPECT_EQ(c.data.size(), 3u);
  apply_top_k(&c, 100);        // larger than the list: no-op
  EXPECT_EQ(c.data.size(), 3u);
}

TEST(Sampler, TopPKeepsSmallestPrefixReachingP) {
  const std::vector<float> logits = logits_for({0.05, 0.5, 0.15, 0.3});
  CandidateList c;
  c.assign(logits);
  apply_top_p(&c, 0.75f);  // 0.5 + 0.3 = 0.8 >= 0.75
  EXPECT_EQ(ids(c), (std::set<int32_t>{1, 3}));
  c.assign(logits);
  apply_top_p(&c, 0.85f);  // needs 0.15 too
  EXPECT_EQ(ids(c), (std::set<int32_t>{1, 3, 2}));
  c.assign(logits);
  apply_top_p(&c, 0.4f);  // the top token alone suffices
  EXPECT_EQ(ids(c), (std::set<int32_t>{1}));
  c.assign(logits);
  apply_top_p(&c, 1.0f);  // off
  EXPECT_EQ(c.data.size(), 4u);
}

TEST(Sampler, MinPKeepsTokensAboveFractionOfMax) {
  const std::vector<float> logits = logits_for({0.05, 0.5, 0.15, 0.3});
  CandidateList c;
  c.assign(logits);
  apply_min_p(&c, 0.25f);  // threshold 0.125
  EXPECT_EQ(ids(c), (std::set<int32_t>{1, 2, 3}));
  c.assign(logits);
  apply_min_p(&c, 0.5f);  // threshold 0.25
  EXPECT_EQ(ids(c), (std::set<int32_t>{1, 3}));
  c.assign(logits);
  apply_min_p(&c, 0.0f);  // off
  EXPECT_EQ(c.data.size(), 4u);
}

// Sample frequencies at temperature t match softmax(logits / t) within 5 standard errors.
void expect_matches_softmax(float temp) {
  const std::vector<float> logits = {1.0f, 2.0f, 0.5f, 3.0f, -1.0f};
  std::vector<double> p(logits.size());
  double sum = 0.0;
  for (size_t i = 0; i < logits.size(); ++i) sum += p[i] = std::exp(logits[i] / temp);
  for (double& x : p) x /= sum;

  Sampler s(plain(temp, 42));
  const int n = 40000;
  std::vector<int> hist(logits.size(), 0);
  std::vector<float> work = logits;
  for (int i = 0; i < n; ++i) ++hist[s.sample(work, {})];
  for (size_t i = 0; i < p.size(); ++i) {
    const double freq = static_cast<double>(hist[i]) / n;
    const double se = std::sqrt(p[i] * (1 - p[i]) / n);
    EXPECT_NEAR(freq, p[i], 5 * se + 1e-4) << "token " << i << " temp " << temp;
  }
}

TEST(Sampler, FrequenciesMatchSoftmaxAtTemperatureOne) { expect_matches_softmax(1.0f); }
TEST(Sampler, FrequenciesMatchSoftmaxAtTemperatureHalf) { expect_matches_softmax(0.5f); }

TEST(Sampler, TruncationNeverSamplesRemovedTokens) {
  SamplerParams p = plain(1.0f, 5);
  p.top_k = 3;
  Sampler s(p);
  std::vector<float> logits = {1.0f, 2.0f, 0.5f, 3.0f, -1.0f, 2.5f};
  std::set<int32_t> seen;
  for (int i = 0; i < 2000; ++i) seen.insert(s.sample(logits, {}));
  EXPECT_EQ(seen, (std::set<int32_t>{1, 3, 5}));

  p = plain(1.0f, 5);
  p.min_p = 0.3f;  // keeps logits >= 3 + ln 0.3 = 1.796
  Sampler m(p);
  seen.clear();
  for (int i = 0; i < 2000; ++i) seen.insert(m.sample(logits, {}));
  EXPECT_EQ(seen, (std::set<int32_t>{1, 3, 5}));
}

TEST(Sampler, DeterministicForASeed) {
  SamplerParams p;  // defaults: the full chain
  p.temp = 1.0f;
  p.seed = 2024;
  std::vector<float> logits(100);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = std::sin(static_cast<float>(i)) * 2;
  auto run = [&](uint64_t seed) {
    SamplerParams q = p;
    q.seed = seed;
    Sampler s(q);
    std::vector<int32_t> out;
    for (int i = 0; i < 50; ++i) out.push_back(s.sample(logits, out));
    return out;
  };
  EXPECT_EQ(run(2024), run(2024));
  EXPECT_NE(run(2024), run(2025));

  Sampler s(p);
  const int32_t first = s.sample(logits, {});
  s.reseed(2024);
  EXPECT_EQ(s.sample(logits, {}), first);
}

// Greedy without penalties skips the candidate list: the same choice as with it (a penalty
// that changes nothing forces the full path) on ties, NaN, -inf and random logits.
TEST(Sampler, GreedyFastPathEqualsTheCandidateListPath) {
  SamplerParams fast_p = plain(0.0f), full_p = plain(0.0f);
  full_p.presence_penalty = 1e-30f;  // active, but too small to move any logit here
  full_p.repeat_last_n = 1;
  Sampler fast(fast_p), full(full_p);
  const std::vector<int32_t> recent = {0};
  std::vector<std::vector<float>> cases = {
      {NAN, NAN, NAN}, {-INFINITY, -INFINITY}, {NAN, -INFINITY, 2.0f, 2.0f}, {1.0f, NAN, 1.0f},
      {3.0f}, {-1.0f, -1.0f, -0.5f, -0.5f}};
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> lvl(-8, 8);
  for (int n = 0; n < 50; ++n) {
    std::vector<float> v(200);
    for (float& x : v) x = 0.25f * lvl(rng);  // many ties
    cases.push_back(v);
  }
  for (const auto& c : cases) {
    std::vector<float> shifted = c;  // token 0 is the penalised one: keep it out of the top
    shifted[0] = shifted.size() > 1 ? NAN : shifted[0];
    EXPECT_EQ(fast.sample(shifted, {}), full.sample(shifted, recent));
  }
}

TEST(Sampler, NanLogitsAreNeverChosen) {
  Sampler s(plain(1.0f));
  std::vector<float> logits = {NAN, 0.0f, NAN};
  for (int i = 0; i < 100; ++i) EXPECT_EQ(s.sample(logits, {}), 1);
  Sampler g(plain(0.0f));
  EXPECT_EQ(g.sample(logits, {}), 1);
}

}  // namespace
}  // namespace hc
