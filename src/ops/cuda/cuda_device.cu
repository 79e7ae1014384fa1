// CudaDevice: ops::Device (ops/device.h) on one NVIDIA GPU.
//
// ---- Queue -------------------------------------------------------------------------------
// One non-blocking stream; every queued operation is a kernel launch (or cudaMemcpyAsync /
// cuBLAS call) on it, so operations run in order and asynchronously to the host. A failure is
// never an abort: argument errors (an unsupported weight type, a shape that does not fit) skip
// the operation and record "<op>: <what was wrong>"; launch errors are read with
// cudaGetLastError after each launch; sync() reports the first recorded error (and any error
// of the queued work itself) and clears it.
//
// ---- Files (one concept each) ------------------------------------------------------------
//   cuda_device.h    open_cuda_device / cuda_device_count (no CUDA headers: model code sees it)
//   cuda_device_impl.h   the CudaDevice class; this file: open, memory, errors, sync
//   cuda_profile.cu  the DeviceProfile measured at open
//   cuda_ops.cu      the queued operations: checks, kernel choice, launches
//   nvml_probe.*     free device memory before a CUDA context exists (NVML via dlopen)
//   cuda_testing.h   test hook: the row dequantiser on its own
//   kernels.h        launchers of the kernels below (cuda_common.cuh: their shared helpers)
//   dequant.cuh      Dequant<T>::group: 8 elements of a weight row of any supported type
//                    (F32 F16 BF16 Q4_0 Q4_1 Q8_0 Q4_K Q5_K Q6_K), bit-exact with
//                    quant::dequantize_row_ref.
//   matvec.cu        matvec_kernel<T, NT>: y = W x for NT <= 8 tokens, weights streamed once
//                    (16 rows per block, x staged in shared memory, fp32 accumulation); with
//                    an index list and a firing predicate it is also the FFN's gate / up pass.
//                    dequant_rows_kernel<T>: W rows -> fp32 for cuBLAS.
//   ffn_down.cu      sparse_down_kernel<T, NT>: out = sum_j h_j Dt[j] over the active neurons
//                    only; blocks own output columns, splits of the neuron range are summed in
//                    order by sum_partials_kernel (deterministic, no atomics).
//   attention.cu     attention_kernel: one block per (head, token), online fp32 softmax.
//   elementwise.cu   rmsnorm, rope (ggml normal mode, ggml's theta recurrence), kv_store
//                    (fp32 -> fp16 round to nearest even), glu, add, profiling kernels.
//
// matmul: n_tok <= kGemmMinTokens runs the mat-vec in groups of 8 tokens (a batch of 17 reads
// the weights 3 times, still far cheaper than dequantising them); larger batches dequantise
// the weight, kGemmScratchBytes at a time (F32 weights are used in place), and multiply with
// cublasGemmEx in fp32 (CUBLAS_COMPUTE_32F: no TF32, no fp16 rounding of the activations:
// device.h wants the weights' quantisation only). If the scratch does not fit in the budget the
// mat-vec path is used instead: slower, never wrong.
// matmul_rows (a server's decode steps, one row per sequence): always the mat-vec in groups
// of 8, each row bit-identical to a one-row matmul (matvec.cu), the weights read once per 8.
//
// ffn_threshold / ffn_rows, per group of up to 8 tokens, two kernels (plus the sum of the down
// splits when there are several):
//   gate + up   g[t, j] = gate[row j] . x_t          (ffn_rows: rows idx[j], skipped when no
//                                                     token fires j), then
//               h[t, j] = fired ? act(g) * (up[row j] . x_t) : 0, rows no token fires skipped
//               (gate_up_kernel; a gate and up of different types, Falcon's ungated ReLU, or
//               HOTCOLD_CUDA_FFN_FUSED=0: a gate pass and an up pass, the same bits)
//   down        out[t] = sum_j h[t, j] Dt[row j]      (sparse_down_kernel, active rows only)
//
// ---- Memory accounting -------------------------------------------------------------------
//   budget    opt.budget_bytes, or (0) all device memory free before open.
//   overhead  device memory the open itself took: free bytes before open (NVML, which needs
//             no CUDA context, so the context is counted; cudaMemGetInfo after creating the
//             context when NVML is unavailable) minus free bytes after the stream, the cuBLAS
//             handle and its kCublasWorkspaceBytes workspace exist and the profile and a
//             warm-up GEMM have run, plus kLazyCodeReserve for kernel code CUDA loads on first
//             use (lazy module loading) and the allocator's sub-allocation slack.
//   charged   overhead + every live alloc(), each rounded as cudaMalloc rounds (2 MiB pages for
//             1 MiB and up, 512 bytes below), so measured_bytes() tracks charged_bytes().
//   scratch   charged like any allocation, made on first need, kept and grown (never shrunk):
//             "matmul dequant scratch" (at most kGemmScratchBytes, only for batches of more
//             than kGemmMinTokens) and "ffn scratch" (h [8, n_rows] and the down splits
//             [n_split, 8, n_embd] fp32). Growing one waits for the queue first.
//   profile   measured at open with temporary buffers (at most 256 MiB, within the budget),
//             freed before open returns.
#include <algorithm>
#include <cstdio>

