#include <string>

#include "ops/cpu/cpu_device.h"
#include "ops/device.h"
#ifdef HC_HAVE_CUDA
#include "ops/cuda/cuda_device.h"
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

Result<std::unique_ptr<Device>> open_device(const DeviceOptions& opt) {
  if (opt.kind == DeviceKind::kCpu) return open_cpu_device(opt);
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
