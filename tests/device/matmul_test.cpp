// matmul of every device, for every weight type, against the exact product of the dequantised
// weights and against ops::matmul_ref (which quantises x as ggml does):
//   - within fp32 summation error of the exact product (plus the activation quantisation error
//     on a device that quantises activations: the CPU device), and within activation
//     quantisation error of matmul_ref (within fp32 summation error of it on a device that
//     quantises activations, as matmul_ref does);
//   - odd shapes: row counts that are not multiples of a kernel's row block, rows longer than a
//     1024-element staging chunk with a tail, float rows of odd length, padded and misaligned
//     row strides, token counts 1 to 17 (groups of 8 and their tails) and a prompt batch;
//   - matmul_rows: each row bit for bit a one-row matmul.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "device_test_util.h"
#include "ops/cpu/matmul.h"

namespace hc::device_test {
namespace {

class DeviceMatmul : public DeviceTest {};

// Row lengths to test for type t: one block, a few blocks, past one 1024-element chunk with a
// tail.
std::vector<int64_t> test_cols(GgmlType t) {
  const int64_t bs = dtype_traits(t).block_size;
  if (bs == 1) return {1, 7, 64, 1031};
  if (bs == 32) return {32, 96, 1056};
  return {256, 1280};
}

// Runs the device matmul of m with n_tok random tokens and checks every output.
void check_matmul(ops::Device* dev, const Matrix& m, int64_t n_tok, uint32_t seed) {
  const auto x = randn(static_cast<size_t>(n_tok * m.cols), seed);
  auto dx = to_device(dev, x);
  DeviceBuffer dy(dev, static_cast<uint64_t>(n_tok * m.rows) * 4);
  dev->matmul(m.view(), dx->as<float>(), n_tok, dy.as<float>());
  check(dev->sync(), "matmul");
  const auto y = from_device<float>(dev, dy.as<void>(), static_cast<size_t>(n_tok * m.rows));
  // ggml's arithmetic on the CPU (quantised activations), on the tightly packed copy.
  const int64_t rb = row_bytes(m.type, m.cols);
  std::vector<uint8_t> packed(static_cast<size_t>(rb * m.rows));
  for (int64_t r = 0; r < m.rows; ++r)
    std::copy_n(m.bytes.data() + r * m.nb1, rb, packed.data() + r * rb);
  std::vector<float> y_cpu(static_cast<size_t>(n_tok * m.rows));
  ops::matmul_ref(TensorView::make(m.type, packed.data(), m.cols, m.rows), x.data(), n_tok,
                  y_cpu.data());
  for (int64_t t = 0; t < n_tok; ++t) {
    const float* xt = x.data() + t * m.cols;
    const auto e_ref = activation_error(m.type, xt, m.cols);    // matmul_ref's rounding
    const auto e_dev = device_input_error(m.type, xt, m.cols);  // the device's, if any
    for (int64_t r = 0; r < m.rows; ++r) {
      const Dot d = dot(m.row(r), xt, m.cols);
      const double act_ref = input_error_cost(m.row(r), e_ref);
      const double act_dev = input_error_cost(m.row(r), e_dev);
      const float got = y[t * m.rows + r];
      ASSERT_NEAR(got, d.value, act_dev + kDotUlps * kU * d.abs + 1e-30)
          << dtype_name(m.type) << " [" << m.rows << ", " << m.cols << "] nb1 " << m.nb1
          << " n_tok " << n_tok << " t " << t << " row " << r;
      // A device that quantises activations does so as matmul_ref does (ggml's x86 rounding on
      // every CPU, quant::quantize_activations): then only the fp32 accumulation differs.
      const double vs_ref = quantises_activations() ? 0.0 : act_ref;
      ASSERT_NEAR(got, y_cpu[t * m.rows + r], vs_ref + 2 * kDotUlps * kU * d.abs + 1e-30)
          << "vs matmul_ref: " << dtype_name(m.type) << " n_tok " << n_tok << " row " << r;
    }
  }
}

TEST_F(DeviceMatmul, EveryTypeMatchesHostAcrossShapesAndBatches) {
  uint32_t seed = 100;
  for (GgmlType t : kAllTypes) {
    for (int64_t cols : test_cols(t)) {
      for (int64_t rows : {1, 17, 300}) {
        const Matrix m = make_matrix(dev, t, rows, cols, ++seed);
        for (int64_t n_tok : {1, 3, 8, 9, 17}) check_matmul(dev, m, n_tok, ++seed);
      }
    }
  }
}

TEST_F(DeviceMatmul, PaddedAndUnalignedRowStrides) {
  uint32_t seed = 500;
  for (GgmlType t : kAllTypes) {
    const int64_t cols = dtype_traits(t).block_size == 1 ? 1000 : 1024;
    // F32 rows must stay 4-byte aligned, the rest 2: these strides break 16-byte alignment.
    for (int64_t pad : {t == GgmlType::F32 ? int64_t{4} : int64_t{2}, int64_t{64}}) {
      const Matrix m = make_matrix(dev, t, 33, cols, ++seed, pad);
      for (int64_t n_tok : {1, 5, 40}) check_matmul(dev, m, n_tok, ++seed);
    }
  }
}

// matmul_rows (a server's decode steps, one row per sequence): every row bit for bit what a
// one-row matmul gives, at batch sizes that cross each device's token groups (8 per mat-vec
// launch) and its GEMM threshold (the CPU device from 8 rows, CUDA's cuBLAS above 32).
TEST_F(DeviceMatmul, RowsEqualOneRowCalls) {
  uint32_t seed = 700;
  for (GgmlType t : kAllTypes) {
    const int64_t cols = test_cols(t).back();  // past one staging chunk, with a tail
    const Matrix m = make_matrix(dev, t, 300, cols, ++seed);
    for (int64_t n_tok : {2, 8, 9, 17, 33, 40}) {
      const auto x = randn(static_cast<size_t>(n_tok * cols), ++seed);
      auto dx = to_device(dev, x);
      const uint64_t bytes = static_cast<uint64_t>(n_tok * m.rows) * 4;
      DeviceBuffer batched(dev, bytes), alone(dev, bytes);
      dev->matmul_rows(m.view(), dx->as<float>(), n_tok, batched.as<float>());
      for (int64_t r = 0; r < n_tok; ++r)
        dev->matmul(m.view(), dx->as<float>() + r * cols, 1, alone.as<float>() + r * m.rows);
      check(dev->sync(), "matmul_rows");
      const size_t n = static_cast<size_t>(n_tok * m.rows);
      const auto got = from_device<float>(dev, batched.as<void>(), n);
      const auto want = from_device<float>(dev, alone.as<void>(), n);
      const int64_t i = first_difference(got, want);
      ASSERT_EQ(i, -1) << dtype_name(t) << " [300, " << cols << "] n_tok " << n_tok << ": row "
                       << i / m.rows << " output " << i % m.rows << " batched " << got[i]
                       << " alone " << want[i];
    }
  }
}

}  // namespace
}  // namespace hc::device_test
