#include "ops/cpu/cpu_device.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstddef>
#include <cstdlib>
#include <map>
#include <memory>
#include <new>
#include <cstring>
#include <type_traits>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/inline_op.h"
#include "core/thread_pool.h"
#include "ops/cpu/attention.h"
#include "ops/checks/device_checks.h"
#include "ops/cpu/gemm.h"
#include "ops/cpu/matmul.h"
#include "ops/cpu/membw.h"
#include "ops/cpu/moe_topk.h"
#include "ops/cpu/ops.h"
#include "ops/cpu/repack.h"
#include "ops/cpu/sparse.h"
#include "quant/quant.h"

namespace hc::ops {

namespace {

namespace check = device_checks;
using Clock = std::chrono::steady_clock;

// One queued operation, stored in place (core/inline_op.h): queueing allocates nothing.
using QueuedOp = InlineOp;

std::string mib(uint64_t b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(b) / (1024.0 * 1024.0));
  return buf;
}

class CpuDevice final : public Device {
 public:
  explicit CpuDevice(const DeviceOptions& opt)
      : opt_(opt), pool_(std::max(1, opt.n_threads)), worker_([this] { work(); }) {}

  ~CpuDevice() override {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
    for (auto& [p, n] : blocks_) std::free(p);
  }

  Status init() {
    profile_.link_gbps = opt_.link_gbps;
    profile_.mem_gbps = opt_.mem_gbps > 0 ? opt_.mem_gbps : measure_mem_gbps();
    if (opt_.emulate_gbps > 0) profile_.mem_gbps = std::min(profile_.mem_gbps, opt_.emulate_gbps);
    // Queue round trips, measured: the planner's per-operation and per-sync costs.
    const int n = 50;
    const auto t0 = Clock::now();
    for (int i = 0; i < n; ++i) {
      enqueue([] {});
      HC_TRY(sync());
    }
    profile_.sync_us = seconds_since(t0) * 1e6 / n;
    profile_.op_us = profile_.sync_us / 2;
    reset_counters();  // the counters start at open, after this measurement
    return Status::Ok();
  }

  DeviceKind kind() const override { return DeviceKind::kCpu; }
  std::string name() const override {
    return "cpu device (" + std::to_string(pool_.size()) + " thread" +
           (pool_.size() == 1 ? "" : "s") + ")";
  }
  DeviceProfile profile() const override { return profile_; }

  uint64_t budget_bytes() const override {
    return opt_.budget_bytes ? opt_.budget_bytes : UINT64_MAX;
  }
  uint64_t charged_bytes() const override {
    std::lock_guard<std::mutex> lk(mem_mu_);
    return charged_;
  }
  uint64_t overhead_bytes() const override { return 0; }
  uint64_t measured_bytes() const override { return charged_bytes(); }

  uint64_t charge_bytes(uint64_t bytes) const override {
    return (std::max<uint64_t>(bytes, 1) + 63) / 64 * 64;
  }
  Result<void*> alloc(uint64_t bytes, const char* what) override {
    std::lock_guard<std::mutex> lk(mem_mu_);
    const uint64_t rounded = charge_bytes(bytes);
    if (rounded > budget_bytes() - charged_)
      return Status::Error(std::string("cpu device: cannot allocate ") + mib(rounded) + " for " +
                           what + ": " + mib(charged_) + " of the " + mib(budget_bytes()) +
                           " budget already in use");
    void* p = std::aligned_alloc(64, rounded);
    if (!p)
      return Status::Error(std::string("cpu device: out of host memory allocating ") +
                           mib(rounded) + " for " + what);
    blocks_[p] = rounded;
    charged_ += rounded;
    return p;
  }
  void free(void* p) override {
    if (!p) return;
    std::lock_guard<std::mutex> lk(mem_mu_);
    auto it = blocks_.find(p);
    HC_CHECK(it != blocks_.end());
    charged_ -= it->second;
    std::free(p);
    blocks_.erase(it);
  }
  Result<void*> alloc_host(uint64_t bytes) override {
    void* p = std::aligned_alloc(64, (std::max<uint64_t>(bytes, 1) + 63) / 64 * 64);
    if (!p) return Status::Error("cpu device: out of host memory for a staging buffer");
    return p;
  }
  void free_host(void* p) override { std::free(p); }
  Status upload(void* dst, const void* host_src, uint64_t bytes) override {
    if (bytes == 0) return Status::Ok();
    const std::string e = check::nulls({{"destination", dst}, {"source", host_src}});
    if (!e.empty()) return Status::Error("cpu device: upload: " + e);
    std::memcpy(dst, host_src, bytes);
    count_sync();  // synchronous by the contract
    count_h2d(bytes);
    return Status::Ok();
  }
  // Waits for the queue but leaves a failed operation's error to sync(), as the GPU devices do.
  Status download(void* host_dst, const void* src, uint64_t bytes) override {
    wait();
    count_sync();
    if (bytes == 0) return Status::Ok();
    const std::string e = check::nulls({{"destination", host_dst}, {"source", src}});
    if (!e.empty()) return Status::Error("cpu device: download: " + e);
    std::memcpy(host_dst, src, bytes);
    count_d2h(bytes);
    return Status::Ok();
  }

