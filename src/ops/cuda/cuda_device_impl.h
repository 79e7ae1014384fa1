// CudaDevice, the CUDA implementation of ops::Device: the class shared by the files that
// implement it (cuda_device.cu: open, memory, errors; cuda_profile.cu: the profile measured
// at open; cuda_ops.cu: the queued operations). Internal to ops/cuda (includes CUDA headers).
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "ops/cuda/cublas_loader.h"
#include "ops/cuda/cuda_op_timer.h"
#include "ops/cuda/nvml_probe.h"
#include "ops/device.h"

namespace hc::ops::cuda {

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kCublasWorkspaceBytes = 32 * kMiB;  // NVIDIA's recommendation for Hopper
// Charged with the overhead: kernel code CUDA loads on first launch (lazy module loading,
// ours and cuBLAS's) and the allocator's sub-allocation slack, which appear after open.
constexpr uint64_t kLazyCodeReserve = 64 * kMiB;
constexpr uint64_t kGemmScratchBytes = 64 * kMiB;   // fp32 weight rows dequantised per GEMM
constexpr int64_t kGemmMinTokens = 32;              // matmul: larger batches go through cuBLAS
constexpr uint64_t kProfileReadBytes = 256 * kMiB;  // memory bandwidth probe (if budget allows)
constexpr uint64_t kProfileLinkBytes = 64 * kMiB;   // host <-> device copy probe

std::string mib(uint64_t bytes);  // "N bytes (M MiB)"
// A failed CUDA runtime call as a Status naming the call (OK for cudaSuccess). Clears the
// thread's last-error slot, so a failure reported here is not reported again by the next
// launch check.
Status cuda_error(cudaError_t e, const std::string& call);
Status cublas_error(cublasStatus_t s, const std::string& call);

// Device memory and its size, for the scratch buffers.
// HOTCOLD_CUDA_FFN_FUSED=0 turns off the fused gate + up kernel (A/B timing; same bits).
bool ffn_fused_from_env();

struct Scratch {
  void* p = nullptr;
  uint64_t bytes = 0;
};

class CudaDevice final : public Device {
 public:
  static Result<std::unique_ptr<Device>> open(const DeviceOptions& opt);
  ~CudaDevice() override;

  DeviceKind kind() const override { return DeviceKind::kCuda; }
  std::string name() const override { return name_; }
  DeviceProfile profile() const override { return profile_; }

  uint64_t budget_bytes() const override { return budget_; }
  uint64_t charged_bytes() const override;
  uint64_t overhead_bytes() const override { return overhead_; }
  uint64_t measured_bytes() const override;
  Result<void*> alloc(uint64_t bytes, const char* what) override;
  uint64_t charge_bytes(uint64_t bytes) const override;
  void free(void* p) override;
  uint64_t scratch_bytes(const ScratchNeeds& n) const override;
  Status reserve_scratch(const ScratchNeeds& n) override;
  Result<void*> alloc_host(uint64_t bytes) override;
  void free_host(void* p) override;
  Status upload(void* dst, const void* host_src, uint64_t bytes) override;
  Status download(void* host_dst, const void* src, uint64_t bytes) override;

  void copy_to_device(void* dst, const void* host_src, uint64_t bytes) override;
  void copy_to_host(void* host_dst, const void* src, uint64_t bytes) override;
  void rmsnorm(float* out, const float* x, const float* w, int64_t n_tok, int64_t n,
               float eps) override;
  void matmul(const TensorView& w, const float* x, int64_t n_tok, float* y) override;
  // The rows of independent sequences (a server's decode steps): the mat-vec, 8 rows per
  // launch, whatever the count (never cuBLAS). Each row's dot products are the same operations
  // in any group of up to 8 (every lane walks the same groups of a row in the same order for
  // any NT; matvec.cu), so every row equals a one-row matmul, and the weights are read once per
  // 8 rows instead of once per row.
  void matmul_rows(const TensorView& w, const float* x, int64_t n_tok, float* y) override;
  void rope(float* x, int64_t n_tok, int n_head, int head_dim, int n_rot, DevicePos pos0,
            float theta_scale, float freq_scale, const float* freq_factors, bool neox) override;
  void kv_store(const float* k, const float* v, int64_t n_tok, DevicePos pos0, int64_t kv_dim,
                int n_ctx, fp16_t* k_cache, fp16_t* v_cache_t) override;
  void attention(const float* q, const fp16_t* k_cache, const fp16_t* v_cache_t, DevicePos pos0,
                 int64_t n_tok, const AttentionShape& shape, float scale, float* out) override;
  void glu(float* gate, const float* up, int64_t n_tok, int64_t n, GluKind kind) override;
  void add(float* y, const float* x, int64_t n) override;
  void add_rows(float* y, const float* b, int64_t n_tok, int64_t n) override;
  void get_rows(float* dst, const float* src, const int32_t* idx, int64_t n,
                int64_t width) override;
  void set_rows_scaled(float* dst, const float* src, const int32_t* idx, const float* scale,
                       int64_t n, int64_t width) override;
  void ffn_threshold(const TensorView& gate, const float* gate_bias, const TensorView& up,
                     const TensorView& down_t, const float* x, int64_t n_tok, float threshold,
                     GluKind kind, float* out) override;
  void ffn_rows(const TensorView& gate, const float* gate_bias, const TensorView& up,
                const TensorView& down_t, const float* x, int64_t n_tok, const int32_t* idx,
                int64_t n_idx, const uint8_t* fire, GluKind kind, float* out) override;
  void argmax(const float* x, int64_t n_rows, int64_t n, int32_t* out) override;
  void moe_topk(float* x, int64_t n_tok, int n_expert, int k, const MoeGate& gate, int32_t* ids,
                float* w) override;
  void matmul_id(const TensorView& w, int64_t rows, const int32_t* ids, int64_t n_ids,
                 const float* x, int64_t x_stride, float* y) override;
  void moe_combine(const float* y, const float* w, int64_t n_tok, int k, int64_t n,
                   float* out) override;
  void fire_mask(const float* x, int64_t n_tok, int64_t n, const int32_t* cols, int64_t n_cols,
                 float threshold, uint8_t* fire) override;
  Status sync() override;
  // Recorded steps (cuda_graph.cu): stream capture into a CUDA graph, launched at end_record
  // and at each replay.
  bool can_record() const override { return true; }
  void begin_record() override;
  Result<int> end_record() override;
  void replay(int id, bool step = true) override;
  bool failed_recording_ran() const override { return failed_ran_; }
  void drop_record(int id) override;

