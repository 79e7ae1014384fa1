// attention_batch (prompt batches) against a float64 causal attention over the same fp16 cache
// (q and the softmax weights rounded to fp16, as both hotcold paths and ggml do),
// and against attention_one (ggml's per-token path): blocks, tails, a non-empty cache prefix
// (pos0 > 0), grouped-query heads and 1-3 threads.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/thread_pool.h"
#include "ops/cpu/attention.h"

namespace hc {
namespace {

struct AttnCase {
  int n_head = 4, n_head_kv = 2, hd = 64;
  int64_t n_ctx = 160;
  std::vector<fp16_t> k, v_t;  // k [n_ctx][kv_dim], v_t [kv_dim][n_ctx]
  std::vector<float> q;        // [n_tok][n_head * hd]
  int64_t kv_dim() const { return int64_t{n_head_kv} * hd; }
  ops::AttentionShape shape() const { return {n_head, n_head_kv, hd, kv_dim(), n_ctx}; }

  AttnCase(int64_t n_tok, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, 1.0f);
    k.resize(n_ctx * kv_dim());
    v_t.resize(kv_dim() * n_ctx);
    for (auto& x : k) x = fp32_to_fp16(d(rng));
    for (auto& x : v_t) x = fp32_to_fp16(d(rng));
    q.resize(n_tok * n_head * hd);
    for (auto& x : q) x = 2.0f * d(rng);  // sharp softmax rows as well as flat ones
  }
};

// float64 attention of token t (at position pos) over positions [0, pos].
std::vector<double> exact(const AttnCase& s, int64_t t, int64_t pos, float scale) {
  const int group = s.n_head / s.n_head_kv;
  std::vector<double> out(s.n_head * s.hd);
  for (int h = 0; h < s.n_head; ++h) {
    const int hk = h / group;
    std::vector<double> w(pos + 1);
    double mx = -1e300;
    for (int64_t j = 0; j <= pos; ++j) {
      double acc = 0;
      for (int dd = 0; dd < s.hd; ++dd)
        acc += double(fp16_to_fp32(fp32_to_fp16(s.q[(t * s.n_head + h) * s.hd + dd]))) * fp16_to_fp32(s.k[j * s.kv_dim() + hk * s.hd + dd]);
      w[j] = acc * scale;
      mx = std::max(mx, w[j]);
    }
    double sum = 0;
    for (auto& x : w) sum += (x = std::exp(x - mx));
    for (int dd = 0; dd < s.hd; ++dd) {
      double acc = 0;
      for (int64_t j = 0; j <= pos; ++j)
        acc += double(fp16_to_fp32(fp32_to_fp16(static_cast<float>(w[j] / sum)))) * fp16_to_fp32(s.v_t[(hk * s.hd + dd) * s.n_ctx + j]);
      out[h * s.hd + dd] = acc;
    }
  }
  return out;
}

TEST(AttentionBatch, MatchesFloat64AndPerTokenPath) {
  if (!ops::attention_batch_available()) GTEST_SKIP() << "no AVX2 or AVX-512 on this CPU";
  const float scale = 0.125f;
  for (int64_t pos0 : {0, 37}) {
    for (int64_t n_tok : {8, 33, 70}) {
      AttnCase s(n_tok, 3 + static_cast<uint32_t>(n_tok + pos0));
      for (int nth : {1, 2, 3}) {
        ThreadPool pool(nth);
        std::vector<float> out(n_tok * s.n_head * s.hd, NAN), scratch;
        ops::attention_batch(s.q.data(), s.k.data(), s.v_t.data(), pos0, n_tok, s.shape(), scale,
                             out.data(), pool, scratch);
        std::vector<float> one(s.n_head * s.hd), tmp(2 * 512);
        for (int64_t t = 0; t < n_tok; ++t) {
          const int64_t pos = pos0 + t;
          const auto want = exact(s, t, pos, scale);
          const int64_t pad = ops::attention_kv_pad(pos + 1);
          ops::attention_one(s.q.data() + t * s.n_head * s.hd, s.k.data(), s.v_t.data(), pos + 1,
                             pad, s.shape(), scale, {}, 0, s.n_head, one.data(), tmp.data());
          for (int i = 0; i < s.n_head * s.hd; ++i) {
            // Both round q and the softmax weights to fp16 as ggml does; the fp32 sums stay
            // inside 1e-4, but a weight may round to the neighbouring fp16 value (one ulp,
            // 2^-11 relative: 2.4e-4 for a weight of 0.5 against a v of 1), and with the avx2
            // flavour's exp (HOTCOLD_ISA=avx2) one did (1.1e-4).
            ASSERT_NEAR(out[t * s.n_head * s.hd + i], want[i], 6e-4)
                << "pos0 " << pos0 << " n_tok " << n_tok << " t " << t << " i " << i << " threads " << nth;
            // ggml's path rounds q and the weights to fp16: 2^-11 relative per term.
            ASSERT_NEAR(one[i], want[i], 5e-3) << "per-token path, t " << t << " i " << i;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace hc
