// What only the CUDA device has (the generic contract is tests/device, run on CUDA as
// test_device_cuda):
//   - a fixed overhead (context, cuBLAS) charged at open, and the memory the GPU itself reports
//     in use staying within the budget when 100 MiB allocations fill several GiB of it;
//   - opening fails clearly for a budget below the fixed overhead or a missing ordinal;
//   - a prompt-batch matmul still computes when the budget leaves no room for cuBLAS's
//     dequantisation scratch.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "../device/device_test_util.h"
#include "ops/cuda/cuda_device.h"

namespace hc::device_test {
namespace {

bool has_gpu() { return ops::cuda::cuda_device_count() > 0; }

std::unique_ptr<ops::Device> open_with_budget(uint64_t budget) {
  ops::DeviceOptions opt;
  opt.kind = ops::DeviceKind::kCuda;
  opt.budget_bytes = budget;
  auto r = ops::cuda::open_cuda_device(opt);
  check(r.status(), "open_cuda_device");
  return std::move(r).value();
}

TEST(CudaDevice, OverheadIsChargedAndTheGpuStaysWithinTheBudget) {
  if (!has_gpu()) GTEST_SKIP() << "no CUDA device";
  const uint64_t budget = 3ull << 30;  // above any context + cuBLAS overhead
  auto dev = open_with_budget(budget);
  ASSERT_GT(dev->overhead_bytes(), 0u);
  ASSERT_EQ(dev->charged_bytes(), dev->overhead_bytes());
  EXPECT_LE(dev->measured_bytes(), dev->charged_bytes());
  std::vector<void*> bufs;
  for (;;) {
    auto r = dev->alloc(100 * kMiB, "filler");
    if (!r.ok()) break;
    bufs.push_back(r.value());
    ASSERT_LE(dev->charged_bytes(), budget);
  }
  EXPECT_GT(dev->charged_bytes() + 100 * kMiB, budget);
  EXPECT_LE(dev->measured_bytes(), budget) << "charged " << dev->charged_bytes();
  for (void* p : bufs) dev->free(p);
  EXPECT_EQ(dev->charged_bytes(), dev->overhead_bytes());
  EXPECT_TRUE(dev->sync().ok());
}

TEST(CudaDevice, MatmulWithoutRoomForScratchStillComputes) {
  if (!has_gpu()) GTEST_SKIP() << "no CUDA device";
  auto dev = open_with_budget(3ull << 30);
  const Matrix m = make_matrix(dev.get(), GgmlType::Q4_0, 40, 1024, 77);
  const int64_t n_tok = 64;  // a batch that would take the cuBLAS path
  const auto x = randn(static_cast<size_t>(n_tok * m.cols), 78);
  auto dx = to_device(dev.get(), x);
  DeviceBuffer dy(dev.get(), static_cast<uint64_t>(n_tok * m.rows) * 4);
  // Leave less than the dequantised matrix (160 KiB) free.
  std::vector<void*> bufs;
  for (uint64_t chunk = 256 * kMiB; chunk >= 4096; chunk /= 2) {
    for (;;) {
      auto r = dev->alloc(chunk, "filler");
      if (!r.ok()) break;
      bufs.push_back(r.value());
    }
  }
  ASSERT_LT(dev->budget_bytes() - dev->charged_bytes(), 160u * 1024);
  dev->matmul(m.view(), dx->as<float>(), n_tok, dy.as<float>());
  check(dev->sync(), "matmul");
  const auto y = from_device<float>(dev.get(), dy.as<void>(), static_cast<size_t>(n_tok * m.rows));
  for (int64_t t = 0; t < n_tok; ++t) {
    for (int64_t r = 0; r < m.rows; ++r) {
      const Dot d = dot(m.row(r), x.data() + t * m.cols, m.cols);
      ASSERT_NEAR(y[t * m.rows + r], d.value, kDotUlps * kU * d.abs) << "t " << t << " r " << r;
    }
  }
  for (void* p : bufs) dev->free(p);
}

TEST(CudaDevice, OpenFailsClearly) {
  if (!has_gpu()) GTEST_SKIP() << "no CUDA device";
  ops::DeviceOptions opt;
  opt.kind = ops::DeviceKind::kCuda;
  opt.budget_bytes = kMiB;  // below the context and cuBLAS workspace
  auto r = ops::cuda::open_cuda_device(opt);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("overhead"), std::string::npos) << r.message();
  opt.budget_bytes = 0;
  opt.cuda_ordinal = ops::cuda::cuda_device_count();
  r = ops::cuda::open_cuda_device(opt);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("does not exist"), std::string::npos) << r.message();
}

}  // namespace
}  // namespace hc::device_test
