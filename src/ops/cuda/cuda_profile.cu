// The device profile measured at open (DeviceProfile of ops/device.h): streaming read
// bandwidth of device memory, pinned host <-> device copy bandwidth, the cost of one queued
// kernel launch and of a launch + stream synchronisation round trip. Temporary buffers only,
// freed before open returns.
#include <algorithm>
#include <chrono>

#include "ops/cuda/cuda_device_impl.h"
#include "ops/cuda/kernels.h"

namespace hc::ops::cuda {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

Status CudaDevice::measure_profile() {
  const uint64_t used = free_before_ > free_now() ? free_before_ - free_now() : 0;
  const uint64_t room = budget_ > used + kLazyCodeReserve ? budget_ - used - kLazyCodeReserve : 0;
  HC_TRY(measure_memory_bandwidth(std::min(kProfileReadBytes, room / 2) / 16 * 16));
  HC_TRY(measure_link_bandwidth(std::min(kProfileLinkBytes, room / 2)));
  return measure_latency();
}

Status CudaDevice::measure_memory_bandwidth(uint64_t bytes) {
  if (bytes < kMiB) return Status::Ok();  // no room to measure: leave 0 (unknown)
  void* buf = nullptr;
  HC_TRY(cuda_error(cudaMalloc(&buf, bytes + 16), "cudaMalloc (bandwidth probe)"));
  cudaEvent_t start = nullptr, stop = nullptr;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  cudaMemsetAsync(buf, 0, bytes + 16, stream_);
  const auto* src = static_cast<const uint4*>(buf);
  auto* sink = reinterpret_cast<uint4*>(static_cast<uint8_t*>(buf) + bytes);
  launch_read(src, static_cast<int64_t>(bytes / 16), sink, stream_);  // warm-up
  float best_ms = 0;
  for (int rep = 0; rep < 3; ++rep) {
    cudaEventRecord(start, stream_);
    launch_read(src, static_cast<int64_t>(bytes / 16), sink, stream_);
    cudaEventRecord(stop, stream_);
    cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    if (rep == 0 || ms < best_ms) best_ms = ms;
  }
  const Status st = cuda_error(cudaGetLastError(), "memory bandwidth probe");
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaFree(buf);
  if (best_ms > 0) profile_.mem_gbps = static_cast<double>(bytes) / (best_ms * 1e-3) / 1e9;
  return st;
}

Status CudaDevice::measure_link_bandwidth(uint64_t bytes) {
  if (bytes < kMiB) return Status::Ok();
  void* host = nullptr;
  void* dev = nullptr;
  HC_TRY(cuda_error(cudaMallocHost(&host, bytes), "cudaMallocHost (link probe)"));
  double best[2] = {0, 0};  // seconds: host -> device, device -> host
  const Status st = cuda_error(cudaMalloc(&dev, bytes), "cudaMalloc (link probe)");
  const Status copies = st.ok() ? time_copies(host, dev, bytes, best) : st;
  if (dev) cudaFree(dev);
  cudaFreeHost(host);
  if (copies.ok() && best[0] > 0 && best[1] > 0) {
    const double gb = static_cast<double>(bytes) / 1e9;
    profile_.link_gbps = (gb / best[0] + gb / best[1]) / 2;
  }
  return copies;
}

// Best of two timed copies each way (after one warm-up), in seconds.
Status CudaDevice::time_copies(void* host, void* dev, uint64_t bytes, double best[2]) {
  for (int rep = 0; rep < 3; ++rep) {
    for (int dir = 0; dir < 2; ++dir) {
      const auto t0 = std::chrono::steady_clock::now();
      HC_TRY(cuda_error(dir == 0
                            ? cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, stream_)
                            : cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, stream_),
                        "cudaMemcpyAsync (link probe)"));
      HC_TRY(cuda_error(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"));
      const double s = seconds_since(t0);
      if (rep > 0 && (best[dir] == 0 || s < best[dir])) best[dir] = s;  // rep 0 warms up
    }
  }
  return Status::Ok();
}

Status CudaDevice::measure_latency() {
  constexpr int kLaunches = 100, kSyncs = 20;
  launch_empty(stream_);  // loads the kernel
  HC_TRY(cuda_error(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"));
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kLaunches; ++i) launch_empty(stream_);
  HC_TRY(cuda_error(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"));
  profile_.op_us = seconds_since(t0) * 1e6 / kLaunches;
  t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kSyncs; ++i) {
    launch_empty(stream_);
    HC_TRY(cuda_error(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"));
  }
  profile_.sync_us = seconds_since(t0) * 1e6 / kSyncs;
  return cuda_error(cudaGetLastError(), "empty kernel launch");
}

// One small GEMM, so that cuBLAS's lazily loaded code is part of the measured overhead.
Status CudaDevice::warm_up_cublas() {
  constexpr int kN = 64;
  float* buf = nullptr;
  HC_TRY(cuda_error(cudaMalloc(&buf, 3 * kN * kN * sizeof(float)), "cudaMalloc (cuBLAS warm-up)"));
  cudaMemsetAsync(buf, 0, 2 * kN * kN * sizeof(float), stream_);
  const float one = 1, zero = 0;
  const Status gemm = cublas_error(
      cublas::gemm_ex(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, kN, kN, kN, &one, buf, CUDA_R_32F, kN,
                   buf + kN * kN, CUDA_R_32F, kN, &zero, buf + 2 * kN * kN, CUDA_R_32F, kN,
                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
      "cublasGemmEx (warm-up)");
  const Status st =
      gemm.ok() ? cuda_error(cudaStreamSynchronize(stream_), "cudaStreamSynchronize") : gemm;
  cudaFree(buf);
  return st;
}

}  // namespace hc::ops::cuda