  Result<TensorView> upload_weight(const TensorView& host, const int32_t* rows, int64_t row0,
                                   int64_t n_rows, const char* what) override {
    auto w = Device::upload_weight(host, rows, row0, n_rows, what);
    if (!w.ok() || !with_decode_layout(host, n_rows)) return w;
    // The host's decode layout, so dense matmuls on this device round as the host's do.
    const uint64_t bytes = static_cast<uint64_t>(repack_bytes(host.type, host.ne0, n_rows));
    auto mem = alloc(bytes, what);
    if (!mem.ok()) {
      free_weight(*w);
      return mem.status();
    }
    repack_groups(*w, 0, (n_rows + kRepackRows - 1) / kRepackRows, static_cast<uint8_t*>(*mem));
    w->packed = *mem;
    return w;
  }
  uint64_t weight_bytes(const TensorView& host, int64_t n_rows) const override {
    const uint64_t rows = Device::weight_bytes(host, n_rows);
    if (rows == 0 || !with_decode_layout(host, n_rows)) return rows;
    return rows + charge_bytes(static_cast<uint64_t>(repack_bytes(host.type, host.ne0, n_rows)));
  }
  // Whether upload_weight also builds (and charges) the host's decode layout for these rows.
  static bool with_decode_layout(const TensorView& host, int64_t n_rows) {
    return host.packed && repack_available(host.type) && n_rows >= kRepackRows;
  }
  void free_weight(const TensorView& w) override {
    if (w.packed) free(const_cast<void*>(w.packed));
    Device::free_weight(w);
  }
  // The decode layout's groups of the rows too, where the rows are whole groups.
  TensorView weight_rows(const TensorView& w, int64_t row0, int64_t n_rows) const override {
    TensorView v = Device::weight_rows(w, row0, n_rows);
    if (w.packed && row0 % kRepackRows == 0 && n_rows >= kRepackRows &&
        (n_rows % kRepackRows == 0 || row0 + n_rows == w.ne1))
      v.packed = static_cast<const uint8_t*>(w.packed) +
                 row0 / kRepackRows * repack_group_bytes(w.type, w.ne0);
    return v;
  }

