// CUDA matmul and weight dequantisation against the CPU, for every weight type:
//   - the dequantiser is bit-exact with quant::dequantize_row_ref;
//   - matmul (mat-vec for n_tok <= 32 in groups of 8, cuBLAS above) is within fp32 summation
//     error of the exact product of the dequantised weights, and within activation
//     quantisation error of ops::matmul_ref (which quantises x as ggml does);
//   - odd shapes: row counts that are not multiples of the 16 rows a block computes, rows longer
//     than one 1024-element staging chunk, float rows of odd length, padded and misaligned
//     row strides, n_tok 1, 3, 8, 17, 64.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "cuda_test_util.h"
#include "ops/cpu/matmul.h"
#include "ops/cuda/cuda_testing.h"

namespace hc::cuda_test {
namespace {

class CudaMatmul : public CudaTest {};

// Row lengths to test for type t: one block, a few blocks, past one staging chunk with a tail.
std::vector<int64_t> test_cols(GgmlType t) {
  const int64_t bs = dtype_traits(t).block_size;
  if (bs == 1) return {1, 7, 64, 1000, 1031};
  if (bs == 32) return {32, 96, 1056};
  return {256, 768, 2304};
}

// Half the width of the step the CPU's activation quantisation (vec_dot_type) takes around x[i],
// doubled to cover the rounding of the block scale: a bound on |x_q[i] - x[i]|.
std::vector<double> activation_error(GgmlType w_type, const float* x, int64_t n) {
  const GgmlType vt = quant::vec_dot_type(w_type);
  std::vector<double> e(static_cast<size_t>(n), 0.0);
  const int64_t block = vt == GgmlType::Q8_K ? 256 : 32;
  for (int64_t b0 = 0; b0 < n; b0 += block) {
    double amax = 0;
    for (int64_t i = b0; i < std::min(n, b0 + block); ++i)
      amax = std::max(amax, std::fabs(double{x[i]}));
    for (int64_t i = b0; i < std::min(n, b0 + block); ++i) {
      if (vt == GgmlType::F16) {
        e[i] = std::fabs(x[i]) * kU16;
      } else if (vt == GgmlType::BF16) {
        e[i] = std::fabs(x[i]) / 256;
      } else if (vt != GgmlType::F32) {
        e[i] = amax / 127;
      }
    }
  }
  return e;
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
  std::vector<uint8_t> packed(static_cast<size_t>(row_bytes(m.type, m.cols) * m.rows));
  for (int64_t r = 0; r < m.rows; ++r) {
    std::copy_n(m.bytes.data() + r * m.nb1, row_bytes(m.type, m.cols),
                packed.data() + r * row_bytes(m.type, m.cols));
  }
  std::vector<float> y_cpu(static_cast<size_t>(n_tok * m.rows));
  ops::matmul_ref(TensorView::make(m.type, packed.data(), m.cols, m.rows), x.data(), n_tok,
                  y_cpu.data());
  for (int64_t t = 0; t < n_tok; ++t) {
    const float* xt = x.data() + t * m.cols;
    const auto ex = activation_error(m.type, xt, m.cols);
    for (int64_t r = 0; r < m.rows; ++r) {
      const Dot d = dot(m.row(r), xt, m.cols);
      double act = 0;  // bound on the CPU's activation quantisation error
      for (int64_t k = 0; k < m.cols; ++k) act += std::fabs(m.row(r)[k]) * ex[k];
      const float got = y[t * m.rows + r];
      ASSERT_NEAR(got, d.value, kDotUlps * kU * d.abs + 1e-30)
          << dtype_name(m.type) << " [" << m.rows << ", " << m.cols << "] n_tok " << n_tok << " t "
          << t << " row " << r;
      ASSERT_NEAR(got, y_cpu[t * m.rows + r], act + 2 * kDotUlps * kU * d.abs + 1e-30)
          << "vs matmul_ref: " << dtype_name(m.type) << " n_tok " << n_tok << " row " << r;
    }
  }
}

TEST_F(CudaMatmul, DequantiserIsBitExactForEveryType) {
  for (GgmlType t : kAllTypes) {
    for (int64_t cols : test_cols(t)) {
      const Matrix m = make_matrix(dev, t, 5, cols, 7);
      DeviceBuffer out(dev, static_cast<uint64_t>(m.rows * cols) * 4);
      ops::cuda::dequantize_rows(*dev, m.view(), out.as<float>());
      sync();
      const auto got = from_device<float>(dev, out.as<void>(), m.deq.size());
      ASSERT_EQ(0, std::memcmp(got.data(), m.deq.data(), got.size() * 4))
          << dtype_name(t) << " cols " << cols;
    }
  }
}

TEST_F(CudaMatmul, EveryTypeMatchesCpuAcrossShapesAndBatches) {
  uint32_t seed = 100;
  for (GgmlType t : kAllTypes) {
    for (int64_t cols : test_cols(t)) {
      for (int64_t rows : {1, 17, 300}) {
        const Matrix m = make_matrix(dev, t, rows, cols, ++seed);
        for (int64_t n_tok : {1, 3, 8, 17, 64}) check_matmul(dev, m, n_tok, ++seed);
      }
    }
  }
}

TEST_F(CudaMatmul, PaddedAndUnalignedRowStrides) {
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

TEST_F(CudaMatmul, LargeBatchScratchStaysWithinBudget) {
  const Matrix m = make_matrix(dev, GgmlType::Q4_K, 64, 512, 900);
  check_matmul(dev, m, 64, 901);  // charges the dequant scratch (kept for the next batch)
  EXPECT_LE(dev->charged_bytes(), dev->budget_bytes());
  EXPECT_LE(dev->measured_bytes(), dev->budget_bytes());
}

}  // namespace
}  // namespace hc::cuda_test
