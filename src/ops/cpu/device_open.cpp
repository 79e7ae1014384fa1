#include <string>

#include "ops/cpu/cpu_device.h"
#include "ops/device.h"
#ifdef HC_HAVE_CUDA
#include "ops/cuda/cuda_device.h"
#endif
#ifdef HC_HAVE_VULKAN
#include "ops/vulkan/vk_device.h"
#endif

namespace hc::ops {

bool cuda_compiled() {
#ifdef HC_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

int cuda_device_count() {
#ifdef HC_HAVE_CUDA
  return cuda::cuda_device_count();
#else
  return 0;
#endif
}

bool vulkan_compiled() {
#ifdef HC_HAVE_VULKAN
  return true;
#else
  return false;
#endif
}

std::vector<std::string> vulkan_device_lines() {
#ifdef HC_HAVE_VULKAN
  auto devs = vk::vulkan_devices();
  if (!devs.ok()) return {devs.message()};
  if (devs->empty()) return {"the Vulkan loader sees no device"};
  std::vector<std::string> out;
  for (const vk::VulkanDeviceInfo& d : *devs)
    out.push_back(std::to_string(d.index) + ": " + d.name + " [" + d.type + ", Vulkan " + d.api +
                  (d.usable ? "" : ", unusable: lacks " + d.missing) + "]");
  return out;
#else
  return {"built without the Vulkan backend"};
#endif
}

int vulkan_gpu_index() {
#ifdef HC_HAVE_VULKAN
  auto devs = vk::vulkan_devices();
  if (!devs.ok()) return -1;
  for (const vk::VulkanDeviceInfo& d : *devs)
    if (d.usable && d.type == "gpu") return d.index;
#endif
  return -1;
}

Result<std::unique_ptr<Device>> open_device(const DeviceOptions& opt) {
  if (opt.kind == DeviceKind::kCpu) return open_cpu_device(opt);
  if (opt.kind == DeviceKind::kVulkan) {
#ifdef HC_HAVE_VULKAN
    return vk::open_vulkan_device(opt);
#else
    return Status::Error("Vulkan device requested, but this hotcold was built without the Vulkan "
                         "backend (configure with -DHC_VULKAN=ON, glslc and libvulkan-dev "
                         "installed)");
#endif
  }
#ifdef HC_HAVE_CUDA
  if (cuda::cuda_device_count() == 0)
    return Status::Error("CUDA device requested, but no CUDA device is visible (driver missing "
                         "or no GPU); use --device cpu for the CPU device");
  return cuda::open_cuda_device(opt);
#else
  return Status::Error("CUDA device requested, but this hotcold was built without the CUDA "
                       "backend (configure with -DHC_CUDA=ON and nvcc installed)");
#endif
}

}  // namespace hc::ops