  void copy_to_device(void* dst, const void* host_src, uint64_t bytes) override {
    if (bytes == 0 ||
        !ok("copy_to_device", check::nulls({{"destination", dst}, {"source", host_src}})))
      return;
    count_h2d(bytes);
    enqueue([=, this] {
      std::memcpy(dst, host_src, bytes);
      pace_link(bytes);
    });
  }
  void copy_to_host(void* host_dst, const void* src, uint64_t bytes) override {
    if (bytes == 0 ||
        !ok("copy_to_host", check::nulls({{"destination", host_dst}, {"source", src}})))
      return;
    count_d2h(bytes);
    enqueue([=, this] {
      std::memcpy(host_dst, src, bytes);
      pace_link(bytes);
    });
  }
  void update_rows(const TensorView& w, const TensorView& host, const int32_t* src_rows,
                   const int32_t* slots, int64_t n) override {
    if (n <= 0 || !ok("update_rows", check::update_rows(w, host, src_rows, slots, n))) return;
    Device::update_rows(w, host, src_rows, slots, n);  // the rows, in ggml's layout
    if (!w.packed) return;
    // The decode layout's groups holding a changed row, each rebuilt once (after the copies).
    std::vector<int64_t> groups(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) groups[j] = slots[j] / kRepackRows;
    std::sort(groups.begin(), groups.end());
    groups.erase(std::unique(groups.begin(), groups.end()), groups.end());
    auto* packed = static_cast<uint8_t*>(const_cast<void*>(w.packed));
    for (const int64_t g : groups) enqueue([=] { repack_groups(w, g, g + 1, packed); });
  }
  void rmsnorm(float* out, const float* x, const float* w, int64_t n_tok, int64_t n,
               float eps) override {
    if (n_tok <= 0 || n <= 0 || !ok("rmsnorm", check::nulls({{"out", out}, {"x", x}, {"w", w}})))
      return;
    enqueue([=] {
      for (int64_t t = 0; t < n_tok; ++t) ops::rmsnorm(out + t * n, x + t * n, w, n, eps);
    });
  }
  void matmul(const TensorView& w, const float* x, int64_t n_tok, float* y) override {
    queue_matmul("matmul", in_, w, x, n_tok, y);
  }
  void matmul_rows(const TensorView& w, const float* x, int64_t n_tok, float* y) override {
    queue_matmul("matmul_rows", in_rows_, w, x, n_tok, y);  // in_rows_ is kPerToken
  }
  void rope(float* x, int64_t n_tok, int n_head, int head_dim, int n_rot, DevicePos p,
            float theta_scale, float freq_scale, const float* freq_factors, bool neox) override {
    if (!ok("rope", check::rope(n_rot, head_dim, p.host())) || n_tok <= 0 || n_head <= 0 ||
        !ok("rope", check::nulls({{"x", x}})))
      return;
    enqueue([=, this] {
      const int pos0 = p.dev ? *p.dev : p.at;
      if (p.dev && !ok("rope", check::rope(n_rot, head_dim, pos0))) return;
      cs_.resize(static_cast<size_t>(n_rot));
      for (int64_t t = 0; t < n_tok; ++t) {
        ops::rope_cache(cs_.data(), n_rot, theta_scale, freq_scale, freq_factors, pos0 + t);
        const auto apply = neox ? ops::rope_apply_neox : ops::rope_apply;
        for (int h = 0; h < n_head; ++h)
          apply(x + t * int64_t{n_head} * head_dim + int64_t{h} * head_dim, n_rot, cs_.data());
      }
    });
  }
  void kv_store(const float* k, const float* v, int64_t n_tok, DevicePos p, int64_t kv_dim,
                int n_ctx, fp16_t* k_cache, fp16_t* v_cache_t) override {
    if (!ok("kv_store", check::kv_store(n_tok, p.host(), kv_dim, n_ctx)) || n_tok == 0 ||
        kv_dim == 0 ||
        !ok("kv_store",
            check::nulls({{"k", k}, {"v", v}, {"k_cache", k_cache}, {"v_cache_t", v_cache_t}})))
      return;
    enqueue([=, this] {
      const int pos0 = p.dev ? *p.dev : p.at;
      if (p.dev && !ok("kv_store", check::kv_store(n_tok, pos0, kv_dim, n_ctx))) return;
      v16_.resize(static_cast<size_t>(kv_dim));
      for (int64_t t = 0; t < n_tok; ++t) {
        const int64_t pos = pos0 + t;
        quant::quantize_row(GgmlType::F16, k + t * kv_dim, k_cache + pos * kv_dim, kv_dim);
        quant::quantize_row(GgmlType::F16, v + t * kv_dim, v16_.data(), kv_dim);
        for (int64_t d = 0; d < kv_dim; ++d) v_cache_t[d * n_ctx + pos] = v16_[d];
      }
    });
  }
  void attention(const float* q, const fp16_t* k_cache, const fp16_t* v_cache_t, DevicePos p,
                 int64_t n_tok, const AttentionShape& shape, float scale, float* out) override {
    if (!ok("attention", check::attention(shape, p.host(), n_tok)) || n_tok <= 0 ||
        shape.n_head <= 0 ||
        !ok("attention",
            check::nulls({{"q", q}, {"k_cache", k_cache}, {"v_cache_t", v_cache_t}, {"out", out}})))
      return;
    enqueue([=, this] {
      const int pos0 = p.dev ? *p.dev : p.at;
      if (p.dev && !ok("attention", check::attention(shape, pos0, n_tok))) return;
      attend(q, k_cache, v_cache_t, pos0, n_tok, shape, scale, out);
    });
  }
  void glu(float* gate, const float* up, int64_t n_tok, int64_t n, GluKind kind) override {
    if (n_tok <= 0 || n <= 0 ||
        !ok("glu", check::nulls({{"gate", gate},
                                 {"up", kind == GluKind::kReluUngated ? gate : up}})))
      return;
    enqueue([=] {
      for (int64_t t = 0; t < n_tok; ++t) glu_row(gate + t * n, up ? up + t * n : nullptr, n, kind);
    });
  }
  void add(float* y, const float* x, int64_t n) override {
    if (n <= 0 || !ok("add", check::nulls({{"y", y}, {"x", x}}))) return;
    enqueue([=] { ops::add_inplace(y, x, n); });
  }
  void add_rows(float* y, const float* b, int64_t n_tok, int64_t n) override {
    if (n <= 0 || n_tok <= 0 || !ok("add_rows", check::nulls({{"y", y}, {"b", b}}))) return;
    enqueue([=] {
      for (int64_t t = 0; t < n_tok; ++t) ops::add_inplace(y + t * n, b, n);
    });
  }
  void get_rows(float* dst, const float* src, const int32_t* idx, int64_t n,
                int64_t width) override {
    if (n <= 0 || width <= 0 ||
        !ok("get_rows", check::nulls({{"dst", dst}, {"src", src}, {"idx", idx}})))
      return;
    enqueue([=] {
      for (int64_t j = 0; j < n; ++j)
        std::memcpy(dst + j * width, src + int64_t{idx[j]} * width,
                    static_cast<size_t>(width) * sizeof(float));
    });
  }
  void set_rows_scaled(float* dst, const float* src, const int32_t* idx, const float* scale,
                       int64_t n, int64_t width) override {
    if (n <= 0 || width <= 0 ||
        !ok("set_rows_scaled",
            check::nulls({{"dst", dst}, {"src", src}, {"idx", idx}, {"scale", scale}})))
      return;
    enqueue([=] {
      for (int64_t j = 0; j < n; ++j) {
        float* d = dst + int64_t{idx[j]} * width;
        const float* x = src + j * width;
        const float w = scale[j];
        for (int64_t i = 0; i < width; ++i) d[i] = x[i] * w;
      }
    });
  }
  void moe_topk(float* x, int64_t n_tok, int n_expert, int k, const MoeGate& gate, int32_t* ids,
                float* w) override {
    if (n_tok <= 0 || !ok("moe_topk", check::moe_topk(x, n_tok, n_expert, k, ids, w))) return;
    enqueue([=, this] {
      order_.resize(static_cast<size_t>(n_expert));
      for (int64_t t = 0; t < n_tok; ++t)
        moe_topk_row(x + t * n_expert, n_expert, k, gate, ids + t * k, w + t * k, order_.data());
    });
  }
  // Each id's rows as a one-row matmul on their view (weight_rows): the host's expert matmuls.
  void matmul_id(const TensorView& w, int64_t rows, const int32_t* ids, int64_t n_ids,
                 const float* x, int64_t x_stride, float* y) override {
    if (n_ids <= 0 ||
        !ok("matmul_id", check::matmul_id(w, rows, ids, n_ids, x, x_stride, y)))
      return;
    enqueue([=, this] {
      const auto t0 = Clock::now();
      const int64_t n_mat = w.ne1 / rows;
      uint64_t bytes = 0;
      for (int64_t j = 0; j < n_ids; ++j) {
        const int64_t e = ids[j];
        if (e < 0 || e >= n_mat) {
          ok("matmul_id", "id " + std::to_string(e) + " (of route " + std::to_string(j) +
                              ") is not in [0, " + std::to_string(n_mat) + ")");
          continue;
        }
        const TensorView v = weight_rows(w, e * rows, rows);
        ops::matmul(v, x + j * x_stride, 1, y + j * rows, pool_, in_rows_);
        bytes += bytes_of(v);
      }
      pace(bytes, t0);
    });
  }
  void moe_combine(const float* y, const float* w, int64_t n_tok, int k, int64_t n,
                   float* out) override {
    if (n_tok <= 0 || n <= 0 || !ok("moe_combine", check::moe_combine(y, w, n_tok, k, n, out)))
      return;
    enqueue([=] {
      for (int64_t t = 0; t < n_tok; ++t) {
        const float* yt = y + t * k * n;
        const float* wt = w + t * k;
        float* o = out + t * n;
        for (int64_t i = 0; i < n; ++i) {
          float acc = yt[i] * wt[0];
          for (int j = 1; j < k; ++j) {
            const float p = yt[j * n + i] * wt[j];  // rounded before the add
            acc += p;
          }
          o[i] = acc;
        }
      }
    });
  }
  void ffn_threshold(const TensorView& gate, const float* gate_bias, const TensorView& up,
                     const TensorView& down_t, const float* x, int64_t n_tok, float threshold,
                     GluKind kind, float* out) override {
    queue_ffn_threshold("ffn_threshold", in_, gate, gate_bias, up, down_t, x, n_tok, threshold,
                        kind, out);
  }
  // The gate in the per-token decode kernels; up and down are per row already (sparse_rows'
  // dot products, sparse_down's fma chain in index order, to which the union's zero h add
  // nothing).
  void ffn_threshold_rows(const TensorView& gate, const float* gate_bias, const TensorView& up,
                          const TensorView& down_t, const float* x, int64_t n_tok,
                          float threshold, GluKind kind, float* out) override {
    queue_ffn_threshold("ffn_threshold_rows", in_rows_, gate, gate_bias, up, down_t, x, n_tok,
                        threshold, kind, out);
  }
  void ffn_rows(const TensorView& gate, const float* gate_bias, const TensorView& up,
                const TensorView& down_t, const float* x, int64_t n_tok, const int32_t* idx,
                int64_t n_idx, const uint8_t* fire, GluKind kind, float* out) override {
    if (!ok("ffn_rows", check::ffn(gate, up, down_t, kind)) ||
        !ok("ffn_rows", check::negatives({{"n_idx", n_idx}})) || n_tok <= 0 ||
        !ok("ffn_rows", check::nulls({{"x", x}, {"out", out}})) ||
        (n_idx > 0 && !ok("ffn_rows", check::nulls({{"idx", idx}, {"fire", fire}}))))
      return;
    enqueue([=, this] {
      const auto t0 = Clock::now();
      // idx is device memory a copy queued just before may have written: checked now.
      if (!ok("ffn_rows", check::ffn_indices(idx, n_idx, gate.ne1))) return;
      rows_now(gate, gate_bias, up, down_t, x, n_tok, idx, n_idx, fire, kind, out);
      pace(n_idx * (row_bytes(gate.type, gate.ne0) + (up.empty() ? 0 : row_bytes(up.type, up.ne0)) +
                    row_bytes(down_t.type, down_t.ne0)),
           t0);
    });
  }

