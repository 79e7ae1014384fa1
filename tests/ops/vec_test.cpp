// ggml's vector primitives (ops/cpu/vec.h), both flavours (ggml's AVX-512 and AVX2 builds): the
// SIMD versions against their scalar twins bit for bit over many sizes, masked lengths and
// misalignments, and the twins against what they model (expf, plain sums, the masking
// convention, the reductions' pairings).
#include "ops/cpu/vec.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "quant/quant.h"

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

// One flavour: its scalar twin, its SIMD kernels (nullptr on a CPU without them) and its
// tinyBLAS vector width (inner sizes tinyBLAS takes are multiples of it).
struct Flavoured {
  const char* name;
  const Kernels* twin;
  const Kernels* simd;
  int64_t lanes;
};
std::vector<Flavoured> flavours() {
  return {{"avx512", &scalar_kernels(), avx512_kernels(), 16},
          {"avx2", &scalar_avx2_kernels(), avx2_kernels(), 8}};
}

std::vector<int64_t> lengths() {
  std::vector<int64_t> n;
  for (int64_t i = 1; i <= 70; ++i) n.push_back(i);
  for (int64_t i : {127, 128, 129, 191, 192, 193, 255, 256, 257, 320, 512, 1000, 1536})
    n.push_back(i);
  return n;
}

TEST(VecKernels, SimdDotF16EqualsScalarTwin) {
  int ran = 0;
  for (const Flavoured& f : flavours()) {
    if (!f.simd) continue;
    ++ran;
    std::mt19937 rng(1);
    for (int64_t n : lengths()) {
      for (int64_t off : {0, 1, 3}) {  // fp16 pointers off a vector boundary
        const auto xs = to_f16(ranged(static_cast<size_t>(n + off), rng));
        const auto ys = to_f16(ranged(static_cast<size_t>(n + off), rng));
        for (int64_t n_valid : {n, n - 1, n / 2, n - 17, int64_t{1}}) {
          if (n_valid < 1) continue;
          const fp16_t* x = xs.data() + off;
          const fp16_t* y = ys.data() + off;
          ASSERT_TRUE(same_bits(f.simd->dot_f16(x, y, n_valid, n), f.twin->dot_f16(x, y, n_valid, n)))
              << f.name << " n=" << n << " n_valid=" << n_valid << " off=" << off;
          if (n % f.lanes == 0) {
            ASSERT_TRUE(same_bits(f.simd->dot_f16_tinyblas(x, y, n_valid, n),
                                  f.twin->dot_f16_tinyblas(x, y, n_valid, n)))
                << f.name << " tinyblas n=" << n << " n_valid=" << n_valid << " off=" << off;
          }
        }
      }
    }
  }
  if (!ran) GTEST_SKIP() << "no AVX2 or AVX-512";
}

// nr rows of x (stride ldx) against y, n_valid elements read of n: dot_f16_rows and
// dot_f16_tinyblas_rows of each table against dot_f16 / dot_f16_tinyblas of every row.
// Everything beyond what is read (the rest of each row, and of y) holds fp16 NaN or inf, which
// must never be multiplied: one unmasked lane turns a row's result into NaN.
void expect_rows_equal_per_row_dots(const Flavoured& f, int64_t nr, int64_t n_valid, int64_t n,
                                    int64_t ldx, int64_t off, std::mt19937& rng) {
  std::vector<const Kernels*> tables = {f.twin};
  if (f.simd) tables.push_back(f.simd);
  const int64_t read = std::min(n_valid, n);
  auto xs = to_f16(ranged(static_cast<size_t>(off + nr * ldx), rng));
  auto ys = to_f16(ranged(static_cast<size_t>(off + std::max(n, n_valid) + 64), rng));
  const fp16_t garbage[] = {0x7E00, 0x7C00, 0xFC00, 0x7D01};  // qNaN, +inf, -inf, sNaN
  for (int64_t r = 0; r < nr; ++r)
    for (int64_t e = read; e < ldx; ++e) xs[off + r * ldx + e] = garbage[(r + e) % 4];
  for (size_t e = off + read; e < ys.size(); ++e) ys[e] = garbage[e % 4];
  const fp16_t* x = xs.data() + off;
  const fp16_t* y = ys.data() + off;
  const Kernels& ref = *f.twin;
  for (const Kernels* k : tables) {
    std::vector<float> got(static_cast<size_t>(nr) + 1, -7.0f);  // one past: must stay untouched
    if (n_valid <= n) {                                          // dot_f16 reads up to n_valid
      k->dot_f16_rows(x, ldx, nr, y, n_valid, n, got.data());
      for (int64_t r = 0; r < nr; ++r) {
        const float want = ref.dot_f16(x + r * ldx, y, n_valid, n);
        ASSERT_FALSE(std::isnan(want));
        ASSERT_TRUE(same_bits(got[r], want))
            << k->name << " nr=" << nr << " n_valid=" << n_valid << " n=" << n << " ldx=" << ldx
            << " row " << r << ": " << got[r] << " vs " << want;
        if (f.simd) {
          ASSERT_TRUE(same_bits(got[r], f.simd->dot_f16(x + r * ldx, y, n_valid, n)));
        }
      }
      ASSERT_EQ(got[nr], -7.0f) << k->name << " wrote past row " << nr;
    }
    if (n % f.lanes != 0) continue;  // tinyBLAS takes inner sizes in whole vectors
    std::fill(got.begin(), got.end(), -7.0f);
    k->dot_f16_tinyblas_rows(x, ldx, nr, y, n_valid, n, got.data());
    for (int64_t r = 0; r < nr; ++r) {
      const float want = ref.dot_f16_tinyblas(x + r * ldx, y, n_valid, n);
      ASSERT_FALSE(std::isnan(want));
      ASSERT_TRUE(same_bits(got[r], want))
          << k->name << " tinyblas nr=" << nr << " n_valid=" << n_valid << " n=" << n
          << " ldx=" << ldx << " row " << r << ": " << got[r] << " vs " << want;
    }
    ASSERT_EQ(got[nr], -7.0f) << k->name << " tinyblas wrote past row " << nr;
  }
}

