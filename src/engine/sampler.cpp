#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>

#include "core/status.h"
#include "ops/cpu/ops.h"

namespace hc {
namespace {

bool before(const TokenCandidate& a, const TokenCandidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

// softmax of c's logits into probs, in the same order.
void softmax(const CandidateList& c, std::vector<double>* probs) {
  float max_l = -std::numeric_limits<float>::infinity();
  for (const TokenCandidate& t : c.data) max_l = std::max(max_l, t.logit);
  probs->resize(c.data.size());
  if (max_l == -std::numeric_limits<float>::infinity()) {  // every token masked: uniform
    std::fill(probs->begin(), probs->end(), 1.0 / static_cast<double>(c.data.size()));
    return;
  }
  double sum = 0.0;
  for (size_t i = 0; i < c.data.size(); ++i) {
    const double p = std::exp(static_cast<double>(c.data[i].logit) - max_l);
    (*probs)[i] = p;
    sum += p;
  }
  for (double& p : *probs) p /= sum;
}

}  // namespace

void CandidateList::assign(std::span<const float> logits) {
  data.resize(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) {
    const float l = logits[i];
    const float masked = -std::numeric_limits<float>::infinity();
    data[i] = {static_cast<int32_t>(i), std::isnan(l) ? masked : l};
  }
  sorted = false;
}

void CandidateList::sort() {
  if (!sorted) std::sort(data.begin(), data.end(), before);
  sorted = true;
}

namespace {
// Whether the penalty settings change anything, given some recent tokens.
bool penalties_on(int last_n, float repeat_penalty, float frequency_penalty,
                  float presence_penalty) {
  return last_n != 0 &&
         (repeat_penalty != 1.0f || frequency_penalty != 0.0f || presence_penalty != 0.0f);
}
bool penalties_apply(std::span<const int32_t> recent, int last_n, float repeat_penalty,
                     float frequency_penalty, float presence_penalty) {
  return !recent.empty() &&
         penalties_on(last_n, repeat_penalty, frequency_penalty, presence_penalty);
}
}  // namespace

void apply_penalties(CandidateList* c, std::span<const int32_t> recent, int last_n,
                     float repeat_penalty, float frequency_penalty, float presence_penalty) {
  if (!penalties_apply(recent, last_n, repeat_penalty, frequency_penalty, presence_penalty))
    return;
  if (last_n > 0 && recent.size() > static_cast<size_t>(last_n)) {
    recent = recent.subspan(recent.size() - last_n);
  }
  std::unordered_map<int32_t, int> count;
  for (int32_t tok : recent) ++count[tok];

  auto penalize = [&](TokenCandidate* t, int n) {
    // Dividing a negative logit would make the token *more* likely, hence the multiply
    // (llama.cpp's rule: logit <= 0 multiplies, > 0 divides).
    if (t->logit <= 0) {
      t->logit *= repeat_penalty;
    } else {
      t->logit /= repeat_penalty;
    }
    t->logit -= static_cast<float>(n) * frequency_penalty + presence_penalty;
  };
  for (const auto& [tok, n] : count) {
    // A fresh list is in id order (data[id].id == id); otherwise search for the token.
    if (tok >= 0 && static_cast<size_t>(tok) < c->data.size() && c->data[tok].id == tok) {
      penalize(&c->data[tok], n);
      continue;
    }
    for (TokenCandidate& t : c->data) {
      if (t.id == tok) penalize(&t, n);
    }
  }
  c->sorted = false;
}

void apply_top_k(CandidateList* c, int k) {
  if (k <= 0) return;
  const size_t keep = std::min(static_cast<size_t>(k), c->data.size());
  if (!c->sorted) {
    std::partial_sort(c->data.begin(), c->data.begin() + keep, c->data.end(), before);
    c->sorted = true;
  }
  c->data.resize(keep);
}

void apply_top_p(CandidateList* c, float p) {
  if (p >= 1.0f || c->data.empty()) return;
  c->sort();
  std::vector<double>& probs = c->probs;
  softmax(*c, &probs);
  double cum = 0.0;
  size_t keep = c->data.size();
  for (size_t i = 0; i < probs.size(); ++i) {
    cum += probs[i];
    if (cum >= p) {
      keep = i + 1;
      break;
    }
  }
  c->data.resize(keep);
}

void apply_min_p(CandidateList* c, float p) {
  if (p <= 0.0f || c->data.empty()) return;
  float max_l = -std::numeric_limits<float>::infinity();
  for (const TokenCandidate& t : c->data) max_l = std::max(max_l, t.logit);
  // p_i >= p * p_max  <=>  logit_i >= max_logit + log(p)
  const float min_logit = max_l + std::log(p);
  std::erase_if(c->data, [&](const TokenCandidate& t) { return t.logit < min_logit; });
}

void apply_temperature(CandidateList* c, float temp) {
  HC_CHECK(temp > 0.0f);
  for (TokenCandidate& t : c->data) t.logit /= temp;
}

size_t argmax_index(const CandidateList& c) {
  HC_CHECK(!c.data.empty());
  size_t best = 0;
  for (size_t i = 1; i < c.data.size(); ++i) {
    if (before(c.data[i], c.data[best])) best = i;
  }
  return best;
}

bool Sampler::greedy() const {
  const SamplerParams& p = params_;
  return p.temp <= 0.0f &&
         !penalties_on(p.repeat_last_n, p.repeat_penalty, p.frequency_penalty, p.presence_penalty);
}

Sampler::Sampler(const SamplerParams& params) : params_(params), rng_(params.seed) {}

void Sampler::reseed(uint64_t seed) {
  params_.seed = seed;
  rng_.seed(seed);
}

size_t Sampler::draw(CandidateList& c) {
  std::vector<double>& probs = c.probs;
  softmax(c, &probs);
  const double target = std::uniform_real_distribution<double>(0.0, 1.0)(rng_);
  double cum = 0.0;
  for (size_t i = 0; i < probs.size(); ++i) {
    cum += probs[i];
    if (cum > target) return i;
  }
  return probs.size() - 1;  // rounding left cum just below target
}

int32_t Sampler::sample(std::span<const float> logits, std::span<const int32_t> recent_tokens) {
  HC_CHECK(!logits.empty());
  const SamplerParams& p = params_;
  if (p.temp <= 0.0f && !penalties_apply(recent_tokens, p.repeat_last_n, p.repeat_penalty,
                                         p.frequency_penalty, p.presence_penalty)) {
    // Greedy on the logits as they are: argmax_index's choice (the first of equal maxima, NaN
    // never) without building the candidate list (a 49k vocabulary per token and slot).
    return ops::argmax_row(logits.data(), static_cast<int64_t>(logits.size()));
  }
  cur_.assign(logits);
  apply_penalties(&cur_, recent_tokens, p.repeat_last_n, p.repeat_penalty,
                  p.frequency_penalty, p.presence_penalty);
  if (p.temp <= 0.0f) return cur_.data[argmax_index(cur_)].id;
  apply_top_k(&cur_, p.top_k);
  apply_top_p(&cur_, p.top_p);
  apply_min_p(&cur_, p.min_p);
  apply_temperature(&cur_, p.temp);
  return cur_.data[draw(cur_)].id;
}

}  // namespace hc