#include "ops/checks/device_checks.h"
#include "ops/cuda/cuda_device.h"
#include "ops/cuda/cuda_device_impl.h"
#include "ops/cuda/cuda_testing.h"
#include "ops/cuda/kernels.h"
#include "quant/quant.h"

namespace hc::ops::cuda {
namespace {

// Bytes cudaMalloc really takes for a request (what the device reports as used).
uint64_t charge_for(uint64_t bytes) {
  const uint64_t granule = bytes >= kMiB ? 2 * kMiB : 512;
  const uint64_t b = bytes == 0 ? 1 : bytes;
  return (b + granule - 1) / granule * granule;
}

}  // namespace

std::string mib(uint64_t bytes) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%llu bytes (%.1f MiB)", static_cast<unsigned long long>(bytes),
                static_cast<double>(bytes) / static_cast<double>(kMiB));
  return buf;
}

Status cuda_error(cudaError_t e, const std::string& call) {
  if (e == cudaSuccess) return Status::Ok();
  cudaGetLastError();
  return Status::Error(call + " failed: " + cudaGetErrorString(e) + " (" + cudaGetErrorName(e) +
                       ")");
}

Status cublas_error(cublasStatus_t s, const std::string& call) {
  if (s == CUBLAS_STATUS_SUCCESS) return Status::Ok();
  return Status::Error(call + " failed: " + cublas::status_string(s));
}

// ---- open / close ---------------------------------------------------------------------------

Result<std::unique_ptr<Device>> CudaDevice::open(const DeviceOptions& opt) {
  std::unique_ptr<CudaDevice> dev(new CudaDevice());
  HC_TRY(dev->init(opt));
  return std::unique_ptr<Device>(std::move(dev));
}

Status CudaDevice::init(const DeviceOptions& opt) {
  int count = 0;
  HC_TRY(cuda_error(cudaGetDeviceCount(&count), "cudaGetDeviceCount (no NVIDIA driver or GPU?)"));
  if (opt.cuda_ordinal < 0 || opt.cuda_ordinal >= count) {
    return Status::Error("CUDA device " + std::to_string(opt.cuda_ordinal) +
                         " does not exist: " + std::to_string(count) + " visible");
  }
  ordinal_ = opt.cuda_ordinal;
  char bus_id[32] = {};
  HC_TRY(
      cuda_error(cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), ordinal_), "cudaDeviceGetPCIBusId"));
  // Before any context exists: NVML's free memory (the context is then part of the overhead).
  use_nvml_ = nvml_.open(bus_id) && nvml_.free_bytes(&free_before_);
  HC_TRY(cuda_error(cudaSetDevice(ordinal_), "cudaSetDevice"));
  HC_TRY(cuda_error(cudaFree(nullptr), "creating the CUDA context"));
  if (!use_nvml_) free_before_ = free_now();
  cudaDeviceProp prop{};
  HC_TRY(cuda_error(cudaGetDeviceProperties(&prop, ordinal_), "cudaGetDeviceProperties"));
  name_ = prop.name;
  n_sm_ = std::max(1, prop.multiProcessorCount);
  budget_ = opt.budget_bytes ? opt.budget_bytes : free_before_;
  HC_TRY(create_queue());
  HC_TRY(measure_profile());
  HC_TRY(warm_up_cublas());
  reset_counters();  // the counters start at open, after the profile's measurements
  timer_ = OpTimer::from_env();  // times the operations from here on
  const uint64_t now = free_now();
  overhead_ = (free_before_ > now ? free_before_ - now : 0) + kLazyCodeReserve;
  if (overhead_ > budget_) {
    return Status::Error("CUDA device " + name_ + ": its fixed overhead (context, cuBLAS) of " +
                         mib(overhead_) + " exceeds the budget of " + mib(budget_));
  }
  charged_ = overhead_;
  return Status::Ok();
}

