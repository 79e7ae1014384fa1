// The scalar references on their own: type tables, dot products against the float sum of
// dequantised products, and quantise -> dequantise error bounds (the K-quant quantisers are
// also checked bit for bit against ggml in golden_test.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "quant/blocks.h"
#include "quant/quant.h"
#include "quant_test_util.h"

namespace hc::quant {
namespace {

TEST(QuantRef, TypeTables) {
  for (GgmlType t : qtest::kWeightTypes) {
    EXPECT_TRUE(is_supported_weight_type(t)) << dtype_name(t);
    EXPECT_TRUE(can_quantize_to(t)) << dtype_name(t);
  }
  for (GgmlType t :
       {GgmlType::Q8_1, GgmlType::Q8_K, GgmlType::Q2_K, GgmlType::IQ4_NL, GgmlType::IQ4_XS}) {
    EXPECT_FALSE(is_supported_weight_type(t)) << dtype_name(t);
  }
  EXPECT_TRUE(can_quantize_to(GgmlType::Q8_1));
  EXPECT_TRUE(can_quantize_to(GgmlType::Q8_K));
  EXPECT_FALSE(can_quantize_to(GgmlType::Q3_K));
  EXPECT_EQ(vec_dot_type(GgmlType::Q4_0), GgmlType::Q8_0);
  EXPECT_EQ(vec_dot_type(GgmlType::Q8_0), GgmlType::Q8_0);
  EXPECT_EQ(vec_dot_type(GgmlType::Q4_1), GgmlType::Q8_1);
  EXPECT_EQ(vec_dot_type(GgmlType::Q5_0), GgmlType::Q8_0);
  EXPECT_EQ(vec_dot_type(GgmlType::Q5_1), GgmlType::Q8_1);
  EXPECT_EQ(vec_dot_type(GgmlType::Q4_K), GgmlType::Q8_K);
  EXPECT_EQ(vec_dot_type(GgmlType::Q5_K), GgmlType::Q8_K);
  EXPECT_EQ(vec_dot_type(GgmlType::Q6_K), GgmlType::Q8_K);
  for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16}) EXPECT_EQ(vec_dot_type(t), t);
  // The structs must agree with the dtype table the GGUF loader sizes tensors by.
  EXPECT_EQ(dtype_traits(GgmlType::Q4_0).type_size, int64_t(sizeof(block_q4_0)));
  EXPECT_EQ(dtype_traits(GgmlType::Q4_1).type_size, int64_t(sizeof(block_q4_1)));
  EXPECT_EQ(dtype_traits(GgmlType::Q8_0).type_size, int64_t(sizeof(block_q8_0)));
  EXPECT_EQ(dtype_traits(GgmlType::Q8_1).type_size, int64_t(sizeof(block_q8_1)));
  EXPECT_EQ(dtype_traits(GgmlType::Q4_K).type_size, int64_t(sizeof(block_q4_K)));
  EXPECT_EQ(dtype_traits(GgmlType::Q5_K).type_size, int64_t(sizeof(block_q5_K)));
  EXPECT_EQ(dtype_traits(GgmlType::Q6_K).type_size, int64_t(sizeof(block_q6_K)));
  EXPECT_EQ(dtype_traits(GgmlType::Q8_K).type_size, int64_t(sizeof(block_q8_K)));
}

// Q4_1 / Q5_1 x Q8_1 take the block-minimum term from s = fp16(d * sum(q)), not from the levels:
// up to half an fp16 ulp (2^-11 relative) of |m * s| per block that the float sum lacks.
double q8_1_sum_error(GgmlType t, const std::vector<uint8_t>& w, const std::vector<uint8_t>& a,
                      int64_t n) {
  if (t != GgmlType::Q4_1 && t != GgmlType::Q5_1) return 0;
  const auto* y = reinterpret_cast<const block_q8_1*>(a.data());
  double e = 0;
  for (int64_t i = 0; i < n / QK8_1; ++i) {
    const fp16_t m = t == GgmlType::Q4_1 ? reinterpret_cast<const block_q4_1*>(w.data())[i].m
                                         : reinterpret_cast<const block_q5_1*>(w.data())[i].m;
    e += std::fabs(fp16_to_fp32(m) * fp16_to_fp32(y[i].s)) * std::ldexp(1.0, -11);
  }
  return e;
}

