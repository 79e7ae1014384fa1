// The row operations of mixture-of-experts and qwen2 layers (ops/device.h): add_rows (a bias on
// every row), get_rows (gather a routed token's row) and set_rows_scaled (scatter an expert's
// output times its router weight), against scalar loops, bit for bit on every device kind: they
// are copies, single adds and single products. Sizes straddle the Vulkan shaders' workgroup of
// 64 elements and include one row, one element, and a grid past 65535 workgroups. A sentinel
// row after every output catches writes past the end. (Argument errors: errors_test.cpp.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "device_test_util.h"

namespace hc::device_test {
namespace {

class DeviceMoeOps : public DeviceTest {};

constexpr float kSentinel = 42.0f;

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// n row indices drawn from [0, n_src): repeats allowed (a gather may read a row twice), the
// last row always among them.
std::vector<int32_t> random_rows(int64_t n, int64_t n_src, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> d(0, static_cast<int32_t>(n_src - 1));
  std::vector<int32_t> idx(static_cast<size_t>(n));
  for (int32_t& i : idx) i = d(rng);
  idx[static_cast<size_t>(n / 2)] = static_cast<int32_t>(n_src - 1);
  return idx;
}

// n distinct rows of [0, n_dst) in random order (a scatter's targets).
std::vector<int32_t> distinct_rows(int64_t n, int64_t n_dst, uint32_t seed) {
  std::vector<int32_t> all(static_cast<size_t>(n_dst));
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), std::mt19937(seed));
  all.resize(static_cast<size_t>(n));
  return all;
}

TEST_F(DeviceMoeOps, AddRowsAddsTheRowToEveryRowExactly) {
  for (int64_t n : {1, 7, 64, 65, 896, 4099}) {
    for (int64_t n_tok : {1, 3, 17}) {
      // y: n_tok rows and a sentinel row after them.
      auto y = randn(static_cast<size_t>(n_tok * n), 71 + static_cast<uint32_t>(n), 3.0f);
      y.resize(static_cast<size_t>((n_tok + 1) * n), kSentinel);
      const auto b = randn(static_cast<size_t>(n), 72);
      auto dy = to_device(dev, y);
      auto db = to_device(dev, b);
      dev->add_rows(dy->as<float>(), db->as<float>(), n_tok, n);
      sync();
      const auto got = from_device<float>(dev, dy->as<void>(), y.size());
      for (int64_t t = 0; t <= n_tok; ++t) {
        for (int64_t i = 0; i < n; ++i) {
          const size_t k = static_cast<size_t>(t * n + i);
          const float want = t < n_tok ? y[k] + b[static_cast<size_t>(i)] : kSentinel;
          ASSERT_EQ(bits(got[k]), bits(want))
              << "n " << n << " n_tok " << n_tok << " t " << t << " i " << i;
        }
      }
    }
  }
}

// dst [n + 1 rows, width] after get_rows from src [n_src, width] with random rows.
void check_get_rows(ops::Device* dev, int64_t n, int64_t n_src, int64_t width, uint32_t seed) {
  auto src = randn(static_cast<size_t>(n_src * width), seed);
  // Values a float operation could alter: a copy keeps their bits.
  src[0] = -0.0f;
  src[static_cast<size_t>(n_src * width - 1)] = std::numeric_limits<float>::quiet_NaN();
  if (src.size() > 2) {
    src[1] = std::numeric_limits<float>::denorm_min();
    const uint32_t nan_payload = 0x7fc12345u;
    std::memcpy(&src[src.size() - 2], &nan_payload, 4);
  }
  const auto idx = random_rows(n, n_src, seed + 1);
  const std::vector<float> sentinel(static_cast<size_t>((n + 1) * width), kSentinel);
  auto dsrc = to_device(dev, src);
  auto didx = to_device(dev, idx);
  auto ddst = to_device(dev, sentinel);
  dev->get_rows(ddst->as<float>(), dsrc->as<float>(), didx->as<int32_t>(), n, width);
  check(dev->sync(), "get_rows");
  const auto got = from_device<float>(dev, ddst->as<void>(), sentinel.size());
  for (int64_t j = 0; j <= n; ++j) {
    for (int64_t i = 0; i < width; ++i) {
      const float want = j < n ? src[static_cast<size_t>(idx[j] * width + i)] : kSentinel;
      ASSERT_EQ(bits(got[static_cast<size_t>(j * width + i)]), bits(want))
          << "n " << n << " width " << width << " row " << j << " (src row "
          << (j < n ? idx[j] : -1) << ") i " << i;
    }
  }
}

TEST_F(DeviceMoeOps, GetRowsCopiesTheIndexedRowsBitForBit) {
  uint32_t seed = 80;
  for (int64_t width : {1, 7, 63, 64, 65, 896, 4097}) {
    for (int64_t n : {1, 3, 17}) check_get_rows(dev, n, 5 + n, width, seed += 3);
  }
  check_get_rows(dev, 1, 1, 1, 99);  // one element
}

