// The CUDA backend's entry points, as one table: the hotcold binary opens the backend as a
// module (libhotcold_cuda.so, beside the binary) only when a command asks for a CUDA device, so
// the CUDA runtime's static initialisation (it registers every kernel image when the program
// starts: ~1 MiB of resident pages) costs nothing to the commands that run on the CPU. Programs
// that link hc_cuda themselves (the CUDA tests) get the table without the module
// (ops/cpu/device_open.cpp).
#pragma once
#include <memory>

#include "core/status.h"
#include "ops/device.h"

namespace hc::ops {

// Bumped whenever the table or what crosses it (Device, DeviceOptions) changes shape, so a
// module built from other sources is refused instead of called.
inline constexpr int kCudaEntryAbi = 1;
inline constexpr const char* kCudaModuleFile = "libhotcold_cuda.so";
inline constexpr const char* kCudaModuleEntry = "hc_cuda_entry";

struct CudaEntry {
  int abi = 0;
  int (*device_count)() = nullptr;
  Result<std::unique_ptr<Device>> (*open)(const DeviceOptions& opt) = nullptr;
};

}  // namespace hc::ops

// Defined by hc_cuda (ops/cuda/cuda_entry.cpp).
extern "C" const hc::ops::CudaEntry* hc_cuda_entry();