// vec_dot_ref works on integers and block scales; the same sum taken over the dequantised
// floats (in double) differs only by the roundings of dequantisation (a few per element,
// each relative to that element's magnitude) and of the reference's own accumulation.
TEST(QuantRef, VecDotEqualsSumOfDequantizedProducts) {
  std::mt19937 rng(7);
  for (GgmlType t : qtest::kWeightTypes) {
    SCOPED_TRACE(dtype_name(t));
    const GgmlType at = vec_dot_type(t);
    for (int64_t nb : {1, 3, 8, 16}) {
      const int64_t n = nb * 256;
      std::vector<uint8_t> w(static_cast<size_t>(row_bytes(t, n))),
          a(static_cast<size_t>(row_bytes(at, n)));
      for (bool quantized_weights : {false, true}) {
        if (quantized_weights) {  // realistic blocks, as the quantiser makes them
          const std::vector<float> xw = qtest::random_floats(n, rng);
          quantize_row_ref(t, xw.data(), w.data(), n);
        } else {  // arbitrary level patterns
          qtest::random_weights(t, n, w.data(), rng);
        }
        const std::vector<float> x = qtest::random_floats(n, rng, 3.0f);
        quantize_row_ref(at, x.data(), a.data(), n);
        std::vector<float> fw(static_cast<size_t>(n)), fa(static_cast<size_t>(n));
        dequantize_row_ref(t, w.data(), fw.data(), n);
        dequantize_row_ref(at, a.data(), fa.data(), n);
        double want = 0;
        for (int64_t i = 0; i < n; ++i) want += static_cast<double>(fw[i]) * fa[i];
        const double m = qtest::dot_magnitude(t, w.data(), a.data(), n);
        const double tol = 2 * (qtest::rounding_chain(t, n) + 8) * qtest::kU * m;
        EXPECT_NEAR(vec_dot_ref(t, n, w.data(), a.data()), want, tol + q8_1_sum_error(t, w, a, n))
            << "n=" << n;
        EXPECT_LT(tol, m / static_cast<double>(n));  // tighter than one average term
      }
    }
  }
}

struct RoundTrip {
  double rel_rmse;     // rms(x - y) / rms(x)
  double max_in_step;  // max |x - y| in units of the block's own step (see below)
};

double rms(const std::vector<float>& v) {
  double s = 0;
  for (float f : v) s += static_cast<double>(f) * f;
  return std::sqrt(s / static_cast<double>(v.size()));
}

std::vector<float> round_trip(GgmlType t, const std::vector<float>& x) {
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<uint8_t> q(static_cast<size_t>(row_bytes(t, n)));
  quantize_row_ref(t, x.data(), q.data(), n);
  std::vector<float> y(x.size());
  dequantize_row_ref(t, q.data(), y.data(), n);
  return y;
}

// Relative RMS error of quantise -> dequantise on Gaussian data, against the error of a
// uniform quantiser with the type's step: step / sqrt(12) relative to sigma, where the step is
// (expected block |max| or range) / levels: Q8_0 2.4/127, Q8_K 3.0/127 (256-blocks), Q4_0
// 2.4/8, Q4_1 and Q4_K 4.1/15, Q5_K 4.1/31, Q6_K 2.0/32 (16-blocks); F16 / BF16: a rounding
// error of 2^-12 / 2^-9 relative. Bounds are those figures plus ~20%; the K-quants' scale
// searches must do at least as well as the plain grid, so a broken search shows up here.
TEST(QuantRef, QuantizeRoundTripErrorIsBounded) {
  struct Case {
    GgmlType t;
    double max_rel_rmse;
  };
  const Case cases[] = {
      {GgmlType::F16, 2.6e-4},  {GgmlType::BF16, 2.1e-3}, {GgmlType::Q8_0, 6.6e-3},
      {GgmlType::Q8_1, 6.6e-3}, {GgmlType::Q8_K, 8.3e-3}, {GgmlType::Q4_0, 0.104},
      {GgmlType::Q4_1, 0.095},  {GgmlType::Q4_K, 0.095},  {GgmlType::Q5_K, 0.046},
      {GgmlType::Q6_K, 0.022},
  };
  std::mt19937 rng(11);
  const std::vector<float> x = qtest::random_floats(64 * 256, rng, 0.02f);
  for (const Case& c : cases) {
    SCOPED_TRACE(dtype_name(c.t));
    const std::vector<float> y = round_trip(c.t, x);
    std::vector<float> err(x.size());
    for (size_t i = 0; i < x.size(); ++i) err[i] = x[i] - y[i];
    const double rel = rms(err) / rms(x);
    EXPECT_LT(rel, c.max_rel_rmse);
  }
}

