// The device-contract suite (tests/device): the tests of ops/device.h, written once against the
// generic ops::Device interface and built into one executable per device kind
// (test_device_cpu, test_device_vulkan, test_device_cuda; device_kind.cpp names the kind). Here:
// which device an executable opens, a device per test suite, device buffers that free
// themselves, random quantised matrices with their exact dequantised values, and the error
// bounds the comparisons use.
//
// Kinds: "cpu" is the CPU device (2 threads), always available. "vulkan" is device 0 of the
// Vulkan loader's list (on CI Mesa's lavapipe, which --device auto never picks): the tests skip
// when the build has no Vulkan backend or the loader lists no usable device 0, and fail when it
// does but the device does not open. "cuda" is CUDA device 0; the tests skip without a GPU.
//
// Tolerances: a sum of n fp32 products, accumulated in any order, is off from the exact sum by
// at most (n - 1) u S (u = 2^-24, S = sum |w_i x_i|); random rounding makes it about u S (the
// partial sums random-walk), so kDotUlps u S leaves a wide margin while still catching a wrong
// element (which costs ~ |w x| ~ S / n). Anything rounded to fp16 gets 2^-11 relative instead.
// The CPU device runs ggml's kernels, which first quantise the activations to the weight's
// vec_dot_type (Q8_0 / Q8_1 / Q8_K / F16 / BF16; quantises_activations() is true): against the
// exact product its dot products may also be off by sum |w_i| e_i (e_i the activation rounding
// bound of activation_error()), so where a test can it compares them with ggml's own scalar
// arithmetic on the same quantised activations (matmul_ref, DeviceDots) within fp32 summation
// error instead. The Vulkan device quantises as the host does (the same bytes) and is held to the same
// bound; CUDA keeps activations in fp32 and gets no such allowance.
// Argument errors (errors_test.cpp) run on every kind: each device checks an operation's
// arguments when it is queued and reports a bad one from sync().
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "../ops/ops_test_util.h"
#include "core/dtype.h"
#include "core/status.h"
#include "core/tensor_view.h"
#include "ops/device.h"
#include "quant/quant.h"

// The kind this executable tests: "cpu", "vulkan" or "cuda" (device_kind.cpp).
extern const char* const kDeviceKind;

namespace hc::device_test {

inline constexpr const auto& kAllTypes = ops_test::kDeviceTypes;  // every type the device kernels support
using ops_test::randn;

inline constexpr double kU = 1.0 / (1 << 24);    // fp32 unit roundoff
inline constexpr double kU16 = 1.0 / (1 << 11);  // fp16 unit roundoff
inline constexpr double kDotUlps = 16;
inline constexpr uint64_t kMiB = 1ull << 20;

// ---- the device under test --------------------------------------------------------------------

// Why this executable's device cannot be tested here ("" when it can): no backend, no device.
std::string unavailable_reason();
// Opens this executable's device with the given budget (0: the device's default).
Result<std::unique_ptr<ops::Device>> open_test_device(uint64_t budget_bytes = 0);
// Whether the device quantises matmul activations as ggml does (the CPU device).
bool quantises_activations();

// Throws (gtest reports it as a test failure with the message) when a Status failed.
inline void check(const Status& st, const std::string& what) {
  if (!st.ok()) throw std::runtime_error(what + ": " + st.message());
}

// The first index where a and b differ in bits (same sizes), or -1.
inline int64_t first_difference(const std::vector<float>& a, const std::vector<float>& b) {
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) return static_cast<int64_t>(i);
  }
  return -1;
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
  TensorView host_view() const { return {type, bytes.data(), cols, rows, nb1, nullptr}; }
  const float* row(int64_t r) const { return deq.data() + r * cols; }
};

Matrix make_matrix(ops::Device* dev, GgmlType t, int64_t rows, int64_t cols, uint32_t seed,
                   int64_t pad_bytes = 0, float scale = 0.5f);

// Sum of w . x in double, and S = sum |w x| (the scale of its fp32 rounding error).
struct Dot {
  double value = 0, abs = 0;
};
Dot dot(const float* w, const float* x, int64_t n);

// A bound on |x_q[i] - x[i]| when x is quantised to vec_dot_type(w_type) as ggml's CPU kernels
// do: half the quantisation step, doubled to cover the rounding of the block scale.
std::vector<double> activation_error(GgmlType w_type, const float* x, int64_t n);
// The same where the device under test quantises activations, zeros where it does not.
std::vector<double> device_input_error(GgmlType w_type, const float* x, int64_t n);
// sum_i |w_i| e_i: what input errors e cost a dot product with w.
double input_error_cost(const float* w, const std::vector<double>& e);

// The dot products of weight rows with one activation row x as the device under test takes
// them, with a bound on the device's difference from each. On a device that quantises
// activations: ggml's scalar arithmetic (quantize_activations_ref, vec_dot_ref; the device's
// quantisation gives the same bytes on every CPU, quant.h), off by the fp32 accumulation
// order only, 2 kDotUlps u S. Elsewhere: the exact product in double, kDotUlps u S.
struct BoundedDot {
  double value = 0, bound = 0;  // |device - value| <= bound
};
class DeviceDots {
 public:
  DeviceDots(GgmlType w_type, const float* x, int64_t n);
  BoundedDot operator()(const Matrix& m, int64_t r) const;  // row r of m (of type w_type) . x

 private:
  GgmlType w_type_;
  const float* x_;
  int64_t n_;
  std::vector<uint8_t> xq_;  // x quantised to vec_dot_type(w_type) (quantising devices)
};

// Whether `msg` names the budget: in bytes ("3221225472") or in MiB with one decimal ("64.0").
bool names_budget(const std::string& msg, uint64_t budget);

// ---- fixtures ---------------------------------------------------------------------------------

// Opens this executable's device (default budget) once per test suite; tests skip when it is
// unavailable (see unavailable_reason) and fail when it is available but does not open.
class DeviceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite();
  static void TearDownTestSuite();
  void SetUp() override;
  void TearDown() override;
  // Runs everything queued; the test fails (fatally, via exception) on a device error.
  void sync() { check(dev->sync(), "sync"); }

  ops::Device* dev = nullptr;

 private:
  static inline ops::Device* device_ = nullptr;
  static inline std::string* skip_ = nullptr;        // why the kind is unavailable
  static inline std::string* open_error_ = nullptr;  // why an available device did not open
};

}  // namespace hc::device_test
