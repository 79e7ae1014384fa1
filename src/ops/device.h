// A second compute device next to the host CPU: a CUDA GPU (ops/cuda), a Vulkan device (ops/vulkan:
// any Vulkan 1.2 GPU, or Mesa's lavapipe on the CPU, which is how CI runs the GPU code path) or a
// CPU device running on its own threads with its own memory budget (ops/cpu/cpu_device.h), so
// that the hybrid executor, the placement planner and the merge logic run and are tested on
// machines without a GPU.
//
// Memory: every byte a device holds is charged against its budget: weights, KV cache, scratch,
// and its fixed overhead (CUDA context, cuBLAS workspace) charged at open. An allocation that
// would pass the budget fails with a Status naming the request, the use and the budget; nothing
// is allocated behind the budget's back.
//
// Work: operations are queued in order on the device's one queue and run asynchronously to the
// host thread that queued them; sync() waits until everything queued so far has run. The host
// overlaps its own work between queueing and sync(). The host side of copy_to_device /
// copy_to_host may be any host memory; buffers from alloc_host (pinned for CUDA, mapped for
// Vulkan) are the fast path, copied directly, while other memory is staged (CUDA: as cudaMemcpyAsync
// does for pageable memory; Vulkan: copied into a staging buffer when queued, and read back at
// sync()). Host buffers, like every device pointer an operation reads or writes, must stay
// valid and unchanged until the next sync().
//
// Pointers passed to operations are device memory (from alloc) unless named host_*; a TensorView
// argument describes a weight matrix stored in device memory in ggml's block layout (its
// `packed` member is ignored). Shapes follow ops/cpu: x [n_tok, ne0] row-major fp32, etc.
//
// Arithmetic: the CPU device runs the host's own kernels (ops/cpu) on its own thread pool, so its
// results equal the host's bit for bit. The Vulkan device quantises matmul activations to the
// weight's vec_dot_type exactly as the host does (the same bytes) and takes the same per-block
// integer dot products times scales, the same dequantised weights and the same fp16 roundings
// (KV cache, q, softmax weights); it differs from the host only in fp32 summation order, fma
// fusion and ~1-ulp exp and sincos: about 1e-7 relative per operation. A last-bit difference can
// still move one level of a later 8-bit activation quantisation, so on quantisation-sensitive
// models (SmolLM2) logits can differ by up to ~1, and greedy tokens differ where the host's top
// two logits are that close. The CUDA device computes in fp32 with the same quantisation of
// weights (activations are not quantised); its tests bound the difference from the CPU
// reference by tolerances derived from the weight type.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "core/tensor_view.h"
#include "ops/cpu/attention.h"
#include "ops/cpu/moe_topk.h"