// Per-element bounds that follow from the algorithms of the 32-block types: levels are
// rounded to nearest (|err| <= step / 2), the fp16 scale costs at most 2^-11 relative per
// level step, and Q4_0 may clip one level at +8 (|err| <= one step).
TEST(QuantRef, QuantizeElementErrorWithinHalfStep) {
  std::mt19937 rng(12);
  const std::vector<float> x = qtest::random_floats(64 * 32, rng, 5.0f);
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_K}) {
    SCOPED_TRACE(dtype_name(t));
    const int64_t bs = qtest::block_size(t);
    const int levels =
        (t == GgmlType::Q8_0 || t == GgmlType::Q8_K) ? 127 : (t == GgmlType::Q4_0 ? 8 : 15);
    const std::vector<float> y = round_trip(t, x);
    for (size_t b = 0; b < x.size() / bs; ++b) {
      float lo = x[b * bs], hi = lo, amax = 0;
      for (int64_t j = 0; j < bs; ++j) {
        lo = std::min(lo, x[b * bs + j]);
        hi = std::max(hi, x[b * bs + j]);
        amax = std::max(amax, std::fabs(x[b * bs + j]));
      }
      const double step = t == GgmlType::Q4_1 ? (hi - lo) / 15.0 : amax / levels;
      const double slack = 1 + 16 * levels * std::ldexp(1.0, -11);
      const double bound =
          (t == GgmlType::Q4_0 ? 1.0 : 0.5) * step * slack + std::fabs(lo) * std::ldexp(1.0, -11);
      for (int64_t j = 0; j < bs; ++j) {
        ASSERT_LE(std::fabs(x[b * bs + j] - y[b * bs + j]), bound)
            << "block " << b << " elem " << j;
      }
    }
  }
}

// Quantising values that already sit on a quantisation grid should find (nearly) that grid
// again: the second round trip loses much less than the first.
TEST(QuantRef, RequantizingDequantizedDataIsNearlyLossless) {
  std::mt19937 rng(13);
  const std::vector<float> x = qtest::random_floats(32 * 256, rng);
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q4_K, GgmlType::Q5_K,
                     GgmlType::Q6_K, GgmlType::Q8_K}) {
    SCOPED_TRACE(dtype_name(t));
    const std::vector<float> y = round_trip(t, x);
    const std::vector<float> z = round_trip(t, y);
    std::vector<float> e1(x.size()), e2(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      e1[i] = x[i] - y[i];
      e2[i] = y[i] - z[i];
    }
    EXPECT_LT(rms(e2), 0.25 * rms(e1));
  }
}

TEST(QuantRef, SpecialRows) {
  for (GgmlType t :
       {GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q8_1, GgmlType::Q8_K,
        GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K}) {
    SCOPED_TRACE(dtype_name(t));
    std::vector<float> zeros(512, 0.0f);
    for (float v : round_trip(t, zeros)) ASSERT_EQ(v, 0.0f);
    // A constant row is reproduced to within the scale's fp16 rounding.
    std::vector<float> c(512, 0.75f);
    for (float v : round_trip(t, c)) ASSERT_NEAR(v, 0.75f, 0.75f * 2e-3f);
    // A lone spike keeps its value; the zeros around it stay (near) zero.
    std::vector<float> spike(512, 0.0f);
    spike[300] = -4.0f;
    const std::vector<float> y = round_trip(t, spike);
    EXPECT_NEAR(y[300], -4.0f, 4.0f * 2e-3f);
    for (size_t i = 256; i < 512; ++i) {
      if (i == 300) continue;
      ASSERT_NEAR(y[i], 0.0f, 4.0f / 7) << i;
    }
  }
}

// The activation quantisers never produce -128: the SIMD dot products rely on it (their sign
// trick negates the activation byte).
TEST(QuantRef, ActivationLevelsStayWithinPlusMinus127) {
  std::mt19937 rng(17);
  std::vector<float> x = qtest::random_floats(64 * 256, rng);
  for (size_t i = 0; i < x.size(); i += 97) x[i] = -std::fabs(x[i]) * 50;  // negative extremes
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q8_1, GgmlType::Q8_K}) {
    SCOPED_TRACE(dtype_name(t));
    const int64_t n = static_cast<int64_t>(x.size());
    std::vector<float> y(x.size());
    for (auto quant : {quantize_row_ref, quantize_row}) {
      std::vector<uint8_t> q(static_cast<size_t>(row_bytes(t, n)));
      quant(t, x.data(), q.data(), n);
      dequantize_row_ref(t, q.data(), y.data(), n);
      // Level -128 would dequantise below -127 * d, i.e. beyond the block's |max| (+ rounding).
      const int64_t bs = qtest::block_size(t);
      for (int64_t b = 0; b < n / bs; ++b) {
        float amax = 0;
        for (int64_t j = 0; j < bs; ++j) amax = std::max(amax, std::fabs(x[b * bs + j]));
        for (int64_t j = 0; j < bs; ++j) ASSERT_LE(std::fabs(y[b * bs + j]), amax * (1 + 1e-3f));
      }
    }
  }
}

}  // namespace
}  // namespace hc::quant
