#include "model/segment_recorder.h"

#include <bit>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/log.h"

namespace hc {

namespace {

// The operations, as the first word of their fingerprints.
enum class Op : uint64_t {
  kCopyToDevice = 1, kCopyToHost, kRmsnorm, kMatmul, kMatmulRows, kRope, kKvStore, kAttention,
  kGlu, kAdd, kAddRows, kGetRows, kSetRowsScaled, kFfnThreshold, kFfnThresholdRows, kFfnRows,
  kArgmax, kFireMask, kMoeTopk, kMatmulId, kMoeCombine,
};

// An operation's fingerprint: its kind and every argument, a word each (a TensorView, a
// DevicePos and an AttentionShape several).
struct Words {
  static constexpr size_t kMax = 48;
  uint64_t w[kMax];
  size_t n = 0;
  void push(uint64_t v) {
    // A fingerprint cut short could match another operation's: the operations above have
    // at most 31 words, so this is a coding error.
    if (n == kMax) {
      HC_LOG_ERROR("segment recorder: an operation has more than %zu fingerprint words", kMax);
      std::abort();
    }
    w[n++] = v;
  }
};

template <class T>
  requires std::is_integral_v<T> || std::is_enum_v<T>
void add(Words& p, T v) {
  p.push(static_cast<uint64_t>(v));
}
void add(Words& p, const void* v) { p.push(reinterpret_cast<uintptr_t>(v)); }
void add(Words& p, float v) { p.push(std::bit_cast<uint32_t>(v)); }
void add(Words& p, const TensorView& t) {
  add(p, t.type);
  add(p, t.data);
  add(p, t.ne0);
  add(p, t.ne1);
  add(p, t.nb1);
  add(p, t.packed);
  add(p, t.block_sums);
}
// A device position is its address (read when the operation runs); a host one its value.
void add(Words& p, const ops::DevicePos& d) {
  if (d.dev) {
    add(p, 1);
    add(p, static_cast<const void*>(d.dev));
  } else {
    add(p, 0);
    add(p, d.at);
  }
}
void add(Words& p, const ops::AttentionShape& s) {
  add(p, s.n_head);
  add(p, s.n_head_kv);
  add(p, s.head_dim);
  add(p, s.k_stride);
  add(p, s.v_stride);
}

void add(Words& p, const ops::MoeGate& g) {
  add(p, g.kind);
  add(p, g.norm_w);
  add(p, g.w_scale);
}

template <class... A>
Words print(Op op, const A&... a) {
  Words p;
  add(p, op);
  (add(p, a), ...);
  return p;
}

}  // namespace

SegmentRecorder::~SegmentRecorder() {
  for (Segment& s : segs_)
    if (s.id >= 0) inner_.drop_record(s.id);
  for (const int id : retired_) inner_.drop_record(id);
}

void SegmentRecorder::begin_pass() {
  if (in_pass_) end_pass();
  in_pass_ = true;
  first_replay_ = true;
  mode_ = Mode::kIdle;
  k_ = 0;
  ++stats_.passes;
}

void SegmentRecorder::end_pass() {
  if (!in_pass_) return;
  end_segment();
  in_pass_ = false;
  // Replaced recordings are freed now: freeing one waits for the device (a replay may be
  // running it), which inside the pass would have been a sync of its own.
  for (const int id : retired_) inner_.drop_record(id);
  retired_.clear();
}

void SegmentRecorder::cut() {
  if (in_pass_) end_segment();
}

void SegmentRecorder::retire(int& id) {
  if (id >= 0) retired_.push_back(id);
  id = -1;
}

void SegmentRecorder::start_segment() {
  print_.clear();
  held_.clear();
  if (k_ >= kMaxSegments) {
    mode_ = Mode::kDirect;
    return;
  }
  if (k_ == segs_.size()) segs_.emplace_back();
  Segment& s = segs_[k_];
  if (s.direct) {
    mode_ = Mode::kDirect;
  } else if (s.id >= 0) {
    mode_ = Mode::kHold;
  } else {
    inner_.begin_record();
    mode_ = Mode::kRecord;
  }
}

void SegmentRecorder::run_held() const {
  for (const InlineOp& h : held_) h();
}

template <class F>
void SegmentRecorder::put(const uint64_t* w, size_t n, const F& run) {
  const auto hold = [&] { held_.emplace_back().set(run); };
  if (!in_pass_) {
    run();
    return;
  }
  if (mode_ == Mode::kIdle) start_segment();
  if (mode_ == Mode::kDirect) {
    run();
    return;
  }
  const size_t at = print_.size();
  print_.insert(print_.end(), w, w + n);
  if (mode_ == Mode::kRecord) {
    hold();  // queued again should the device's recording run nothing
    run();
    return;
  }
  // Holding: still the recording's operations?
  Segment& s = segs_[k_];
  if (print_.size() <= s.print.size() &&
      std::memcmp(print_.data() + at, s.print.data() + at, n * sizeof(uint64_t)) == 0) {
    hold();
    return;
  }
  // Not: what was held and the rest of the segment are queued anew, recorded again unless the
  // segment has differed too often.
  ++stats_.misses;
  hold();
  if (++s.misses >= kMaxMisses) {
    retire(s.id);
    s.direct = true;
    s.print.clear();
    mode_ = Mode::kDirect;
    run_held();
    held_.clear();
    return;
  }
  inner_.begin_record();
  mode_ = Mode::kRecord;
  run_held();
}

void SegmentRecorder::finish_record(Segment& s) {
  auto id = inner_.end_record();
  if (id.ok()) {
    retire(s.id);
    s.id = *id;
    s.print = std::move(print_);
    ++stats_.recorded;
    return;
  }
  HC_LOG_DEBUG("segment %zu not recorded: %s", k_, id.status().message().c_str());
  if (!inner_.failed_recording_ran())
    run_held();
  retire(s.id);
  s.print.clear();
  ++stats_.direct;
  if (++s.misses >= kMaxMisses) s.direct = true;
}

void SegmentRecorder::end_segment() {
  if (mode_ == Mode::kIdle) return;  // nothing queued: no segment
  switch (mode_) {
    case Mode::kHold: {
      Segment& s = segs_[k_];
      if (print_.size() == s.print.size()) {  // every operation matched (put compared them)
        inner_.replay(s.id, first_replay_);
        first_replay_ = false;
        s.misses = 0;
        ++stats_.replayed;
      } else {  // the recording has more: this segment ended early
        ++stats_.misses;
        if (++s.misses >= kMaxMisses) {
          retire(s.id);
          s.direct = true;
          s.print.clear();
          run_held();
          ++stats_.direct;
        } else {
          inner_.begin_record();
          run_held();
          finish_record(s);
        }
      }
      break;
    }
    case Mode::kRecord:
      finish_record(segs_[k_]);
      break;
    case Mode::kDirect:
      ++stats_.direct;
      break;
    case Mode::kIdle:
      break;
  }
  ++k_;
  mode_ = Mode::kIdle;
  print_.clear();
  held_.clear();
}

// ---- what ends a segment, then goes straight to the device ---------------------------------

Result<void*> SegmentRecorder::alloc(uint64_t bytes, const char* what) {
  cut();
  return inner_.alloc(bytes, what);
}
void SegmentRecorder::free(void* p) {
  cut();
  inner_.free(p);
}
Result<void*> SegmentRecorder::alloc_host(uint64_t bytes) {
  cut();
  return inner_.alloc_host(bytes);
}
void SegmentRecorder::free_host(void* p) {
  cut();
  inner_.free_host(p);
}
Status SegmentRecorder::upload(void* dst, const void* host_src, uint64_t bytes) {
  cut();
  return inner_.upload(dst, host_src, bytes);
}
Status SegmentRecorder::download(void* host_dst, const void* src, uint64_t bytes) {
  cut();
  return inner_.download(host_dst, src, bytes);
}
Result<TensorView> SegmentRecorder::upload_weight(const TensorView& host, const int32_t* rows,
                                                  int64_t row0, int64_t n_rows,
                                                  const char* what) {
  cut();
  return inner_.upload_weight(host, rows, row0, n_rows, what);
}
void SegmentRecorder::free_weight(const TensorView& w) {
  cut();
  inner_.free_weight(w);
}
Status SegmentRecorder::reserve_scratch(const ops::ScratchNeeds& n) {
  cut();
  return inner_.reserve_scratch(n);
}
void SegmentRecorder::update_rows(const TensorView& w, const TensorView& host,
                                  const int32_t* src_rows, const int32_t* slots, int64_t n) {
  cut();
  inner_.update_rows(w, host, src_rows, slots, n);  // reads src_rows and slots now
}
Status SegmentRecorder::sync() {
  cut();
  return inner_.sync();
}

// ---- queued operations ----------------------------------------------------------------------

#define HC_PUT(OP, CALL, ...)                                  \
  do {                                                         \
    const Words p_ = print(OP, __VA_ARGS__);                   \
    ops::Device& d_ = inner_;                                  \
    put(p_.w, p_.n, [=, &d_] { d_.CALL; });                    \
  } while (0)

void SegmentRecorder::copy_to_device(void* dst, const void* host_src, uint64_t bytes) {
  HC_PUT(Op::kCopyToDevice, copy_to_device(dst, host_src, bytes), dst, host_src, bytes);
}
void SegmentRecorder::copy_to_host(void* host_dst, const void* src, uint64_t bytes) {
  HC_PUT(Op::kCopyToHost, copy_to_host(host_dst, src, bytes), host_dst, src, bytes);
}
void SegmentRecorder::rmsnorm(float* out, const float* x, const float* w, int64_t n_tok,
                              int64_t n, float eps) {
  HC_PUT(Op::kRmsnorm, rmsnorm(out, x, w, n_tok, n, eps), out, x, w, n_tok, n, eps);
}
void SegmentRecorder::matmul(const TensorView& w, const float* x, int64_t n_tok, float* y) {
  HC_PUT(Op::kMatmul, matmul(w, x, n_tok, y), w, x, n_tok, y);
}
void SegmentRecorder::matmul_rows(const TensorView& w, const float* x, int64_t n_tok, float* y) {
  HC_PUT(Op::kMatmulRows, matmul_rows(w, x, n_tok, y), w, x, n_tok, y);
}
void SegmentRecorder::rope(float* x, int64_t n_tok, int n_head, int head_dim, int n_rot,
                           ops::DevicePos pos0, float theta_scale, float freq_scale,
                           const float* freq_factors, bool neox) {
  HC_PUT(Op::kRope,
         rope(x, n_tok, n_head, head_dim, n_rot, pos0, theta_scale, freq_scale, freq_factors,
              neox),
         x, n_tok, n_head, head_dim, n_rot, pos0, theta_scale, freq_scale, freq_factors, neox);
}
void SegmentRecorder::kv_store(const float* k, const float* v, int64_t n_tok, ops::DevicePos pos0,
                               int64_t kv_dim, int n_ctx, fp16_t* k_cache, fp16_t* v_cache_t) {
  HC_PUT(Op::kKvStore, kv_store(k, v, n_tok, pos0, kv_dim, n_ctx, k_cache, v_cache_t), k, v,
         n_tok, pos0, kv_dim, n_ctx, k_cache, v_cache_t);
}
void SegmentRecorder::attention(const float* q, const fp16_t* k_cache, const fp16_t* v_cache_t,
                                ops::DevicePos pos0, int64_t n_tok,
                                const ops::AttentionShape& shape, float scale, float* out) {
  HC_PUT(Op::kAttention, attention(q, k_cache, v_cache_t, pos0, n_tok, shape, scale, out), q,
         k_cache, v_cache_t, pos0, n_tok, shape, scale, out);
}
void SegmentRecorder::glu(float* gate, const float* up, int64_t n_tok, int64_t n,
                          ops::GluKind kind) {
  HC_PUT(Op::kGlu, glu(gate, up, n_tok, n, kind), gate, up, n_tok, n, kind);
}
void SegmentRecorder::add(float* y, const float* x, int64_t n) {
  HC_PUT(Op::kAdd, add(y, x, n), y, x, n);
}
void SegmentRecorder::add_rows(float* y, const float* b, int64_t n_tok, int64_t n) {
  HC_PUT(Op::kAddRows, add_rows(y, b, n_tok, n), y, b, n_tok, n);
}
void SegmentRecorder::get_rows(float* dst, const float* src, const int32_t* idx, int64_t n,
                               int64_t width) {
  HC_PUT(Op::kGetRows, get_rows(dst, src, idx, n, width), dst, src, idx, n, width);
}
void SegmentRecorder::set_rows_scaled(float* dst, const float* src, const int32_t* idx,
                                      const float* scale, int64_t n, int64_t width) {
  HC_PUT(Op::kSetRowsScaled, set_rows_scaled(dst, src, idx, scale, n, width), dst, src, idx,
         scale, n, width);
}
void SegmentRecorder::ffn_threshold(const TensorView& gate, const float* gate_bias,
                                    const TensorView& up, const TensorView& down_t,
                                    const float* x, int64_t n_tok, float threshold,
                                    ops::GluKind kind, float* out) {
  HC_PUT(Op::kFfnThreshold,
         ffn_threshold(gate, gate_bias, up, down_t, x, n_tok, threshold, kind, out), gate,
         gate_bias, up, down_t, x, n_tok, threshold, kind, out);
}
void SegmentRecorder::ffn_threshold_rows(const TensorView& gate, const float* gate_bias,
                                         const TensorView& up, const TensorView& down_t,
                                         const float* x, int64_t n_tok, float threshold,
                                         ops::GluKind kind, float* out) {
  HC_PUT(Op::kFfnThresholdRows,
         ffn_threshold_rows(gate, gate_bias, up, down_t, x, n_tok, threshold, kind, out), gate,
         gate_bias, up, down_t, x, n_tok, threshold, kind, out);
}
void SegmentRecorder::ffn_rows(const TensorView& gate, const float* gate_bias,
                               const TensorView& up, const TensorView& down_t, const float* x,
                               int64_t n_tok, const int32_t* idx, int64_t n_idx,
                               const uint8_t* fire, ops::GluKind kind, float* out) {
  HC_PUT(Op::kFfnRows,
         ffn_rows(gate, gate_bias, up, down_t, x, n_tok, idx, n_idx, fire, kind, out), gate,
         gate_bias, up, down_t, x, n_tok, idx, n_idx, fire, kind, out);
}
void SegmentRecorder::argmax(const float* x, int64_t n_rows, int64_t n, int32_t* out) {
  HC_PUT(Op::kArgmax, argmax(x, n_rows, n, out), x, n_rows, n, out);
}
void SegmentRecorder::fire_mask(const float* x, int64_t n_tok, int64_t n, const int32_t* cols,
                                int64_t n_cols, float threshold, uint8_t* fire) {
  HC_PUT(Op::kFireMask, fire_mask(x, n_tok, n, cols, n_cols, threshold, fire), x, n_tok, n,
         cols, n_cols, threshold, fire);
}

void SegmentRecorder::moe_topk(float* x, int64_t n_tok, int n_expert, int k,
                               const ops::MoeGate& gate, int32_t* ids, float* w) {
  HC_PUT(Op::kMoeTopk, moe_topk(x, n_tok, n_expert, k, gate, ids, w), x, n_tok, n_expert, k,
         gate, ids, w);
}
void SegmentRecorder::matmul_id(const TensorView& w, int64_t rows, const int32_t* ids,
                                int64_t n_ids, const float* x, int64_t x_stride, float* y) {
  HC_PUT(Op::kMatmulId, matmul_id(w, rows, ids, n_ids, x, x_stride, y), w, rows, ids, n_ids, x,
         x_stride, y);
}
void SegmentRecorder::moe_combine(const float* y, const float* w, int64_t n_tok, int k,
                                  int64_t n, float* out) {
  HC_PUT(Op::kMoeCombine, moe_combine(y, w, n_tok, k, n, out), y, w, n_tok, k, n, out);
}

#undef HC_PUT

}  // namespace hc