namespace hc::ops {

enum class DeviceKind { kCpu, kCuda, kVulkan };

// What the placement planner needs to know about a device (measured at open for CUDA;
// configured for the CPU device).
struct DeviceProfile {
  double mem_gbps = 0;    // streaming read bandwidth of device memory (weights)
  double link_gbps = 0;   // host <-> device copy bandwidth (PCIe for CUDA)
  double op_us = 0;       // cost of one queued operation (kernel launch)
  double sync_us = 0;     // one host round trip: queue, sync, return
};

// Which FFN activation a device applies: act(gate) * up (kSilu, kRelu), relu(gate) *
// relu(up) (kDRelu), or relu(gate) alone (kReluUngated: Falcon's FFN has no up; the operations
// then never read up, which may be empty / null). A neuron's firing test uses act(gate): SiLU,
// or ReLU for the three ReLU kinds.
enum class GluKind { kSilu = 0, kRelu = 1, kDRelu = 2, kReluUngated = 3 };  // kernels' glu_kind

// A weight an operation reads: its type and shape [ne1 rows, ne0].
struct WeightShape {
  GgmlType type = GgmlType::F32;
  int64_t ne0 = 0, ne1 = 0;
};

// The largest operations a user of a device will queue, for the device's own scratch: tokens
// per operation, the weights matmul() multiplies and the gate matrices of ffn_threshold() /
// ffn_rows() (ne1 = the neurons held). Repeats and any order are fine.
struct ScratchNeeds {
  int64_t max_tokens = 0;
  std::vector<WeightShape> matmul;
  std::vector<WeightShape> ffn;
};

// What a device has done since it opened, each device counting its own work (the contract suite,
// tests/device/counters_test.cpp, holds every device to these definitions):
//   syncs      host waits for the queue: sync(), download(), upload(), and any wait a device
//              makes by itself (growing scratch that queued work may read)
//   ops        commands put on the queue: kernel launches (CUDA), recorded dispatches and copies
//              (Vulkan), queued operations (CPU device); a replayed graph is one command
//   h2d_bytes  bytes copied host -> device (copy_to_device, upload, upload_weight, update_rows)
//   d2h_bytes  bytes copied device -> host (copy_to_host, download)
//   replayed   decode steps replayed from a recorded graph instead of queued anew
// `hotcold bench --json` reports them per generated token under "device".
struct DeviceCounters {
  uint64_t syncs = 0, ops = 0, h2d_bytes = 0, d2h_bytes = 0, replayed = 0;
  DeviceCounters operator-(const DeviceCounters& o) const {
    return {syncs - o.syncs, ops - o.ops, h2d_bytes - o.h2d_bytes, d2h_bytes - o.d2h_bytes,
            replayed - o.replayed};
  }
  DeviceCounters& operator+=(const DeviceCounters& o) {
    syncs += o.syncs, ops += o.ops, h2d_bytes += o.h2d_bytes, d2h_bytes += o.d2h_bytes;
    replayed += o.replayed;
    return *this;
  }
};

// The position of an operation's row 0: `at`, known to the host when it queues the operation,
// or, when `dev` is non-null, the int32 at `dev` in device memory, read when the operation runs
// (a recorded decode step's position, which the host sets with a copy before each replay; `at`
// is then ignored). A device position is checked when the operation runs: the CPU device
// reports one out of range at the next sync() (and skips the operation), as it does a host one;
// Vulkan and CUDA (a kernel cannot report) take a negative one as 0, store no KV row at or past
// n_ctx and attend over at most n_ctx positions.
struct DevicePos {
  int at = 0;
  const int32_t* dev = nullptr;
  DevicePos(int p) : at(p) {}  // NOLINT: a host integer is a position
  DevicePos(int p, const int32_t* d) : at(p), dev(d) {}
  // What the checks made at queueing see: `at`, or 0 for a device position.
  int host() const { return dev ? 0 : at; }
};

class Device {
 public:
  virtual ~Device() = default;
  Device() = default;
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  virtual DeviceKind kind() const = 0;
  virtual std::string name() const = 0;  // e.g. "cpu device (2 threads)", "NVIDIA H100 80GB"
  virtual DeviceProfile profile() const = 0;
  // The counters above, read at any time from any thread.
  DeviceCounters counters() const {
    return {syncs_.load(std::memory_order_relaxed), ops_.load(std::memory_order_relaxed),
            h2d_.load(std::memory_order_relaxed), d2h_.load(std::memory_order_relaxed),
            replayed_.load(std::memory_order_relaxed)};
  }

