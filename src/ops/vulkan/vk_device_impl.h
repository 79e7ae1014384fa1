// VulkanDevice, the Vulkan implementation of ops::Device: the class shared by the files that
// implement it (vk_device.cpp: open, memory, dispatch and the operations, with the design notes;
// vk_queue.cpp: the queue, its command buffers and the recorded steps). Internal to ops/vulkan.
#pragma once
#include <array>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "ops/device.h"
#include "ops/vulkan/vk_abi.h"
#include "ops/vulkan/vk_loader.h"

namespace hc::ops::vk {

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kGranule = 4096;          // charge rounding of one alloc()
constexpr uint64_t kStagingChunk = 8 * kMiB;  // staging buffers grow in chunks at least this big
constexpr uint64_t kUploadChunk = 64 * kMiB;  // synchronous upload / download staging
constexpr int kFlushOps = 256;               // submit a recording after this many operations
// How matvec splits its rows on a CPU device, for one token and for batches.
struct MatvecSplit {
  int rows_per_lane = 0;  // 0: a workgroup of 64 per row
  int local = 64;         // workgroup size
};
constexpr MatvecSplit kCpuSplitOneToken{4, 8};
constexpr MatvecSplit kCpuSplitBatch{1, 8};
constexpr int kCpuDownLocal = 8;  // down on a CPU device: workgroups of 8 lanes, 8 columns each
constexpr uint64_t kWaitNs = 120ull * 1000 * 1000 * 1000;  // a sync that waits longer fails

template <class T>
T vk_struct(VkStructureType type) {
  T s{};
  s.sType = type;
  return s;
}

std::string mib(uint64_t bytes);
Status vk_error(VkResult r, const std::string& call);  // OK for VK_SUCCESS

// One buffer and its memory.
struct Buf {
  VkBuffer buf = VK_NULL_HANDLE;
  VkDeviceMemory mem = VK_NULL_HANDLE;
  uint64_t size = 0;     // requested
  uint64_t charged = 0;  // charged to the budget (device buffers)
  uint64_t real = 0;     // the driver's allocation size
  uint64_t addr = 0;     // device address
  uint8_t* map = nullptr;  // host buffers: the mapping
};

enum Pipe : int {
  kMatvec0 = 0,                          // one token: MatvecSplit split_[0]
  kMatvecBatch0 = kMatvec0 + kVkWTypes,  // 2 to 8 tokens: split_[1]
  kDown0 = kMatvecBatch0 + kVkWTypes,    // one token
  kDownBatch0 = kDown0 + kVkWTypes,      // 2 to 8 tokens
  kRmsnorm = kDownBatch0 + kVkWTypes,
  kRope,
  kKvStore,
  kGlu,
  kAdd,
  kAttention,
  kReadProbe,
  kQuantize,
  kRows,
  kArgmax,
  kFireMask,
  kMoe,
  kPipes
};

std::string pipe_name(int p);
int wtype_of(GgmlType t);      // a weight type's WTYPE (vk_abi.h), or -1
VkXType xtype_of(GgmlType t);  // the activation type quantize writes for a weight type
double seconds_now();
inline uint64_t addr_of(const void* p) { return reinterpret_cast<uint64_t>(p); }
// Workgroups of an "elements" grid over n elements (vk_abi.h).
inline uint64_t elem_groups(int64_t n) {
  return (static_cast<uint64_t>(n) + kVkLocal - 1) / kVkLocal;
}

class VulkanDevice final : public Device {
 public:
  static Result<std::unique_ptr<Device>> open(const DeviceOptions& opt);
  ~VulkanDevice() override;

  DeviceKind kind() const override { return DeviceKind::kVulkan; }
  std::string name() const override { return name_; }
  DeviceProfile profile() const override { return profile_; }