  void dequantize_rows(const TensorView& w, float* out);  // cuda_testing.h

 private:
  CudaDevice() = default;
  Status init(const DeviceOptions& opt);
  Status create_queue();
  Status measure_profile();
  Status measure_memory_bandwidth(uint64_t bytes);
  Status measure_link_bandwidth(uint64_t bytes);
  Status time_copies(void* host, void* dev, uint64_t bytes, double best[2]);
  Status measure_latency();
  Status warm_up_cublas();
  uint64_t free_now() const;

  // Every queued operation starts here (and with HC_CUDA_PROFILE its timing does).
  void select() const {
    cudaSetDevice(ordinal_);
    if (timer_) timer_->start(stream_);
  }
  void timed(const char* op) {
    if (timer_) timer_->stop(stream_, op);
  }
  void fail(const std::string& op, const std::string& msg);
  // Reads the launch error of the last `launches` kernel launches of op, and counts them.
  void check_launch(const char* op, uint64_t launches = 1);
  bool check_weight(const char* op, const char* name, const TensorView& w, int64_t ne0);
  bool check_ffn(const char* op, const TensorView& gate, const TensorView& up,
                 const TensorView& down_t, int64_t n_tok, GluKind kind);
  Status ensure_scratch(Scratch* s, uint64_t bytes, const char* what);
  // What gemm_scratch_ and ffn_scratch_ grow to for operations as large as n (0: none).
  void scratch_sizes(const ScratchNeeds& n, uint64_t* gemm, uint64_t* ffn) const;
  uint64_t ffn_scratch_size(int64_t n_rows, int64_t n_embd) const;
  void free_scratch(Scratch* s);

  void matvec(const TensorView& w, const float* x, int64_t n_tok, float* y);
  bool gemm(const TensorView& w, const float* x, int64_t n_tok, float* y);
  struct FfnArgs {
    const TensorView* gate;
    const float* gate_bias;  // [n_sub] device memory or null
    const TensorView* up;
    const TensorView* down_t;
    const float* x;  // [n_tok, n_embd]
    int64_t n_tok;
    const int32_t* idx;   // ffn_rows: [n_rows] local neurons; ffn_threshold: null
    int64_t n_rows;       // neurons computed: n_idx or gate.ne1
    const uint8_t* fire;  // ffn_rows: [n_tok, n_rows]
    float threshold;
    GluKind kind;
    float* out;  // [n_tok, n_embd]
  };
  void ffn(const char* op, const FfnArgs& a);
  void ffn_group(const FfnArgs& a, int64_t t0, int64_t nt, float* h, int n_split, float* part);
  bool fuse_gate_up(const FfnArgs& a) const;
  bool ffn_fused_ = ffn_fused_from_env();  // gate and up in one kernel (set_ffn_fused: tests)

 public:
  void set_ffn_fused(bool on) { ffn_fused_ = on; }

 private:
  int down_splits(int64_t n_rows, int64_t n_out) const;

  int ordinal_ = 0;
  std::string name_;
  DeviceProfile profile_;
  int n_sm_ = 1;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  void* workspace_ = nullptr;  // cuBLAS workspace, part of the overhead
  NvmlMemory nvml_;
  bool use_nvml_ = false;     // free memory read through NVML (else cudaMemGetInfo)
  uint64_t free_before_ = 0;  // free device memory before open
  uint64_t budget_ = 0;
  uint64_t overhead_ = 0;

  mutable std::mutex mu_;                       // guards the fields below
  uint64_t charged_ = 0;                        // overhead + live allocations
  std::unordered_map<void*, uint64_t> allocs_;  // device pointer -> charged bytes
  std::string first_error_;                     // first failure since the last sync()

  std::unique_ptr<OpTimer> timer_;           // HC_CUDA_PROFILE's breakdown, or null
  bool capturing_ = false;                   // between begin_record and end_record
  std::string capture_error_;                // why the capture cannot be kept
  // Whether what the last refused recording queued ran: a capture runs nothing, but when none
  // started (HC_CUDA_PROFILE, a failed cudaStreamBeginCapture) the operations ran as queued.
  bool failed_ran_ = false;
  struct Graph {
    cudaGraphExec_t exec;
    RecordedBytes bytes;  // what its copies move (counted again at each replay)
  };
  std::map<int, Graph> graphs_;              // recorded steps

  Scratch gemm_scratch_;  // [rows, ne0] fp32 dequantised weight rows
  Scratch ffn_scratch_;   // h [8, n_rows] fp32, then the down splits [n_split, 8, n_embd]
};

}  // namespace hc::ops::cuda
