#include "ops/cuda/cuda_entry.h"

#include "ops/cuda/cuda_device.h"

extern "C" const hc::ops::CudaEntry* hc_cuda_entry() {
  static const hc::ops::CudaEntry entry{hc::ops::kCudaEntryAbi, &hc::ops::cuda::cuda_device_count,
                                        &hc::ops::cuda::open_cuda_device};
  return &entry;
}