TEST(VecKernels, DotF16RowsEqualPerRowDotsBitForBit) {
  std::mt19937 rng(4);
  for (int64_t nr : {1, 5, 15, 16, 17, 33}) {
    for (int64_t n_valid : {1, 7, 16, 63, 64, 65, 100, 256, 300}) {
      // Whole steps of 64 only, and n = n_valid (+ 16) where n & ~63 < n_valid: the tail that
      // dot_f16 adds in double after the reduction. n < n_valid: tinyBLAS only, reads stop at n.
      for (int64_t n :
           {int64_t{64}, int64_t{128}, int64_t{256}, int64_t{512}, n_valid, n_valid + 16}) {
        const int64_t ldx = std::max(n, n_valid) + 24 + nr % 3;  // garbage between rows
        for (const Flavoured& f : flavours())
          expect_rows_equal_per_row_dots(f, nr, n_valid, n, ldx, nr % 2, rng);  // off a vector
      }
    }
  }
}

TEST(VecKernels, DotF16RowsLongRowsAndCachePaddedViews) {
  std::mt19937 rng(5);
  // Rows longer than the AVX-512 kernels' y block (4096), with and without a tail, and
  // attention's shapes: kq (n_valid = n = head_dim, rows = positions) and kqv (n = n_kv_pad).
  for (const Flavoured& f : flavours()) {
    for (int64_t n_valid : {4097, 5000, 8192}) {
      for (int64_t n : {n_valid, int64_t{8192}}) {
        if (n < n_valid) continue;
        expect_rows_equal_per_row_dots(f, 19, n_valid, n, n + 40, 1, rng);
      }
    }
    for (int64_t hd : {64, 80, 96, 128})
      expect_rows_equal_per_row_dots(f, 300, hd, hd, 3 * hd, 0, rng);
    for (int64_t n_kv : {1, 23, 255, 256, 257, 1000})
      expect_rows_equal_per_row_dots(f, 64, n_kv, (n_kv + 255) / 256 * 256, 1024 + 8, 0, rng);
  }
}

TEST(VecKernels, DotF16RowsReduceInGgmlTreeOrder) {
  // Products 2^24 and -2^24 in lanes l and l + W/2 (W the flavour's lanes, l = r % (W/2))
  // cancel exactly when added first, as both flavours' reductions pair them (AVX-512:
  // _mm512_reduce_add_ps' hi256 + lo256; AVX2: hi128 + lo128); 1 + r in another lane (from the
  // first and second W elements) then survives, where adding it to 2^24 first would round it
  // away. A row landing in another row's output shows as a wrong r.
  for (const Flavoured& f : flavours()) {
    const int64_t nr = 16, n = 64, w = f.lanes, half = w / 2;
    std::vector<fp16_t> x(nr * n, fp32_to_fp16(0.0f)), y(n, fp32_to_fp16(4096.0f));
    std::vector<float> want(nr);
    for (int64_t r = 0; r < nr; ++r) {
      const int64_t l = r % half, one = (l + 1 + (r / half) % (half - 1)) % w;  // not l, l + W/2
      x[r * n + l] = fp32_to_fp16(4096.0f);
      x[r * n + l + half] = fp32_to_fp16(-4096.0f);
      x[r * n + one] = fp32_to_fp16(1.0f / 4096);
      x[r * n + w + one] = fp32_to_fp16(static_cast<float>(r) / 4096);  // the row's id
      want[r] = 1.0f + static_cast<float>(r);
    }
    std::vector<const Kernels*> tables = {f.twin};
    if (f.simd) tables.push_back(f.simd);
    for (const Kernels* k : tables) {
      std::vector<float> got(nr), got_tb(nr);
      k->dot_f16_rows(x.data(), n, nr, y.data(), n, n, got.data());
      k->dot_f16_tinyblas_rows(x.data(), n, nr, y.data(), 2 * w, n, got_tb.data());
      for (int64_t r = 0; r < nr; ++r) {
        EXPECT_EQ(got[r], want[r]) << k->name << " row " << r;
        EXPECT_EQ(got_tb[r], want[r]) << k->name << " tinyblas row " << r;
      }
    }
  }
}