  uint64_t budget_bytes() const override { return budget_; }
  uint64_t charged_bytes() const override {
    std::lock_guard<std::mutex> lk(mem_mu_);
    return charged_;
  }
  uint64_t overhead_bytes() const override { return 0; }
  uint64_t measured_bytes() const override {
    std::lock_guard<std::mutex> lk(mem_mu_);
    return real_;
  }
  uint64_t charge_bytes(uint64_t bytes) const override {
    return (std::max<uint64_t>(bytes, 1) + kGranule - 1) / kGranule * kGranule;
  }
  Result<void*> alloc(uint64_t bytes, const char* what) override;
  void free(void* p) override;
  uint64_t scratch_bytes(const ScratchNeeds& n) const override;
  Status reserve_scratch(const ScratchNeeds& n) override;
  Result<void*> alloc_host(uint64_t bytes) override;
  void free_host(void* p) override;
  Status upload(void* dst, const void* host_src, uint64_t bytes) override;
  Status download(void* host_dst, const void* src, uint64_t bytes) override;
  Result<TensorView> upload_weight(const TensorView& host, const int32_t* rows, int64_t row0,
                                   int64_t n_rows, const char* what) override;

  void copy_to_device(void* dst, const void* host_src, uint64_t bytes) override;
  void copy_to_host(void* host_dst, const void* src, uint64_t bytes) override;
  void update_rows(const TensorView& w, const TensorView& host, const int32_t* src_rows,
                   const int32_t* slots, int64_t n) override;
  void rmsnorm(float* out, const float* x, const float* w, int64_t n_tok, int64_t n,
               float eps) override;
  void matmul(const TensorView& w, const float* x, int64_t n_tok, float* y) override;
  // Batch-invariant already: every batch runs the mat-vec, each token's dot products the same
  // operations in any group of up to kVkMaxVecTokens (no GEMM), so a decode batch is one call
  // (tests/vulkan/vulkan_session_test.cpp holds this against one-token decodes, bit for bit).
  void matmul_rows(const TensorView& w, const float* x, int64_t n_tok, float* y) override {
    matmul(w, x, n_tok, y);
  }
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
  // The same for the FFN: the gate and up mat-vecs per token, the down projection an fma chain
  // in index order per output, to which the union's zero h add nothing (down.comp).
  void ffn_threshold_rows(const TensorView& gate, const float* gate_bias, const TensorView& up,
                          const TensorView& down_t, const float* x, int64_t n_tok,
                          float threshold, GluKind kind, float* out) override {
    ffn_threshold(gate, gate_bias, up, down_t, x, n_tok, threshold, kind, out);
  }
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
  // Recorded steps (vk_queue.cpp): the recording is a command buffer of its own (not
  // one-time-submit), submitted at end_record and again at each replay.
  bool can_record() const override { return true; }
  void begin_record() override;
  Result<int> end_record() override;
  void replay(int id, bool step = true) override;
  void drop_record(int id) override;

  // Test hook: drain the queue, then behave as after VK_ERROR_DEVICE_LOST.
  void lose_device() {
    (void)wait_all();
    lost_ = "VK_ERROR_DEVICE_LOST (simulated by a test)";
  }
  // Test hook: the bytes matmul would quantise x [n_tok, ne0] (device memory) to for weights of
  // type t.
  Result<std::vector<uint8_t>> quantized_activations(GgmlType t, const float* x, int64_t n_tok,
                                                     int64_t ne0) {
    uint64_t xq;
    int64_t nbx;
    xq_key_ = XqKey();  // quantise afresh
    const bool ok = quantize_x("quantize", t, x, n_tok, ne0, &xq, &nbx);
    HC_TRY(sync());
    if (!ok) return Status::Error("quantize failed");
    const uint64_t bytes = static_cast<uint64_t>(n_tok * nbx);
    std::vector<uint8_t> out(bytes);
    if (xq != xq_.addr) return Status::Error("F32 weights take x unquantised");
    HC_TRY(immediate_copy(xq_.buf, 0, transfer_.buf, 0, bytes));
    std::memcpy(out.data(), transfer_.map, bytes);
    return out;
  }

 private:
  VulkanDevice() = default;
  Status init(const DeviceOptions& opt);
  Status measure_profile();