  // ---- memory -----------------------------------------------------------------------------
  virtual uint64_t budget_bytes() const = 0;
  // Bytes charged: fixed overhead + live allocations. Never exceeds budget_bytes().
  virtual uint64_t charged_bytes() const = 0;
  // Fixed overhead charged at open (CUDA context, cuBLAS workspace; 0 for the CPU device).
  virtual uint64_t overhead_bytes() const = 0;
  // Device memory this process uses as the device itself reports it (cudaMemGetInfo's used
  // bytes minus what was used before open; the CPU device's live allocations).
  virtual uint64_t measured_bytes() const = 0;
  // Device memory of `bytes` (64-byte aligned), charged; `what` names the use in errors.
  virtual Result<void*> alloc(uint64_t bytes, const char* what) = 0;
  // What alloc(bytes) charges: the request rounded to the device's allocation granule.
  virtual uint64_t charge_bytes(uint64_t bytes) const = 0;
  virtual void free(void* p) = 0;
  // Host memory usable as the host side of queued copies (pinned for CUDA). Not charged.
  virtual Result<void*> alloc_host(uint64_t bytes) = 0;
  virtual void free_host(void* p) = 0;
  // Synchronous copy of host memory into device memory (load time).
  virtual Status upload(void* dst, const void* host_src, uint64_t bytes) = 0;
  // Synchronous copy of device memory to host memory (tests, debugging).
  virtual Status download(void* host_dst, const void* src, uint64_t bytes) = 0;
  // A weight matrix copied to the device (charged): rows [row0, row0 + n_rows) of `host`, or
  // the rows listed in `rows` (n_rows of them, in that order) when `rows` is non-null: a
  // compact matrix of selected neurons. The default stores ggml's block layout; the CPU device
  // also builds the host's decode layout (ops/cpu/repack.h) when `host` has one, charging
  // both, so its kernels round exactly as the host's. Release with free_weight.
  virtual Result<TensorView> upload_weight(const TensorView& host, const int32_t* rows,
                                           int64_t row0, int64_t n_rows, const char* what);
  virtual void free_weight(const TensorView& w);
  // Rows [row0, row0 + n_rows) of a device weight w (from upload_weight) as a weight of their
  // own, usable by every operation until w is freed (never freed itself): one expert of a
  // layer's experts uploaded as one matrix. The default offsets the data; the CPU device also
  // its decode layout, which takes row0 and n_rows in whole groups of rows (ops/cpu/repack.h
  // kRepackRows; else the view has none and its kernels round as ggml's layout does).
  virtual TensorView weight_rows(const TensorView& w, int64_t row0, int64_t n_rows) const {
    TensorView v = w;
    v.data = w.row(row0);
    v.ne1 = n_rows;
    v.packed = nullptr;
    return v;
  }
  // What upload_weight charges for n_rows rows of a matrix like `host` (its type, row length
  // and whether the host has its decode layout), with every allocation's rounding: the bytes
  // the planners count (0 for 0 rows: nothing uploaded).
  virtual uint64_t weight_bytes(const TensorView& host, int64_t n_rows) const;

  // Device memory some operations take for themselves (quantised activations, an FFN's h, a
  // GEMM's dequantised rows): charged like any allocation, made at first need, kept and grown,
  // never shrunk. scratch_bytes(n): what that scratch charges on a fresh device once operations
  // as large as n have run (0 for the CPU device, whose scratch is host memory).
  // reserve_scratch(n) grows it to that size now, so that a session's charge is complete
  // before its first operation (nothing charged mid-run); an error names the budget when it
  // does not fit.
  virtual uint64_t scratch_bytes(const ScratchNeeds& n) const { return 0; }
  virtual Status reserve_scratch(const ScratchNeeds& n) { return Status::Ok(); }

