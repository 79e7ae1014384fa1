// Shared by the Vulkan device tests (tests/vulkan): whether device 0 of the Vulkan loader is
// usable, and REQUIRE_VULKAN(), which skips a test (naming why) when it is not. Skips only for a
// build without the backend or a machine without a usable device; tests/device opens it
// directly and fails when it is listed but does not open.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "../ops/ops_test_util.h"
#include "ops/device.h"
#include "ops/vulkan/vk_device.h"

namespace hc::ops::vk_test {

inline bool have_device(std::string* why) {
  auto devs = vk::vulkan_devices();
  if (!devs.ok()) return *why = devs.message(), false;
  if (devs->empty()) return *why = "the loader lists no device", false;
  if (!(*devs)[0].usable) return *why = (*devs)[0].name + " lacks " + (*devs)[0].missing, false;
  return true;
}

// Vulkan device 0 (lavapipe on CI) as a shared device with the default budget; null (and a
// test failure) when it does not open.
inline std::shared_ptr<Device> open_device0() {
  DeviceOptions o;
  o.kind = DeviceKind::kVulkan;
  o.vulkan_index = 0;
  auto d = open_device(o);
  EXPECT_TRUE(d.ok()) << d.message();
  return d.ok() ? std::shared_ptr<Device>(std::move(*d)) : nullptr;
}

// n normal floats (mean 0, sd scale) from seed: the ops tests' generator.
using ops_test::randn;

}  // namespace hc::ops::vk_test

#define REQUIRE_VULKAN()                                                            \
  do {                                                                              \
    std::string why_;                                                               \
    if (!::hc::ops::vk_test::have_device(&why_)) GTEST_SKIP() << "no Vulkan device: " << why_; \
  } while (0)
