// Device::fire_mask, the predictor's decision on the device: every device writes, for every
// neuron or for a listed subset (a device's hot neurons, in slot order, any order), exactly the
// host's `logit >= threshold` bytes (model/sparse_ffn.cpp predict_firing), ties at the threshold
// fire, NaN never does; it queues one command and moves no bytes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

#include "device_test_util.h"

namespace hc::device_test {
namespace {

class DeviceFireMask : public DeviceTest {};

std::vector<uint8_t> host_mask(const std::vector<float>& x, int64_t n_tok, int64_t n,
                               const std::vector<int32_t>* cols, float thr) {
  const int64_t nc = cols ? static_cast<int64_t>(cols->size()) : n;
  std::vector<uint8_t> f(static_cast<size_t>(n_tok * nc));
  for (int64_t t = 0; t < n_tok; ++t)
    for (int64_t j = 0; j < nc; ++j)
      f[t * nc + j] = x[t * n + (cols ? (*cols)[j] : j)] >= thr;
  return f;
}

TEST_F(DeviceFireMask, EqualsTheHostsTestForEveryNeuronAndForAHotList) {
  const int64_t n = 1000;
  const float thr = 0.25f;
  for (const int64_t n_tok : {1, 3}) {
    std::vector<float> x = randn(static_cast<size_t>(n_tok * n), 11 + n_tok);
    x[5] = thr;                                       // a tie fires
    x[6] = std::nextafter(thr, -1.0f);                // just below does not
    x[7] = std::numeric_limits<float>::quiet_NaN();   // NaN never fires
    x[8] = std::numeric_limits<float>::infinity();
    x[n_tok * n - 1] = thr;
    // The hot list: a scattered subset in no particular order (slot order after migrations).
    std::vector<int32_t> cols;
    for (int32_t i = 0; i < n; i += 7) cols.push_back(i);
    cols.push_back(static_cast<int32_t>(n - 1));
    std::reverse(cols.begin() + 3, cols.end() - 10);
    auto dx = to_device(dev, x);
    auto dc = to_device(dev, cols);
    DeviceBuffer all(dev, static_cast<uint64_t>(n_tok * n));
    DeviceBuffer hot(dev, static_cast<uint64_t>(n_tok) * cols.size());
    sync();
    const ops::DeviceCounters c0 = dev->counters();
    dev->fire_mask(dx->as<float>(), n_tok, n, nullptr, n, thr, all.as<uint8_t>());
    dev->fire_mask(dx->as<float>(), n_tok, n, dc->as<int32_t>(),
                   static_cast<int64_t>(cols.size()), thr, hot.as<uint8_t>());
    const ops::DeviceCounters queued = dev->counters() - c0;
    EXPECT_GE(queued.ops, 2u);
    EXPECT_EQ(queued.h2d_bytes + queued.d2h_bytes, 0u);
    EXPECT_EQ(queued.syncs, 0u);
    sync();
    EXPECT_EQ(from_device<uint8_t>(dev, all.as<void>(), n_tok * n),
              host_mask(x, n_tok, n, nullptr, thr))
        << n_tok << " tokens, every neuron";
    EXPECT_EQ(from_device<uint8_t>(dev, hot.as<void>(), n_tok * static_cast<int64_t>(cols.size())),
              host_mask(x, n_tok, n, &cols, thr))
        << n_tok << " tokens, the hot list";
  }
}

TEST_F(DeviceFireMask, BadArgumentsAreReportedAtSync) {
  auto dx = to_device(dev, randn(64, 3));
  DeviceBuffer f(dev, 128);
  dev->fire_mask(dx->as<float>(), 1, 64, nullptr, 65, 0.0f, f.as<uint8_t>());
  const Status st = dev->sync();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("fire_mask"), std::string::npos) << st.message();
  dev->fire_mask(nullptr, 1, 64, nullptr, 64, 0.0f, f.as<uint8_t>());
  EXPECT_FALSE(dev->sync().ok());
  check(dev->sync(), "a clean sync after the errors");
}

}  // namespace
}  // namespace hc::device_test
