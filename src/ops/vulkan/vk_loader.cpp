#include "ops/vulkan/vk_loader.h"

#include <dlfcn.h>

#include <mutex>

namespace hc::ops::vk {

Result<Fns*> load_vulkan() {
  static Fns fns;
  static std::string error;
  static std::once_flag once;
  std::call_once(once, [] {
    void* lib = dlopen("libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) lib = dlopen("libvulkan.so", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      const char* why = dlerror();
      error = std::string("cannot open the Vulkan loader libvulkan.so.1 (") + (why ? why : "?") +
              "); install libvulkan1 and a driver (mesa-vulkan-drivers for lavapipe)";
      return;
    }
    fns.vkGetInstanceProcAddr =
        reinterpret_cast<PFN_vkGetInstanceProcAddr>(dlsym(lib, "vkGetInstanceProcAddr"));
    if (!fns.vkGetInstanceProcAddr) {
      error = "the Vulkan loader has no vkGetInstanceProcAddr";
      return;
    }
#define HC_VK_LOAD_GLOBAL(name)                                                          \
  fns.name = reinterpret_cast<PFN_##name>(fns.vkGetInstanceProcAddr(nullptr, #name)); \
  if (!fns.name) {                                                                      \
    error = "the Vulkan loader has no " #name;                                          \
    return;                                                                             \
  }
    HC_VK_GLOBAL_FNS(HC_VK_LOAD_GLOBAL)
#undef HC_VK_LOAD_GLOBAL
  });
  if (!error.empty()) return Status::Error(error);
  return &fns;
}

Status load_instance_fns(Fns& f, VkInstance instance) {
#define HC_VK_LOAD_INSTANCE(name)                                                     \
  f.name = reinterpret_cast<PFN_##name>(f.vkGetInstanceProcAddr(instance, #name)); \
  if (!f.name) return Status::Error("Vulkan: the instance has no " #name);
  HC_VK_INSTANCE_FNS(HC_VK_LOAD_INSTANCE)
#undef HC_VK_LOAD_INSTANCE
  return Status::Ok();
}

Status load_device_fns(Fns& f, VkDevice device) {
#define HC_VK_LOAD_DEVICE(name)                                                \
  f.name = reinterpret_cast<PFN_##name>(f.vkGetDeviceProcAddr(device, #name)); \
  if (!f.name) return Status::Error("Vulkan: the device has no " #name);
  HC_VK_DEVICE_FNS(HC_VK_LOAD_DEVICE)
#undef HC_VK_LOAD_DEVICE
  return Status::Ok();
}

const char* vk_result_name(VkResult r) {
  switch (r) {
    case VK_SUCCESS: return "VK_SUCCESS";
    case VK_NOT_READY: return "VK_NOT_READY";
    case VK_TIMEOUT: return "VK_TIMEOUT";
    case VK_ERROR_OUT_OF_HOST_MEMORY: return "VK_ERROR_OUT_OF_HOST_MEMORY";
    case VK_ERROR_OUT_OF_DEVICE_MEMORY: return "VK_ERROR_OUT_OF_DEVICE_MEMORY";
    case VK_ERROR_INITIALIZATION_FAILED: return "VK_ERROR_INITIALIZATION_FAILED";
    case VK_ERROR_DEVICE_LOST: return "VK_ERROR_DEVICE_LOST";
    case VK_ERROR_MEMORY_MAP_FAILED: return "VK_ERROR_MEMORY_MAP_FAILED";
    case VK_ERROR_LAYER_NOT_PRESENT: return "VK_ERROR_LAYER_NOT_PRESENT";
    case VK_ERROR_EXTENSION_NOT_PRESENT: return "VK_ERROR_EXTENSION_NOT_PRESENT";
    case VK_ERROR_FEATURE_NOT_PRESENT: return "VK_ERROR_FEATURE_NOT_PRESENT";
    case VK_ERROR_INCOMPATIBLE_DRIVER: return "VK_ERROR_INCOMPATIBLE_DRIVER";
    case VK_ERROR_TOO_MANY_OBJECTS: return "VK_ERROR_TOO_MANY_OBJECTS";
    case VK_ERROR_FORMAT_NOT_SUPPORTED: return "VK_ERROR_FORMAT_NOT_SUPPORTED";
    case VK_ERROR_OUT_OF_POOL_MEMORY: return "VK_ERROR_OUT_OF_POOL_MEMORY";
    case VK_ERROR_INVALID_SHADER_NV: return "VK_ERROR_INVALID_SHADER_NV";
    default: return "VK_ERROR (unknown)";
  }
}

}  // namespace hc::ops::vk
