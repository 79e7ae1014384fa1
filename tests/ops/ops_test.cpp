#include <gtest/gtest.h>

#include "ops_test_util.h"

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "ops/cpu/attention.h"
#include "ops/cpu/matmul.h"
#include "ops/cpu/ops.h"
#include "ops/cpu/vec.h"
#include "quant/quant.h"

namespace hc {
namespace {

using ops_test::randn;

// Quantises a float matrix [rows, cols] into type t.
std::vector<uint8_t> quantize_matrix(GgmlType t, const std::vector<float>& w, int64_t rows, int64_t cols) {
  const int64_t rb = row_bytes(t, cols);
  std::vector<uint8_t> out(rb * rows);
  for (int64_t r = 0; r < rows; ++r) quant::quantize_row_ref(t, w.data() + r * cols, out.data() + r * rb, cols);
  return out;
}

TEST(Matmul, ThreadedMatchesScalarReferenceForEveryType) {
  const GgmlType types[] = {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0,
                            GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q4_K, GgmlType::Q5_K,
                            GgmlType::Q6_K};
  for (GgmlType t : types) {
    for (int64_t n_tok : {1, 3, 40}) {
      const int64_t cols = 512, rows = 37;
      auto wf = randn(rows * cols, 1);
      auto wq = quantize_matrix(t, wf, rows, cols);
      auto x = randn(n_tok * cols, 2);
      TensorView w = TensorView::make(t, wq.data(), cols, rows);
      std::vector<float> y(n_tok * rows), yr(n_tok * rows);
      ops::matmul_ref(w, x.data(), n_tok, yr.data());
      for (int nt : {1, 2, 3}) {
        ThreadPool pool(nt);
        ops::MatmulInput s;
        ops::matmul(w, x.data(), n_tok, y.data(), pool, s);
        for (int64_t i = 0; i < n_tok * rows; ++i) {
          // Same quantised activations; only summation order may differ: relative 1e-4 of
          // the sum of |terms| (~ sqrt(cols) * E|w||x| ~ 20) is a loose fp32 bound.
          ASSERT_NEAR(y[i], yr[i], 2e-3f + 1e-4f * std::fabs(yr[i]))
              << dtype_name(t) << " n_tok " << n_tok << " threads " << nt << " i " << i;
        }
      }
      // And against the exact float product: quantisation error only.
      if (t == GgmlType::F32) {
        for (int64_t tk = 0; tk < n_tok; ++tk)
          for (int64_t r = 0; r < rows; ++r) {
            double ref = 0;
            for (int64_t c = 0; c < cols; ++c) ref += double(wf[r * cols + c]) * x[tk * cols + c];
            ASSERT_NEAR(yr[tk * rows + r], ref, 1e-3);
          }
      }
    }
  }
}

TEST(Matmul, SharedInputIsQuantisedOncePerTypeAndResetInvalidates) {
  // Weights of three dot types (Q8_1, Q8_K, Q8_0) read one input, as Q/K/V can in a mixed file.
  const int64_t cols = 256, rows = 24, n_tok = 5;
  const GgmlType types[] = {GgmlType::Q4_1, GgmlType::Q4_K, GgmlType::Q8_0, GgmlType::Q4_1};
  std::vector<std::vector<uint8_t>> wq;
  for (GgmlType t : types) wq.push_back(quantize_matrix(t, randn(rows * cols, 11), rows, cols));
  auto x = randn(n_tok * cols, 12);
  ThreadPool pool(2);
  ops::MatmulInput shared, single;
  shared.reset(x.data(), n_tok, cols);
  for (size_t i = 0; i < wq.size(); ++i) {
    TensorView w = TensorView::make(types[i], wq[i].data(), cols, rows);
    std::vector<float> a(n_tok * rows), b(n_tok * rows);
    ops::matmul(w, shared, a.data(), pool);
    ops::matmul(w, x.data(), n_tok, b.data(), pool, single);
    ASSERT_EQ(a, b) << dtype_name(types[i]);
  }
  // New contents at the same address: reset must drop the cached quantisation.
  TensorView w0 = TensorView::make(types[0], wq[0].data(), cols, rows);
  std::vector<float> before(n_tok * rows), after(n_tok * rows), fresh(n_tok * rows);
  ops::matmul(w0, shared, before.data(), pool);
  for (float& v : x) v = -v;
  shared.reset(x.data(), n_tok, cols);
  ops::matmul(w0, shared, after.data(), pool);
  ops::matmul(w0, x.data(), n_tok, fresh.data(), pool, single);
  EXPECT_EQ(after, fresh);
  EXPECT_NE(after, before);
}

TEST(Ops, RmsnormMatchesDefinition) {
  auto x = randn(300, 3);
  auto w = randn(300, 4);
  std::vector<float> out(300);
  ops::rmsnorm(out.data(), x.data(), w.data(), 300, 1e-5f);
  double ss = 0;
  for (float v : x) ss += double(v) * v;
  const double scale = 1.0 / std::sqrt(ss / 300 + 1e-5);
  for (int i = 0; i < 300; ++i) ASSERT_NEAR(out[i], x[i] * scale * w[i], 1e-5);
}

TEST(Ops, LayernormMatchesDefinition) {
  auto x = randn(300, 13);
  for (float& v : x) v += 0.7f;  // a non-zero mean to subtract
  auto w = randn(300, 14);
  auto b = randn(300, 15);
  std::vector<float> out(300), nob(300);
  ops::layernorm(out.data(), x.data(), w.data(), b.data(), 300, 1e-5f);
  ops::layernorm(nob.data(), x.data(), w.data(), nullptr, 300, 1e-5f);
  double mean = 0, var = 0;
  for (float v : x) mean += v;
  mean /= 300;
  for (float v : x) var += (v - mean) * (v - mean);
  const double scale = 1.0 / std::sqrt(var / 300 + 1e-5);
  for (int i = 0; i < 300; ++i) {
    ASSERT_NEAR(out[i], (x[i] - mean) * scale * w[i] + b[i], 1e-5) << i;
    ASSERT_NEAR(nob[i], (x[i] - mean) * scale * w[i], 1e-5) << i;
  }
  // In place, as the forward pass may call it.
  auto y = x;
  ops::layernorm(y.data(), y.data(), w.data(), b.data(), 300, 1e-5f);
  EXPECT_EQ(y, out);
}

TEST(Ops, GeluIsGgmlsFp16TableOfTheTanhApproximation) {
  std::vector<float> x = {-12.0f, -10.0f, -3.3f, -0.5f, 0.0f, 1e-3f, 0.7f, 2.5f, 9.99f, 10.0f, 42.0f};
  auto y = x;
  ops::gelu(y.data(), static_cast<int64_t>(y.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    const double v = x[i];
    if (v <= -10) {
      EXPECT_EQ(y[i], 0.0f);
      continue;
    }
    if (v >= 10) {
      EXPECT_EQ(y[i], x[i]);
      continue;
    }
    // The table: x rounded to fp16, gelu in float, the result rounded to fp16.
    const float xr = fp16_to_fp32(fp32_to_fp16(x[i]));
    EXPECT_EQ(y[i], fp16_to_fp32(fp32_to_fp16(ops::gelu_f32(xr)))) << x[i];
    // And the tanh approximation itself: off by rounding x to fp16 (the move of gelu from x to
    // the rounded x) and the result to fp16 (2^-11 relative), with a margin.
    const auto gd = [](double u) {
      return 0.5 * u * (1 + std::tanh(std::sqrt(2 / M_PI) * u * (1 + 0.044715 * u * u)));
    };
    const double g = gd(v);
    EXPECT_NEAR(y[i], g, std::fabs(gd(xr) - g) + 2e-3 * std::fabs(g) + 1e-9) << x[i];
  }
}

TEST(Ops, NeoxRopeRotatesHalvesByPosTimesFrequency) {
  const int n_rot = 64, half = n_rot / 2;
  const float base = 10000.0f;
  std::vector<float> cs(n_rot);
  const int pos = 23;
  ops::rope_cache(cs.data(), n_rot, std::pow(base, -2.0f / n_rot), 1.0f, nullptr, pos);
  auto x = randn(n_rot, 6);
  auto y = x;
  ops::rope_apply_neox(y.data(), n_rot, cs.data());
  for (int i = 0; i < half; ++i) {
    const double th = pos * std::pow(double(base), -2.0 * i / n_rot);
    ASSERT_NEAR(y[i], x[i] * std::cos(th) - x[i + half] * std::sin(th), 1e-4);
    ASSERT_NEAR(y[i + half], x[i] * std::sin(th) + x[i + half] * std::cos(th), 1e-4);
  }
}

TEST(Ops, RopeRotatesAdjacentPairsByPosTimesFrequency) {
  const int n_rot = 64;
  const float base = 10000.0f;
  std::vector<float> cs(n_rot);
  const int pos = 37;
  ops::rope_cache(cs.data(), n_rot, std::pow(base, -2.0f / n_rot), 1.0f, nullptr, pos);
  auto x = randn(n_rot, 5);
  auto y = x;
  ops::rope_apply(y.data(), n_rot, cs.data());
  for (int i = 0; i < n_rot / 2; ++i) {
    const double th = pos * std::pow(double(base), -2.0 * i / n_rot);
    ASSERT_NEAR(y[2 * i], x[2 * i] * std::cos(th) - x[2 * i + 1] * std::sin(th), 1e-4);
    ASSERT_NEAR(y[2 * i + 1], x[2 * i] * std::sin(th) + x[2 * i + 1] * std::cos(th), 1e-4);
  }
  // Norm is preserved by a rotation.
  double n0 = 0, n1 = 0;
  for (int i = 0; i < n_rot; ++i) { n0 += x[i] * x[i]; n1 += y[i] * y[i]; }
  EXPECT_NEAR(n0, n1, 1e-3);
}

TEST(Attention, GroupedQueryMatchesNaiveSoftmaxAttention) {
  const int64_t n_ctx = 40, n_kv = 23;
  ops::AttentionShape sh{8, 2, 16, 2 * 16, n_ctx};
  auto q = randn(sh.n_head * sh.head_dim, 6);
  auto kf = randn(n_kv * sh.k_stride, 7), vf = randn(n_kv * sh.k_stride, 8);
  // K as [pos][kv_dim]; V transposed as [kv_dim][n_ctx].
  std::vector<fp16_t> k(kf.size()), v_t(sh.k_stride * n_ctx);
  for (size_t i = 0; i < kf.size(); ++i) k[i] = fp32_to_fp16(kf[i]);
  for (int64_t j = 0; j < n_kv; ++j)
    for (int64_t d = 0; d < sh.k_stride; ++d) v_t[d * n_ctx + j] = fp32_to_fp16(vf[j * sh.k_stride + d]);
  const float scale = 0.25f;
  const int64_t n_pad = ops::attention_kv_pad(n_kv);
  EXPECT_EQ(n_pad, 256);  // beyond our 40-position cache: masked, never read
  for (int64_t n_tokens : {1, 2}) {
    const ops::AttentionKernels kern = ops::attention_kernels(n_tokens, sh.head_dim, n_pad);
    std::vector<float> out(q.size()), tmp(2 * n_pad);
    ops::attention_one(q.data(), k.data(), v_t.data(), n_kv, n_pad, sh, scale, kern, 0, sh.n_head,
                       out.data(), tmp.data());
    for (int h = 0; h < sh.n_head; ++h) {
      const int hk = h / (sh.n_head / sh.n_head_kv);
      std::vector<double> p(n_kv);
      double mx = -1e30, sum = 0;
      for (int64_t j = 0; j < n_kv; ++j) {
        double d = 0;
        for (int e = 0; e < sh.head_dim; ++e) d += q[h * 16 + e] * fp16_to_fp32(k[j * sh.k_stride + hk * 16 + e]);
        p[j] = d * scale;
        mx = std::max(mx, p[j]);
      }
      for (auto& x : p) { x = std::exp(x - mx); sum += x; }
      for (int e = 0; e < sh.head_dim; ++e) {
        double o = 0;
        for (int64_t j = 0; j < n_kv; ++j) o += p[j] / sum * fp16_to_fp32(v_t[(hk * 16 + e) * n_ctx + j]);
        // fp16 rounding of q and of the probabilities: ~1e-3 relative.
        ASSERT_NEAR(out[h * 16 + e], o, 5e-3 * (1 + std::fabs(o))) << "head " << h << " dim " << e;
      }
    }
  }
}

TEST(Attention, KvPadAndKernelChoiceFollowLlamaCpp) {
  EXPECT_EQ(ops::attention_kv_pad(1), 256);
  EXPECT_EQ(ops::attention_kv_pad(256), 256);
  EXPECT_EQ(ops::attention_kv_pad(257), 512);
  EXPECT_EQ(ops::attention_kv_pad(1000), 1024);
  const auto one = ops::attention_kernels(1, 64, 256);
  EXPECT_EQ(one.kq, ops::F16Matmul::kVecDot);
  EXPECT_EQ(one.kqv, ops::F16Matmul::kVecDot);
  const auto batch = ops::attention_kernels(7, 64, 256);
  EXPECT_EQ(batch.kq, ops::F16Matmul::kTinyBlas);
  EXPECT_EQ(batch.kqv, ops::F16Matmul::kTinyBlas);
  const auto odd = ops::attention_kernels(7, 64, 250);  // 250 % 16 != 0: kqv falls back
  EXPECT_EQ(odd.kqv, ops::F16Matmul::kVecDot);
}

// ggml's decode attention one dot product per call, as attention_one computed it before its
// kernels took many rows at once: the scalar twins of ggml_vec_dot_f16 / tinyBLAS for each
// score and each output dim, fp32_to_fp16 per element. attention_one must give these bits.
void attention_one_per_dot(const float* q, const fp16_t* k, const fp16_t* v_t, int64_t n_kv,
                           int64_t n_kv_pad, const ops::AttentionShape& sh, float scale,
                           ops::AttentionKernels kern, float* out) {
  const ops::vec::Kernels& K = ops::vec::flavour_twin();  // the host's flavour
  const auto dot_kq = kern.kq == ops::F16Matmul::kTinyBlas ? K.dot_f16_tinyblas : K.dot_f16;
  const auto dot_kqv = kern.kqv == ops::F16Matmul::kTinyBlas ? K.dot_f16_tinyblas : K.dot_f16;
  const int hd = sh.head_dim, group = sh.n_head / sh.n_head_kv;
  std::vector<fp16_t> qh(hd), p16(n_kv);
  std::vector<float> w(n_kv_pad);
  for (int h = 0; h < sh.n_head; ++h) {
    const int hk = h / group;
    for (int d = 0; d < hd; ++d) qh[d] = fp32_to_fp16(q[h * hd + d]);
    float mx = -INFINITY;
    for (int64_t j = 0; j < n_kv; ++j) {
      w[j] = dot_kq(k + j * sh.k_stride + hk * hd, qh.data(), hd, hd) * scale;
      mx = w[j] > mx ? w[j] : mx;
    }
    const double sum = K.soft_max(w.data(), w.data(), n_kv, n_kv_pad, mx);
    const float inv = static_cast<float>(1.0 / sum);
    for (int64_t j = 0; j < n_kv; ++j) p16[j] = fp32_to_fp16(w[j] * inv);
    const fp16_t* vh = v_t + int64_t{hk} * hd * sh.v_stride;
    for (int d = 0; d < hd; ++d)
      out[h * hd + d] = dot_kqv(vh + d * sh.v_stride, p16.data(), n_kv, n_kv_pad);
  }
}

TEST(Attention, OneTokenEqualsPerDotReferenceBitForBit) {
  // head_dim 80 leaves a tail beyond the last step of 64 (added in double by ggml_vec_dot_f16);
  // strides wider than the data and NaN in every cache cell beyond n_kv check the masking.
  for (int hd : {64, 80, 128}) {
    for (int64_t n_kv : {1, 23, 256, 300, 1000}) {
      const int64_t n_ctx = n_kv + 5;
      ops::AttentionShape sh{6, 2, hd, 2 * hd + 8, n_ctx + 3};
      std::vector<fp16_t> k(n_ctx * sh.k_stride, 0x7E00), v_t(2 * hd * sh.v_stride, 0x7E00);
      const auto kf = randn(k.size(), 21), vf = randn(v_t.size(), 22);
      for (int64_t j = 0; j < n_kv; ++j)
        for (int64_t e = 0; e < 2 * hd; ++e) {
          k[j * sh.k_stride + e] = fp32_to_fp16(kf[j * sh.k_stride + e]);
          v_t[e * sh.v_stride + j] = fp32_to_fp16(vf[e * sh.v_stride + j]);
        }
      const auto q = randn(sh.n_head * hd, 23, 2.0f);
      const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
      const int64_t n_pad = ops::attention_kv_pad(n_kv);
      for (int64_t n_tokens : {1, 2}) {
        const ops::AttentionKernels kern = ops::attention_kernels(n_tokens, hd, n_pad);
        std::vector<float> want(q.size()), got(q.size()), tmp(2 * n_pad);
        attention_one_per_dot(q.data(), k.data(), v_t.data(), n_kv, n_pad, sh, scale, kern,
                              want.data());
        // Two calls over head ranges, as threads split the heads.
        ops::attention_one(q.data(), k.data(), v_t.data(), n_kv, n_pad, sh, scale, kern, 0, 4,
                           got.data(), tmp.data());
        ops::attention_one(q.data(), k.data(), v_t.data(), n_kv, n_pad, sh, scale, kern, 4,
                           sh.n_head, got.data(), tmp.data());
        for (size_t i = 0; i < want.size(); ++i)
          ASSERT_EQ(fp32_to_bits(got[i]), fp32_to_bits(want[i]))
              << "hd " << hd << " n_kv " << n_kv << " n_tokens " << n_tokens << " at " << i
              << ": " << got[i] << " vs " << want[i];
      }
    }
  }
}

// swiglu_each: an element's result depends only on its own gate and up. The same values at
// every position of rows of every length give the same bits, equal to the row kernel's SIMD
// block (where the plain swiglu computes a row's tail with expf, which may differ).
TEST(Ops, SwigluEachIsPositionIndependent) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> d(-6.0f, 6.0f);
  std::vector<float> gv(40), uv(40);
  for (size_t i = 0; i < gv.size(); ++i) gv[i] = d(rng), uv[i] = d(rng);
  std::vector<float> block_g(gv.begin(), gv.begin() + 32), block_u(uv.begin(), uv.begin() + 32);
  ops::swiglu(block_g.data(), block_u.data(), 32);  // whole blocks: the reference bits
  int tail_differs = 0;
  for (int64_t n = 1; n <= 32; ++n) {
    for (int64_t shift = 0; shift + n <= 32; shift += 5) {
      std::vector<float> g(gv.begin() + shift, gv.begin() + shift + n);
      std::vector<float> u(uv.begin() + shift, uv.begin() + shift + n);
      auto plain = g;
      ops::swiglu_each(g.data(), u.data(), n);
      ops::swiglu(plain.data(), u.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(g[i], block_g[shift + i]) << "n " << n << " shift " << shift << " i " << i;
        tail_differs += plain[i] != g[i];
      }
    }
  }
  // With blocked kernels (either flavour, SIMD or twin) the plain tails, computed with expf,
  // round differently somewhere: what the function exists for.
  {
    EXPECT_GT(tail_differs, 0);
  }
}

TEST(Ops, SoftmaxSwigluReglu) {
  std::vector<float> x = {1000.f, 1001.f, 999.f};
  ops::softmax(x.data(), 3);
  EXPECT_NEAR(x[0] + x[1] + x[2], 1.0f, 1e-6);
  EXPECT_GT(x[1], x[0]);
  std::vector<float> g = {-1.f, 0.f, 2.f}, u = {3.f, 3.f, 3.f};
  auto g2 = g;
  ops::swiglu(g.data(), u.data(), 3);
  EXPECT_NEAR(g[2], 2.f / (1 + std::exp(-2.f)) * 3.f, 1e-6);
  ops::reglu(g2.data(), u.data(), 3);
  EXPECT_EQ(g2[0], 0.f);
  EXPECT_EQ(g2[2], 6.f);
  // dReLU: relu(g) * relu(u); where reglu keeps g * u for a negative u, dreglu gives 0.
  std::vector<float> dg = {-1.f, 2.f, 2.f, 0.f, 0.5f}, du = {3.f, -3.f, 3.f, 1.f, 0.f};
  auto rg = dg;
  ops::dreglu(dg.data(), du.data(), 5);
  ops::reglu(rg.data(), du.data(), 5);
  EXPECT_EQ(dg, (std::vector<float>{0.f, 0.f, 6.f, 0.f, 0.f}));
  EXPECT_EQ(rg[1], -6.f);
}

}  // namespace
}  // namespace hc
