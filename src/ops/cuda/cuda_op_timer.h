// The CUDA device's per-operation time breakdown (HC_CUDA_PROFILE=1): every queued operation is
// bracketed by two CUDA events on the stream and waited for, and its device time (the events'
// elapsed time) is added to its name's total; the totals go to stderr when the device closes,
// as HC_VK_PROFILE does for the Vulkan device. Waiting for every operation makes the run slower
// than it is without the timer, and recorded steps are not kept (begin_record refuses), so the
// table shows where device time goes, op by op, not the decode rate. Internal to ops/cuda.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>

namespace hc::ops::cuda {

class OpTimer {
 public:
  // A timer when HC_CUDA_PROFILE is set (and not "0"), else null.
  static std::unique_ptr<OpTimer> from_env();
  ~OpTimer();
  OpTimer(const OpTimer&) = delete;
  OpTimer& operator=(const OpTimer&) = delete;

  // Before an operation's first launch: marks its start on the stream.
  void start(cudaStream_t stream);
  // After its last launch: waits for it and adds its time to op's total.
  void stop(cudaStream_t stream, const char* op);
  // "HC_CUDA_PROFILE: T ms in N operations (each waited for)", then one line per operation
  // name, the longest total first: calls, total ms, us per call, share of the total.
  void report(std::FILE* out) const;

 private:
  OpTimer() = default;
  struct Total {
    double ms = 0;
    uint64_t n = 0;
  };
  cudaEvent_t begin_ = nullptr, end_ = nullptr;
  bool started_ = false;
  std::map<std::string, Total> totals_;
};

}  // namespace hc::ops::cuda
