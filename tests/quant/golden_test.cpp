// Independent golden values (tools/gen_quant_golden.py): gguf-py's numpy reference for
// dequantisation of random raw blocks and for the quantisers it has (F16, BF16, Q8_0, Q4_0,
// Q4_1); ggml's own quantize_row_*_ref (from llama-cpp-python's libggml-base) for the
// K-quants, Q8_K and Q8_1, and ggml's scalar ggml_vec_dot_*_generic for the dot products.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "quant/quant.h"
#include "quant_test_util.h"

namespace hc::quant {
namespace {

using qtest::as_floats;
using qtest::read_file;

std::vector<uint8_t> golden(const std::string& name) {
  std::vector<uint8_t> bytes =
      read_file(std::string(HC_SOURCE_DIR) + "/tests/quant/golden/" + name);
  EXPECT_FALSE(bytes.empty()) << name << " missing: run tools/gen_quant_golden.py";
  return bytes;
}

// Bitwise, so -0.0 vs 0.0 and NaN payloads count; reports the first mismatch.
void expect_same_floats(const std::vector<float>& want, const std::vector<float>& got) {
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) {
    if (fp32_to_bits(want[i]) != fp32_to_bits(got[i])) {
      ADD_FAILURE() << "element " << i << ": want " << want[i] << " got " << got[i];
      return;
    }
  }
}

void expect_same_bytes(const std::vector<uint8_t>& want, const std::vector<uint8_t>& got,
                       int64_t type_size) {
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) {
    if (want[i] != got[i]) {
      ADD_FAILURE() << "byte " << i << " (block " << i / type_size << ", offset " << i % type_size
                    << "): want " << int(want[i]) << " got " << int(got[i]);
      return;
    }
  }
}

TEST(QuantGolden, DequantizeMatchesGgufPyBitForBit) {
  for (GgmlType t : {GgmlType::F16, GgmlType::BF16, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0,
                     GgmlType::Q5_1, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K}) {
    SCOPED_TRACE(dtype_name(t));
    const std::string stem = std::string("dequant_") + dtype_name(t);
    const std::vector<uint8_t> raw = golden(stem + ".bin");
    const std::vector<float> want = as_floats(golden(stem + ".f32"));
    const int64_t n = static_cast<int64_t>(want.size());
    ASSERT_EQ(static_cast<int64_t>(raw.size()), row_bytes(t, n));
    std::vector<float> got(want.size());
    dequantize_row_ref(t, raw.data(), got.data(), n);
    expect_same_floats(want, got);
    dequantize_row(t, raw.data(), got.data(), n);
    expect_same_floats(want, got);
  }
}

TEST(QuantGolden, QuantizeMatchesGgufPyAndGgmlBitForBit) {
  const std::vector<float> x = as_floats(golden("quant_input.f32"));
  const int64_t n = static_cast<int64_t>(x.size());
  ASSERT_EQ(n % 256, 0);
  for (GgmlType t :
       {GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1,
        GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q8_K, GgmlType::Q8_1}) {
    SCOPED_TRACE(dtype_name(t));
    const std::vector<uint8_t> want = golden(std::string("quant_") + dtype_name(t) + ".bin");
    std::vector<uint8_t> got(static_cast<size_t>(row_bytes(t, n)));
    quantize_row_ref(t, x.data(), got.data(), n);
    expect_same_bytes(want, got, dtype_traits(t).type_size);
    std::fill(got.begin(), got.end(), 0xAB);  // the dispatched path must write every byte
    quantize_row(t, x.data(), got.data(), n);
    expect_same_bytes(want, got, dtype_traits(t).type_size);
  }
}

// ggml's generic dot products accumulate in the same order as ours, but libggml-cpu is built
// with FMA contraction, so agreement is asked within the derived rounding bound, not bits.
TEST(QuantGolden, VecDotMatchesGgmlGeneric) {
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1,
                     GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K}) {
    SCOPED_TRACE(dtype_name(t));
    const std::vector<uint8_t> w = golden(std::string("dequant_") + dtype_name(t) + ".bin");
    const std::vector<uint8_t> a = golden(std::string("dot_") + dtype_name(t) + ".act");
    const std::vector<float> want = as_floats(golden(std::string("dot_") + dtype_name(t) + ".f32"));
    ASSERT_EQ(want.size(), 1u);
    const int64_t n =
        static_cast<int64_t>(w.size()) / dtype_traits(t).type_size * qtest::block_size(t);
    ASSERT_EQ(static_cast<int64_t>(a.size()), row_bytes(vec_dot_type(t), n));
    const double tol = qtest::dot_tolerance(t, w.data(), a.data(), n);
    EXPECT_NEAR(vec_dot_ref(t, n, w.data(), a.data()), want[0], tol);
    EXPECT_NEAR(vec_dot(t, n, w.data(), a.data()), want[0], tol);
  }
}

}  // namespace
}  // namespace hc::quant
