// A decode pass split between the host and a device (a hot/cold FFN, attention on the device with
// FFN neurons on the host, experts on both) cannot be one recorded step (model/device_step.h):
// the host waits for the device in every layer. SegmentRecorder records it in segments instead,
// so that on a GPU each segment is one launch (a CUDA graph, a resubmitted Vulkan command buffer)
// rather than one launch per kernel.
//
// It is an ops::Device wrapped around the session's device for one pass (begin_pass ..
// end_pass). A segment is what is queued between two of the host's waits: it ends at a sync(),
// a synchronous copy (upload, download), anything that allocates, frees or grows memory
// (alloc, upload_weight, reserve_scratch, ...), a row migration (update_rows), or cut(), which
// the forward pass calls where the host starts its own half of a layer, so that the device's
// half is submitted first and both halves still run at once.
//   - The first pass records each segment (Device::begin_record .. end_record) while queueing it.
//   - Later passes hold each segment's operations, comparing every one with the recording: the
//     kind of operation and every argument (pointers, sizes, thresholds, a DevicePos's device
//     address, or its host integer when it has none), word for word. A segment that matches to
//     its end is replayed as one command (Device::replay). At the first operation that differs,
//     what was held and the rest of the segment are queued anew and recorded again (the
//     recording replaced); a segment that differs kMaxMisses passes in a row, or whose
//     recording fails, is queued directly for the rest of the session (dynamic thresholds, a
//     host predictor's index lists, expert routes: what changes every token).
// So a replay only ever runs the same operations on the same buffers as queueing them would,
// and what changes from token to token must be in device memory, copied in from fixed host
// buffers by the segment itself (the position: DeviceSession::pos). A replay counts one op and
// its copies' bytes; only a pass's first replay counts a replayed step (replayed_tokens).
// Outside a pass every call goes straight to the device.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/inline_op.h"
#include "ops/device.h"

namespace hc {

class SegmentRecorder final : public ops::Device {
 public:
  // A segment that differs from its recording this many passes in a row is queued directly.
  static constexpr int kMaxMisses = 3;
  // Segments per pass recorded at most (the rest are queued directly).
  static constexpr size_t kMaxSegments = 4096;

  explicit SegmentRecorder(ops::Device& inner) : inner_(inner) {}
  ~SegmentRecorder() override;  // frees its recordings on the device

  void begin_pass();
  // Ends the pass's last segment and frees recordings replaced during the pass.
  void end_pass();
  bool in_pass() const { return in_pass_; }
  // Ends the current segment: what it holds is submitted now.
  void cut();

  // Segments since the recorder was made, by what became of them.
  struct Stats {
    uint64_t passes = 0;
    uint64_t replayed = 0;  // replayed as one command
    uint64_t recorded = 0;  // recorded (first pass, or again after a difference)
    uint64_t direct = 0;    // queued directly
    uint64_t misses = 0;    // differed from their recording
  };
  const Stats& stats() const { return stats_; }

  // ---- ops::Device: queries and memory pass through (those that allocate end a segment) ----
  ops::DeviceKind kind() const override { return inner_.kind(); }
  std::string name() const override { return inner_.name(); }
  ops::DeviceProfile profile() const override { return inner_.profile(); }
  uint64_t budget_bytes() const override { return inner_.budget_bytes(); }
  uint64_t charged_bytes() const override { return inner_.charged_bytes(); }
  uint64_t overhead_bytes() const override { return inner_.overhead_bytes(); }
  uint64_t measured_bytes() const override { return inner_.measured_bytes(); }
  uint64_t charge_bytes(uint64_t bytes) const override { return inner_.charge_bytes(bytes); }
  uint64_t weight_bytes(const TensorView& host, int64_t n_rows) const override {
    return inner_.weight_bytes(host, n_rows);
  }
  uint64_t scratch_bytes(const ops::ScratchNeeds& n) const override {
    return inner_.scratch_bytes(n);
  }
  Result<void*> alloc(uint64_t bytes, const char* what) override;
  void free(void* p) override;
  Result<void*> alloc_host(uint64_t bytes) override;
  void free_host(void* p) override;
  Status upload(void* dst, const void* host_src, uint64_t bytes) override;
  Status download(void* host_dst, const void* src, uint64_t bytes) override;
  Result<TensorView> upload_weight(const TensorView& host, const int32_t* rows, int64_t row0,
                                   int64_t n_rows, const char* what) override;
  void free_weight(const TensorView& w) override;
  TensorView weight_rows(const TensorView& w, int64_t row0, int64_t n_rows) const override {
    return inner_.weight_rows(w, row0, n_rows);
  }
  Status reserve_scratch(const ops::ScratchNeeds& n) override;
  void update_rows(const TensorView& w, const TensorView& host, const int32_t* src_rows,
                   const int32_t* slots, int64_t n) override;
  Status sync() override;

