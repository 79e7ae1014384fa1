// The Vulkan FFN's gate and up in one dispatch (matvec mode 3, ops/vulkan/vk_abi.h) give exactly
// the bits of the gate pass then the up pass: ffn_threshold and ffn_rows, the gated kinds, with
// and without a gate bias, 1-11 tokens (one-token and batch pipelines, a second group of 8),
// in both matvec work splits (a workgroup per row, as on GPUs, and whole rows per invocation,
// as on CPU implementations), for gate / up of one type (fused) and of two (never fused).
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/tensor_view.h"
#include "ops/device.h"
#include "ops/vulkan/vk_device.h"
#include "ops/vulkan/vk_testing.h"
#include "quant/quant.h"
#include "vulkan_test_util.h"

namespace hc::ops {
namespace {

using vk_test::randn;

// Device memory holding bytes, freed with the device.
struct Up {
  Device* dev;
  void* p = nullptr;
  Up(Device* d, const void* src, uint64_t bytes) : dev(d) {
    auto r = d->alloc(bytes, "test");
    EXPECT_TRUE(r.ok()) << r.message();
    if (!r.ok()) return;
    p = *r;
    const Status st = d->upload(p, src, bytes);
    EXPECT_TRUE(st.ok()) << st.message();
  }
  ~Up() { dev->free(p); }
};

struct Weights {
  std::vector<uint8_t> bytes;
  std::unique_ptr<Up> dev;
  TensorView view;
};
Weights weights(Device* d, GgmlType t, int64_t rows, int64_t cols, uint32_t seed) {
  Weights w;
  const auto f = randn(static_cast<size_t>(rows * cols), seed, 0.5f);
  const int64_t rb = row_bytes(t, cols);
  w.bytes.resize(static_cast<size_t>(rb * rows));
  for (int64_t r = 0; r < rows; ++r)
    quant::quantize_row(t, f.data() + r * cols, w.bytes.data() + r * rb, cols);
  w.dev = std::make_unique<Up>(d, w.bytes.data(), w.bytes.size());
  w.view = TensorView::make(t, w.dev->p, cols, rows);
  return w;
}

void check_split(const char* split) {
  setenv("HC_VK_SPLIT", split, 1);
  DeviceOptions o;
  o.kind = DeviceKind::kVulkan;
  o.vulkan_index = 0;
  auto opened = open_device(o);
  unsetenv("HC_VK_SPLIT");
  ASSERT_TRUE(opened.ok()) << opened.message();
  Device* d = opened->get();
  uint32_t seed = 500;
  const int64_t n_embd = 512, n_ff = 300, n_idx = 90;
  for (GgmlType up_type : {GgmlType::Q4_0, GgmlType::Q8_0}) {
    Weights gate = weights(d, GgmlType::Q4_0, n_ff, n_embd, ++seed);
    Weights up = weights(d, up_type, n_ff, n_embd, ++seed);
    Weights down_t = weights(d, GgmlType::Q8_0, n_ff, n_embd, ++seed);
    const auto bias = randn(static_cast<size_t>(n_ff), ++seed, 0.5f);
    Up dbias(d, bias.data(), bias.size() * 4);
    for (int64_t n_tok : {1, 3, 8, 11}) {
      const auto x = randn(static_cast<size_t>(n_tok * n_embd), ++seed);
      Up dx(d, x.data(), x.size() * 4);
      std::vector<int32_t> idx(n_idx);
      for (int64_t k = 0; k < n_idx; ++k) idx[k] = static_cast<int32_t>((k * 37 + 11) % n_ff);
      std::mt19937 rng(seed);
      std::vector<uint8_t> fire(static_cast<size_t>(n_tok * n_idx));
      for (size_t i = 0; i < fire.size(); ++i) fire[i] = i % 6 != 0 && (rng() & 1);
      Up didx(d, idx.data(), idx.size() * 4);
      Up dfire(d, fire.data(), fire.size());
      auto out = d->alloc(static_cast<uint64_t>(n_tok * n_embd) * 4, "out");
      ASSERT_TRUE(out.ok());
      for (GluKind kind : {GluKind::kSilu, GluKind::kRelu, GluKind::kDRelu}) {
        for (bool rows : {false, true}) {
          for (const float* b : {static_cast<const float*>(nullptr),
                                 static_cast<const float*>(dbias.p)}) {
            std::vector<float> got[2];
            for (int fused = 0; fused < 2; ++fused) {
              vk::set_ffn_fused_for_test(*d, fused == 1);
              auto* y = static_cast<float*>(*out);
              if (rows) {
                d->ffn_rows(gate.view, b, up.view, down_t.view, static_cast<float*>(dx.p), n_tok,
                            static_cast<int32_t*>(didx.p), n_idx, static_cast<uint8_t*>(dfire.p),
                            kind, y);
              } else {
                d->ffn_threshold(gate.view, b, up.view, down_t.view, static_cast<float*>(dx.p),
                                 n_tok, 0.05f, kind, y);
              }
              const Status st = d->sync();
              ASSERT_TRUE(st.ok()) << st.message();
              got[fused].resize(static_cast<size_t>(n_tok * n_embd));
              ASSERT_TRUE(d->download(got[fused].data(), y, got[fused].size() * 4).ok());
            }
            vk::set_ffn_fused_for_test(*d, true);
            ASSERT_EQ(0, std::memcmp(got[0].data(), got[1].data(), got[0].size() * 4))
                << split << (rows ? " ffn_rows" : " ffn_threshold") << " up "
                << dtype_name(up_type) << " n_tok " << n_tok << " kind "
                << static_cast<int>(kind) << (b ? " with bias" : "");
            double sum = 0;  // not all zero: the neurons fire
            for (float v : got[1]) sum += std::fabs(v);
            ASSERT_GT(sum, 0.0);
          }
        }
      }
      d->free(*out);
    }
  }
}

TEST(VulkanFfnFused, GateUpInOneDispatchGivesTheTwoPassesBits) {
  REQUIRE_VULKAN();
  check_split("gpu");
  check_split("cpu");
}

}  // namespace
}  // namespace hc::ops