TEST(VecKernels, Avx2ReductionsPairLanesAsGgml) {
  // hsum (sgemm, soft_max): t = (l + l+4), then (t0 + t2) + (t1 + t3); GGML_F32x8_REDUCE's
  // end: the same t, then (t0 + t1) + (t2 + t3). Only the right pairing cancels these.
  float a[8] = {};
  a[0] = 1e8f;
  a[1] = -1e8f;
  a[2] = 3.0f;  // hsum: (t0 + t2) rounds the 3 away before t1 (-1e8) comes in
  EXPECT_EQ(hsum_8(a), 0.0f);
  EXPECT_EQ(reduce_dot_8(a), 3.0f);  // (t0 + t1) cancels first
  float b[8] = {};
  b[0] = 1e8f;
  b[4] = -1e8f;  // both start with lane l + lane l + 4
  b[1] = 1.0f;
  EXPECT_EQ(hsum_8(b), 1.0f);
  EXPECT_EQ(reduce_dot_8(b), 1.0f);
}

TEST(VecKernels, SimdSoftMaxAndSwigluEqualScalarTwin) {
  int ran = 0;
  for (const Flavoured& f : flavours()) {
    if (!f.simd) continue;
    ++ran;
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
          const double sa = f.simd->soft_max(a.data(), x, n_valid, n, mx);
          const double sb = f.twin->soft_max(b.data(), x, n_valid, n, mx);
          ASSERT_TRUE(same_bits(sa, sb)) << f.name << " n=" << n << " n_valid=" << n_valid;
          for (int64_t i = 0; i < n; ++i)
            ASSERT_TRUE(same_bits(a[i], b[i])) << "n=" << n << " i=" << i;
        }
        auto gs = ranged(static_cast<size_t>(n + off), rng);
        std::vector<float> ya(static_cast<size_t>(n)), yb(static_cast<size_t>(n));
        f.simd->swiglu(ya.data(), x, gs.data() + off, n);
        f.twin->swiglu(yb.data(), x, gs.data() + off, n);
        for (int64_t i = 0; i < n; ++i)
          ASSERT_TRUE(same_bits(ya[i], yb[i])) << "swiglu n=" << n << " i=" << i << " x=" << x[i];
        // In place (y aliases x), as the forward pass calls it.
        std::vector<float> inplace(x, x + n);
        f.simd->swiglu(inplace.data(), inplace.data(), gs.data() + off, n);
        for (int64_t i = 0; i < n; ++i) ASSERT_TRUE(same_bits(inplace[i], yb[i])) << i;
      }
    }
  }
  if (!ran) GTEST_SKIP() << "no AVX2 or AVX-512";
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

TEST(VecKernels, VExpfAvx2IsAccurateAndSaturatesLikeGgml) {
  for (float x = -103.0f; x < 88.0f; x += 0.0137f) {
    const double want = std::exp(static_cast<double>(x));
    const float got = v_expf_avx2(x);
    ASSERT_NEAR(got, want, 3 * std::ldexp(want, -23) + std::ldexp(1.0, -149)) << x;
  }
  EXPECT_EQ(v_expf_avx2(0.0f), 1.0f);
  EXPECT_EQ(v_expf_avx2(-INFINITY), 0.0f);  // a masked (-inf) score
  EXPECT_EQ(v_expf_avx2(-200.0f), 0.0f);
  EXPECT_EQ(v_expf_avx2(INFINITY), INFINITY);
  EXPECT_EQ(v_expf_avx2(200.0f), INFINITY);
  EXPECT_TRUE(std::isnan(v_expf_avx2(std::numeric_limits<float>::quiet_NaN())));
  // The two branches are different polynomials' roundings: they part on some inputs (so the
  // flavour matters), never by more than a couple of ulp.
  int differ = 0;
  for (float x = -80.0f; x < 80.0f; x += 0.01f) {
    const float a = v_expf(x), b = v_expf_avx2(x);
    differ += a != b;
    ASSERT_NEAR(a, b, 4 * std::ldexp(std::fabs(a), -23)) << x;
  }
  EXPECT_GT(differ, 0);
}

TEST(VecKernels, F16WeightDotIsGgmlsAvx2VecDot) {
  // F16 weights' per-row dot product (quant's x86 kernel) is ggml_vec_dot_f16 of ggml's AVX2
  // build: the avx2 twin with every element valid. (AVX-512 hosts decode F16 weights through
  // the 16-lane decode layout instead, ops/cpu/repack.h.)
  if (std::string(quant::isa_name()) == "scalar") GTEST_SKIP() << "no AVX2 on this CPU";
  std::mt19937 rng(9);
  for (int64_t n : lengths()) {
    const auto x = to_f16(ranged(static_cast<size_t>(n), rng));
    const auto y = to_f16(ranged(static_cast<size_t>(n), rng));
    ASSERT_TRUE(same_bits(quant::vec_dot(GgmlType::F16, n, x.data(), y.data()),
                          scalar_avx2_kernels().dot_f16(x.data(), y.data(), n, n)))
        << "n=" << n;
  }
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