Status CudaDevice::create_queue() {
  HC_TRY(cuda_error(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking),
                    "cudaStreamCreateWithFlags"));
  HC_TRY(cublas::load());
  HC_TRY(cublas_error(cublas::create(&cublas_), "cublasCreate"));
  HC_TRY(cublas_error(cublas::set_stream(cublas_, stream_), "cublasSetStream"));
  HC_TRY(
      cuda_error(cudaMalloc(&workspace_, kCublasWorkspaceBytes), "cudaMalloc (cuBLAS workspace)"));
  return cublas_error(cublas::set_workspace(cublas_, workspace_, kCublasWorkspaceBytes),
                      "cublasSetWorkspace");
}

CudaDevice::~CudaDevice() {
  if (timer_) timer_->report(stderr);
  timer_.reset();
  select();
  if (capturing_) {
    cudaGraph_t g = nullptr;
    cudaStreamEndCapture(stream_, &g);
    if (g) cudaGraphDestroy(g);
  }
  if (stream_) cudaStreamSynchronize(stream_);
  for (auto& entry : graphs_) cudaGraphExecDestroy(entry.second.exec);
  for (auto& entry : allocs_) cudaFree(entry.first);
  if (cublas_) cublas::destroy(cublas_);
  if (workspace_) cudaFree(workspace_);
  if (stream_) cudaStreamDestroy(stream_);
  cudaGetLastError();
}

uint64_t CudaDevice::free_now() const {
  uint64_t free = 0;
  if (use_nvml_ && nvml_.free_bytes(&free)) return free;
  size_t f = 0, total = 0;
  if (cudaMemGetInfo(&f, &total) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return f;
}

// ---- memory ---------------------------------------------------------------------------------

uint64_t CudaDevice::charged_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return charged_;
}

uint64_t CudaDevice::measured_bytes() const {
  select();
  const uint64_t now = free_now();
  return free_before_ > now ? free_before_ - now : 0;
}

uint64_t CudaDevice::charge_bytes(uint64_t bytes) const { return charge_for(bytes); }

Result<void*> CudaDevice::alloc(uint64_t bytes, const char* what) {
  select();
  const uint64_t charge = charge_for(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  if (charged_ + charge > budget_) {
    return Status::Error(std::string("CUDA device: allocating ") + what + " needs " + mib(bytes) +
                         " (charged as " + mib(charge) + "), but " + mib(charged_) +
                         " of the budget of " + mib(budget_) + " are already charged");
  }
  void* p = nullptr;
  HC_TRY(cuda_error(cudaMalloc(&p, bytes == 0 ? 1 : bytes),
                    std::string("cudaMalloc of ") + mib(bytes) + " for " + what));
  allocs_[p] = charge;
  charged_ += charge;
  return p;
}

void CudaDevice::free(void* p) {
  if (!p) return;
  select();
  std::lock_guard<std::mutex> lock(mu_);
  auto it = allocs_.find(p);
  HC_CHECK(it != allocs_.end());  // not from this device's alloc(): a programming bug
  const Status st = cuda_error(cudaFree(p), "cudaFree");
  if (!st.ok() && first_error_.empty()) first_error_ = "free: " + st.message();
  charged_ -= it->second;
  allocs_.erase(it);
}

Result<void*> CudaDevice::alloc_host(uint64_t bytes) {
  select();
  void* p = nullptr;
  HC_TRY(cuda_error(cudaMallocHost(&p, bytes == 0 ? 1 : bytes), "cudaMallocHost of " + mib(bytes)));
  return p;
}

void CudaDevice::free_host(void* p) {
  if (!p) return;
  select();
  const Status st = cuda_error(cudaFreeHost(p), "cudaFreeHost");
  if (!st.ok()) fail("free_host", st.message());
}

Status CudaDevice::upload(void* dst, const void* host_src, uint64_t bytes) {
  select();
  HC_TRY(cuda_error(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, stream_),
                    "upload: cudaMemcpyAsync of " + mib(bytes)));
  count_ops();
  count_h2d(bytes);
  count_sync();
  return cuda_error(cudaStreamSynchronize(stream_), "upload: cudaStreamSynchronize");
}