  // ---- queued operations ------------------------------------------------------------------
  virtual void copy_to_device(void* dst, const void* host_src, uint64_t bytes) = 0;
  virtual void copy_to_host(void* host_dst, const void* src, uint64_t bytes) = 0;
  // Row migration (dynamic placement): row slots[j] of the device weight w (from
  // upload_weight) becomes row src_rows[j] of `host` (same type and row length), for j < n.
  // Queued like a copy: operations queued later see the new rows, earlier ones the old. The
  // host rows must stay valid until the queue has run them (weights: always). The default
  // queues one copy per row; the CPU device also rebuilds the decode layout's touched groups.
  // src_rows and slots are read during the call.
  virtual void update_rows(const TensorView& w, const TensorView& host, const int32_t* src_rows,
                           const int32_t* slots, int64_t n);
  // out[t] = rmsnorm(x[t]) * w for n_tok rows of n (out may alias x). w: [n] fp32.
  virtual void rmsnorm(float* out, const float* x, const float* w, int64_t n_tok, int64_t n,
                       float eps) = 0;
  // y [n_tok, w.ne1] = x [n_tok, w.ne0] W^T, any supported weight type.
  virtual void matmul(const TensorView& w, const float* x, int64_t n_tok, float* y) = 0;
  // The same for the rows of independent sequences (a server's decode steps): every row
  // computed exactly as a one-row matmul computes it, so that the batch changes no bit. The
  // default queues those one-row calls; the CPU device runs its per-token decode kernels over
  // the batch in one pass over the weights.
  virtual void matmul_rows(const TensorView& w, const float* x, int64_t n_tok, float* y) {
    for (int64_t t = 0; t < n_tok; ++t) matmul(w, x + t * w.ne0, 1, y + t * w.ne1);
  }
  // Positions (pos0 below) are DevicePos: a host integer, or an int32 in device memory.
  // RoPE in place on x [n_tok, n_head * head_dim]; row t is at position pos0 + t. theta_scale =
  // base^(-2/n_rot); freq_factors: [n_rot/2] or null. Pairs rotated: adjacent (x[2i], x[2i+1])
  // (ggml's "normal" mode, llama), or with neox (x[i], x[i + n_rot/2]) (NeoX mode: qwen,
  // falcon), as ops::rope_apply / ops::rope_apply_neox.
  virtual void rope(float* x, int64_t n_tok, int n_head, int head_dim, int n_rot, DevicePos pos0,
                    float theta_scale, float freq_scale, const float* freq_factors,
                    bool neox) = 0;
  // Stores n_tok rows of k and v [n_tok, kv_dim] at positions pos0.. of one layer's cache:
  //   k_cache: [n_ctx, kv_dim] fp16; v_cache_t: [kv_dim, n_ctx] fp16 (V transposed).
  virtual void kv_store(const float* k, const float* v, int64_t n_tok, DevicePos pos0,
                        int64_t kv_dim, int n_ctx, fp16_t* k_cache, fp16_t* v_cache_t) = 0;
  // Causal attention for n_tok query rows at positions pos0.. over the cache positions
  // [0, pos0 + t] (shape.k_stride = kv_dim, shape.v_stride = n_ctx). q, out: [n_tok, n_head *
  // head_dim]. Same function as the host's attention for the same batch.
  virtual void attention(const float* q, const fp16_t* k_cache, const fp16_t* v_cache_t,
                         DevicePos pos0, int64_t n_tok, const AttentionShape& shape, float scale,
                         float* out) = 0;
  // gate[t, i] = act(gate[t, i]) * up[t, i] for n_tok rows of n (ggml's swiglu / reglu), or
  // relu(gate) * relu(up) (kDRelu), or relu(gate) (kReluUngated; up unused, may be null).
  virtual void glu(float* gate, const float* up, int64_t n_tok, int64_t n, GluKind kind) = 0;
  // y[i] += x[i]
  virtual void add(float* y, const float* x, int64_t n) = 0;
  // y[t * n + i] += b[i] for n_tok rows (a bias on every row: qwen2's Q/K/V biases).
  virtual void add_rows(float* y, const float* b, int64_t n_tok, int64_t n) = 0;
  // Row gather: dst[j] = src[idx[j]] for j < n, rows of `width` floats (a mixture-of-experts
  // layer's inputs of the tokens routed to one expert). idx: n int32 in device memory.
  virtual void get_rows(float* dst, const float* src, const int32_t* idx, int64_t n,
                        int64_t width) = 0;
  // Scaled row scatter: dst[idx[j]] = src[j] * scale[j] for j < n, rows of `width` floats, one
  // fp32 product per element (ggml_mul: an expert's output times its router weight). idx: n
  // distinct int32 and scale: n floats, in device memory.
  virtual void set_rows_scaled(float* dst, const float* src, const int32_t* idx,
                               const float* scale, int64_t n, int64_t width) = 0;