  // Recording: enqueue() keeps a copy of every operation queued while recording_; a replay is
  // one queued operation running them in order on the worker.
  bool can_record() const override { return true; }
  void begin_record() override {
    recording_ = true;
    record_error_.clear();
    taking_.clear();
    mark_record();
  }
  Result<int> end_record() override {
    if (!recording_)
      return Status::Error("cpu device: cannot replay the recording: begin_record was not called");
    recording_ = false;
    if (!record_error_.empty())
      return Status::Error("cpu device: cannot replay the recording: " + record_error_);
    int id = 0;
    while (recordings_.count(id)) ++id;
    recordings_[id] = std::make_unique<Recording>(Recording{std::move(taking_), recorded_bytes()});
    taking_ = {};
    return id;
  }
  void replay(int id, bool step = true) override {
    auto it = recordings_.find(id);
    if (it == recordings_.end()) {
      ok("replay", "no recording " + std::to_string(id));
      return;
    }
    const std::vector<QueuedOp>* ops = &it->second->ops;
    enqueue([ops] {
      for (const QueuedOp& op : *ops) op();
    }, /*counted=*/false);
    count_replay(it->second->bytes, step);  // one command
  }
  void drop_record(int id) override {
    wait();  // a queued replay may be running it
    recordings_.erase(id);
  }

