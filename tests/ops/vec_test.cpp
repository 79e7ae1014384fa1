// ggml's vector primitives (ops/cpu/vec.h): the AVX-512 versions against their scalar twins bit
// for bit over many sizes, masked lengths and misalignments, and the twins against what they
// model (expf, plain sums, the masking convention).
#include "ops/cpu/vec.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace hc::ops::vec {
namespace {

// Values spread over many exponents so that rounding order matters.
std::vector<float> ranged(size_t n, std::mt19937& rng, int emin = -6, int emax = 6) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_int_distribution<int> e(emin, emax);
  std::vector<float> v(n);
  for (float& x : v) x = std::ldexp(nd(rng), e(rng));
  return v;
}

std::vector<fp16_t> to_f16(const std::vector<float>& v) {
  std::vector<fp16_t> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) h[i] = fp32_to_fp16(v[i]);
  return h;
}

bool same_bits(float a, float b) { return fp32_to_bits(a) == fp32_to_bits(b); }
bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

std::vector<int64_t> lengths() {
  std::vector<int64_t> n;
  for (int64_t i = 1; i <= 70; ++i) n.push_back(i);
  for (int64_t i : {127, 128, 129, 191, 192, 193, 255, 256, 257, 320, 512, 1000, 1536})
    n.push_back(i);
  return n;
}

TEST(VecKernels, Avx512DotF16EqualsScalarTwin) {
  const Kernels* fast = avx512_kernels();
  if (!fast) GTEST_SKIP() << "no AVX-512";
  const Kernels& ref = scalar_kernels();
  std::mt19937 rng(1);
  for (int64_t n : lengths()) {
    for (int64_t off : {0, 1, 3}) {  // fp16 pointers off a vector boundary
      const auto xs = to_f16(ranged(static_cast<size_t>(n + off), rng));
      const auto ys = to_f16(ranged(static_cast<size_t>(n + off), rng));
      for (int64_t n_valid : {n, n - 1, n / 2, n - 17, int64_t{1}}) {
        if (n_valid < 1) continue;
        const fp16_t* x = xs.data() + off;
        const fp16_t* y = ys.data() + off;
        ASSERT_TRUE(same_bits(fast->dot_f16(x, y, n_valid, n), ref.dot_f16(x, y, n_valid, n)))
            << "n=" << n << " n_valid=" << n_valid << " off=" << off;
        if (n % 16 == 0) {
          ASSERT_TRUE(same_bits(fast->dot_f16_tinyblas(x, y, n_valid, n),
                                ref.dot_f16_tinyblas(x, y, n_valid, n)))
              << "tinyblas n=" << n << " n_valid=" << n_valid << " off=" << off;
        }
      }
    }
  }
}

TEST(VecKernels, Avx512SoftMaxAndSwigluEqualScalarTwin) {
  const Kernels* fast = avx512_kernels();
  if (!fast) GTEST_SKIP() << "no AVX-512";
  const Kernels& ref = scalar_kernels();
  std::mt19937 rng(2);
  for (int64_t n : lengths()) {
    for (int64_t off : {0, 1, 5}) {
      auto xs = ranged(static_cast<size_t>(n + off), rng, -4, 5);  // |x| up to ~100: exp limits
      const float* x = xs.data() + off;
      for (int64_t n_valid : {n, n - 1, n / 2 + 1}) {
        if (n_valid < 1) continue;
        float mx = -INFINITY;
        for (int64_t i = 0; i < n_valid; ++i) mx = std::max(mx, x[i]);
        std::vector<float> a(static_cast<size_t>(n), -7.0f), b(a);
        const double sa = fast->soft_max(a.data(), x, n_valid, n, mx);
        const double sb = ref.soft_max(b.data(), x, n_valid, n, mx);
        ASSERT_TRUE(same_bits(sa, sb)) << "n=" << n << " n_valid=" << n_valid;
        for (int64_t i = 0; i < n; ++i)
          ASSERT_TRUE(same_bits(a[i], b[i])) << "n=" << n << " i=" << i;
      }
      auto gs = ranged(static_cast<size_t>(n + off), rng);
      std::vector<float> ya(static_cast<size_t>(n)), yb(static_cast<size_t>(n));
      fast->swiglu(ya.data(), x, gs.data() + off, n);
      ref.swiglu(yb.data(), x, gs.data() + off, n);
      for (int64_t i = 0; i < n; ++i)
        ASSERT_TRUE(same_bits(ya[i], yb[i])) << "swiglu n=" << n << " i=" << i << " x=" << x[i];
      // In place (y aliases x), as the forward pass calls it.
      std::vector<float> inplace(x, x + n);
      fast->swiglu(inplace.data(), inplace.data(), gs.data() + off, n);
      for (int64_t i = 0; i < n; ++i) ASSERT_TRUE(same_bits(inplace[i], yb[i])) << i;
    }
  }
}

