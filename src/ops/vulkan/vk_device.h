// The Vulkan backend of ops::Device (Vulkan 1.2 compute): opened through ops::open_device, so
// nothing here is visible to model code. Needs no Vulkan library at link time (vk_loader.h).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "ops/device.h"

namespace hc::ops::vk {

// What the loader reports of one physical device (enumeration order = the N of vulkan:N).
struct VulkanDeviceInfo {
  int index = 0;
  std::string name;      // "llvmpipe (LLVM 15.0.6, 256 bits)", "NVIDIA H100 80GB HBM3"
  std::string type;      // "gpu" (discrete or integrated), "cpu" (lavapipe), "virtual", "other"
  std::string api;       // "1.3.230"
  bool usable = false;   // Vulkan >= 1.2 with every feature the backend needs
  std::string missing;   // what it lacks when not usable
};

// The devices the Vulkan loader sees; an error when there is no loader or no instance.
Result<std::vector<VulkanDeviceInfo>> vulkan_devices();

// opt.vulkan_index >= 0: that device; -1: the first usable GPU-type device (never a CPU one).
Result<std::unique_ptr<Device>> open_vulkan_device(const DeviceOptions& opt);

}  // namespace hc::ops::vk
