// Every SIMD kernel against its scalar twin: each ISA table this CPU supports, every entry,
// many sizes (block counts, tails of the float types) and pointers that are deliberately not
// vector-aligned (only the blocks' natural 2- or 4-byte alignment is kept).
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "quant/kernels.h"
#include "quant/quant.h"
#include "quant_test_util.h"

namespace hc::quant {
namespace {

using qtest::Buffer;
using qtest::IsaCase;
using qtest::kIsas;

std::vector<int64_t> sweep_sizes(GgmlType t) {
  if (qtest::block_size(t) == 1) {
    std::vector<int64_t> n;
    for (int64_t i = 1; i <= 80; ++i) n.push_back(i);
    for (int64_t i : {127, 128, 129, 255, 256, 257, 1000, 1024, 4099}) n.push_back(i);
    return n;
  }
  const std::vector<int64_t> nb =
      qtest::block_size(t) == 32
          ? std::vector<int64_t>{1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 33, 64, 127}
          : std::vector<int64_t>{1, 2, 3, 4, 5, 7, 8, 9, 13};
  std::vector<int64_t> n;
  for (int64_t b : nb) n.push_back(b * qtest::block_size(t));
  return n;
}

void check_vec_dot(GgmlType t, VecDotFn fast, std::mt19937& rng) {
  const GgmlType at = vec_dot_type(t);
  const size_t wa = qtest::row_alignment(t), aa = qtest::row_alignment(at);
  for (int64_t n : sweep_sizes(t)) {
    for (size_t mis : {0, 1, 3, 7}) {
      Buffer w(static_cast<size_t>(row_bytes(t, n)), mis * wa);
      Buffer a(static_cast<size_t>(row_bytes(at, n)), ((mis * 5) % 8) * aa);
      qtest::random_weights(t, n, w.data(), rng);
      const std::vector<float> x = qtest::random_floats(n, rng);
      quantize_row_ref(at, x.data(), a.data(), n);
      const double tol = qtest::dot_tolerance(t, w.data(), a.data(), n);
      const double want = vec_dot_ref(t, n, w.data(), a.data());
      ASSERT_NEAR(fast(n, w.data(), a.data()), want, tol) << "n=" << n << " misalign=" << mis;
      // The bound must stay well below one average term, or a wrong element could hide in it.
      ASSERT_LT(tol, qtest::dot_magnitude(t, w.data(), a.data(), n) / static_cast<double>(n));
    }
  }
}

// Inputs for the activation quantisers: Gaussian rows plus blocks whose scaled values land
// exactly on .5 (d = 1 for Q8_0/Q8_1, iscale = 1 for Q8_K), where roundf and round-to-even
// differ, and an all-zero block.
std::vector<float> quantizer_input(GgmlType t, int64_t n, std::mt19937& rng) {
  std::vector<float> x = qtest::random_floats(n, rng);
  const int64_t bs = qtest::block_size(t);
  for (int64_t j = 0; j < bs; ++j) x[static_cast<size_t>(j)] = static_cast<float>(j % 40) - 19.5f;
  x[0] = bs == 256 ? -127.0f : 127.0f;  // pins d (or iscale) to exactly 1
  if (n >= 3 * bs) std::fill(x.begin() + 2 * bs, x.begin() + 3 * bs, 0.0f);
  return x;
}

void check_quantize(GgmlType t, QuantizeFn fast, std::mt19937& rng) {
  for (int64_t nb : {1, 2, 3, 4, 5, 8, 17, 33}) {
    const int64_t n = nb * qtest::block_size(t);
    const size_t bytes = static_cast<size_t>(row_bytes(t, n));
    for (size_t mis : {0, 1, 3, 6}) {
      Buffer src(static_cast<size_t>(n) * 4, mis * 4);
      const std::vector<float> x = quantizer_input(t, n, rng);
      std::copy(x.begin(), x.end(), src.floats());
      Buffer got(bytes, mis * qtest::row_alignment(t));
      std::vector<uint8_t> want(bytes);
      quantize_row_ref(t, src.floats(), want.data(), n);
      std::fill(got.data(), got.data() + bytes, 0xAB);
      fast(src.floats(), got.data(), n);
      for (size_t i = 0; i < bytes; ++i) {
        ASSERT_EQ(got.data()[i], want[i]) << "n=" << n << " misalign=" << mis << " byte " << i;
      }
    }
  }
}

void check_dequantize(GgmlType t, DequantizeFn fast, std::mt19937& rng) {
  for (int64_t n : sweep_sizes(t)) {
    Buffer w(static_cast<size_t>(row_bytes(t, n)), qtest::row_alignment(t));
    qtest::random_weights(t, n, w.data(), rng);
    std::vector<float> want(static_cast<size_t>(n)), got(static_cast<size_t>(n));
    dequantize_row_ref(t, w.data(), want.data(), n);
    fast(w.data(), got.data(), n);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(fp32_to_bits(got[i]), fp32_to_bits(want[i])) << i;
  }
}

TEST(QuantSimd, EveryKernelMatchesItsReference) {
  int checked = 0;
  for (const IsaCase& isa : kIsas) {
    const IsaKernels* k = isa.get();
    if (!k) continue;  // this CPU lacks the instruction set
    SCOPED_TRACE(isa.name);
    for (int slot = 0; slot < kTypeSlots; ++slot) {
      const GgmlType t = static_cast<GgmlType>(slot);
      const TypeKernels& e = k->types[slot];
      if (!e.vec_dot && !e.quantize && !e.dequantize) continue;
      SCOPED_TRACE(dtype_name(t));
      std::mt19937 rng(1234 + slot);
      if (e.vec_dot) check_vec_dot(t, e.vec_dot, rng);
      if (e.quantize) check_quantize(t, e.quantize, rng);
      // Activation quantisers other than ggml-cpu's x86 Q8_0 / Q8_1 ones (x86_twin_test) are
      // the type's quantiser.
      if (e.from_float && t != GgmlType::Q8_0 && t != GgmlType::Q8_1) check_quantize(t, e.from_float, rng);
      if (e.dequantize) check_dequantize(t, e.dequantize, rng);
      ++checked;
    }
  }
  if (!checked) GTEST_SKIP() << "no SIMD kernels on this CPU";
}

// Four-row kernels: each output bit-identical to the one-row kernel of the same table, rows
// strided like a matrix (stride > row bytes, only natural alignment).
TEST(QuantSimd, FourRowKernelsEqualOneRowKernels) {
  int checked = 0;
  for (const IsaCase& isa : kIsas) {
    const IsaKernels* k = isa.get();
    if (!k) continue;
    for (int slot = 0; slot < kTypeSlots; ++slot) {
      const TypeKernels& e = k->types[slot];
      if (!e.vec_dot4) continue;
      const GgmlType t = static_cast<GgmlType>(slot);
      SCOPED_TRACE(std::string(isa.name) + " " + dtype_name(t));
      ASSERT_NE(e.vec_dot, nullptr);
      std::mt19937 rng(77 + slot);
      const GgmlType at = vec_dot_type(t);
      for (int64_t nb : {1, 2, 3, 7, 33}) {
        const int64_t n = nb * qtest::block_size(t);
        const int64_t stride = row_bytes(t, n) + 6;
        Buffer w(static_cast<size_t>(4 * stride), qtest::row_alignment(t));
        for (int r = 0; r < 4; ++r) qtest::random_weights(t, n, w.data() + r * stride, rng);
        const std::vector<float> x = qtest::random_floats(n, rng);
        std::vector<uint8_t> a(static_cast<size_t>(row_bytes(at, n)));
        quantize_activations(at, x.data(), a.data(), n);
        float out[4];
        e.vec_dot4(n, w.data(), stride, a.data(), out);
        for (int r = 0; r < 4; ++r)
          ASSERT_EQ(fp32_to_bits(out[r]), fp32_to_bits(e.vec_dot(n, w.data() + r * stride, a.data())))
              << "n=" << n << " row " << r;
        // Four rows in any order and place (a firing set's rows), one of them twice.
        ASSERT_NE(e.vec_dot4_rows, nullptr);
        const void* rows[4] = {w.data() + 3 * stride, w.data(), w.data() + 2 * stride, w.data()};
        const int which[4] = {3, 0, 2, 0};
        e.vec_dot4_rows(n, rows, a.data(), out);
        for (int r = 0; r < 4; ++r)
          ASSERT_EQ(fp32_to_bits(out[r]), fp32_to_bits(e.vec_dot(n, w.data() + which[r] * stride, a.data())))
              << "n=" << n << " rows slot " << r;
      }
      ++checked;
    }
  }
  if (!checked) GTEST_SKIP() << "no four-row kernels on this CPU";
}

TEST(QuantSimd, Avx2CoversEveryWeightTypeAndActivationQuantiser) {
  const IsaKernels* k = avx2_kernels();
  if (!k) GTEST_SKIP() << "no AVX2";
  for (GgmlType t : qtest::kWeightTypes)
    EXPECT_NE(k->types[type_slot(t)].vec_dot, nullptr) << dtype_name(t);
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q8_1, GgmlType::Q8_K}) {
    EXPECT_NE(k->types[type_slot(t)].quantize, nullptr) << dtype_name(t);
  }
}

// The public entry points reach the fastest kernel and agree with the reference.
TEST(QuantSimd, DispatchedEntryPointsMatchReference) {
  std::mt19937 rng(99);
  for (GgmlType t : qtest::kWeightTypes) {
    SCOPED_TRACE(dtype_name(t));
    const int64_t n = 8 * 256;
    const GgmlType at = vec_dot_type(t);
    std::vector<uint8_t> w(static_cast<size_t>(row_bytes(t, n))),
        a(static_cast<size_t>(row_bytes(at, n)));
    qtest::random_weights(t, n, w.data(), rng);
    const std::vector<float> x = qtest::random_floats(n, rng);
    quantize_row(at, x.data(), a.data(), n);
    const double tol = qtest::dot_tolerance(t, w.data(), a.data(), n);
    EXPECT_NEAR(vec_dot(t, n, w.data(), a.data()), vec_dot_ref(t, n, w.data(), a.data()), tol);
    EXPECT_EQ(vec_dot_fn(t)(n, w.data(), a.data()), vec_dot(t, n, w.data(), a.data()));
  }
  EXPECT_NE(std::string(isa_name()), "");
}

}  // namespace
}  // namespace hc::quant
