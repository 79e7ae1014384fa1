// What only the CUDA matmul has (the generic matmul contract is tests/device/matmul_test.cpp):
//   - the dequantiser cuBLAS batches read from is bit-exact with quant::dequantize_row_ref, for
//     every weight type (a test hook, ops/cuda/cuda_testing.h);
//   - a batch past the mat-vec kernels (cuBLAS over the dequantised matrix) computes within
//     fp32 summation error, and its scratch stays within the budget.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "../device/device_test_util.h"
#include "ops/cuda/cuda_testing.h"

namespace hc::device_test {
namespace {

class CudaMatmul : public DeviceTest {};

TEST_F(CudaMatmul, DequantiserIsBitExactForEveryType) {
  for (GgmlType t : kAllTypes) {
    const int64_t bs = dtype_traits(t).block_size;
    for (int64_t cols : bs == 1 ? std::vector<int64_t>{1, 7, 1031}
                                : std::vector<int64_t>{bs, 4 * bs, 1024 + bs}) {
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

TEST_F(CudaMatmul, LargeBatchMatchesAndScratchStaysWithinBudget) {
  uint32_t seed = 900;
  for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q8_0, GgmlType::F16}) {
    const Matrix m = make_matrix(dev, t, 64, 512, ++seed);
    const int64_t n_tok = 64;  // past the mat-vec kernels: cuBLAS, with the dequant scratch
    const auto x = randn(static_cast<size_t>(n_tok * m.cols), ++seed);
    auto dx = to_device(dev, x);
    DeviceBuffer dy(dev, static_cast<uint64_t>(n_tok * m.rows) * 4);
    dev->matmul(m.view(), dx->as<float>(), n_tok, dy.as<float>());
    sync();
    const auto y = from_device<float>(dev, dy.as<void>(), static_cast<size_t>(n_tok * m.rows));
    for (int64_t tok = 0; tok < n_tok; ++tok) {
      for (int64_t r = 0; r < m.rows; ++r) {
        const Dot d = dot(m.row(r), x.data() + tok * m.cols, m.cols);
        ASSERT_NEAR(y[tok * m.rows + r], d.value, kDotUlps * kU * d.abs + 1e-30)
            << dtype_name(t) << " t " << tok << " r " << r;
      }
    }
    EXPECT_LE(dev->charged_bytes(), dev->budget_bytes());
    EXPECT_LE(dev->measured_bytes(), dev->budget_bytes());
  }
}

}  // namespace
}  // namespace hc::device_test