  // ---- queued operations: held, recorded or queued as the segment's state says -------------
  void copy_to_device(void* dst, const void* host_src, uint64_t bytes) override;
  void copy_to_host(void* host_dst, const void* src, uint64_t bytes) override;
  void rmsnorm(float* out, const float* x, const float* w, int64_t n_tok, int64_t n,
               float eps) override;
  void matmul(const TensorView& w, const float* x, int64_t n_tok, float* y) override;
  void matmul_rows(const TensorView& w, const float* x, int64_t n_tok, float* y) override;
  void rope(float* x, int64_t n_tok, int n_head, int head_dim, int n_rot, ops::DevicePos pos0,
            float theta_scale, float freq_scale, const float* freq_factors, bool neox) override;
  void kv_store(const float* k, const float* v, int64_t n_tok, ops::DevicePos pos0,
                int64_t kv_dim, int n_ctx, fp16_t* k_cache, fp16_t* v_cache_t) override;
  void attention(const float* q, const fp16_t* k_cache, const fp16_t* v_cache_t,
                 ops::DevicePos pos0, int64_t n_tok, const ops::AttentionShape& shape,
                 float scale, float* out) override;
  void glu(float* gate, const float* up, int64_t n_tok, int64_t n, ops::GluKind kind) override;
  void add(float* y, const float* x, int64_t n) override;
  void add_rows(float* y, const float* b, int64_t n_tok, int64_t n) override;
  void get_rows(float* dst, const float* src, const int32_t* idx, int64_t n,
                int64_t width) override;
  void set_rows_scaled(float* dst, const float* src, const int32_t* idx, const float* scale,
                       int64_t n, int64_t width) override;
  void ffn_threshold(const TensorView& gate, const float* gate_bias, const TensorView& up,
                     const TensorView& down_t, const float* x, int64_t n_tok, float threshold,
                     ops::GluKind kind, float* out) override;
  void ffn_threshold_rows(const TensorView& gate, const float* gate_bias, const TensorView& up,
                          const TensorView& down_t, const float* x, int64_t n_tok,
                          float threshold, ops::GluKind kind, float* out) override;
  void ffn_rows(const TensorView& gate, const float* gate_bias, const TensorView& up,
                const TensorView& down_t, const float* x, int64_t n_tok, const int32_t* idx,
                int64_t n_idx, const uint8_t* fire, ops::GluKind kind, float* out) override;
  void argmax(const float* x, int64_t n_rows, int64_t n, int32_t* out) override;
  void moe_topk(float* x, int64_t n_tok, int n_expert, int k, const ops::MoeGate& gate,
                int32_t* ids, float* w) override;
  void matmul_id(const TensorView& w, int64_t rows, const int32_t* ids, int64_t n_ids,
                 const float* x, int64_t x_stride, float* y) override;
  void moe_combine(const float* y, const float* w, int64_t n_tok, int k, int64_t n,
                   float* out) override;
  void fire_mask(const float* x, int64_t n_tok, int64_t n, const int32_t* cols, int64_t n_cols,
                 float threshold, uint8_t* fire) override;
  // Not recordable itself (it records through the device it wraps).
  bool can_record() const override { return false; }

 private:
  enum class Mode {
    kIdle,    // nothing queued in the current segment yet
    kHold,    // holding operations that match the recording so far
    kRecord,  // the device records what is queued
    kDirect,  // queued directly, not recorded
  };
  struct Segment {
    std::vector<uint64_t> print;  // every operation's kind and arguments, in order
    int id = -1;                  // the device's recording, or -1
    int misses = 0;               // passes in a row that differed from the recording
    bool direct = false;          // queued directly from now on
  };

  // One queued operation: its fingerprint, n words at w (appended to print_), and `run`, which
  // queues it on the wrapped device (held in place: a steady-state pass allocates nothing).
  template <class F>
  void put(const uint64_t* w, size_t n, const F& run);
  void run_held() const;  // queues the held operations on the wrapped device, in order
  void start_segment();
  void end_segment();
  // Ends the segment being recorded: keeps the recording, or (it failed) counts a miss.
  void finish_record(Segment& s);
  void retire(int& id);  // frees a recording at the pass's end; id = -1

  ops::Device& inner_;
  bool in_pass_ = false, first_replay_ = true;
  Mode mode_ = Mode::kIdle;
  size_t k_ = 0;  // the current segment's index in the pass
  std::vector<Segment> segs_;
  std::vector<uint64_t> print_;             // the current segment's fingerprint so far
  std::vector<InlineOp> held_;             // its operations, as the device gets them
  std::vector<int> retired_;                // recordings to free when the pass ends
  Stats stats_;
};

}  // namespace hc