  // The FFN over the neurons this device holds, as compact matrices (row j = the device's
  // j-th neuron): gate, up [n_sub rows, n_embd]; down_t [n_sub rows, n_embd] (the transposed
  // down projection); x [n_tok, n_embd] the normed FFN input; out [n_tok, n_embd] overwritten.
  // gate_bias: null, or [n_sub] floats in this device's memory added to each gate value before
  // the activation and the firing test (OPT's ffn_up bias: g = gate_j . x + gate_bias[j]).
  //
  // ffn_threshold: every held neuron; neuron j fires for token t when
  //   |act(gate_j . x_t)| > threshold; out[t] = sum over fired j of glu(g, up_j . x_t) *
  //   down_t[j], glu as glu() computes it. (ReLU / dReLU with threshold 0 is the exact FFN over
  //   these neurons.)
  virtual void ffn_threshold(const TensorView& gate, const float* gate_bias, const TensorView& up,
                             const TensorView& down_t, const float* x, int64_t n_tok,
                             float threshold, GluKind kind, float* out) = 0;
  // ffn_threshold_rows: ffn_threshold for the rows of independent sequences, each row exactly
  //   as a one-row ffn_threshold computes it (the default queues those calls; the CPU device
  //   computes the union of the rows' firing sets, which is the same per row).
  virtual void ffn_threshold_rows(const TensorView& gate, const float* gate_bias,
                                  const TensorView& up, const TensorView& down_t, const float* x,
                                  int64_t n_tok, float threshold, GluKind kind, float* out) {
    for (int64_t t = 0; t < n_tok; ++t)
      ffn_threshold(gate, gate_bias, up, down_t, x + t * gate.ne0, 1, threshold, kind,
                    out + t * down_t.ne0);
  }
  // ffn_rows: only the n_idx local neuron indices idx (ascending), with fire [n_tok, n_idx]
  //   (uint8, 1 = token t fires idx[j]; a predictor's decision, no threshold applied):
  //   out[t] = sum over j with fire[t, j] of act(gate_idx[j] . x_t) * (up_idx[j] . x_t) *
  //   down_t[idx[j]]. n_idx may be 0 (out = 0).
  virtual void ffn_rows(const TensorView& gate, const float* gate_bias, const TensorView& up,
                        const TensorView& down_t, const float* x, int64_t n_tok,
                        const int32_t* idx, int64_t n_idx, const uint8_t* fire, GluKind kind,
                        float* out) = 0;

  // out[r] = the index of the largest of x[r * n .. r * n + n) for n_rows rows (the first such
  // index on ties, as the host's greedy sampler picks; NaN is never the largest): greedy
  // decoding, so that only the token id crosses the link. out: n_rows int32 in device memory.
  virtual void argmax(const float* x, int64_t n_rows, int64_t n, int32_t* out) = 0;

  // ---- mixture of experts, routed on the device (no host round trip) ----------------------
  // Routing (ops/cpu/moe_topk.h, the host's moe_route): for n_tok rows of n_expert router
  // logits x (overwritten with the gate's values), ids[t * k + j] = the expert with the j-th
  // largest value and w[t * k + j] its weight. 1 <= k <= n_expert; ids, w: device memory.
  virtual void moe_topk(float* x, int64_t n_tok, int n_expert, int k, const MoeGate& gate,
                        int32_t* ids, float* w) = 0;
  // y[j] = W_ids[j] . x_j for j < n_ids, each row as a one-row matmul computes it (matmul_rows):
  // W_e = rows [e * rows, (e + 1) * rows) of w (a layer's experts as one matrix, e <
  // w.ne1 / rows, ids: int32 in device memory), x_j = x + j * x_stride floats (x_stride 0: one
  // input for every id, or w.ne0: consecutive rows), y [n_ids, rows]. An id out of range is reported at the
  // next sync() where a device can check (the CPU device; Vulkan and CUDA, whose kernels cannot
  // report, clamp it into range).
  virtual void matmul_id(const TensorView& w, int64_t rows, const int32_t* ids, int64_t n_ids,
                         const float* x, int64_t x_stride, float* y) = 0;
  // out[t] = ((y[t*k] * w[t*k] + y[t*k + 1] * w[t*k + 1]) + ...) for n_tok rows of n floats:
  // each product rounded to fp32, then added in j order (the host's moe_sum_slots of its
  // weighted slots), no fused multiply-add. y [n_tok * k, n], w [n_tok * k].
  virtual void moe_combine(const float* y, const float* w, int64_t n_tok, int k, int64_t n,
                           float* out) = 0;