  void argmax(const float* x, int64_t n_rows, int64_t n, int32_t* out) override {
    if (n_rows <= 0 || !ok("argmax", check::negatives({{"n", n}})) ||
        !ok("argmax", check::nulls({{"x", x}, {"out", out}})))
      return;
    enqueue([=] {
      for (int64_t r = 0; r < n_rows; ++r) out[r] = argmax_row(x + r * n, n);
    });
  }

  void fire_mask(const float* x, int64_t n_tok, int64_t n, const int32_t* cols, int64_t n_cols,
                 float threshold, uint8_t* fire) override {
    if (n_tok <= 0 || n_cols <= 0 || !ok("fire_mask", check::fire_mask(x, n, cols, n_cols, fire)))
      return;
    enqueue([=] {
      for (int64_t t = 0; t < n_tok; ++t) {
        const float* xr = x + t * n;
        uint8_t* f = fire + t * n_cols;
        for (int64_t j = 0; j < n_cols; ++j) f[j] = xr[cols ? int64_t{cols[j]} : j] >= threshold;
      }
    });
  }

  // Waits for the queue, then reports (and clears) the first operation that failed since the
  // last sync(): operations with bad arguments were never queued (see ok()).
  Status sync() override {
    wait();
    count_sync();
    if (recording_) record_error_ = "sync() while recording";
    std::lock_guard<std::mutex> lk(mu_);
    if (first_error_.empty()) return Status::Ok();
    Status st = Status::Error("cpu device: " + first_error_);
    first_error_.clear();
    return st;
  }

 private:
  void wait() {
    std::unique_lock<std::mutex> lk(mu_);
    done_cv_.wait(lk, [this] { return count_ == 0 && !busy_; });
  }

  // True when `error` (an argument check's result) is empty; else records "op: error" as the
  // first error for sync(), unless one is already waiting, and the caller skips the operation.
  // Called by the queueing thread and, for checks of device memory, by the worker.
  bool ok(const char* op, const std::string& error) {
    if (error.empty()) return true;
    std::lock_guard<std::mutex> lk(mu_);
    if (first_error_.empty()) first_error_ = std::string(op) + ": " + error;
    return false;
  }

