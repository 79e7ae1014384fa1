// The CUDA implementation of ops::Device (ops/device.h). Compiled only with HC_CUDA; opened
// through ops::open_device. Nothing here is visible to model code (DESIGN.md: model code
// never includes CUDA headers, and this header includes none either).
#pragma once
#include <memory>

#include "core/status.h"
#include "ops/device.h"

namespace hc::ops::cuda {

// Opens GPU opt.cuda_ordinal with a memory budget of opt.budget_bytes (0: all free memory):
// creates the stream, the cuBLAS handle and its workspace, charges their memory (measured
// with cudaMemGetInfo before and after) and measures the device profile (memory bandwidth,
// host<->device bandwidth with pinned buffers, launch and sync latency).
// Errors: no driver or device, ordinal out of range, a budget smaller than the overhead.
Result<std::unique_ptr<Device>> open_cuda_device(const DeviceOptions& opt);

// Visible CUDA devices (0 when the driver or a device is missing: never an error).
int cuda_device_count();

}  // namespace hc::ops::cuda
