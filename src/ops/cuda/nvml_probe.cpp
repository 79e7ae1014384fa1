#include "ops/cuda/nvml_probe.h"

#include <dlfcn.h>

namespace hc::ops::cuda {
namespace {

// nvml.h's nvmlMemory_t (v1), a stable ABI; the toolkit here ships no nvml.h.
struct NvmlMemoryInfo {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
constexpr int kNvmlSuccess = 0;

template <class Fn>
Fn symbol(void* lib, const char* name) {
  return reinterpret_cast<Fn>(dlsym(lib, name));
}

}  // namespace

NvmlMemory::~NvmlMemory() {
  if (initialized_ && shutdown_) shutdown_();
  if (lib_) dlclose(lib_);
}

bool NvmlMemory::open(const std::string& pci_bus_id) {
  lib_ = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib_) return false;
  auto init = symbol<int (*)()>(lib_, "nvmlInit_v2");
  auto by_bus = symbol<int (*)(const char*, void**)>(lib_, "nvmlDeviceGetHandleByPciBusId_v2");
  get_memory_info_ = symbol<int (*)(void*, void*)>(lib_, "nvmlDeviceGetMemoryInfo");
  shutdown_ = symbol<int (*)()>(lib_, "nvmlShutdown");
  if (!init || !by_bus || !get_memory_info_ || !shutdown_) return false;
  if (init() != kNvmlSuccess) return false;
  initialized_ = true;
  if (by_bus(pci_bus_id.c_str(), &device_) != kNvmlSuccess) {
    device_ = nullptr;
    return false;
  }
  uint64_t probe = 0;
  return free_bytes(&probe);
}

bool NvmlMemory::free_bytes(uint64_t* free) const {
  if (!device_ || !get_memory_info_) return false;
  NvmlMemoryInfo info{};
  if (get_memory_info_(device_, &info) != kNvmlSuccess) return false;
  *free = info.free;
  return true;
}

}  // namespace hc::ops::cuda
