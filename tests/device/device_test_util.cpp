#include "device_test_util.h"

#include <algorithm>
#include <cstdio>

namespace hc::device_test {

namespace {

std::string kind() { return kDeviceKind; }

std::string joined(const std::vector<std::string>& lines) {
  std::string s;
  for (const std::string& l : lines) s += (s.empty() ? "" : "; ") + l;
  return s;
}

ops::DeviceOptions options(uint64_t budget_bytes) {
  ops::DeviceOptions opt;
  opt.budget_bytes = budget_bytes;
  if (kind() == "cpu") {
    opt.kind = ops::DeviceKind::kCpu;
    opt.n_threads = 2;  // work split across threads, as in use
  } else if (kind() == "vulkan") {
    opt.kind = ops::DeviceKind::kVulkan;
    opt.vulkan_index = 0;  // the loader's first device, a CPU one (lavapipe) included
  } else {
    opt.kind = ops::DeviceKind::kCuda;
    opt.cuda_ordinal = 0;
  }
  return opt;
}

}  // namespace

std::string unavailable_reason() {
  const std::string k = kind();
  if (k == "cpu") return "";
  if (k == "vulkan") {
    if (!ops::vulkan_compiled()) return "this build has no Vulkan backend (HC_VULKAN=OFF)";
    // "0: NAME [TYPE, Vulkan X.Y.Z]", with ", unusable: lacks ..." when it cannot be used; any
    // other first line says why the loader lists nothing.
    const std::vector<std::string> lines = ops::vulkan_device_lines();
    if (lines.empty() || lines[0].rfind("0: ", 0) != 0)
      return "no Vulkan device: " + joined(lines);
    if (lines[0].find(", unusable") != std::string::npos)
      return "Vulkan device 0 is not usable: " + lines[0];
    return "";
  }
  if (k == "cuda") {
    if (!ops::cuda_compiled()) return "this build has no CUDA backend (HC_CUDA=OFF)";
    if (ops::cuda_device_count() == 0) return "no CUDA device";
    return "";
  }
  return "";  // an unknown kind fails to open (a build error, never a skip)
}

Result<std::unique_ptr<ops::Device>> open_test_device(uint64_t budget_bytes) {
  if (kind() != "cpu" && kind() != "vulkan" && kind() != "cuda")
    return Status::Error("unknown device kind '" + kind() + "' (tests/device/device_kind.cpp)");
  return ops::open_device(options(budget_bytes));
}

// The CPU and Vulkan devices quantise activations to the weight's vec_dot_type as the host does;
// CUDA keeps them in fp32.
bool quantises_activations() { return kind() == "cpu" || kind() == "vulkan"; }

Matrix make_matrix(ops::Device* dev, GgmlType t, int64_t rows, int64_t cols, uint32_t seed,
                   int64_t pad_bytes, float scale) {
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

Dot dot(const float* w, const float* x, int64_t n) {
  Dot d;
  for (int64_t i = 0; i < n; ++i) {
    const double p = static_cast<double>(w[i]) * x[i];
    d.value += p;
    d.abs += std::fabs(p);
  }
  return d;
}

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

std::vector<double> device_input_error(GgmlType w_type, const float* x, int64_t n) {
  if (!quantises_activations()) return std::vector<double>(static_cast<size_t>(n), 0.0);
  return activation_error(w_type, x, n);
}

double input_error_cost(const float* w, const std::vector<double>& e) {
  double c = 0;
  for (size_t i = 0; i < e.size(); ++i) c += std::fabs(w[i]) * e[i];
  return c;
}

DeviceDots::DeviceDots(GgmlType w_type, const float* x, int64_t n)
    : w_type_(w_type), x_(x), n_(n) {
  const GgmlType vt = quant::vec_dot_type(w_type);
  if (!quantises_activations()) return;
  if (vt == GgmlType::F32) {
    xq_.assign(reinterpret_cast<const uint8_t*>(x), reinterpret_cast<const uint8_t*>(x + n));
    return;
  }
  xq_.resize(static_cast<size_t>(row_bytes(vt, n)));
  quant::quantize_activations_ref(vt, x, xq_.data(), n);
}

BoundedDot DeviceDots::operator()(const Matrix& m, int64_t r) const {
  HC_CHECK(m.type == w_type_ && m.cols == n_);
  const Dot exact = dot(m.row(r), x_, n_);
  if (xq_.empty()) return {exact.value, kDotUlps * kU * exact.abs};
  const float v = quant::vec_dot_ref(m.type, n_, m.bytes.data() + r * m.nb1, xq_.data());
  return {v, 2 * kDotUlps * kU * exact.abs};
}

bool names_budget(const std::string& msg, uint64_t budget) {
  char mib[32];
  std::snprintf(mib, sizeof mib, "%.1f MiB", static_cast<double>(budget) / kMiB);
  return msg.find("budget") != std::string::npos &&
         (msg.find(std::to_string(budget)) != std::string::npos ||
          msg.find(mib) != std::string::npos);
}

void DeviceTest::SetUpTestSuite() {
  const std::string why = unavailable_reason();
  if (!why.empty()) {
    skip_ = new std::string(why);
    return;
  }
  auto r = open_test_device();
  if (r.ok()) {
    device_ = std::move(r).value().release();
  } else {
    open_error_ = new std::string(r.message());
  }
}

void DeviceTest::TearDownTestSuite() {
  delete device_;
  device_ = nullptr;
  delete skip_;
  skip_ = nullptr;
  delete open_error_;
  open_error_ = nullptr;
}

void DeviceTest::SetUp() {
  if (skip_) {
    GTEST_SKIP() << *skip_;
  }
  ASSERT_NE(device_, nullptr) << kDeviceKind << " device did not open: "
                              << (open_error_ ? *open_error_ : "no error message");
  dev = device_;
}

void DeviceTest::TearDown() {
  if (dev) {
    EXPECT_TRUE(dev->sync().ok());  // nothing left failing behind a test
  }
}

}  // namespace hc::device_test