  static double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
  }
  static uint64_t bytes_of(const TensorView& w) {
    return static_cast<uint64_t>(w.nb1) * static_cast<uint64_t>(w.ne1);
  }

  double measure_mem_gbps() {
    const int64_t n = int64_t{32} << 20;  // 128 MiB of floats: well past the LLC
    std::vector<float> a(static_cast<size_t>(n), 1.0f);
    double best = 0;
    for (int rep = 0; rep < 3; ++rep) {
      const auto t0 = Clock::now();
      volatile double s = membw_read(a.data(), n, pool_);
      (void)s;
      best = std::max(best, static_cast<double>(n) * 4 / seconds_since(t0) / 1e9);
    }
    return best;
  }

  // Holds a weight-streaming operation to bytes / emulate_gbps (the bandwidth model).
  void pace(uint64_t bytes, Clock::time_point t0) const {
    if (opt_.emulate_gbps <= 0) return;
    const double want = static_cast<double>(bytes) / (opt_.emulate_gbps * 1e9);
    const double left = want - seconds_since(t0);
    if (left > 0) std::this_thread::sleep_for(std::chrono::duration<double>(left));
  }
  void pace_link(uint64_t bytes) const {
    if (opt_.emulate_gbps <= 0 || opt_.link_gbps <= 0) return;
    std::this_thread::sleep_for(
        std::chrono::duration<double>(static_cast<double>(bytes) / (opt_.link_gbps * 1e9)));
  }

  static void glu_row(float* g, const float* u, int64_t n, GluKind kind) {
    if (kind == GluKind::kRelu) ops::reglu(g, u, n);
    else if (kind == GluKind::kDRelu) ops::dreglu(g, u, n);
    else if (kind == GluKind::kReluUngated) ffn_relu(g, n);
    else ops::swiglu(g, u, n);
  }
  static void ffn_relu(float* g, int64_t n) {
    for (int64_t i = 0; i < n; ++i) g[i] = g[i] > 0.0f ? g[i] : 0.0f;
  }
  // matmul / matmul_rows: the same checks and operation, in's mode deciding the arithmetic.
  void queue_matmul(const char* op, MatmulInput& in, const TensorView& w, const float* x,
                    int64_t n_tok, float* y) {
    if (!ok(op, check::weight("weight", w, -1)) || n_tok <= 0 || w.ne1 == 0 ||
        !ok(op, check::nulls({{"x", x}, {"y", y}})))
      return;
    enqueue([=, this, &in] {
      const auto t0 = Clock::now();
      ops::matmul(w, x, n_tok, y, pool_, in);
      pace(bytes_of(w), t0);
    });
  }
  // ffn_threshold / ffn_threshold_rows, likewise.
  void queue_ffn_threshold(const char* op, MatmulInput& in, const TensorView& gate,
                           const float* gate_bias, const TensorView& up, const TensorView& down_t,
                           const float* x, int64_t n_tok, float threshold, GluKind kind,
                           float* out) {
    if (!ok(op, check::ffn(gate, up, down_t, kind)) || n_tok <= 0 ||
        !ok(op, check::nulls({{"x", x}, {"out", out}})))
      return;
    enqueue([=, this, &in] {
      const auto t0 = Clock::now();
      ffn_threshold_now(in, gate, gate_bias, up, down_t, x, n_tok, threshold, kind, out);
      pace(bytes_of(gate) + bytes_of(up) + bytes_of(down_t), t0);
    });
  }
  static MatmulInput per_token_input() {
    MatmulInput in;
    in.set_mode(MatmulMode::kPerToken);
    return in;
  }
  static float act_of(float g, GluKind kind) {
    return kind != GluKind::kSilu ? (g > 0.0f ? g : 0.0f) : g / (1.0f + std::exp(-g));
  }