  Result<Buf> make_buffer(uint64_t bytes, bool host);
  void destroy_buffer(const Buf& b);
  // The device buffer holding [addr, addr + bytes), and the offset of addr in it.
  bool find_device(uint64_t addr, uint64_t bytes, VkBuffer* buf, uint64_t* off) const;
  bool find_host(const void* p, uint64_t bytes, VkBuffer* buf, uint64_t* off) const;
  // Staging space of `bytes` valid until the next sync(): its buffer, offset and mapping.
  Result<std::pair<const Buf*, uint64_t>> stage(uint64_t bytes);

  void fail(const std::string& op, const std::string& msg);
  bool usable(const char* op);  // false (and the op is skipped) once the device is lost
  // The recording command buffer, after a barrier ordering it behind everything queued.
  VkCommandBuffer record();
  Status flush();  // submit the recording, if any (not while recording a step)
  Status submit(VkCommandBuffer cb);  // cb ended; signals the timeline's next value
  Result<VkCommandBuffer> end_current();  // ends cur_ behind a host-read barrier; cur_ cleared
  // While recording a step: what makes it unreplayable (the first such thing) is kept for
  // end_record; no-op otherwise.
  void not_replayable(const std::string& why) {
    if (recording_ && record_error_.empty()) record_error_ = why;
  }
  Status wait_all();
  Status immediate_copy(VkBuffer src, uint64_t src_off, VkBuffer dst, uint64_t dst_off,
                        uint64_t bytes);
  Result<VkPipeline> pipeline(int p);
  void dispatch(const char* op, int p, const void* pc, uint32_t pc_bytes, uint64_t groups,
                uint32_t gy = 0);
  bool check_weight(const char* op, const char* name, const TensorView& w, int64_t ne0);
  // Grows buf to at least bytes (kMinScratch at least; charged), waiting for queued work that
  // may read the old one. ensure_scratch records a failure for op (reported at sync).
  Status grow_scratch(Buf& buf, uint64_t bytes, const char* what);
  bool ensure_scratch(Buf& buf, uint64_t bytes, const char* op, const char* what);
  // The sizes xq_ and scratch_ need for operations as large as n (0: none).
  static void scratch_sizes(const ScratchNeeds& n, uint64_t* xq, uint64_t* ffn);
  // Queues the quantisation of x [n_tok, ne0] to vec_dot_type(type) into xq_ (reusing the
  // previous one when nothing has been queued since that could have changed x); returns the
  // address of the quantised rows and their stride, or false (failed, recorded).
  bool quantize_x(const char* op, GgmlType type, const float* x, int64_t n_tok, int64_t ne0,
                  uint64_t* xq, int64_t* nbx);
  // One matvec dispatch per group of up to 8 tokens: base.x / base.y at token 0 (x quantised,
  // base.nbx apart), base.n_tok the total.
  void matvec(const char* op, const TensorView& w, const MatvecPC& base);
  uint64_t matvec_groups(int64_t n_rows, int64_t n_tok) const;
  int matvec_pipe(GgmlType t, int64_t n_tok) const {
    return (n_tok > 1 ? kMatvecBatch0 : kMatvec0) + wtype_of(t);
  }
  int down_pipe(GgmlType t, int64_t n_tok) const {
    return (n_tok > 1 ? kDownBatch0 : kDown0) + wtype_of(t);
  }
  uint64_t down_groups(int64_t n_out) const {
    return down_groups_per_lane_ ? (static_cast<uint64_t>(n_out) + 8 * kCpuDownLocal - 1) /
                                       (8 * kCpuDownLocal)
                                 : elem_groups(n_out);
  }
  // After an operation recorded as number seq + 1 that wrote y [ny floats]: the quantised x
  // [nx floats] made before it stays valid unless y overlaps x.
  void keep_xq(uint64_t seq, const float* x, int64_t nx, const float* y, int64_t ny);
  struct FfnArgs {
    const TensorView* gate;
    const float* gate_bias;  // [n_sub] device memory or null
    const TensorView* up;
    const TensorView* down_t;
    const float* x;
    int64_t n_tok;
    const int32_t* idx;
    int64_t n_rows;
    const uint8_t* fire;
    float threshold;
    GluKind kind;
    float* out;
  };
  void ffn(const char* op, const FfnArgs& a);
  bool up_pass(const char* op, const FfnArgs& a, const MatvecPC& g, int64_t t0, int64_t nx,
               int64_t nh);
  bool fuse_gate_up(const FfnArgs& a) const;
  // Gate and up in one dispatch (matvec mode 3) unless HOTCOLD_VK_FFN_FUSED=0; tests switch it
  // (set_ffn_fused_for_test, vk_testing.h).
  bool ffn_fused_ = [] {
    const char* v = std::getenv("HOTCOLD_VK_FFN_FUSED");
    return !(v && v[0] == '0' && v[1] == 0);
  }();

