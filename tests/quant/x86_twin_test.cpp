// ggml-cpu's x86 kernels for the 32-element types (the run-time activation quantisers and the
// 8-lane dot products): the SIMD kernels against their scalar twins (ref::x86) bit for bit, and
// the twins against what they model.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "quant/blocks.h"
#include "quant/kernels.h"
#include "quant/quant.h"
#include "quant/ref.h"
#include "quant_test_util.h"

namespace hc::quant {
namespace {

using qtest::Buffer;
using qtest::IsaCase;
using qtest::kIsas;

struct DotTwin {
  GgmlType t;
  VecDotFn twin;
};
const DotTwin kDotTwins[] = {{GgmlType::Q4_0, ref::x86::vec_dot_q4_0_q8_0},
                             {GgmlType::Q4_1, ref::x86::vec_dot_q4_1_q8_1},
                             {GgmlType::Q5_0, ref::x86::vec_dot_q5_0_q8_0},
                             {GgmlType::Q5_1, ref::x86::vec_dot_q5_1_q8_1},
                             {GgmlType::Q8_0, ref::x86::vec_dot_q8_0_q8_0}};

// Rows with wide dynamic range (values at many exponents) so that the float rounding of the
// lane sums and the block order actually matter.
std::vector<float> ranged_floats(int64_t n, std::mt19937& rng) {
  std::vector<float> x = qtest::random_floats(n, rng);
  std::uniform_int_distribution<int> e(-6, 6);
  for (float& v : x) v = std::ldexp(v, e(rng));
  return x;
}

TEST(QuantX86Twin, SimdDotProductsEqualTheTwinBitForBit) {
  int checked = 0;
  for (const IsaCase& isa : kIsas) {
    const IsaKernels* k = isa.get();
    if (!k) continue;
    SCOPED_TRACE(isa.name);
    for (const DotTwin& d : kDotTwins) {
      SCOPED_TRACE(dtype_name(d.t));
      const VecDotFn fast = k->types[type_slot(d.t)].vec_dot;
      ASSERT_NE(fast, nullptr);
      const GgmlType at = vec_dot_type(d.t);
      std::mt19937 rng(7 + type_slot(d.t));
      for (int64_t nb : {1, 2, 3, 4, 5, 7, 8, 9, 18, 48, 127}) {
        const int64_t n = nb * 32;
        for (size_t mis : {0, 1, 3}) {
          Buffer w(static_cast<size_t>(row_bytes(d.t, n)), mis * 2);
          Buffer a(static_cast<size_t>(row_bytes(at, n)), ((mis * 5) % 8) * 2);
          qtest::random_weights(d.t, n, w.data(), rng);
          const std::vector<float> x = ranged_floats(n, rng);
          ref::x86::quantize_q8_0(x.data(), a.data(), n);  // Q8_1 below
          if (at == GgmlType::Q8_1) ref::x86::quantize_q8_1(x.data(), a.data(), n);
          const float want = d.twin(n, w.data(), a.data());
          const float got = fast(n, w.data(), a.data());
          ASSERT_EQ(fp32_to_bits(got), fp32_to_bits(want))
              << "n=" << n << " misalign=" << mis << " got " << got << " want " << want;
        }
      }
      ++checked;
    }
  }
  if (!checked) GTEST_SKIP() << "no SIMD kernels on this CPU";
}

TEST(QuantX86Twin, SimdActivationQuantisersEqualTheTwinBytes) {
  int checked = 0;
  for (const IsaCase& isa : kIsas) {
    const IsaKernels* k = isa.get();
    if (!k) continue;
    SCOPED_TRACE(isa.name);
    for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q8_1}) {
      SCOPED_TRACE(dtype_name(t));
      const QuantizeFn fast = k->types[type_slot(t)].from_float;
      ASSERT_NE(fast, nullptr);
      const QuantizeFn twin =
          t == GgmlType::Q8_0 ? ref::x86::quantize_q8_0 : ref::x86::quantize_q8_1;
      std::mt19937 rng(31 + type_slot(t));
      for (int64_t nb : {1, 2, 3, 5, 8, 17, 33}) {
        const int64_t n = nb * 32;
        const size_t bytes = static_cast<size_t>(row_bytes(t, n));
        for (size_t mis : {0, 1, 3}) {
          Buffer src(static_cast<size_t>(n) * 4, mis * 4);
          std::vector<float> x = ranged_floats(n, rng);
          // A block of exact halves (amax = 127: id = 1) and an all-zero block.
          for (int j = 0; j < 32; ++j)
            x[static_cast<size_t>(j)] = static_cast<float>(j % 40) - 19.5f;
          x[0] = 127.0f;
          if (nb >= 3) std::fill(x.begin() + 64, x.begin() + 96, 0.0f);
          std::copy(x.begin(), x.end(), src.floats());
          Buffer got(bytes, mis * 2);
          std::vector<uint8_t> want(bytes);
          twin(src.floats(), want.data(), n);
          fast(src.floats(), got.data(), n);
          for (size_t i = 0; i < bytes; ++i)
            ASSERT_EQ(got.data()[i], want[i]) << "n=" << n << " misalign=" << mis << " byte " << i;
        }
      }
      ++checked;
    }
  }
  if (!checked) GTEST_SKIP() << "no SIMD kernels on this CPU";
}

