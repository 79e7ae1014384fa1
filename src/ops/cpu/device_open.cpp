#include <string>

#include "ops/cpu/cpu_device.h"
#include "ops/device.h"
#ifdef HC_HAVE_CUDA
#include "core/module.h"
#include "ops/cuda/cuda_entry.h"

// Null unless the program links hc_cuda itself (the CUDA tests); the hotcold binary does not and
// opens the module instead.
extern "C" const hc::ops::CudaEntry* hc_cuda_entry() __attribute__((weak));
#endif
#ifdef HC_HAVE_VULKAN
#include "ops/vulkan/vk_device.h"
#endif

namespace hc::ops {

#ifdef HC_HAVE_CUDA
namespace {

struct CudaBackend {
  const CudaEntry* entry = nullptr;
  std::string error;  // why there is no entry
};

// The CUDA backend's table, found once: linked in, or the module beside the running binary
// (core/module.h).
const CudaBackend& cuda_backend() {
  static const CudaBackend backend = [] {
    CudaBackend b;
    if (hc_cuda_entry) {
      b.entry = hc_cuda_entry();
      return b;
    }
    auto sym = open_module_entry(kCudaModuleFile, kCudaModuleEntry, "CUDA backend module",
                                 "CUDA devices need it beside the binary; the build makes both");
    if (!sym.ok()) {
      b.error = sym.message();
      return b;
    }
    using EntryFn = const CudaEntry* (*)();
    const CudaEntry* e = reinterpret_cast<EntryFn>(*sym)();
    if (!e || e->abi != kCudaEntryAbi) {
      b.error = std::string("the CUDA backend module was built from other sources (entry ") +
                (e ? "ABI " + std::to_string(e->abi) : std::string("missing")) +
                ", expected ABI " + std::to_string(kCudaEntryAbi) + "); rebuild hotcold";
      return b;
    }
    b.entry = e;  // kept open: the device's code lives there
    return b;
  }();
  return backend;
}

}  // namespace
#endif

bool cuda_compiled() {
#ifdef HC_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

int cuda_device_count() {
#ifdef HC_HAVE_CUDA
  const CudaBackend& b = cuda_backend();
  return b.entry ? b.entry->device_count() : 0;
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
  const CudaBackend& b = cuda_backend();
  if (!b.entry) return Status::Error("CUDA device requested, but " + b.error);
  if (b.entry->device_count() == 0)
    return Status::Error("CUDA device requested, but no CUDA device is visible (driver missing "
                         "or no GPU); use --device cpu for the CPU device");
  return b.entry->open(opt);
#else
  return Status::Error("CUDA device requested, but this hotcold was built without the CUDA "
                       "backend (configure with -DHC_CUDA=ON and nvcc installed)");
#endif
}

}  // namespace hc::ops