  // A predictor's decision per neuron: fire[t * n_cols + j] = 1 when x[t * n + c(j)] >=
  // threshold, else 0 (NaN never fires), for n_tok rows of n logits (fc2's), c(j) = cols[j]
  // (n_cols int32 in device memory, each in [0, n): the neurons this device holds, in slot
  // order) or j when cols is null (n_cols = n: every neuron). The host's test is the same
  // comparison (model/sparse_ffn.h predict_firing), so the masks are equal for equal logits.
  virtual void fire_mask(const float* x, int64_t n_tok, int64_t n, const int32_t* cols,
                         int64_t n_cols, float threshold, uint8_t* fire) = 0;

  // Waits until every operation queued so far has run. A failure inside the device (a CUDA
  // error) is reported here, naming the operation.
  virtual Status sync() = 0;

  // ---- recorded steps -----------------------------------------------------------------------
  // A decode step queues the same operations every token, on the same buffers; what changes
  // (the token's row, its position) is copied from fixed host buffers (alloc_host) into device
  // memory by the step itself, and positions are read there (DevicePos::dev). Such a step is
  // recorded once and replayed: a CUDA graph, a reused Vulkan command buffer, the CPU device's
  // list of queued operations.
  //   begin_record()  operations queued from now on are recorded; once end_record succeeds
  //                   they have also been queued to run (this step's results are the same as
  //                   without recording);
  //   end_record()    ends the recording and returns its id, or an error (nothing kept) when
  //                   the device cannot replay what was queued: a copy from or to host memory
  //                   not from alloc_host, scratch that had to grow, a sync() in between, a
  //                   failed operation. After an error, whether the operations ran is the
  //                   device's (CUDA's capture runs nothing; the others ran them): the caller
  //                   queues the step again, which a step that first copies in its inputs
  //                   can always do. No sync() between the two calls.
  //   replay(id, step) queues the recorded operations again, in order, as one command; counts
  //                   one op, the bytes its copies move and, with `step`, one replayed step
  //                   (a pass replayed as several recordings, model/segment_recorder.h,
  //                   counts its first). Everything they read must still be valid.
  //   drop_record(id) frees a recording (all are freed when the device closes).
  // can_record() is false for a device that does not record (then end_record fails).
  // failed_recording_ran(): whether the operations of a recording end_record refused have run
  // (true for the CPU device and Vulkan; CUDA's capture runs nothing).
  virtual bool can_record() const { return false; }
  virtual void begin_record() {}
  virtual Result<int> end_record() {
    return Status::Error(name() + " does not record operations");
  }
  virtual void replay(int id, bool step = true) {}
  virtual void drop_record(int id) {}
  virtual bool failed_recording_ran() const { return true; }

 protected:
  // For the devices' own counting (DeviceCounters above).
  void count_sync() { syncs_.fetch_add(1, std::memory_order_relaxed); }
  void count_ops(uint64_t n = 1) { ops_.fetch_add(n, std::memory_order_relaxed); }
  void count_h2d(uint64_t bytes) { h2d_.fetch_add(bytes, std::memory_order_relaxed); }
  void count_d2h(uint64_t bytes) { d2h_.fetch_add(bytes, std::memory_order_relaxed); }
  void count_replayed(uint64_t n = 1) { replayed_.fetch_add(n, std::memory_order_relaxed); }
  // Recording devices: begin_record marks the counters; a recording keeps the bytes its copies
  // moved since the mark (recorded_bytes), which each replay counts again (count_replay).
  struct RecordedBytes {
    uint64_t h2d = 0, d2h = 0;
  };
  void mark_record() { mark_ = counters(); }
  RecordedBytes recorded_bytes() const {
    const DeviceCounters d = counters() - mark_;
    return {d.h2d_bytes, d.d2h_bytes};
  }
  void count_replay(const RecordedBytes& b, bool step = true) {
    count_ops();
    if (step) count_replayed();
    count_h2d(b.h2d);
    count_d2h(b.d2h);
  }
  // Back to zero (after a device's own measurements at open).
  void reset_counters() {
    for (auto* c : {&syncs_, &ops_, &h2d_, &d2h_, &replayed_}) c->store(0);
  }

