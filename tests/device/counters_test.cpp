// Every device's counters (ops/device.h DeviceCounters) and its argmax: a copy counts its bytes
// in its direction and nothing else moves, sync() and the synchronous copies count as host
// syncs while queued work does not, every queued operation counts at least one command, and
// argmax gives ops::argmax_row's index (first of equal maxima, NaN never) for every row.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "device_test_util.h"
#include "ops/cpu/ops.h"

namespace hc::device_test {
namespace {

class DeviceCounters : public DeviceTest {};

TEST_F(DeviceCounters, CopiesCountTheirBytesEachWay) {
  const std::vector<float> x = randn(1000, 3);
  auto d = to_device(dev, x);
  void* h = nullptr;
  {
    auto r = dev->alloc_host(4000);
    check(r.status(), "alloc_host");
    h = r.value();
  }
  std::vector<float> plain(1000);
  sync();
  const ops::DeviceCounters c0 = dev->counters();
  dev->copy_to_device(d->as<void>(), x.data(), 4000);  // staged host memory
  dev->copy_to_host(h, d->as<void>(), 1000);           // pinned / mapped host memory
  dev->copy_to_host(plain.data(), d->as<void>(), 400);
  const ops::DeviceCounters queued = dev->counters() - c0;
  EXPECT_EQ(queued.h2d_bytes, 4000u);
  EXPECT_EQ(queued.d2h_bytes, 1400u);
  EXPECT_GE(queued.ops, 3u);
  EXPECT_EQ(queued.syncs, 0u) << "queueing copies must not wait for the device";
  sync();
  const ops::DeviceCounters after = dev->counters() - c0;
  EXPECT_EQ(after.syncs, 1u);
  EXPECT_EQ(after.h2d_bytes, 4000u);
  EXPECT_EQ(after.d2h_bytes, 1400u);
  EXPECT_EQ(after.replayed, 0u);
  EXPECT_EQ(std::memcmp(plain.data(), x.data(), 400), 0);
  dev->free_host(h);
}

TEST_F(DeviceCounters, SynchronousCopiesAreSyncsAndOperationsMoveNoBytes) {
  const std::vector<float> x = randn(4096, 5), w = randn(4096, 6);
  auto dx = to_device(dev, x);
  auto dw = to_device(dev, w);
  DeviceBuffer out(dev, 4096 * 4);
  sync();
  ops::DeviceCounters c0 = dev->counters();
  check(dev->upload(dx->as<void>(), x.data(), 4096 * 4), "upload");
  const ops::DeviceCounters up = dev->counters() - c0;
  EXPECT_EQ(up.h2d_bytes, 4096u * 4);
  EXPECT_EQ(up.d2h_bytes, 0u);
  EXPECT_GE(up.syncs, 1u);
  c0 = dev->counters();
  const auto back = from_device<float>(dev, dx->as<void>(), 4096);
  const ops::DeviceCounters down = dev->counters() - c0;
  EXPECT_EQ(down.d2h_bytes, 4096u * 4);
  EXPECT_EQ(down.h2d_bytes, 0u);
  EXPECT_GE(down.syncs, 1u);
  EXPECT_EQ(back, x);
  // Queued arithmetic: commands, no bytes over the link, no waits until sync().
  c0 = dev->counters();
  dev->rmsnorm(out.as<float>(), dx->as<float>(), dw->as<float>(), 4, 1024, 1e-5f);
  dev->add(out.as<float>(), dx->as<float>(), 4096);
  dev->glu(out.as<float>(), dx->as<float>(), 4, 1024, ops::GluKind::kSilu);
  const ops::DeviceCounters ops_only = dev->counters() - c0;
  EXPECT_GE(ops_only.ops, 3u);
  EXPECT_EQ(ops_only.syncs, 0u);
  EXPECT_EQ(ops_only.h2d_bytes + ops_only.d2h_bytes, 0u);
  sync();
  EXPECT_EQ((dev->counters() - c0).syncs, 1u);
}

TEST_F(DeviceCounters, ArgmaxIsTheHostsGreedyChoice) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<std::vector<float>> rows;
  for (int64_t n : {1, 7, 64, 65, 1000, 49152}) rows.push_back(randn(static_cast<size_t>(n), 40 + n));
  // Ties: the first of equal maxima, wherever the lanes that hold them are.
  std::vector<float> tie(3000, -1.0f);
  tie[2999] = tie[700] = tie[65] = 2.5f;
  rows.push_back(tie);
  std::vector<float> with_nan = randn(500, 9);
  with_nan[0] = nan;
  with_nan[17] = nan;
  with_nan[300] = 100.0f;
  with_nan[301] = nan;
  rows.push_back(with_nan);
  rows.push_back(std::vector<float>(130, nan));   // all NaN: 0
  rows.push_back(std::vector<float>(90, -inf));   // all -inf: the first
  std::vector<float> late_inf(200, -inf);
  late_inf[150] = -1e30f;
  rows.push_back(late_inf);
  for (const auto& row : rows) {
    const int64_t n = static_cast<int64_t>(row.size());
    auto dx = to_device(dev, row);
    DeviceBuffer out(dev, 4);
    dev->argmax(dx->as<float>(), 1, n, out.as<int32_t>());
    sync();
    const auto got = from_device<int32_t>(dev, out.as<void>(), 1);
    EXPECT_EQ(got[0], ops::argmax_row(row.data(), n)) << "n " << n;
  }
  // Several rows at once.
  const int64_t n_rows = 5, n = 777;
  std::vector<float> m = randn(static_cast<size_t>(n_rows * n), 77);
  m[2 * n + 5] = 50.0f;
  m[2 * n + 600] = 50.0f;
  auto dm = to_device(dev, m);
  DeviceBuffer out(dev, n_rows * 4);
  dev->argmax(dm->as<float>(), n_rows, n, out.as<int32_t>());
  sync();
  const auto got = from_device<int32_t>(dev, out.as<void>(), n_rows);
  for (int64_t r = 0; r < n_rows; ++r)
    EXPECT_EQ(got[r], ops::argmax_row(m.data() + r * n, n)) << "row " << r;
  EXPECT_EQ(got[2], 5);
}

}  // namespace
}  // namespace hc::device_test
