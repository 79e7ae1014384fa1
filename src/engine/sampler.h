// Token sampling with llama.cpp's default chain order:
//   penalties -> top-k -> top-p -> min-p -> temperature -> dist
// so top-p and min-p see the temperature-1 distribution, as in llama.cpp. temp <= 0 means
// greedy: argmax after the penalties, ties broken towards the lowest token id.
// Deterministic for a given seed: candidates are ordered by (logit desc, id asc), never by
// an unstable sort, and the only randomness is one uniform draw per sampled token.
#pragma once
#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace hc {

struct SamplerParams {
  float temp = 0.8f;            // <= 0: greedy
  int top_k = 40;               // <= 0: off
  float top_p = 0.95f;          // >= 1: off
  float min_p = 0.05f;          // <= 0: off
  float repeat_penalty = 1.0f;  // 1: off; > 1 divides positive / multiplies negative logits
  int repeat_last_n = 64;       // 0: off; < 0: all of recent_tokens
  float frequency_penalty = 0.0f;  // subtracted count times (llama.cpp penalty_freq)
  float presence_penalty = 0.0f;   // subtracted once if present (llama.cpp penalty_present)
  uint64_t seed = 0;
};

struct TokenCandidate {
  int32_t id;
  float logit;
};

// The working set of one sampling step. `sorted` means ordered by (logit desc, id asc).
struct CandidateList {
  std::vector<TokenCandidate> data;
  bool sorted = false;
  std::vector<double> probs;  // softmax scratch for top-p and drawing, reused across tokens

  // Fills data with every token in id order (NaN logits become -inf so sorting stays sane).
  void assign(std::span<const float> logits);
  void sort();
};

// The chain's stages, exposed for tests and for callers that build their own chain.
// `recent` holds the most recent tokens, oldest first; only the last `last_n` count.
void apply_penalties(CandidateList* c, std::span<const int32_t> recent, int last_n,
                     float repeat_penalty, float frequency_penalty, float presence_penalty);
void apply_top_k(CandidateList* c, int k);
void apply_top_p(CandidateList* c, float p);  // keeps the smallest prefix with mass >= p
void apply_min_p(CandidateList* c, float p);  // keeps tokens with prob >= p * max prob
void apply_temperature(CandidateList* c, float temp);  // temp > 0
// Index into c->data of the greedy choice (highest logit, lowest id on ties).
size_t argmax_index(const CandidateList& c);

class Sampler {
 public:
  explicit Sampler(const SamplerParams& params);

  // logits: [n_vocab] for the next token. recent_tokens: the context so far,
  // oldest first, used for the repetition penalties. Returns a token id in [0, n_vocab).
  int32_t sample(std::span<const float> logits, std::span<const int32_t> recent_tokens);

  const SamplerParams& params() const { return params_; }
  // True when sample() is the plain argmax of the logits whatever the recent tokens (greedy,
  // no penalty on): callers may then take Session::eval_argmax's id instead.
  bool greedy() const;
  void reseed(uint64_t seed);

 private:
  // Draws from softmax(logits) over the current candidates.
  size_t draw(CandidateList& c);

  SamplerParams params_;
  std::mt19937_64 rng_;
  // Reused between calls to avoid per-token allocations.
  CandidateList cur_;
};

}  // namespace hc
