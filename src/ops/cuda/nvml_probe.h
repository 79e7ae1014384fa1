// Free device memory as the driver sees it, readable before this process has a CUDA context
// (cudaMemGetInfo creates one, so it cannot measure what the context itself costs). NVML is
// loaded at run time (dlopen): binaries must start on machines without the NVIDIA driver.
#pragma once
#include <cstdint>
#include <string>

namespace hc::ops::cuda {

class NvmlMemory {
 public:
  NvmlMemory() = default;
  ~NvmlMemory();
  NvmlMemory(const NvmlMemory&) = delete;
  NvmlMemory& operator=(const NvmlMemory&) = delete;

  // Binds to the GPU with this PCI bus id ("0000:65:00.0"); false when NVML or the GPU is
  // unavailable (then free_bytes always fails).
  bool open(const std::string& pci_bus_id);
  // Free bytes of device memory now; false on any NVML failure.
  bool free_bytes(uint64_t* free) const;

 private:
  void* lib_ = nullptr;
  void* device_ = nullptr;  // nvmlDevice_t
  bool initialized_ = false;
  int (*get_memory_info_)(void* device, void* memory) = nullptr;
  int (*shutdown_)() = nullptr;
};

}  // namespace hc::ops::cuda