 private:
  std::atomic<uint64_t> syncs_{0}, ops_{0}, h2d_{0}, d2h_{0}, replayed_{0};
  DeviceCounters mark_;
};

inline Result<TensorView> Device::upload_weight(const TensorView& host, const int32_t* rows,
                                               int64_t row0, int64_t n_rows, const char* what) {
  const uint64_t rb = static_cast<uint64_t>(row_bytes(host.type, host.ne0));
  auto mem = alloc(rb * static_cast<uint64_t>(n_rows), what);
  if (!mem.ok()) return mem.status();
  uint8_t* dst = static_cast<uint8_t*>(*mem);
  if (rows == nullptr) {
    Status st = upload(dst, host.row(row0), rb * static_cast<uint64_t>(n_rows));
    if (!st.ok()) { free(dst); return st; }
  } else {
    for (int64_t j = 0; j < n_rows; ++j) {
      Status st = upload(dst + rb * j, host.row(rows[j]), rb);
      if (!st.ok()) { free(dst); return st; }
    }
  }
  return TensorView::make(host.type, dst, host.ne0, n_rows);
}
inline uint64_t Device::weight_bytes(const TensorView& host, int64_t n_rows) const {
  if (n_rows <= 0) return 0;
  return charge_bytes(static_cast<uint64_t>(row_bytes(host.type, host.ne0)) *
                      static_cast<uint64_t>(n_rows));
}
inline void Device::free_weight(const TensorView& w) {
  if (w.data) free(const_cast<void*>(w.data));
}

inline void Device::update_rows(const TensorView& w, const TensorView& host,
                                const int32_t* src_rows, const int32_t* slots, int64_t n) {
  const uint64_t rb = static_cast<uint64_t>(row_bytes(host.type, host.ne0));
  for (int64_t j = 0; j < n; ++j)
    copy_to_device(const_cast<uint8_t*>(w.row(slots[j])), host.row(src_rows[j]), rb);
}

// Options for opening a device.
struct DeviceOptions {
  DeviceKind kind = DeviceKind::kCpu;
  uint64_t budget_bytes = 0;  // 0: the device's whole memory (CUDA) / unlimited (CPU device)
  // CPU device only:
  int n_threads = 1;               // its own worker threads, apart from the host's pool
  double mem_gbps = 0;             // bandwidth it reports in its profile (0: measure)
  double link_gbps = 16;           // modelled copy bandwidth
  double emulate_gbps = 0;         // > 0: pace weight-streaming ops to this bandwidth (sleep)
  int cuda_ordinal = 0;            // CUDA only
  int vulkan_index = -1;           // Vulkan only: device N of the loader's list; -1 the first GPU
};

// Opens a device; a CUDA device in a build without CUDA (or on a machine without a GPU) is an
// error naming what is missing.
Result<std::unique_ptr<Device>> open_device(const DeviceOptions& opt);
// True when this build has the CUDA backend compiled in (HC_CUDA).
bool cuda_compiled();
// Number of CUDA devices visible (0 without CUDA or driver).
int cuda_device_count();
// True when this build has the Vulkan backend compiled in (HC_VULKAN).
bool vulkan_compiled();
// The devices the Vulkan loader sees, one line each: "N: NAME [gpu|cpu|..., Vulkan X.Y.Z]" plus
// ", unusable: lacks ..." where a needed feature is missing; or one line saying why there are
// none (no loader, no backend). For hotcold --version and errors.
std::vector<std::string> vulkan_device_lines();
// Index of the first usable GPU-type Vulkan device (what --device auto picks after CUDA), or -1.
int vulkan_gpu_index();

}  // namespace hc::ops
