// CudaDevice's recorded steps (ops::Device::begin_record .. replay): the stream is captured
// into a CUDA graph, which is instantiated once and launched at end_record (the capture itself
// runs nothing) and at every replay, one launch for the whole step instead of one per kernel.
// A capture fails, and end_record says why, when something in it cannot be captured: a copy
// from pageable host memory, a wait on the stream (sync(), scratch that had to grow), a
// cuBLAS call that allocates. Nothing captured has then run: the caller queues the step again.
#include <string>

#include "ops/cuda/cuda_device_impl.h"

namespace hc::ops::cuda {

void CudaDevice::begin_record() {
  select();
  if (capturing_) return;
  capture_error_.clear();
  if (timer_) {  // it waits for every operation: nothing can be captured
    capture_error_ = "HC_CUDA_PROFILE times every operation";
    return;
  }
  const Status st = cuda_error(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal),
                               "cudaStreamBeginCapture");
  if (!st.ok()) {
    capture_error_ = st.message();
    return;
  }
  capturing_ = true;
  mark_record();
}

Result<int> CudaDevice::end_record() {
  select();
  if (!capturing_) {  // no capture started: what was queued ran
    failed_ran_ = true;
    std::string why = capture_error_.empty() ? "begin_record was not called, or a sync() "
                                               "ended the capture"
                                             : capture_error_;
    capture_error_.clear();
    return Status::Error("CUDA device " + name_ + ": cannot replay the recording: " + why);
  }
  capturing_ = false;
  failed_ran_ = false;  // captured: nothing of it has run
  cudaGraph_t graph = nullptr;
  std::string why = capture_error_;
  capture_error_.clear();
  if (Status st = cuda_error(cudaStreamEndCapture(stream_, &graph), "cudaStreamEndCapture");
      !st.ok() && why.empty())
    why = st.message();
  if (why.empty() && !graph) why = "cudaStreamEndCapture returned no graph";
  cudaGraphExec_t exec = nullptr;
  if (why.empty()) {
    if (Status st = cuda_error(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
        !st.ok())
      why = st.message();
  }
  if (graph) cudaGraphDestroy(graph);
  if (!why.empty())
    return Status::Error("CUDA device " + name_ + ": cannot replay the recording: " + why);
  HC_TRY(cuda_error(cudaGraphLaunch(exec, stream_), "cudaGraphLaunch"));  // this step's run
  int id = 0;
  while (graphs_.count(id)) ++id;
  graphs_[id] = {exec, recorded_bytes()};
  return id;
}

void CudaDevice::replay(int id, bool step) {
  select();
  auto it = graphs_.find(id);
  if (it == graphs_.end()) return fail("replay", "no recording " + std::to_string(id));
  const Status st = cuda_error(cudaGraphLaunch(it->second.exec, stream_), "cudaGraphLaunch");
  if (!st.ok()) return fail("replay", st.message());
  count_replay(it->second.bytes, step);
}

void CudaDevice::drop_record(int id) {
  select();
  auto it = graphs_.find(id);
  if (it == graphs_.end()) return;
  cudaStreamSynchronize(stream_);  // a replay may be running it
  cudaGraphExecDestroy(it->second.exec);
  graphs_.erase(it);
}

}  // namespace hc::ops::cuda