TEST_F(DeviceMoeOps, GetRowsPastOneGridRow) {
  // 5 (2^20 + 3) elements: more than 65535 workgroups of 64, so the Vulkan grid's second row.
  check_get_rows(dev, 5, 3, (1 << 20) + 3, 90);
}

// dst [n_dst, width] (sentinels) after set_rows_scaled of src [n, width] to n distinct rows.
void check_set_rows_scaled(ops::Device* dev, int64_t n, int64_t n_dst, int64_t width,
                           uint32_t seed) {
  const auto src = randn(static_cast<size_t>(n * width), seed, 2.0f);
  std::vector<float> scale(static_cast<size_t>(n));
  std::mt19937 rng(seed + 1);
  std::uniform_real_distribution<float> d(0.01f, 1.0f);  // router weights
  for (float& s : scale) s = d(rng);
  scale[0] = -0.75f;  // any float, not only a probability
  const auto idx = distinct_rows(n, n_dst, seed + 2);
  const std::vector<float> sentinel(static_cast<size_t>(n_dst * width), kSentinel);
  auto dsrc = to_device(dev, src);
  auto dscale = to_device(dev, scale);
  auto didx = to_device(dev, idx);
  auto ddst = to_device(dev, sentinel);
  dev->set_rows_scaled(ddst->as<float>(), dsrc->as<float>(), didx->as<int32_t>(),
                       dscale->as<float>(), n, width);
  check(dev->sync(), "set_rows_scaled");
  const auto got = from_device<float>(dev, ddst->as<void>(), sentinel.size());
  std::vector<int64_t> from(static_cast<size_t>(n_dst), -1);  // dst row -> src row
  for (int64_t j = 0; j < n; ++j) from[static_cast<size_t>(idx[j])] = j;
  for (int64_t r = 0; r < n_dst; ++r) {
    const int64_t j = from[static_cast<size_t>(r)];
    for (int64_t i = 0; i < width; ++i) {
      // One fp32 product (volatile: the reference itself is not contracted into anything).
      volatile float prod = j >= 0 ? src[static_cast<size_t>(j * width + i)] * scale[j] : 0.0f;
      const float want = j >= 0 ? prod : kSentinel;
      ASSERT_EQ(bits(got[static_cast<size_t>(r * width + i)]), bits(want))
          << "n " << n << " width " << width << " dst row " << r << " (src row " << j << ") i "
          << i;
    }
  }
}

TEST_F(DeviceMoeOps, SetRowsScaledScattersScaledRowsExactly) {
  uint32_t seed = 100;
  for (int64_t width : {1, 7, 63, 64, 65, 896, 4097}) {
    for (int64_t n : {1, 3, 17}) check_set_rows_scaled(dev, n, n + 4, width, seed += 4);
  }
  check_set_rows_scaled(dev, 1, 1, 1, 120);   // one element
  check_set_rows_scaled(dev, 8, 8, 33, 124);  // every row written
}

// A mixture-of-experts step queued whole before one sync: gather the routed tokens' rows, bias
// them, scatter them back scaled into another buffer. Each operation sees the previous one's
// output (the queue's order).
TEST_F(DeviceMoeOps, GatherBiasScatterInOneQueue) {
  const int64_t n_tok = 11, width = 100, n = 4;
  const auto x = randn(static_cast<size_t>(n_tok * width), 130);
  const auto b = randn(static_cast<size_t>(width), 131);
  const std::vector<int32_t> idx = {9, 2, 10, 5};
  const std::vector<float> scale = {0.5f, 0.25f, 0.125f, 0.3f};
  auto dx = to_device(dev, x);
  auto db = to_device(dev, b);
  auto didx = to_device(dev, idx);
  auto dscale = to_device(dev, scale);
  DeviceBuffer rows(dev, static_cast<uint64_t>(n * width) * 4);
  const std::vector<float> zeros(static_cast<size_t>(n_tok * width), 0.0f);
  auto dout = to_device(dev, zeros);
  dev->get_rows(rows.as<float>(), dx->as<float>(), didx->as<int32_t>(), n, width);
  dev->add_rows(rows.as<float>(), db->as<float>(), n, width);
  dev->set_rows_scaled(dout->as<float>(), rows.as<float>(), didx->as<int32_t>(),
                       dscale->as<float>(), n, width);
  sync();
  const auto got = from_device<float>(dev, dout->as<void>(), zeros.size());
  std::vector<float> want = zeros;
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t i = 0; i < width; ++i) {
      volatile float sum = x[static_cast<size_t>(idx[j] * width + i)] + b[static_cast<size_t>(i)];
      volatile float prod = sum * scale[static_cast<size_t>(j)];
      want[static_cast<size_t>(idx[j] * width + i)] = prod;
    }
  }
  for (size_t k = 0; k < want.size(); ++k) ASSERT_EQ(bits(got[k]), bits(want[k])) << "k " << k;
}

}  // namespace
}  // namespace hc::device_test
