// The CUDA device's memory accounting, profile and error reporting (ops/device.h):
//   - an allocation past the budget fails with a message naming the use, the request and the
//     budget, and allocates nothing; charged never exceeds the budget; the memory the GPU
//     reports in use stays within the budget when allocations fill it;
//   - opening fails clearly for a budget below the fixed overhead or a missing ordinal;
//   - an unsupported weight type is an error from sync() naming the type, and its output is
//     left alone; the error is reported once;
//   - the profile is measured (positive, finite numbers).
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "cuda_test_util.h"

namespace hc::cuda_test {
namespace {

constexpr uint64_t kMiB = 1ull << 20;

bool has_gpu() { return ops::cuda::cuda_device_count() > 0; }

std::unique_ptr<ops::Device> open_with_budget(uint64_t budget) {
  ops::DeviceOptions opt;
  opt.kind = ops::DeviceKind::kCuda;
  opt.budget_bytes = budget;
  auto r = ops::cuda::open_cuda_device(opt);
  check(r.status(), "open_cuda_device");
  return std::move(r).value();
}

TEST(CudaDevice, AllocationsStayWithinTheBudget) {
  if (!has_gpu()) GTEST_SKIP() << "no CUDA device";
  const uint64_t budget = 3ull << 30;  // above any context + cuBLAS overhead
  auto dev = open_with_budget(budget);
  ASSERT_EQ(dev->budget_bytes(), budget);
  ASSERT_GT(dev->overhead_bytes(), 0u);
  ASSERT_EQ(dev->charged_bytes(), dev->overhead_bytes());
  EXPECT_LE(dev->measured_bytes(), dev->charged_bytes());

  // One byte too many: an error naming the use and the budget, and nothing allocated.
  const uint64_t room = budget - dev->charged_bytes();
  const uint64_t measured_before = dev->measured_bytes();
  auto too_big = dev->alloc(room + 1, "blk.0.ffn_up.weight");
  ASSERT_FALSE(too_big.ok());
  EXPECT_NE(too_big.message().find("blk.0.ffn_up.weight"), std::string::npos) << too_big.message();
  EXPECT_NE(too_big.message().find(std::to_string(budget)), std::string::npos) << too_big.message();
  EXPECT_EQ(dev->charged_bytes(), dev->overhead_bytes());
  EXPECT_LE(dev->measured_bytes(), measured_before + 2 * kMiB);

  // Fill the budget with 100 MiB buffers and a few small ones.
  std::vector<void*> bufs;
  for (;;) {
    auto r = dev->alloc(100 * kMiB, "filler");
    if (!r.ok()) break;
    bufs.push_back(r.value());
    ASSERT_LE(dev->charged_bytes(), budget);
  }
  for (int i = 0; i < 64; ++i) {
    auto r = dev->alloc(4096, "small filler");
    if (!r.ok()) break;
    bufs.push_back(r.value());
  }
  EXPECT_LE(dev->charged_bytes(), budget);
  EXPECT_GT(dev->charged_bytes() + 104 * kMiB, budget);  // really close to it
  EXPECT_LE(dev->measured_bytes(), budget) << "charged " << dev->charged_bytes();
  for (void* p : bufs) dev->free(p);
  EXPECT_EQ(dev->charged_bytes(), dev->overhead_bytes());
  EXPECT_TRUE(dev->sync().ok());
}

// The planners count device bytes with weight_bytes and charge_bytes: exactly what
// upload_weight and alloc charge, on both sides of the 1 MiB point where the granule grows.
TEST(CudaDevice, WeightBytesIsWhatUploadWeightCharges) {
  if (!has_gpu()) GTEST_SKIP() << "no CUDA device";
  auto dev = open_with_budget(3ull << 30);
  const int64_t cols = 4096;
  std::vector<uint8_t> w(static_cast<size_t>(row_bytes(GgmlType::Q8_0, cols) * 600), 0);
  const TensorView host = TensorView::make(GgmlType::Q8_0, w.data(), cols, 600);
  for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{16}, int64_t{240}, int64_t{241}, int64_t{600}}) {
    SCOPED_TRACE(n);
    const uint64_t before = dev->charged_bytes();
    auto dw = dev->upload_weight(host, nullptr, 0, n, "w");
    ASSERT_TRUE(dw.ok()) << dw.message();
    EXPECT_EQ(dev->weight_bytes(host, n), dev->charged_bytes() - before);
    dev->free_weight(*dw);
  }
  for (uint64_t b : {uint64_t{1}, uint64_t{513}, kMiB - 1, kMiB, kMiB + 1, 5 * kMiB + 3}) {
    SCOPED_TRACE(b);
    const uint64_t before = dev->charged_bytes();
    auto p = dev->alloc(b, "probe");
    ASSERT_TRUE(p.ok()) << p.message();
    EXPECT_EQ(dev->charge_bytes(b), dev->charged_bytes() - before);
    EXPECT_GE(dev->charge_bytes(b), b);
    dev->free(*p);
  }
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

class CudaDeviceShared : public CudaTest {};

TEST_F(CudaDeviceShared, ProfileIsMeasured) {
  const ops::DeviceProfile p = dev->profile();
  std::printf("%s: memory %.0f GB/s, link %.1f GB/s, op %.2f us, sync %.2f us, overhead %.0f MiB\n",
              dev->name().c_str(), p.mem_gbps, p.link_gbps, p.op_us, p.sync_us,
              static_cast<double>(dev->overhead_bytes()) / kMiB);
  EXPECT_EQ(dev->kind(), ops::DeviceKind::kCuda);
  EXPECT_FALSE(dev->name().empty());
  for (double v : {p.mem_gbps, p.link_gbps, p.op_us, p.sync_us}) {
    EXPECT_GT(v, 0.0);
    EXPECT_TRUE(std::isfinite(v));
  }
  EXPECT_LE(dev->charged_bytes(), dev->budget_bytes());
}

TEST_F(CudaDeviceShared, UnsupportedWeightTypeIsReportedBySyncAndWritesNothing) {
  const int64_t rows = 4, cols = 64;
  const std::vector<uint8_t> bytes(static_cast<size_t>(row_bytes(GgmlType::Q5_0, cols) * rows));
  auto dw = to_device(dev, bytes);
  const auto x = randn(static_cast<size_t>(cols), 5);
  auto dx = to_device(dev, x);
  const std::vector<float> sentinel(static_cast<size_t>(rows), 42.0f);
  auto dy = to_device(dev, sentinel);
  dev->matmul(TensorView::make(GgmlType::Q5_0, dw->as<void>(), cols, rows), dx->as<float>(), 1,
              dy->as<float>());
  const Status st = dev->sync();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("Q5_0"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("matmul"), std::string::npos) << st.message();
  EXPECT_TRUE(dev->sync().ok());  // reported once
  EXPECT_EQ(from_device<float>(dev, dy->as<void>(), sentinel.size()), sentinel);
}

}  // namespace
}  // namespace hc::cuda_test