TEST(VecKernels, VExpfIsAccurateAndSaturatesLikeGgml) {
  for (float x = -103.0f; x < 88.0f; x += 0.0137f) {
    const double want = std::exp(static_cast<double>(x));
    const float got = v_expf(x);
    // ARM's routine: 1.45 ulp plus rounding; allow 3 ulp (subnormals: absolute 2^-149).
    ASSERT_NEAR(got, want, 3 * std::ldexp(want, -23) + std::ldexp(1.0, -149)) << x;
  }
  EXPECT_EQ(v_expf(0.0f), 1.0f);
  EXPECT_EQ(v_expf(-INFINITY), 0.0f);  // what a masked (-inf) score becomes
  EXPECT_EQ(v_expf(-200.0f), 0.0f);
  EXPECT_EQ(v_expf(INFINITY), INFINITY);
  EXPECT_EQ(v_expf(200.0f), INFINITY);
  EXPECT_TRUE(std::isnan(v_expf(std::numeric_limits<float>::quiet_NaN())));
}

TEST(VecKernels, ReduceAdd16FollowsGccTreeOrder) {
  // Only the tree ((hi256 + lo256) -> (hi128 + lo128) -> (0 + 2) + (1 + 3)) cancels these.
  float a[16] = {};
  a[0] = 1e8f;
  a[8] = -1e8f;
  a[1] = 1.0f;
  EXPECT_EQ(reduce_add_16(a), 1.0f);
  float b[16] = {};
  b[0] = 3.0f;
  b[2] = 1e8f;  // (b0 + b2) rounds away the 3 before b1 is added
  b[1] = -1e8f;
  EXPECT_EQ(reduce_add_16(b), (3.0f + 1e8f) + -1e8f);
}

TEST(VecKernels, MaskedPositionsCountAsZero) {
  const Kernels& k = kernels();
  std::mt19937 rng(3);
  for (int64_t n : {64, 100, 256, 300}) {
    const int64_t n_valid = n / 3 + 1;
    auto xf = ranged(static_cast<size_t>(n), rng), yf = ranged(static_cast<size_t>(n), rng);
    auto x = to_f16(xf), y = to_f16(yf);
    auto yz = y;
    for (int64_t i = n_valid; i < n; ++i) yz[i] = fp32_to_fp16(0.0f);
    // Masked tails are not read: garbage there changes nothing, zeros there are the same sum.
    auto yg = y;
    for (int64_t i = n_valid; i < n; ++i) yg[i] = 0x7C00;  // +inf
    EXPECT_TRUE(same_bits(k.dot_f16(x.data(), yg.data(), n_valid, n),
                          k.dot_f16(x.data(), yz.data(), n, n)));
    if (n % 16 == 0) {
      EXPECT_TRUE(same_bits(k.dot_f16_tinyblas(x.data(), yg.data(), n_valid, n),
                            k.dot_f16_tinyblas(x.data(), yz.data(), n, n)));
    }
    double exact = 0;
    for (int64_t i = 0; i < n_valid; ++i) exact += double(fp16_to_fp32(x[i])) * fp16_to_fp32(y[i]);
    EXPECT_NEAR(k.dot_f16(x.data(), y.data(), n_valid, n), exact, 1e-4 * (1 + std::fabs(exact)));
    // soft_max with a -inf mask beyond n_valid equals the masked call.
    std::vector<float> s(xf), masked(xf);
    for (int64_t i = n_valid; i < n; ++i) masked[i] = -INFINITY;
    float mx = -INFINITY;
    for (int64_t i = 0; i < n_valid; ++i) mx = std::max(mx, s[i]);
    std::vector<float> o1(static_cast<size_t>(n)), o2(static_cast<size_t>(n));
    const double s1 = k.soft_max(o1.data(), s.data(), n_valid, n, mx);
    const double s2 = k.soft_max(o2.data(), masked.data(), n, n, mx);
    EXPECT_TRUE(same_bits(s1, s2)) << n;
    for (int64_t i = 0; i < n_valid; ++i) EXPECT_TRUE(same_bits(o1[i], o2[i])) << i;
  }
}

}  // namespace
}  // namespace hc::ops::vec