 public:
  void set_ffn_fused(bool on) { ffn_fused_ = on; }

 private:

  Fns* f_ = nullptr;
  VkPhysicalDevice phys_ = VK_NULL_HANDLE;
  VkDevice dev_ = VK_NULL_HANDLE;
  VkQueue queue_ = VK_NULL_HANDLE;
  uint32_t qfam_ = 0;
  uint32_t dev_type_ = 0, host_type_ = 0;  // memory type indices
  uint64_t max_alloc_ = 0;
  std::string name_;
  DeviceProfile profile_;
  uint64_t budget_ = 0;

  mutable std::mutex mem_mu_;
  uint64_t charged_ = 0, real_ = 0;
  std::map<uint64_t, Buf> dev_bufs_;   // by device address
  std::map<uint64_t, Buf> host_bufs_;  // by mapped address

  VkPipelineLayout layout_ = VK_NULL_HANDLE;
  std::array<VkPipeline, kPipes> pipes_{};
  VkCommandPool pool_ = VK_NULL_HANDLE;
  VkSemaphore timeline_ = VK_NULL_HANDLE;
  uint64_t submitted_ = 0;
  VkCommandBuffer cur_ = VK_NULL_HANDLE;
  int cur_ops_ = 0;
  std::vector<VkCommandBuffer> in_flight_, free_cbs_;
  bool recording_ = false;     // cur_ is a step being recorded (begin_record)
  std::string record_error_;   // why the step being recorded cannot be replayed
  struct Recording {
    VkCommandBuffer cb;
    RecordedBytes bytes;  // what its copies move (counted again at each replay)
  };
  std::map<int, Recording> recordings_;

  std::vector<Buf> staging_;  // chunks; [0, staging_used_) of the last one is taken
  size_t staging_chunk_ = 0;
  uint64_t staging_used_ = 0;
  struct HostCopy {
    void* dst;
    const uint8_t* src;
    uint64_t bytes;
  };
  std::vector<HostCopy> deferred_;
  Buf transfer_;  // synchronous upload / download staging (kUploadChunk)

  Buf scratch_;  // ffn h [8, n_rows] fp32
  Buf xq_;       // quantised activations [n_tok, row_bytes(vec_dot_type, ne0)]
  // What xq_ holds: the quantisation of x [n_tok, ne0] to vtype, made by the operation recorded
  // as number xq_seq_ (ops_recorded_ counts record() calls): reusable while no later operation
  // has been recorded except matvecs whose y does not overlap x.
  struct XqKey {
    uint64_t x = 0;
    int64_t n_tok = 0, ne0 = 0;
    int32_t vtype = -1;
    bool operator==(const XqKey&) const = default;
  };
  XqKey xq_key_;
  uint64_t xq_seq_ = 0, ops_recorded_ = 0;
  // matvec work splits (vk_abi.h MatvecPC) for one token [0] and for batches [1].
  MatvecSplit split_[2];
  bool down_groups_per_lane_ = false;  // down: 8 columns per invocation (CPU) or one (GPU)
  bool native_half_ = false;           // the shaders may use unpackHalf2x16 (CPU devices)
  // HC_VK_PROFILE=1: every dispatch is waited for and timed; totals per shader go to stderr
  // when the device closes.
  bool profile_ops_ = false;
  struct OpTime {
    double s = 0;
    uint64_t n = 0, groups = 0;
  };
  std::array<OpTime, kPipes> op_time_{};
  std::string first_error_;
  std::string lost_;  // non-empty once the device is lost
};

}  // namespace hc::ops::vk
