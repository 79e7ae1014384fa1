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

// ---- routing on the device: moe_topk, matmul_id, moe_combine -------------------------------

// The host's routing of one row (ops/cpu/moe_topk.h) against the device's, for every gate.
void check_moe_topk(ops::Device* dev, int64_t n_tok, int n_expert, int k, const ops::MoeGate& g,
                    std::vector<float> x, const std::string& what) {
  std::vector<float> want_x = x, want_w(static_cast<size_t>(n_tok * k));
  std::vector<int32_t> want_ids(static_cast<size_t>(n_tok * k)), order(static_cast<size_t>(n_expert));
  for (int64_t t = 0; t < n_tok; ++t)
    ops::moe_topk_row(want_x.data() + t * n_expert, n_expert, k, g, want_ids.data() + t * k,
                      want_w.data() + t * k, order.data());
  auto dx = to_device(dev, x);
  DeviceBuffer ids(dev, static_cast<uint64_t>(n_tok * k) * 4), w(dev, static_cast<uint64_t>(n_tok * k) * 4);
  dev->moe_topk(dx->as<float>(), n_tok, n_expert, k, g, ids.as<int32_t>(), w.as<float>());
  check(dev->sync(), "moe_topk " + what);
  const auto got_ids = from_device<int32_t>(dev, ids.as<void>(), want_ids.size());
  const auto got_w = from_device<float>(dev, w.as<void>(), want_w.size());
  const auto got_x = from_device<float>(dev, dx->as<void>(), x.size());
  // The CPU device runs the host's code; the GPUs their own exp (~1 ulp) and sums.
  const bool exact = std::string(kDeviceKind) == "cpu";
  for (size_t i = 0; i < want_ids.size(); ++i) {
    ASSERT_EQ(got_ids[i], want_ids[i]) << what << " route " << i;
    if (exact) ASSERT_EQ(bits(got_w[i]), bits(want_w[i])) << what << " weight " << i;
    else ASSERT_NEAR(got_w[i], want_w[i], 1e-5 * std::fabs(want_w[i]) + 1e-30) << what << " weight " << i;
  }
  for (size_t i = 0; i < x.size(); ++i) {
    if (exact) ASSERT_EQ(bits(got_x[i]), bits(want_x[i])) << what << " gate value " << i;
    else ASSERT_NEAR(got_x[i], want_x[i], 1e-5 * std::fabs(want_x[i]) + 1e-30) << what << " gate value " << i;
  }
}

TEST_F(DeviceMoeOps, MoeTopkChoosesAndWeighsAsTheHost) {
  uint32_t seed = 200;
  for (int n_expert : {8, 60, 128}) {
    for (int k : {1, 2, 8}) {
      for (int kind : {0, 1, 2}) {
        for (bool norm : {false, true}) {
          for (float scale : {0.0f, 2.5f}) {
            ops::MoeGate g;
            g.kind = kind;
            g.norm_w = norm;
            g.w_scale = scale;
            const int64_t n_tok = 3;
            const auto x = randn(static_cast<size_t>(n_tok * n_expert), seed++, 3.0f);
            check_moe_topk(dev, n_tok, n_expert, k, g, x,
                           "n_expert " + std::to_string(n_expert) + " k " + std::to_string(k) +
                               " kind " + std::to_string(kind) + " norm " + std::to_string(norm) +
                               " scale " + std::to_string(scale));
          }
        }
      }
    }
  }
}

TEST_F(DeviceMoeOps, MoeTopkBreaksTiesByTheLowerIndex) {
  // Equal logits give equal gate values on every device: the lower index goes first.
  std::vector<float> x = {0.5f, 2.0f, -1.0f, 2.0f, 0.5f, 2.0f, -3.0f, 0.5f};
  ops::MoeGate g;
  g.norm_w = true;
  check_moe_topk(dev, 1, 8, 5, g, x, "ties, softmax");
  g.kind = ops::MoeGate::kSigmoid;
  check_moe_topk(dev, 1, 8, 5, g, x, "ties, sigmoid");
}

