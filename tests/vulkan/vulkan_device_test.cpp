// What only the Vulkan device has (the device contract itself is tests/device, run on every
// kind): selection by index, a lost device (VK_ERROR_DEVICE_LOST) reported by every later sync()
// without a crash, allocations past one buffer's size limit refused with the limit named, and
// the loader's device list.
#include <gtest/gtest.h>

#include <vector>

#include "ops/device.h"
#include "ops/vulkan/vk_device.h"
#include "ops/vulkan/vk_testing.h"
#include "vulkan_test_util.h"

namespace hc::ops {
namespace {

std::unique_ptr<Device> open_first(uint64_t budget = 0) {
  DeviceOptions o;
  o.kind = DeviceKind::kVulkan;
  o.vulkan_index = 0;
  o.budget_bytes = budget;
  auto r = open_device(o);
  if (!r.ok()) ADD_FAILURE() << r.message();
  return r.ok() ? std::move(r).value() : nullptr;
}


TEST(VulkanDevice, ListsDevicesAndOpensByIndex) {
  REQUIRE_VULKAN();
  auto devs = vk::vulkan_devices();
  ASSERT_TRUE(devs.ok());
  const std::vector<std::string> lines = vulkan_device_lines();
  ASSERT_EQ(lines.size(), devs->size());
  EXPECT_EQ(lines[0].rfind("0: " + (*devs)[0].name + " [", 0), 0u) << lines[0];
  auto dev = open_first();
  ASSERT_TRUE(dev);
  EXPECT_EQ(dev->kind(), DeviceKind::kVulkan);
  EXPECT_NE(dev->name().find((*devs)[0].name), std::string::npos) << dev->name();
  DeviceOptions o;
  o.kind = DeviceKind::kVulkan;
  o.vulkan_index = static_cast<int>(devs->size());
  auto bad = open_device(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("requested, but the loader sees"), std::string::npos) << bad.message();
}

TEST(VulkanDevice, LostDeviceIsAnErrorAtEverySyncNeverACrash) {
  REQUIRE_VULKAN();
  auto dev = open_first();
  ASSERT_TRUE(dev);
  const int64_t n = 256;
  auto a = dev->alloc(n * 4, "a");
  auto h = dev->alloc_host(n * 4);
  ASSERT_TRUE(a.ok() && h.ok());
  float* d = static_cast<float*>(*a);
  std::vector<float> ones(n, 1.0f);
  ASSERT_TRUE(dev->upload(d, ones.data(), n * 4).ok());
  dev->add(d, d, n);  // queued before the loss: drained by it
  vk::lose_device_for_test(*dev);
  dev->add(d, d, n);
  dev->copy_to_host(*h, d, n * 4);
  Status st = dev->sync();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("device lost"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("VK_ERROR_DEVICE_LOST"), std::string::npos) << st.message();
  st = dev->sync();  // and again: the device stays lost
  EXPECT_FALSE(st.ok());
  EXPECT_FALSE(dev->upload(d, ones.data(), n * 4).ok());
  std::vector<float> back(n);
  EXPECT_FALSE(dev->download(back.data(), d, n * 4).ok());
  dev->free(*a);  // freeing and closing still work
  dev->free_host(*h);
  EXPECT_EQ(dev->charged_bytes(), 0u);
}

// One weight matrix larger than lavapipe's maxStorageBufferRange (128 MiB): shaders reach it by
// device address, not through a descriptor binding, so rows past 128 MiB are read like any.
TEST(VulkanDevice, MatricesLargerThanOneBindingRangeAreReadWhole) {
  REQUIRE_VULKAN();
  auto dev = open_first();
  ASSERT_TRUE(dev);
  const int64_t cols = 1024, rows = 40960;  // F32: 160 MiB
  std::vector<float> w(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) w[r * cols + c] = 0.25f * static_cast<float>(r % 7);
  auto wm = dev->alloc(w.size() * 4, "weight");
  auto xm = dev->alloc(cols * 4, "x");
  auto ym = dev->alloc(rows * 4, "y");
  ASSERT_TRUE(wm.ok() && xm.ok() && ym.ok()) << wm.message() << xm.message() << ym.message();
  ASSERT_TRUE(dev->upload(*wm, w.data(), w.size() * 4).ok());
  std::vector<float> x(cols, 1.0f);
  ASSERT_TRUE(dev->upload(*xm, x.data(), cols * 4).ok());
  const TensorView wv = TensorView::make(GgmlType::F32, *wm, cols, rows);
  dev->matmul(wv, static_cast<const float*>(*xm), 1, static_cast<float*>(*ym));
  ASSERT_TRUE(dev->sync().ok());
  std::vector<float> y(rows);
  ASSERT_TRUE(dev->download(y.data(), *ym, rows * 4).ok());
  for (int64_t r = 0; r < rows; ++r)  // sums of 1024 multiples of 0.25: exact in fp32
    ASSERT_EQ(y[r], 256.0f * static_cast<float>(r % 7)) << "row " << r << " at byte "
                                                        << r * cols * 4;
  dev->free(*wm);
  dev->free(*xm);
  dev->free(*ym);
}

TEST(VulkanDevice, BudgetAndPointerErrorsNameWhatWasAsked) {
  REQUIRE_VULKAN();
  auto dev = open_first(/*budget=*/1 << 20);
  ASSERT_TRUE(dev);
  auto big = dev->alloc(2 << 20, "a big thing");
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.message().find("a big thing"), std::string::npos) << big.message();
  EXPECT_NE(big.message().find("budget"), std::string::npos) << big.message();
  // A copy to memory the device never allocated is skipped and reported by sync().
  std::vector<float> v(16, 0.0f);
  float bogus = 0;
  dev->copy_to_device(&bogus, v.data(), 64);
  Status st = dev->sync();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("copy_to_device"), std::string::npos) << st.message();
  EXPECT_TRUE(dev->sync().ok());  // reported once
}

}  // namespace
}  // namespace hc::ops
