// Helpers shared by the CUDA device tests (tests/cuda): a device per test suite, device buffers
// that free themselves, random quantised matrices with their exact dequantised values, and the
// fp32 error bound the comparisons use.
//
// Tolerances: a sum of n fp32 products, accumulated in any order, is off from the exact sum by
// at most (n - 1) u S (u = 2^-24, S = sum |w_i x_i|); random rounding makes it about u S (the
// partial sums random-walk), so kDotUlps u S leaves a wide margin while still catching a wrong
// element (which costs ~ |w x| ~ S / n). Anything rounded to fp16 gets 2^-11 relative instead.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "../ops/ops_test_util.h"
#include "core/dtype.h"
#include "core/tensor_view.h"
#include "ops/cuda/cuda_device.h"
#include "ops/device.h"
#include "quant/quant.h"

namespace hc::cuda_test {

using ops_test::kAllTypes;  // every weight type the kernels support (tests/ops)
using ops_test::randn;

inline constexpr double kU = 1.0 / (1 << 24);    // fp32 unit roundoff
inline constexpr double kU16 = 1.0 / (1 << 11);  // fp16 unit roundoff
inline constexpr double kDotUlps = 16;

// Throws (gtest reports it as a test failure with the message) when a Status failed.
inline void check(const Status& st, const std::string& what) {
  if (!st.ok()) throw std::runtime_error(what + ": " + st.message());
}

// Device memory owned by a test.
class DeviceBuffer {
 public:
  DeviceBuffer(ops::Device* dev, uint64_t bytes) : dev_(dev) {
    auto r = dev->alloc(bytes, "test buffer");
    check(r.status(), "alloc");
    p_ = r.value();
  }
  ~DeviceBuffer() {
    if (p_) dev_->free(p_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  template <class T>
  T* as() const {
    return static_cast<T*>(p_);
  }

 private:
  ops::Device* dev_;
  void* p_ = nullptr;
};

template <class T>
std::unique_ptr<DeviceBuffer> to_device(ops::Device* dev, const std::vector<T>& v) {
  std::unique_ptr<DeviceBuffer> b = std::make_unique<DeviceBuffer>(dev, v.size() * sizeof(T) + 1);
  check(dev->upload(b->as<void>(), v.data(), v.size() * sizeof(T)), "upload");
  return b;
}

template <class T>
std::vector<T> from_device(ops::Device* dev, const void* p, size_t n) {
  std::vector<T> v(n);
  check(dev->download(v.data(), p, n * sizeof(T)), "download");
  return v;
}

// A random [rows, cols] weight matrix of type t: its bytes (rows nb1 apart, nb1 >= the row's
// bytes), the exact values they decode to, and a copy on the device.
struct Matrix {
  GgmlType type;
  int64_t rows, cols, nb1;
  std::vector<uint8_t> bytes;  // [rows, nb1]
  std::vector<float> deq;      // [rows, cols] quant::dequantize_row_ref of each row
  std::unique_ptr<DeviceBuffer> dev;
  TensorView view() const { return {type, dev->as<void>(), cols, rows, nb1, nullptr}; }
  const float* row(int64_t r) const { return deq.data() + r * cols; }
};

inline Matrix make_matrix(ops::Device* dev, GgmlType t, int64_t rows, int64_t cols, uint32_t seed,
                          int64_t pad_bytes = 0, float scale = 0.5f) {
  Matrix m{t, rows, cols, row_bytes(t, cols) + pad_bytes, {}, {}, {}};
  m.bytes.assign(static_cast<size_t>(m.nb1 * rows), 0);
  m.deq.resize(static_cast<size_t>(rows * cols));
  const auto f = randn(static_cast<size_t>(rows * cols), seed, scale);
  for (int64_t r = 0; r < rows; ++r) {
    quant::quantize_row(t, f.data() + r * cols, m.bytes.data() + r * m.nb1, cols);
    quant::dequantize_row_ref(t, m.bytes.data() + r * m.nb1, m.deq.data() + r * cols, cols);
  }
  m.dev = to_device(dev, m.bytes);
  return m;
}

// Sum of w . x in double, and S = sum |w x| (the scale of its fp32 rounding error).
struct Dot {
  double value = 0, abs = 0;
};
inline Dot dot(const float* w, const float* x, int64_t n) {
  Dot d;
  for (int64_t i = 0; i < n; ++i) {
    const double p = static_cast<double>(w[i]) * x[i];
    d.value += p;
    d.abs += std::fabs(p);
  }
  return d;
}

// Opens one CUDA device (whole memory) for the tests of a suite; tests skip without a GPU.
class CudaTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (ops::cuda::cuda_device_count() == 0) return;
    ops::DeviceOptions opt;
    opt.kind = ops::DeviceKind::kCuda;
    auto r = ops::cuda::open_cuda_device(opt);
    if (r.ok()) {
      device_ = std::move(r).value().release();
    } else {
      open_error_ = new std::string(r.message());
    }
  }
  static void TearDownTestSuite() {
    delete device_;
    device_ = nullptr;
    delete open_error_;
    open_error_ = nullptr;
  }
  void SetUp() override {
    if (ops::cuda::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
    ASSERT_NE(device_, nullptr) << (open_error_ ? *open_error_ : "open failed");
    dev = device_;
  }
  void TearDown() override {
    if (dev) {
      EXPECT_TRUE(dev->sync().ok());  // nothing left failing behind a test
    }
  }
  // Runs everything queued; the test fails (fatally, via exception) on a device error.
  void sync() { check(dev->sync(), "sync"); }

  ops::Device* dev = nullptr;

 private:
  static inline ops::Device* device_ = nullptr;
  static inline std::string* open_error_ = nullptr;
};

}  // namespace hc::cuda_test