// y[j] of matmul_id against matmul_rows on the chosen matrix's rows (weight_rows), bit for bit:
// the same one-row mat-vec on the same device.
void check_matmul_id(ops::Device* dev, GgmlType type, int64_t n_mat, int64_t rows, int64_t cols,
                     const std::vector<int32_t>& ids, bool x_per_id, uint32_t seed) {
  const Matrix m = make_matrix(dev, type, n_mat * rows, cols, seed);
  const int64_t n_ids = static_cast<int64_t>(ids.size());
  const auto x = randn(static_cast<size_t>((x_per_id ? n_ids : 1) * cols), seed + 1);
  auto dx = to_device(dev, x);
  auto dids = to_device(dev, ids);
  DeviceBuffer y(dev, static_cast<uint64_t>((n_ids + 1) * rows) * 4),
      ref(dev, static_cast<uint64_t>(n_ids * rows) * 4);
  const std::vector<float> sentinel(static_cast<size_t>((n_ids + 1) * rows), kSentinel);
  check(dev->upload(y.as<void>(), sentinel.data(), sentinel.size() * 4), "upload");
  dev->matmul_id(m.view(), rows, dids->as<int32_t>(), n_ids, dx->as<float>(),
                 x_per_id ? cols : 0, y.as<float>());
  for (int64_t j = 0; j < n_ids; ++j)
    dev->matmul_rows(dev->weight_rows(m.view(), ids[static_cast<size_t>(j)] * rows, rows),
                     dx->as<float>() + (x_per_id ? j * cols : 0), 1, ref.as<float>() + j * rows);
  check(dev->sync(), "matmul_id");
  const auto got = from_device<float>(dev, y.as<void>(), sentinel.size());
  const auto want = from_device<float>(dev, ref.as<void>(), static_cast<size_t>(n_ids * rows));
  for (int64_t i = 0; i < n_ids * rows; ++i)
    ASSERT_EQ(bits(got[static_cast<size_t>(i)]), bits(want[static_cast<size_t>(i)]))
        << dtype_name(type) << " route " << i / rows << " row " << i % rows;
  for (int64_t i = n_ids * rows; i < (n_ids + 1) * rows; ++i)
    ASSERT_EQ(got[static_cast<size_t>(i)], kSentinel) << "written past y";
  // And the first route against the exact product (the view reads the right matrix).
  const DeviceDots dots(type, x.data(), cols);
  for (int64_t r = 0; r < rows; ++r) {
    const BoundedDot d = dots(m, ids[0] * rows + r);
    ASSERT_NEAR(got[static_cast<size_t>(r)], d.value, d.bound) << dtype_name(type) << " row " << r;
  }
}

TEST_F(DeviceMoeOps, MatmulIdComputesEachRouteOnItsMatrix) {
  uint32_t seed = 300;
  for (GgmlType t : kAllTypes) {
    check_matmul_id(dev, t, 4, 32, 256, {2, 0, 3, 2}, false, seed += 2);  // one input (gate, up)
    check_matmul_id(dev, t, 4, 32, 256, {1, 3, 0}, true, seed += 2);      // one per route (down)
  }
  check_matmul_id(dev, GgmlType::Q4_0, 16, 17, 64, {15, 0, 7, 7, 3, 11, 1, 2, 9, 14}, true, 350);
}

TEST_F(DeviceMoeOps, MoeCombineSumsTheWeightedRoutesInOrderExactly) {
  uint32_t seed = 400;
  for (int64_t n : {1, 65, 4097}) {
    for (int k : {1, 2, 8}) {
      for (int64_t n_tok : {1, 3}) {
        const auto y = randn(static_cast<size_t>(n_tok * k * n), seed++, 2.0f);
        auto w = randn(static_cast<size_t>(n_tok * k), seed++, 1.0f);
        auto dy = to_device(dev, y);
        auto dw = to_device(dev, w);
        std::vector<float> sentinel(static_cast<size_t>((n_tok + 1) * n), kSentinel);
        auto dout = to_device(dev, sentinel);
        dev->moe_combine(dy->as<float>(), dw->as<float>(), n_tok, k, n, dout->as<float>());
        sync();
        const auto got = from_device<float>(dev, dout->as<void>(), sentinel.size());
        for (int64_t t = 0; t <= n_tok; ++t) {
          for (int64_t i = 0; i < n; ++i) {
            float want = kSentinel;
            if (t < n_tok) {
              volatile float acc = y[static_cast<size_t>((t * k) * n + i)] * w[static_cast<size_t>(t * k)];
              for (int j = 1; j < k; ++j) {
                volatile float p = y[static_cast<size_t>((t * k + j) * n + i)] * w[static_cast<size_t>(t * k + j)];
                acc = acc + p;
              }
              want = acc;
            }
            ASSERT_EQ(bits(got[static_cast<size_t>(t * n + i)]), bits(want))
                << "n " << n << " k " << k << " t " << t << " i " << i;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace hc::device_test