  // The host's attention for the same batch: blocked GEMMs for a prompt batch, ggml's
  // per-token kernels otherwise (llama_forward's choice).
  void attend(const float* q, const fp16_t* k, const fp16_t* v_t, int pos0, int64_t n_tok,
              const AttentionShape& shape, float scale, float* out) {
    const int64_t q_dim = int64_t{shape.n_head} * shape.head_dim;
    if (n_tok >= kGemmMinTokens && attention_batch_available()) {
      attention_batch(q, k, v_t, pos0, n_tok, shape, scale, out, pool_, att_blk_);
      return;
    }
    const int64_t kv_pad = attention_kv_pad(pos0 + n_tok);
    const AttentionKernels kernels = attention_kernels(n_tok, shape.head_dim, kv_pad);
    att_tmp_.resize(static_cast<size_t>(pool_.size()) * 2 * kv_pad);
    const int64_t n_items = n_tok * shape.n_head;
    pool_.run([&](int ith, int nth) {
      int64_t b, e;
      ThreadPool::split(n_items, ith, nth, &b, &e);
      float* tmp = att_tmp_.data() + static_cast<int64_t>(ith) * 2 * kv_pad;
      for (int64_t it = b; it < e; ++it) {
        const int64_t t = it / shape.n_head;
        const int h = static_cast<int>(it % shape.n_head);
        attention_one(q + t * q_dim, k, v_t, pos0 + t + 1, kv_pad, shape, scale, kernels, h,
                      h + 1, out + t * q_dim, tmp);
      }
    });
  }

  // Every held neuron's gate, the firing test, then up and down over the fired union (each
  // token's h zero where it did not fire): the host's sparse FFN on this subset.
  void ffn_threshold_now(MatmulInput& in, const TensorView& gate, const float* gate_bias,
                         const TensorView& up, const TensorView& down_t, const float* x,
                         int64_t n_tok, float threshold, GluKind kind, float* out) {
    const int64_t n_sub = gate.ne1;
    g_.resize(static_cast<size_t>(n_tok * n_sub));
    in.reset(x, n_tok, gate.ne0);
    ops::matmul(gate, in, g_.data(), pool_);
    if (gate_bias)
      for (int64_t t = 0; t < n_tok; ++t) ops::add_inplace(g_.data() + t * n_sub, gate_bias, n_sub);
    idx_.clear();
    fire_.assign(static_cast<size_t>(n_tok * n_sub), 0);
    mark_.assign(static_cast<size_t>(n_sub), 0);
    for (int64_t t = 0; t < n_tok; ++t)
      for (int64_t j = 0; j < n_sub; ++j) {
        const uint8_t f = std::fabs(act_of(g_[t * n_sub + j], kind)) > threshold;
        fire_[t * n_sub + j] = f;
        mark_[j] |= f;
      }
    for (int64_t j = 0; j < n_sub; ++j)
      if (mark_[j]) idx_.push_back(static_cast<int32_t>(j));
    const int64_t n_idx = static_cast<int64_t>(idx_.size());
    gs_.resize(static_cast<size_t>(n_tok * n_idx));
    for (int64_t t = 0; t < n_tok; ++t)
      for (int64_t j = 0; j < n_idx; ++j) gs_[t * n_idx + j] = g_[t * n_sub + idx_[j]];
    finish_rows(in, up, down_t, n_tok, n_idx, kind, [&](int64_t t, int64_t j) {
      return fire_[t * n_sub + idx_[j]] != 0;
    }, out);
  }

  void rows_now(const TensorView& gate, const float* gate_bias, const TensorView& up,
                const TensorView& down_t, const float* x, int64_t n_tok, const int32_t* idx,
                int64_t n_idx, const uint8_t* fire, GluKind kind, float* out) {
    in_.reset(x, n_tok, gate.ne0);
    // Only the listed rows some token fires are read (as the GPUs skip the others): a list
    // of every slot with a predictor's mask reads what the list of its fired slots reads.
    idx_.clear();
    sel_.clear();
    for (int64_t j = 0; j < n_idx; ++j) {
      uint8_t any = 0;
      for (int64_t t = 0; t < n_tok && !any; ++t) any = fire[t * n_idx + j];
      if (any) {
        idx_.push_back(idx[j]);
        sel_.push_back(static_cast<int32_t>(j));
      }
    }
    const int64_t n_sel = static_cast<int64_t>(idx_.size());
    gs_.resize(static_cast<size_t>(n_tok * n_sel));
    if (n_sel > 0) sparse_rows(gate, in_, idx_.data(), n_sel, gs_.data(), pool_);
    if (gate_bias)
      for (int64_t t = 0; t < n_tok; ++t)
        for (int64_t j = 0; j < n_sel; ++j) gs_[t * n_sel + j] += gate_bias[idx_[j]];
    finish_rows(in_, up, down_t, n_tok, n_sel, kind, [&](int64_t t, int64_t j) {
      return fire[t * n_idx + sel_[j]] != 0;
    }, out);
  }