Status CudaDevice::download(void* host_dst, const void* src, uint64_t bytes) {
  select();
  HC_TRY(cuda_error(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, stream_),
                    "download: cudaMemcpyAsync of " + mib(bytes)));
  count_ops();
  count_d2h(bytes);
  count_sync();
  return cuda_error(cudaStreamSynchronize(stream_), "download: cudaStreamSynchronize");
}

Status CudaDevice::ensure_scratch(Scratch* s, uint64_t bytes, const char* what) {
  if (s->bytes >= bytes) return Status::Ok();
  if (s->p) {
    // Queued work may still read the old buffer.
    count_sync();
    HC_TRY(cuda_error(cudaStreamSynchronize(stream_), std::string("growing ") + what));
    free_scratch(s);
  }
  HC_ASSIGN_OR_RETURN(s->p, alloc(bytes, what));
  s->bytes = bytes;
  return Status::Ok();
}

void CudaDevice::free_scratch(Scratch* s) {
  free(s->p);
  *s = Scratch{};
}

// ---- errors ---------------------------------------------------------------------------------

void CudaDevice::fail(const std::string& op, const std::string& msg) {
  std::lock_guard<std::mutex> lock(mu_);
  // In a capture nothing has run: the failure makes the recording unusable (end_record says
  // so), and the step queued again reports its own errors.
  std::string& slot = capturing_ ? capture_error_ : first_error_;
  if (slot.empty()) slot = op + ": " + msg;
}

void CudaDevice::check_launch(const char* op, uint64_t launches) {
  count_ops(launches);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) fail(op, std::string("kernel launch failed: ") + cudaGetErrorString(e));
  timed(op);
}

Status CudaDevice::sync() {
  select();
  count_sync();
  if (capturing_) {
    // A wait inside a capture would invalidate it: the capture ends here, discarded, and
    // nothing captured has run.
    cudaGraph_t g = nullptr;
    cudaStreamEndCapture(stream_, &g);
    if (g) cudaGraphDestroy(g);
    cudaGetLastError();
    capturing_ = false;
    capture_error_.clear();
    fail("sync", "called while a step was recorded (its operations did not run)");
  }
  const cudaError_t e = cudaStreamSynchronize(stream_);
  if (e != cudaSuccess) {
    cudaGetLastError();
    fail("queued work", std::string(cudaGetErrorString(e)) + " (" + cudaGetErrorName(e) + ")");
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (first_error_.empty()) return Status::Ok();
  Status st = Status::Error("CUDA device " + name_ + ": " + first_error_);
  first_error_.clear();
  return st;
}

// A weight matrix the kernels can read: supported type, whole blocks, 2-byte aligned rows
// (4 for F32), `ne0` inputs per row (-1: any).
bool CudaDevice::check_weight(const char* op, const char* name, const TensorView& w, int64_t ne0) {
  std::string e = device_checks::weight(name, w, ne0);  // built only on failure
  if (e.empty()) return true;
  fail(op, e);
  return false;
}

// ---- test hook --------------------------------------------------------------------------------

void CudaDevice::dequantize_rows(const TensorView& w, float* out) {
  select();
  if (!check_weight("dequantize_rows", "weight", w, -1)) return;
  launch_dequant_rows(w.type, static_cast<const uint8_t*>(w.data), w.nb1, w.ne0, 0, w.ne1, out,
                      stream_);
  check_launch("dequantize_rows");
}

void dequantize_rows(Device& dev, const TensorView& w, float* out) {
  auto* cuda = dynamic_cast<CudaDevice*>(&dev);
  HC_CHECK(cuda != nullptr);  // test hook: only for CUDA devices
  cuda->dequantize_rows(w, out);
}

void set_ffn_fused(Device& dev, bool fused) {
  auto* cuda = dynamic_cast<CudaDevice*>(&dev);
  HC_CHECK(cuda != nullptr);  // test hook: only for CUDA devices
  cuda->set_ffn_fused(fused);
}

// ---- factory ----------------------------------------------------------------------------------

Result<std::unique_ptr<Device>> open_cuda_device(const DeviceOptions& opt) {
  return CudaDevice::open(opt);
}

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

}  // namespace hc::ops::cuda
