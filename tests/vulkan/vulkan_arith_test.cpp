// The Vulkan device's matmul arithmetic against the host's (ops/vulkan/vk_abi.h MatvecPC):
//   - the activations are quantised on the device to vec_dot_type(weight) byte for byte as
//     quant::quantize_activations does on the host (Q8_0 / Q8_1 with ggml's x86 rounding, Q8_K,
//     F16, BF16), over random rows, exact rounding ties, zero, subnormal and huge blocks;
//   - matmul then equals ops::matmul_ref (the host's scalar vec_dot on the same quantised
//     activations) within fp32 accumulation rounding (a few ulp of sum |w x|), for every weight
//     type, in both matvec work splits (a workgroup per row, as on GPUs, and whole rows per
//     invocation, as on CPU implementations), single tokens and batches.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/tensor_view.h"
#include "ops/cpu/matmul.h"
#include "ops/device.h"
#include "ops/vulkan/vk_device.h"
#include "ops/vulkan/vk_testing.h"
#include "vulkan_test_util.h"
#include "quant/quant.h"


namespace hc::ops {
namespace {

using vk_test::randn;


// Device 0 with the work splits forced by HC_VK_SPLIT ("" = the device's default).
std::unique_ptr<Device> open_first(const char* split = "") {
  if (*split) setenv("HC_VK_SPLIT", split, 1);
  DeviceOptions o;
  o.kind = DeviceKind::kVulkan;
  o.vulkan_index = 0;
  auto r = open_device(o);
  unsetenv("HC_VK_SPLIT");
  if (!r.ok()) ADD_FAILURE() << r.message();
  return r.ok() ? std::move(r).value() : nullptr;
}

struct DevMem {
  Device* dev;
  void* p;
  DevMem(Device* d, uint64_t bytes) : dev(d), p(nullptr) {
    auto r = d->alloc(bytes, "test");
    if (r.ok()) p = *r;
  }
  ~DevMem() { dev->free(p); }
};

// Activation rows of ne0 (a multiple of 256) that exercise the quantisers' edge cases, one kind
// per row: random at several scales, exact halves of the rounding step (ties), a zero block,
// a constant negative block, subnormal and huge values.
std::vector<float> edge_rows(int64_t ne0, int64_t* n_tok) {
  std::vector<std::vector<float>> rows;
  for (float scale : {1e-3f, 1.0f, 40.0f}) rows.push_back(randn(ne0, 7 + rows.size(), scale));
  std::vector<float> ties(ne0);  // amax 127 per block: id = 1 (Q8_0 / Q8_1), iscale 1 (Q8_K)
  for (int64_t i = 0; i < ne0; ++i) ties[i] = (i % 32 == 0) ? -127.0f : (i % 7) - 3.5f + (i % 3);
  rows.push_back(ties);
  std::vector<float> mixed = randn(ne0, 99);
  for (int64_t i = 0; i < 256; ++i) mixed[i] = 0.0f;                      // zero block
  for (int64_t i = 256; i < 512 && i < ne0; ++i) mixed[i] = -0.75f;        // constant, negative
  for (int64_t i = 512; i < 544 && i < ne0; ++i) mixed[i] *= 1e-39f;       // subnormal block
  for (int64_t i = 544; i < 576 && i < ne0; ++i) mixed[i] *= 1e30f;        // huge block
  rows.push_back(mixed);
  *n_tok = static_cast<int64_t>(rows.size());
  std::vector<float> x;
  for (const auto& r : rows) x.insert(x.end(), r.begin(), r.end());
  return x;
}

TEST(VulkanArith, QuantisesActivationsAsTheHostByteForByte) {
  REQUIRE_VULKAN();
  auto dev = open_first();
  ASSERT_TRUE(dev);
  const int64_t ne0 = 768;
  int64_t n_tok = 0;
  const std::vector<float> x = edge_rows(ne0, &n_tok);
  DevMem dx(dev.get(), x.size() * sizeof(float));
  ASSERT_TRUE(dx.p);
  ASSERT_TRUE(dev->upload(dx.p, x.data(), x.size() * sizeof(float)).ok());
  for (GgmlType wt : {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q4_K, GgmlType::F16,
                      GgmlType::BF16}) {
    const GgmlType vt = quant::vec_dot_type(wt);
    auto got = vk::quantized_activations_for_test(*dev, wt, static_cast<const float*>(dx.p),
                                                  n_tok, ne0);
    ASSERT_TRUE(got.ok()) << got.message();
    const int64_t rb = row_bytes(vt, ne0);
    ASSERT_EQ(got->size(), static_cast<size_t>(rb * n_tok));
    std::vector<uint8_t> want(static_cast<size_t>(rb));
    for (int64_t t = 0; t < n_tok; ++t) {
      quant::quantize_activations(vt, x.data() + t * ne0, want.data(), ne0);
      for (int64_t b = 0; b < rb; ++b) {
        ASSERT_EQ(static_cast<int>((*got)[static_cast<size_t>(t * rb + b)]),
                  static_cast<int>(want[static_cast<size_t>(b)]))
            << dtype_name(vt) << " row " << t << " byte " << b;
      }
    }
  }
}

// A random [rows, cols] matrix of type t quantised by the reference quantiser, rows nb1 apart.
struct Matrix {
  GgmlType type;
  int64_t rows, cols, nb1;
  std::vector<uint8_t> bytes;
  std::vector<float> deq;
};
Matrix make_matrix(GgmlType t, int64_t rows, int64_t cols, int64_t pad, uint32_t seed) {
  Matrix m{t, rows, cols, row_bytes(t, cols) + pad, {}, {}};
  m.bytes.assign(static_cast<size_t>(m.nb1 * rows), 0);
  m.deq.resize(static_cast<size_t>(rows * cols));
  const std::vector<float> v = randn(static_cast<size_t>(rows * cols), seed, 0.5f);
  for (int64_t r = 0; r < rows; ++r) {
    quant::quantize_row_ref(t, v.data() + r * cols, m.bytes.data() + r * m.nb1, cols);
    quant::dequantize_row_ref(t, m.bytes.data() + r * m.nb1, m.deq.data() + r * cols, cols);
  }
  return m;
}

// matmul of every type and shape in the given split against matmul_ref.
void check_split(const char* split) {
  auto dev = open_first(split);
  ASSERT_TRUE(dev);
  uint32_t seed = 1;
  const GgmlType types[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16,
                            GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0,
                            GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K};
  for (GgmlType t : types) {
    const int64_t bs = dtype_traits(t).block_size;
    const std::vector<int64_t> cols =
        bs == 1 ? std::vector<int64_t>{7, 64, 1031} : bs == 32 ? std::vector<int64_t>{32, 576}
                                                            : std::vector<int64_t>{256, 1280};
    for (int64_t c : cols) {
      for (int64_t rows : {1, 37, 300}) {
        const int64_t pad = rows == 37 ? 2 * (t == GgmlType::F32 ? 2 : 1) : 0;
        const Matrix m = make_matrix(t, rows, c, pad, ++seed);
        DevMem dw(dev.get(), m.bytes.size());
        ASSERT_TRUE(dw.p);
        ASSERT_TRUE(dev->upload(dw.p, m.bytes.data(), m.bytes.size()).ok());
        const TensorView w{t, dw.p, c, rows, m.nb1, nullptr};
        std::vector<uint8_t> packed(static_cast<size_t>(row_bytes(t, c) * rows));
        const int64_t rb = row_bytes(t, c);
        for (int64_t r = 0; r < rows; ++r)
          std::copy_n(m.bytes.data() + r * m.nb1, rb, packed.data() + r * rb);
        for (int64_t n_tok : {1, 3, 9}) {
          const std::vector<float> x = randn(static_cast<size_t>(n_tok * c), ++seed);
          DevMem dx(dev.get(), x.size() * sizeof(float));
          DevMem dy(dev.get(), static_cast<uint64_t>(n_tok * rows) * sizeof(float));
          ASSERT_TRUE(dev->upload(dx.p, x.data(), x.size() * sizeof(float)).ok());
          dev->matmul(w, static_cast<const float*>(dx.p), n_tok, static_cast<float*>(dy.p));
          const Status st = dev->sync();
          ASSERT_TRUE(st.ok()) << split << " " << dtype_name(t) << ": " << st.message();
          std::vector<float> y(static_cast<size_t>(n_tok * rows)), want(y.size());
          ASSERT_TRUE(dev->download(y.data(), dy.p, y.size() * sizeof(float)).ok());
          matmul_ref(TensorView::make(t, packed.data(), c, rows), x.data(), n_tok, want.data());
          for (int64_t tk = 0; tk < n_tok; ++tk) {
            for (int64_t r = 0; r < rows; ++r) {
              double s = 0;  // sum |w x|: the scale of fp32 accumulation error
              for (int64_t i = 0; i < c; ++i)
                s += std::fabs(double(m.deq[r * c + i]) * x[tk * c + i]);
              const double bound = 64.0 * s / (1 << 24) + 1e-30;
              ASSERT_NEAR(y[tk * rows + r], want[tk * rows + r], bound)
                  << split << " " << dtype_name(t) << " [" << rows << ", " << c << "] n_tok "
                  << n_tok << " token " << tk << " row " << r;
            }
          }
        }
      }
    }
  }
}

TEST(VulkanArith, MatmulIsTheHostsBlockArithmeticRowPerWorkgroup) {
  REQUIRE_VULKAN();
  check_split("gpu");
}

TEST(VulkanArith, MatmulIsTheHostsBlockArithmeticRowsPerInvocation) {
  REQUIRE_VULKAN();
  check_split("4,8,1,8");
  check_split("3,5,2,16");  // odd rows per lane and workgroup sizes
}

// Every finite fp16 weight is widened exactly, whichever conversion the shaders use (the
// device's own unpackHalf2x16 on CPU implementations, common.glsl HC_NATIVE_HALF): W holds all
// of them, 8 per row, and 8 one-hot tokens read them back one by one.
TEST(VulkanArith, EveryFiniteHalfWeightIsExact) {
  REQUIRE_VULKAN();
  for (const char* split : {"cpu", "gpu"}) {
    auto dev = open_first(split);
    ASSERT_TRUE(dev);
    const int rows = 8192;
    std::vector<uint16_t> w(rows * 8);
    for (int i = 0; i < rows * 8; ++i) w[i] = static_cast<uint16_t>(i);
    for (uint16_t& v : w) if ((v & 0x7c00) == 0x7c00) v = 0x3c00;  // inf / NaN -> 1
    std::vector<float> x(64, 0.0f);
    for (int t = 0; t < 8; ++t) x[t * 8 + t] = 1.0f;
    DevMem dw(dev.get(), w.size() * 2), dx(dev.get(), 256), dy(dev.get(), rows * 8 * 4);
    ASSERT_TRUE(dev->upload(dw.p, w.data(), w.size() * 2).ok());
    ASSERT_TRUE(dev->upload(dx.p, x.data(), 256).ok());
    const TensorView tv{GgmlType::F16, dw.p, 8, rows, 16, nullptr};
    dev->matmul(tv, static_cast<const float*>(dx.p), 8, static_cast<float*>(dy.p));
    ASSERT_TRUE(dev->sync().ok());
    std::vector<float> y(rows * 8);
    ASSERT_TRUE(dev->download(y.data(), dy.p, y.size() * 4).ok());
    for (int r = 0; r < rows; ++r) {
      for (int t = 0; t < 8; ++t) {
        const float want = fp16_to_fp32(w[r * 8 + t]);
        // -0 * 1 + 0 * 0 + ... is +0: compare zeros by value.
        if (want == 0.0f) {
          ASSERT_EQ(y[t * rows + r], 0.0f);
          continue;
        }
        uint32_t a, b;
        std::memcpy(&a, &want, 4);
        std::memcpy(&b, &y[t * rows + r], 4);
        ASSERT_EQ(a, b) << split << ": half 0x" << std::hex << w[r * 8 + t];
      }
    }
  }
}

}  // namespace
}  // namespace hc::ops