  // gs_ holds gate over idx_: up over idx_, h = act(g) * u (zero where !fired(t, j)), down.
  template <class Fired>
  void finish_rows(MatmulInput& in, const TensorView& up, const TensorView& down_t, int64_t n_tok,
                   int64_t n_idx, GluKind kind, Fired fired, float* out) {
    if (n_idx == 0) {
      std::fill(out, out + n_tok * down_t.ne0, 0.0f);
      return;
    }
    const bool ungated = kind == GluKind::kReluUngated;
    us_.resize(static_cast<size_t>(ungated ? 0 : n_tok * n_idx));
    if (!ungated) sparse_rows(up, in, idx_.data(), n_idx, us_.data(), pool_);
    for (int64_t t = 0; t < n_tok; ++t) {
      float* h = gs_.data() + t * n_idx;
      // As the host's sparse FFN: SwiGLU position-independent over a set of varying length.
      if (kind == GluKind::kSilu) ops::swiglu_each(h, us_.data() + t * n_idx, n_idx);
      else glu_row(h, ungated ? nullptr : us_.data() + t * n_idx, n_idx, kind);
      for (int64_t j = 0; j < n_idx; ++j)
        if (!fired(t, j)) h[j] = 0.0f;
    }
    // As the host's sparse FFN: h rounded to an F16 / BF16 down_t's dot type (round_h).
    round_h_by_value(down_t.type, gs_.data(), n_tok * n_idx);
    sparse_down(down_t, idx_.data(), n_idx, gs_.data(), n_tok, out, pool_);
  }

  // A ring of QueuedOps; it doubles (under the lock) only when more operations are queued at
  // once than ever before, so steady-state decode allocates nothing here.
  template <class F>
  void enqueue(F f, bool counted = true) {
    if (counted) count_ops();
    if (recording_) {
      taking_.emplace_back();
      taking_.back().set(f);
    }
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (count_ == ring_.size()) grow();
      ring_[(head_ + count_) % ring_.size()].set(f);
      ++count_;
    }
    cv_.notify_one();
  }

  void grow() {
    std::vector<QueuedOp> bigger(std::max<size_t>(64, 2 * ring_.size()));
    for (size_t i = 0; i < count_; ++i) bigger[i] = ring_[(head_ + i) % ring_.size()];
    ring_ = std::move(bigger);
    head_ = 0;
  }

  void work() {
    std::unique_lock<std::mutex> lk(mu_);
    for (;;) {
      cv_.wait(lk, [this] { return stop_ || count_ > 0; });
      if (count_ == 0) return;  // stop_ with nothing left
      const QueuedOp op = ring_[head_];
      head_ = (head_ + 1) % ring_.size();
      --count_;
      busy_ = true;
      lk.unlock();
      op();
      lk.lock();
      busy_ = false;
      if (count_ == 0) done_cv_.notify_all();
    }
  }

  DeviceOptions opt_;
  DeviceProfile profile_;
  ThreadPool pool_;  // the device's own threads; the worker thread is its thread 0
  // Memory.
  mutable std::mutex mem_mu_;
  std::unordered_map<void*, uint64_t> blocks_;
  uint64_t charged_ = 0;
  // Scratch of the queued operations (touched only by the worker thread).
  MatmulInput in_;
  MatmulInput in_rows_ = per_token_input();  // matmul_rows, ffn_threshold_rows
  std::vector<float> cs_, att_blk_, att_tmp_, g_, gs_, us_;
  std::vector<fp16_t> v16_;
  std::vector<int32_t> idx_, sel_;  // rows_now: the rows read and their positions in the list
  std::vector<int32_t> order_;      // moe_topk's scratch
  std::vector<uint8_t> fire_, mark_;
  // Queue.
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::vector<QueuedOp> ring_;
  size_t head_ = 0, count_ = 0;
  bool busy_ = false, stop_ = false;
  std::string first_error_;  // the first failed operation since the last sync()
  // Recording (queueing thread only; a replay's worker reads a recording, which drop_record
  // frees only with the queue idle).
  bool recording_ = false;
  std::string record_error_;
  std::vector<QueuedOp> taking_;
  struct Recording {
    std::vector<QueuedOp> ops;
    RecordedBytes bytes;
  };
  std::map<int, std::unique_ptr<Recording>> recordings_;
  std::thread worker_;  // last: starts after everything above is built
};

}  // namespace

Result<std::unique_ptr<Device>> open_cpu_device(const DeviceOptions& opt) {
  if (opt.n_threads < 1 || opt.n_threads > 512)
    return Status::Error("cpu device: threads must be in [1, 512], got " +
                         std::to_string(opt.n_threads));
  if (!(opt.link_gbps >= 0) || !(opt.mem_gbps >= 0) || !(opt.emulate_gbps >= 0))
    return Status::Error("cpu device: bandwidths must be >= 0 GB/s");
  auto dev = std::make_unique<CpuDevice>(opt);
  HC_TRY(dev->init());
  return std::unique_ptr<Device>(std::move(dev));
}

}  // namespace hc::ops