// What the twin models: id = 127 / amax (not 1 / d) and ties to even (not away from zero).
TEST(QuantX86Twin, ActivationQuantiserRoundsAsGgmlX86) {
  float x[32];
  for (int j = 0; j < 32; ++j) x[j] = static_cast<float>(j % 8) - 3.5f;  // ... -0.5, 0.5, 1.5 ...
  x[31] = 127.0f;  // amax = 127: d = 1, id = 1, levels are the values rounded
  block_q8_0 rt, rf;
  ref::x86::quantize_q8_0(x, &rt, 32);
  ref::quantize_q8_0(x, &rf, 32);
  for (int j = 0; j < 31; ++j) {
    EXPECT_EQ(rt.qs[j], static_cast<int8_t>(std::nearbyint(x[j]))) << j;  // -0.5 -> 0, 1.5 -> 2
    EXPECT_EQ(rf.qs[j], static_cast<int8_t>(std::round(x[j]))) << j;      // -0.5 -> -1
  }
  EXPECT_EQ(rt.qs[3], 0);  // x = -0.5
  EXPECT_EQ(rf.qs[3], -1);
  // Levels are x * (127 / amax), which differs from x * (1 / (amax / 127)) in the last bit for
  // many amax; scan for one where that flips a level.
  bool found = false;
  for (int i = 1; i < 4000 && !found; ++i) {
    const float amax = 1.0f + static_cast<float>(i) * 0.000731f;
    float y[32];
    for (int j = 0; j < 32; ++j) y[j] = amax * (static_cast<float>(j) + 0.5f) / 127.0f;
    y[31] = amax;
    ref::x86::quantize_q8_0(y, &rt, 32);
    const float id = 127.f / amax;
    for (int j = 0; j < 32; ++j)
      ASSERT_EQ(rt.qs[j], static_cast<int8_t>(std::nearbyint(y[j] * id)));
    const float id_ref = 1.0f / (amax / 127.f);
    for (int j = 0; j < 32; ++j)
      found |= std::nearbyint(y[j] * id) != std::nearbyint(y[j] * id_ref);
  }
  EXPECT_TRUE(found) << "expected a block where 127/amax and 1/d round differently";
  block_q8_1 s;
  ref::x86::quantize_q8_1(x, &s, 32);
  int sum = 0;
  for (int j = 0; j < 32; ++j) sum += s.qs[j];
  EXPECT_EQ(fp16_to_fp32(s.d), 1.0f);
  EXPECT_EQ(s.s, fp32_to_fp16(static_cast<float>(sum)));  // s = fp16(d * sum(levels))
}

// The twins agree with the generic references up to float rounding (they sum the same terms).
TEST(QuantX86Twin, DotProductsAgreeWithGenericReference) {
  std::mt19937 rng(5);
  for (const DotTwin& d : kDotTwins) {
    SCOPED_TRACE(dtype_name(d.t));
    const GgmlType at = vec_dot_type(d.t);
    for (int64_t nb : {1, 3, 8, 33}) {
      const int64_t n = nb * 32;
      std::vector<uint8_t> w(static_cast<size_t>(row_bytes(d.t, n))),
          a(static_cast<size_t>(row_bytes(at, n)));
      qtest::random_weights(d.t, n, w.data(), rng);
      const std::vector<float> x = qtest::random_floats(n, rng);
      quantize_activations(at, x.data(), a.data(), n);
      const double tol = qtest::dot_tolerance(d.t, w.data(), a.data(), n);
      EXPECT_NEAR(d.twin(n, w.data(), a.data()), vec_dot_ref(d.t, n, w.data(), a.data()), tol);
    }
  }
}

TEST(QuantX86Twin, DispatchedActivationQuantiserEqualsItsReference) {
  std::mt19937 rng(77);
  for (GgmlType t :
       {GgmlType::Q8_0, GgmlType::Q8_1, GgmlType::Q8_K, GgmlType::F16, GgmlType::BF16}) {
    SCOPED_TRACE(dtype_name(t));
    const int64_t n = 4 * 256;
    const size_t bytes = static_cast<size_t>(row_bytes(t, n));
    const std::vector<float> x = ranged_floats(n, rng);
    std::vector<uint8_t> got(bytes), want(bytes), weight_bytes(bytes);
    quantize_activations(t, x.data(), got.data(), n);
    quantize_activations_ref(t, x.data(), want.data(), n);
    EXPECT_EQ(got, want);
    // Only Q8_0 / Q8_1 differ from the weight quantiser (llama-quantize's formula).
    quantize_row_ref(t, x.data(), weight_bytes.data(), n);
    if (t != GgmlType::Q8_0 && t != GgmlType::Q8_1) {
      EXPECT_EQ(got, weight_bytes);
    }
  }
}

}  // namespace
}  // namespace hc::quant
