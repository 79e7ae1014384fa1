#include "model/llama_forward.h"

#include <algorithm>

#include <cmath>
#include <string>

#include "model/device_step.h"
#include "model/hybrid_forward.h"
#include "ops/cpu/attention.h"
#include "ops/cpu/gemm.h"
#include "quant/quant.h"
#include "ops/cpu/ops.h"

namespace hc {

namespace {

void ensure(std::vector<float>& v, size_t n) {
  if (v.size() < n) v.resize(n);
}

Status check_token(const LlamaHParams& hp, int32_t t) {
  if (t < 0 || t >= hp.n_vocab)
    return Status::Error("token id " + std::to_string(t) + " out of range [0, " +
                         std::to_string(hp.n_vocab) + ")");
  return Status::Ok();
}

// Learned position embeddings (opt) end at n_ctx_train rows: a position past them is an error,
// not a read past the table.
Status check_learned_positions(const LlamaHParams& hp, int64_t end) {
  const int64_t n_pos = int64_t{hp.n_ctx_train} - kOptPosOffset;
  if (!hp.learned_pos || end <= n_pos) return Status::Ok();
  return Status::Error("context overflow: position " + std::to_string(end - 1) + " is past the " +
                       std::to_string(n_pos) + " learned positions of this " + hp.arch +
                       " model (" + std::to_string(hp.n_ctx_train) + " rows from row " +
                       std::to_string(kOptPosOffset) + "; use a context of at most " +
                       std::to_string(n_pos) + ")");
}

Status validate(const LlamaModel& model, const KvCache& cache, std::span<const int32_t> tokens,
                int pos0) {
  const LlamaHParams& hp = model.hparams();
  if (tokens.empty()) return Status::Error("no tokens to evaluate");
  if (pos0 < 0 || pos0 + static_cast<int64_t>(tokens.size()) > cache.n_ctx)
    return Status::Error("context overflow: positions " + std::to_string(pos0) + ".." +
                         std::to_string(pos0 + tokens.size() - 1) + " do not fit a context of " +
                         std::to_string(cache.n_ctx) + " tokens");
  for (int32_t t : tokens) HC_TRY(check_token(hp, t));
  HC_TRY(check_learned_positions(hp, pos0 + static_cast<int64_t>(tokens.size())));
  HC_CHECK(cache.n_layer == hp.n_layer && cache.kv_dim == int64_t{hp.n_head_kv} * hp.head_dim);
  return Status::Ok();
}

// The multi-sequence API takes caches from several server slots: a wrong one is an error there,
// not a programming bug.
Status validate_steps(const LlamaModel& model, std::span<const SeqStep> steps,
                      const std::vector<float>* logits) {
  const LlamaHParams& hp = model.hparams();
  if (steps.empty()) return Status::Error("no decode steps to evaluate");
  if (!logits) return Status::Error("no logits buffer given");
  const int64_t kv_dim = int64_t{hp.n_head_kv} * hp.head_dim;
  for (size_t i = 0; i < steps.size(); ++i) {
    // Built only for an error: this runs for every decode step of every token.
    const auto step = [i] { return "decode step " + std::to_string(i) + ": "; };
    const KvCache* c = steps[i].cache;
    if (!c) return Status::Error(step() + "no KV cache");
    const uint64_t cells = static_cast<uint64_t>(c->n_layer) * static_cast<uint64_t>(c->n_ctx) *
                           static_cast<uint64_t>(c->kv_dim);
    if (c->n_layer != hp.n_layer || c->kv_dim != kv_dim || c->n_ctx <= 0 ||
        c->k.size() != cells || c->v.size() != cells)
      return Status::Error(step() + "KV cache of " + std::to_string(c->n_layer) + " layers x " +
                           std::to_string(c->n_ctx) + " positions x kv_dim " +
                           std::to_string(c->kv_dim) + " (" + std::to_string(c->k.size()) +
                           " K cells) does not fit the model's " + std::to_string(hp.n_layer) +
                           " layers x kv_dim " + std::to_string(kv_dim));
    if (steps[i].pos < 0 || steps[i].pos >= c->n_ctx)
      return Status::Error(step() + "context overflow: position " + std::to_string(steps[i].pos) +
                           " does not fit a context of " + std::to_string(c->n_ctx) + " tokens");
    HC_TRY(check_token(hp, steps[i].token));
    HC_TRY(check_learned_positions(hp, int64_t{steps[i].pos} + 1));
    for (size_t j = 0; j < i; ++j)  // a handful of slots: quadratic, allocation-free
      if (steps[j].cache == c)
        return Status::Error("decode steps " + std::to_string(j) + " and " + std::to_string(i) +
                             " share one KV cache (one step per sequence)");
  }
  return Status::Ok();
}

// With a second device: the scratch's session carries the batch (this model's placement, room
// for a micro-batch of steps), and every step brings its own session of that placement with
// room for its cache's positions, none shared. Without one, no step may bring a session.
Status validate_step_devices(const LlamaModel& model, std::span<const SeqStep> steps,
                             const ForwardScratch& s) {
  const DeviceSession* buf = s.device;
  if (buf && s.observer)
    return Status::Error("activation observers (profile) run on the host only: no -ngl");
  if (buf && (&buf->dm().model() != &model ||
              buf->max_tokens() < std::min<int64_t>(kForwardUbatch,
                                                    static_cast<int64_t>(steps.size()))))
    return Status::Error("device session does not match this model / batch (" +
                         std::to_string(buf->max_tokens()) + " rows, " +
                         std::to_string(std::min<size_t>(kForwardUbatch, steps.size())) +
                         " needed)");
  for (size_t i = 0; i < steps.size(); ++i) {
    const DeviceSession* d = steps[i].device;
    const auto step = [i] { return "decode step " + std::to_string(i) + ": "; };
    if (!buf) {
      if (d) return Status::Error(step() + "a device session, but no device in this pass");
      continue;
    }
    if (!d) return Status::Error(step() + "no device session (its device layers' KV cache)");
    if (&d->dm() != &buf->dm())
      return Status::Error(step() + "its device session belongs to another device placement");
    if (d->n_ctx() < steps[i].cache->n_ctx)
      return Status::Error(step() + "device session of " + std::to_string(d->n_ctx()) +
                           " positions for a cache of " + std::to_string(steps[i].cache->n_ctx));
    for (size_t j = 0; j < i; ++j)
      if (steps[j].device == d)
        return Status::Error("decode steps " + std::to_string(j) + " and " + std::to_string(i) +
                             " share one device session (one step per sequence)");
  }
  return Status::Ok();
}

// The token rows of one forward pass and where each meets the KV cache: one sequence (row t is
// tokens[t] at position pos0 + t of `cache`), independent decode steps (row t is steps[t], with
// its own cache and position), or both: the sequence's rows [0, n_seq) first, then the steps
// (the server's mixed pass). The layer code below serves all three; the sequence's rows get the
// arithmetic of that micro-batch alone, every step's row that of its one-token call.
struct Rows {
  int64_t n_tok = 0;
  int64_t n_seq = 0;         // rows [0, n_seq) are the sequence's
  KvCache* cache = nullptr;  // the sequence
  std::span<const int32_t> tokens;
  int pos0 = 0;
  std::span<const SeqStep> steps;  // rows [n_seq, n_tok)

  static Rows sequence(KvCache& cache, std::span<const int32_t> tokens, int pos0) {
    const auto n = static_cast<int64_t>(tokens.size());
    return {n, n, &cache, tokens, pos0, {}};
  }
  static Rows decode_steps(std::span<const SeqStep> steps) {
    return {static_cast<int64_t>(steps.size()), 0, nullptr, {}, 0, steps};
  }
  static Rows mixed(KvCache& cache, std::span<const int32_t> tokens, int pos0,
                    std::span<const SeqStep> steps) {
    const auto n = static_cast<int64_t>(tokens.size());
    return {n + static_cast<int64_t>(steps.size()), n, &cache, tokens, pos0, steps};
  }
  bool has_steps() const { return !steps.empty(); }
  bool is_step(int64_t t) const { return t >= n_seq; }
  KvCache& cache_of(int64_t t) const { return is_step(t) ? *steps[t - n_seq].cache : *cache; }
  int pos_of(int64_t t) const {
    return is_step(t) ? steps[t - n_seq].pos : pos0 + static_cast<int>(t);
  }
  int32_t token_of(int64_t t) const { return is_step(t) ? steps[t - n_seq].token : tokens[t]; }
  // llama.cpp attends over a cache view padded past the batch's last position and picks its
  // f16 kernels by the batch size; both change the rounding, so mirror them. An independent
  // step sees exactly what its own one-token decode would.
  int64_t kv_pad(int64_t t) const {
    return ops::attention_kv_pad(is_step(t) ? pos_of(t) + 1 : pos0 + n_seq);
  }
  ops::AttentionKernels kernels(int64_t t, int head_dim) const {
    return ops::attention_kernels(is_step(t) ? 1 : n_seq, head_dim, kv_pad(t));
  }
  int64_t max_kv_pad() const {
    int64_t m = 0;
    for (int64_t t = 0; t < n_tok; ++t) m = std::max(m, kv_pad(t));
    return m;
  }
};

}  // namespace

void norm_rows(const LlamaHParams& hp, const float* x, float* xb, const TensorView& w,
               const TensorView& b, int64_t n_tok) {
  const int64_t n = hp.n_embd;
  const auto* wf = static_cast<const float*>(w.data);
  for (int64_t t = 0; t < n_tok; ++t) {
    if (hp.norm == NormKind::kLayer)
      ops::layernorm(xb + t * n, x + t * n, wf, static_cast<const float*>(b.data), n, hp.rms_eps);
    else
      ops::rmsnorm(xb + t * n, x + t * n, wf, n, hp.rms_eps);
  }
}

void add_bias_rows(float* y, const TensorView& b, int64_t n_tok) {
  if (b.empty()) return;
  const auto* bf = static_cast<const float*>(b.data);
  const int64_t n = b.ne0;
  for (int64_t t = 0; t < n_tok; ++t) ops::add_inplace(y + t * n, bf, n);
}

void add_ffn_out(const LlamaModel& model, int il, ForwardScratch& s, int64_t n_tok) {
  const LlamaHParams& hp = model.hparams();
  const int64_t n = n_tok * hp.n_embd;
  // opt: the down projection's bias, once, on the whole FFN output (both halves of a split).
  add_bias_rows(s.proj.data(), model.weights().layers[static_cast<size_t>(il)].ffn_down_b, n_tok);
  // llama.cpp's falcon: (ffn + attn) + x.
  if (hp.parallel_block) ops::add_inplace(s.proj.data(), s.attn_out.data(), n);
  ops::add_inplace(s.x.data(), s.proj.data(), n);
}

namespace {

// f(t0, t1, ith) over the token rows [0, n_tok), split across the pool (ith: the thread) from
// kParallelRows rows on:
// the per-row steps between the matmuls (norms, RoPE and the KV store, the gated activation),
// which left the other thread waiting (ThreadPool::worker was 9% of a 32-slot server profile).
// Each row's arithmetic is the same however the rows are split.
constexpr int64_t kParallelRows = 8;
template <class F>
void for_rows(ThreadPool& pool, int64_t n_tok, F&& f) {
  if (n_tok < kParallelRows || pool.size() == 1) {
    f(int64_t{0}, n_tok, 0);
    return;
  }
  pool.run([&](int ith, int nth) {
    int64_t b, e;
    ThreadPool::split(n_tok, ith, nth, &b, &e);
    if (b < e) f(b, e, ith);
  });
}

void norm_rows_par(const LlamaHParams& hp, float* x, float* xb, const TensorView& w,
                   const TensorView& b, int64_t n_tok, ThreadPool& pool) {
  const int64_t n = hp.n_embd;
  for_rows(pool, n_tok, [&](int64_t t0, int64_t t1, int) {
    norm_rows(hp, x + t0 * n, xb + t0 * n, w, b, t1 - t0);
  });
}

// RoPE on rows [t0, t1)'s q and k, then their K/V into their caches at their positions; v16:
// kv_dim fp16 of scratch for this caller.
void rope_and_store(const LlamaHParams& hp, int il, const Rows& rows, ForwardScratch& s,
                    int64_t t0, int64_t t1, fp16_t* v16) {
  const int64_t q_dim = int64_t{hp.n_head} * hp.head_dim;
  const int64_t kv_dim = int64_t{hp.n_head_kv} * hp.head_dim;
  for (int64_t t = t0; t < t1; ++t) {
    const float* cs = s.rope.data() + t * hp.n_rot;
    const auto rope = hp.rope_neox ? ops::rope_apply_neox : ops::rope_apply;
    for (int h = 0; h < hp.n_head; ++h) rope(s.q + t * q_dim + h * hp.head_dim, hp.n_rot, cs);
    for (int h = 0; h < hp.n_head_kv; ++h) rope(s.k + t * kv_dim + h * hp.head_dim, hp.n_rot, cs);
    KvCache& cache = rows.cache_of(t);
    const int pos = rows.pos_of(t);
    // fp32 -> fp16 with round-to-nearest-even (the SIMD row converter gives the same bits).
    quant::quantize_row(GgmlType::F16, s.k + t * kv_dim, cache.k_at(il, pos), kv_dim);
    fp16_t* vh = v16;
    quant::quantize_row(GgmlType::F16, s.v + t * kv_dim, vh, kv_dim);
    for (int64_t d = 0; d < kv_dim; ++d) cache.v_row(il, d)[pos] = vh[d];
  }
}

void attention_block(const LlamaModel& model, const LlamaLayerWeights& L, int il,
                     const Rows& rows, ForwardScratch& s, ThreadPool& pool) {
  const LlamaHParams& hp = model.hparams();
  const int64_t n_tok = rows.n_tok;
  const int64_t q_dim = int64_t{hp.n_head} * hp.head_dim;
  const int64_t kv_dim = int64_t{hp.n_head_kv} * hp.head_dim;
  norm_rows_par(hp, s.x.data(), s.xb.data(), L.attn_norm, L.attn_norm_b, n_tok, pool);
  s.in.reset(s.xb.data(), n_tok, hp.n_embd);  // Q, K and V read the same quantised input
  ops::matmul(L.wq, s.in, s.q, pool);
  ops::matmul(L.wk, s.in, s.k, pool);
  ops::matmul(L.wv, s.in, s.v, pool);
  add_bias_rows(s.q, L.bq, n_tok);  // opt's biases (nothing where empty)
  add_bias_rows(s.k, L.bk, n_tok);
  add_bias_rows(s.v, L.bv, n_tok);
  if (hp.qk_norm) {  // qwen3: each head of Q and K RMS-normed before RoPE
    const auto* qn = static_cast<const float*>(L.attn_q_norm.data);
    const auto* kn = static_cast<const float*>(L.attn_k_norm.data);
    for (int64_t h = 0; h < n_tok * hp.n_head; ++h)
      ops::rmsnorm(s.q + h * hp.head_dim, s.q + h * hp.head_dim, qn, hp.head_dim, hp.rms_eps);
    for (int64_t h = 0; h < n_tok * hp.n_head_kv; ++h)
      ops::rmsnorm(s.k + h * hp.head_dim, s.k + h * hp.head_dim, kn, hp.head_dim, hp.rms_eps);
  }
  // Rows of one sequence write different positions of its cache: no two threads write one
  // element (the transposed V rows are shared cache lines, written element by element).
  for_rows(pool, n_tok, [&](int64_t t0, int64_t t1, int ith) {
    rope_and_store(hp, il, rows, s, t0, t1, s.v16.data() + ith * kv_dim);
  });
  const float scale = 1.0f / std::sqrt(static_cast<float>(hp.head_dim));
  int64_t t_one = 0;  // rows from here on attend one (token, head) at a time
  if (rows.n_seq >= ops::kGemmMinTokens && ops::attention_batch_available()) {
    // Prompt batches: blocked score / value GEMMs instead of one dot per (token, head, key).
    KvCache& cache = *rows.cache;
    const ops::AttentionShape shape{hp.n_head, hp.n_head_kv, hp.head_dim, kv_dim, cache.n_ctx};
    ops::attention_batch(s.q, cache.k_at(il, 0), cache.v_row(il, 0), rows.pos0, rows.n_seq,
                         shape, scale, s.att, pool, s.att_blk);
    t_one = rows.n_seq;
  }
  if (t_one < n_tok) {
    // Work items are (token, head) pairs so that single-token decode still uses every thread.
    const int64_t n_items = (n_tok - t_one) * hp.n_head;
    const int64_t tmp_stride = 2 * rows.max_kv_pad();
    pool.run([&](int ith, int nth) {
      int64_t b, e;
      ThreadPool::split(n_items, ith, nth, &b, &e);
      float* tmp = s.att_tmp.data() + static_cast<int64_t>(ith) * tmp_stride;
      for (int64_t it = b; it < e; ++it) {
        const int64_t t = t_one + it / hp.n_head;
        const int h = static_cast<int>(it % hp.n_head);
        if ((it == b || h == 0) && t + 1 < n_tok) {
          // A decode batch's caches are cold (the weights have streamed through the CPU caches
          // since each sequence's previous step): the next token's KV rows are fetched while
          // this one's heads compute.
          const KvCache& next = rows.cache_of(t + 1);
          const ops::AttentionShape sh{hp.n_head, hp.n_head_kv, hp.head_dim, kv_dim, next.n_ctx};
          ops::attention_prefetch(next.k_at(il, 0), next.v_row(il, 0), rows.pos_of(t + 1) + 1, sh,
                                  0, hp.n_head_kv);
        }
        KvCache& cache = rows.cache_of(t);
        const ops::AttentionShape shape{hp.n_head, hp.n_head_kv, hp.head_dim, kv_dim, cache.n_ctx};
        ops::attention_one(s.q + t * q_dim, cache.k_at(il, 0), cache.v_row(il, 0),
                           rows.pos_of(t) + 1, rows.kv_pad(t), shape, scale,
                           rows.kernels(t, hp.head_dim), h, h + 1, s.att + t * q_dim, tmp);
      }
    });
  }
  if (hp.parallel_block) {  // added with the FFN's output (add_ffn_out)
    ops::matmul(L.wo, s.att, n_tok, s.attn_out.data(), pool, s.in);
    return;
  }
  ops::matmul(L.wo, s.att, n_tok, s.proj.data(), pool, s.in);
  add_bias_rows(s.proj.data(), L.bo, n_tok);
  ops::add_inplace(s.x.data(), s.proj.data(), n_tok * hp.n_embd);
}

void ffn_block(const LlamaModel& model, int il, ForwardScratch& s, ThreadPool& pool,
               int64_t n_tok) {
  const LlamaLayerWeights& L = model.weights().layers[static_cast<size_t>(il)];
  const LlamaHParams& hp = model.hparams();
  norm_rows_par(hp, s.x.data(), s.xb.data(), L.ffn_norm, L.ffn_norm_b, n_tok, pool);
  s.in.reset(s.xb.data(), n_tok, hp.n_embd);  // gate and up read the same quantised input
  if (s.observer) s.observer->on_ffn_input(il, s.x.data(), n_tok, hp.n_embd);
  if (hp.is_moe()) {
    moe_ffn_layer(model, il, s.in, s.xb.data(), s.proj.data(), s.moe, pool, s.observer);
    add_ffn_out(model, il, s, n_tok);
    return;
  }
  if (s.sparse) {
    sparse_ffn_layer(model, *s.sparse, il, s.in, s.x.data(), s.gate, s.up, s.proj.data(),
                     s.sparse_scratch, pool, s.observer);
    add_ffn_out(model, il, s, n_tok);
    return;
  }
  ops::matmul(L.ffn_gate, s.in, s.gate, pool);
  add_bias_rows(s.gate, L.ffn_gate_b, n_tok);  // opt: relu(up . x + b)
  if (s.observer) {
    std::vector<float>& act = s.sparse_scratch.act;
    if (act.size() < static_cast<size_t>(n_tok * hp.n_ff)) act.resize(n_tok * hp.n_ff);
    ffn_activation(hp.ffn_act, s.gate, act.data(), n_tok * hp.n_ff);
    s.observer->on_ffn_activation(il, act.data(), n_tok, hp.n_ff);
  }
  if (hp.ffn_gated) {
    ops::matmul(L.ffn_up, s.in, s.up, pool);
    for_rows(pool, n_tok, [&](int64_t t0, int64_t t1, int) {
      gated_activation(hp.ffn_act, s.gate + t0 * hp.n_ff, s.up + t0 * hp.n_ff, t1 - t0, hp.n_ff);
    });
  } else {
    ffn_activation(hp.ffn_act, s.gate, s.gate, n_tok * hp.n_ff);  // h = act(up . x)
  }
  // ffn_down_dense reuses s.in as its scratch, so it inherits s.in's matmul mode.
  ffn_down_dense(L, s.gate, n_tok, s.proj.data(), pool, s.in, s.sparse_scratch.iota);
  add_ffn_out(model, il, s, n_tok);
}

// A one-token pass of one sequence with part of it on a device and not wholly there (that is
// the recorded step, model/device_step.h): its device operations recorded and replayed segment
// by segment (model/segment_recorder.h) while it lasts. Its position then goes to the device
// once (DeviceSession::pos), and the attention reads it there, so that the pass's operations
// are the same every token.
class SegmentedPass {
 public:
  SegmentedPass(DeviceSession* ds, bool one_token)
      : ds_(one_token && ds && ds->segments ? ds : nullptr) {
    if (ds_) ds_->segments->begin_pass();
  }
  ~SegmentedPass() {
    if (ds_) ds_->segments->end_pass();
  }
  SegmentedPass(const SegmentedPass&) = delete;
  SegmentedPass& operator=(const SegmentedPass&) = delete;
  // The position of the pass's row for a device operation.
  ops::DevicePos position(int pos) {
    if (!ds_ || !ds_->pos || !ds_->h_pos) return pos;
    if (!copied_) {
      ds_->h_pos[0] = pos;
      ds_->device().copy_to_device(ds_->pos, ds_->h_pos, sizeof(int32_t));
      copied_ = true;
    }
    return ops::DevicePos(pos, ds_->pos);
  }

 private:
  DeviceSession* ds_;
  bool copied_ = false;
};

// Layer il on the host and / or the device, as the session's DeviceModel places it.
Status run_layer(const LlamaModel& model, int il, const Rows& rows, ForwardScratch& s,
                 ThreadPool& pool, DeviceResidual& xr, SegmentedPass& pass) {
  const LlamaHParams& hp = model.hparams();
  const int64_t n_tok = rows.n_tok, n = n_tok * hp.n_embd;
  const DeviceLayer* dl = s.device ? &s.device->dm().layer(il) : nullptr;
  // Decode steps of independent sequences (no mixed passes with a device): per-row operations.
  const bool per_row = rows.has_steps();
  if (dl && dl->attn) {
    xr.to_device(s.x.data(), n);
    device_attention(model, *s.device, il, n_tok,
                     per_row ? ops::DevicePos(rows.pos0) : pass.position(rows.pos0), rows.steps);
  } else {
    HC_TRY(xr.to_host(s.x.data(), n));
    attention_block(model, model.weights().layers[il], il, rows, s, pool);
  }
  if (dl && dl->moe() && routes_on_device(*dl, s, n_tok, per_row, xr.on_device)) {
    device_moe_ffn(model, *s.device, il, s.moe);  // x stays on the device: no sync
  } else if (dl && dl->moe()) {
    HC_TRY(xr.to_host(s.x.data(), n));
    const LlamaLayerWeights& L = model.weights().layers[il];
    norm_rows(hp, s.x.data(), s.xb.data(), L.ffn_norm, L.ffn_norm_b, n_tok);
    s.in.reset(s.xb.data(), n_tok, hp.n_embd);
    HC_TRY(hybrid_moe_ffn(model, *s.device, il, s, pool, n_tok, per_row));
  } else if (dl && dl->ffn_dense) {
    xr.to_device(s.x.data(), n);
    device_ffn_dense(model, *s.device, il, n_tok, per_row);
  } else if (dl && dl->hybrid()) {
    // After the device's attention the residual stream stays there: the host reads a copy
    // (its half's input), the device adds both halves into its own (one sync per layer), or,
    // with no host half, the device does it all and nothing crosses.
    const bool resident = xr.on_device && can_merge_on_device(model, *dl, il);
    const bool host_half = hybrid_host_half(*dl, s.sparse_scratch, resident, n_tok);
    // The predictor runs on the device after its attention; its mask comes back with x.
    if (dl->predicts())
      device_predict(model, *s.device, il, n_tok, per_row,
                     s.sparse_scratch.predictor_threshold(*s.sparse, il), host_half);
    if (host_half) {
      if (resident) HC_TRY(xr.read(s.x.data(), n));
      else HC_TRY(xr.to_host(s.x.data(), n));
      if (dl->predicts()) take_device_prediction(model, *s.device, il, n_tok, s.sparse_scratch);
      const LlamaLayerWeights& L = model.weights().layers[il];
      norm_rows(hp, s.x.data(), s.xb.data(), L.ffn_norm, L.ffn_norm_b, n_tok);
      s.in.reset(s.xb.data(), n_tok, hp.n_embd);
    }
    HC_TRY(hybrid_ffn(model, *s.sparse, *s.device, il, s, pool, n_tok, per_row, resident));
  } else {
    // A predictor that followed the attention to the device decides the host's FFN there.
    if (dl && dl->predicts())
      device_predict(model, *s.device, il, n_tok, per_row,
                     s.sparse_scratch.predictor_threshold(*s.sparse, il), true);
    HC_TRY(xr.to_host(s.x.data(), n));
    if (dl && dl->predicts())
      take_device_prediction(model, *s.device, il, n_tok, s.sparse_scratch);
    ffn_block(model, il, s, pool, n_tok);
  }
  return Status::Ok();
}

// One micro-batch of rows; the logits of rows [first_out, n_tok) written to `out` unless it is
// null; with out_id (and out), each of those rows' greedy token written to out_id, and out
// then holds the logits only where the host computed them (the device's stay there).
Status forward_ubatch(const LlamaModel& model, const Rows& rows, ForwardScratch& s,
                      ThreadPool& pool, int64_t first_out, float* out, int32_t* out_id = nullptr) {
  const LlamaHParams& hp = model.hparams();
  const LlamaWeights& W = model.weights();
  const int64_t n_tok = rows.n_tok;
  const int64_t q_dim = int64_t{hp.n_head} * hp.head_dim;
  const int64_t kv_dim = int64_t{hp.n_head_kv} * hp.head_dim;
  ensure(s.x, n_tok * hp.n_embd);
  ensure(s.xb, n_tok * hp.n_embd);
  ensure(s.proj, n_tok * hp.n_embd);
  if (hp.parallel_block) ensure(s.attn_out, n_tok * hp.n_embd);
  // Consecutive parts are kSkew floats apart beyond their size: at offsets that are multiples
  // of 4 KiB (gate and up are 768 KiB for SmolLM2), element i of both fell in the same cache
  // sets and 4K-aliased in swiglu, and prompt processing was 4-5% slower.
  constexpr int64_t kSkew = 272;  // 1088 bytes: 17 cache lines
  const int64_t attn_floats = n_tok * (2 * q_dim + 2 * kv_dim) + 3 * kSkew;
  const int64_t ffn_floats = 2 * n_tok * hp.n_ff + kSkew;
  ensure(s.work, static_cast<size_t>(std::max(attn_floats, ffn_floats)));
  s.q = s.work.data();
  s.k = s.q + n_tok * q_dim + kSkew;
  s.v = s.k + n_tok * kv_dim + kSkew;
  s.att = s.v + n_tok * kv_dim + kSkew;
  s.gate = s.work.data();
  s.up = s.gate + n_tok * hp.n_ff + kSkew;
  ensure(s.rope, n_tok * hp.n_rot);
  if (s.v16.size() < static_cast<size_t>(pool.size() * kv_dim))
    s.v16.resize(static_cast<size_t>(pool.size() * kv_dim));
  ensure(s.att_tmp, static_cast<size_t>(pool.size()) * 2 * rows.max_kv_pad());
  // Independent sequences must not see each other in the arithmetic: every decode step's matmul
  // row as in a one-token call (never the packed GEMM, which rounds differently), a mixed
  // pass's sequence rows as their micro-batch alone.
  const ops::MatmulMode mode =
      rows.n_seq == 0 ? ops::MatmulMode::kPerToken : ops::MatmulMode::kAuto;
  s.in.set_mode(mode);
  s.in.set_auto_rows(rows.n_seq);
  s.sparse_scratch.pred_in.set_mode(mode);
  s.sparse_scratch.res_in.set_mode(mode);  // the predictors' fc1 (a GEMM rounds differently)

  for (int64_t t = 0; t < n_tok; ++t) {
    ops::get_row(W.token_embd, rows.token_of(t), s.x.data() + t * hp.n_embd);
    if (hp.learned_pos) {  // opt: + position_embd[pos + 2] (ggml_add(inpL, pos))
      float* pe = s.xb.data() + t * hp.n_embd;
      ops::get_row(W.pos_embd, rows.pos_of(t) + kOptPosOffset, pe);
      ops::add_inplace(s.x.data() + t * hp.n_embd, pe, hp.n_embd);
    }
    ops::rope_cache(s.rope.data() + t * hp.n_rot, hp.n_rot, model.rope_theta_scale(),
                    hp.rope_freq_scale, static_cast<const float*>(W.rope_freqs.data),
                    rows.pos_of(t));
  }
  // A model wholly on the device decodes a token as one recorded step (model/device_step.h).
  if (s.device && device_step_applies(*s.device, s, n_tok, rows.has_steps(), first_out, out))
    return device_step(model, s, *s.device, pool, s.x.data(), rows.pos0, out, out_id);
  DeviceResidual xr{s.device};
  if (s.device) s.device->deferred.clear();
  SegmentedPass pass(s.device, n_tok == 1 && !rows.has_steps());
  for (int il = 0; il < hp.n_layer; ++il) HC_TRY(run_layer(model, il, rows, s, pool, xr, pass));
  // Predictor masks of layers wholly on the device come back with the pass's last sync.
  if (s.device) queue_deferred_masks(model, *s.device);
  if (s.device && s.device->dm().output_on_device() && out) {
    xr.to_device(s.x.data(), n_tok * hp.n_embd);
    HC_TRY(device_output(model, *s.device, first_out, n_tok, out, rows.has_steps(), out_id));
    take_deferred_masks(model, *s.device, s.sparse_scratch);
    return Status::Ok();
  }
  // Always back on the host (and the device idle) before the staging buffers are reused.
  HC_TRY(xr.to_host(s.x.data(), n_tok * hp.n_embd));
  if (s.device) take_deferred_masks(model, *s.device, s.sparse_scratch);
  if (!out) return Status::Ok();
  const int64_t n_out = n_tok - first_out;
  float* xo = s.x.data() + first_out * hp.n_embd;
  norm_rows(hp, xo, s.xb.data(), W.output_norm, W.output_norm_b, n_out);
  // A mixed pass's logits rows (the sequence's last, the steps) each as a one-token call, as
  // the sequence's last row alone is in llama_forward.
  if (rows.has_steps()) s.in.set_auto_rows(0);
  ops::matmul(W.output, s.xb.data(), n_out, out, pool, s.in);
  for (int64_t t = 0; out_id && t < n_out; ++t)
    out_id[t] = ops::argmax_row(out + t * hp.n_vocab, hp.n_vocab);
  return Status::Ok();
}

}  // namespace

Status llama_forward(const LlamaModel& model, KvCache& cache, ForwardScratch& s,
                     ThreadPool& pool, std::span<const int32_t> tokens, int pos0,
                     bool all_logits, std::vector<float>* logits, int32_t* argmax) {
  HC_TRY(validate(model, cache, tokens, pos0));
  if (argmax && all_logits) return Status::Error("llama_forward: argmax takes the last token only");
  if (s.device) {
    if (s.observer)
      return Status::Error("activation observers (profile) run on the host only: no -ngl");
    if (&s.device->dm().model() != &model || s.device->n_ctx() < cache.n_ctx ||
        s.device->max_tokens() < forward_ubatch(model.hparams()))
      return Status::Error("device session does not match this model / context (" +
                           std::to_string(s.device->n_ctx()) + " positions, " +
                           std::to_string(cache.n_ctx) + " needed)");
  }
  const int64_t n_tok = static_cast<int64_t>(tokens.size());
  const int64_t n_vocab = model.hparams().n_vocab;
  logits->resize(static_cast<size_t>(all_logits ? n_tok : 1) * n_vocab);
  // Micro-batches bound the activation scratch (it grows with the batch: ~110 MiB at 512
  // tokens for a 7B shape) at no cost in speed: the GEMM's panels already fit per 128 tokens.
  const int64_t ub = forward_ubatch(model.hparams());
  for (int64_t b = 0; b < n_tok; b += ub) {
    const int64_t n = std::min<int64_t>(ub, n_tok - b);
    float* out = all_logits ? logits->data() + b * n_vocab
                            : (b + n == n_tok ? logits->data() : nullptr);
    const Rows rows = Rows::sequence(cache, tokens.subspan(b, n), pos0 + static_cast<int>(b));
    HC_TRY(forward_ubatch(model, rows, s, pool, all_logits ? 0 : n - 1, out,
                          out ? argmax : nullptr));
  }
  return Status::Ok();
}

Status llama_forward_mixed(const LlamaModel& model, KvCache& cache,
                           std::span<const int32_t> chunk, int pos0, bool chunk_logits,
                           std::span<const SeqStep> steps, ForwardScratch& s, ThreadPool& pool,
                           std::vector<float>* logits) {
  if (steps.empty()) {
    HC_TRY(llama_forward(model, cache, s, pool, chunk, pos0, false, logits));
    if (!chunk_logits) logits->clear();
    return Status::Ok();
  }
  HC_TRY(validate(model, cache, chunk, pos0));
  HC_TRY(validate_steps(model, steps, logits));
  const LlamaHParams& hp = model.hparams();
  if (s.device || s.sparse || s.observer || hp.is_moe())
    return Status::Error("a mixed prompt / decode pass runs the dense host model only (no "
                         "device, sparse FFN, observer or experts)");
  const int64_t ub = forward_ubatch(hp);
  if (static_cast<int64_t>(chunk.size()) > ub)
    return Status::Error("a mixed pass takes one prompt micro-batch: " +
                         std::to_string(chunk.size()) + " tokens, at most " + std::to_string(ub));
  for (size_t i = 0; i < steps.size(); ++i)
    if (steps[i].cache == &cache)
      return Status::Error("decode step " + std::to_string(i) +
                           " uses the prompt's KV cache (one row set per sequence)");
  const int64_t n_vocab = hp.n_vocab;
  const int64_t n_chunk_out = chunk_logits ? 1 : 0;
  const int64_t n_steps = static_cast<int64_t>(steps.size());
  logits->resize(static_cast<size_t>(n_chunk_out + n_steps) * n_vocab);
  const int64_t n_first = std::min<int64_t>(kForwardUbatch, n_steps);
  const int64_t n_chunk = static_cast<int64_t>(chunk.size());
  HC_TRY(forward_ubatch(model, Rows::mixed(cache, chunk, pos0, steps.first(n_first)), s, pool,
                        n_chunk - n_chunk_out, logits->data()));
  // Steps beyond one micro-batch: as llama_forward_multi splits them.
  for (int64_t b = n_first; b < n_steps; b += kForwardUbatch) {
    const int64_t n = std::min<int64_t>(kForwardUbatch, n_steps - b);
    HC_TRY(forward_ubatch(model, Rows::decode_steps(steps.subspan(b, n)), s, pool, 0,
                          logits->data() + (n_chunk_out + b) * n_vocab));
  }
  return Status::Ok();
}

Status llama_forward_multi(const LlamaModel& model, std::span<const SeqStep> steps,
                           ForwardScratch& s, ThreadPool& pool, std::vector<float>* logits) {
  HC_TRY(validate_steps(model, steps, logits));
  HC_TRY(validate_step_devices(model, steps, s));
  const int64_t n_steps = static_cast<int64_t>(steps.size());
  const int64_t n_vocab = model.hparams().n_vocab;
  logits->resize(static_cast<size_t>(n_steps) * n_vocab);
  // Steps are independent, so splitting them into micro-batches changes no bits.
  for (int64_t b = 0; b < n_steps; b += kForwardUbatch) {
    const int64_t n = std::min<int64_t>(kForwardUbatch, n_steps - b);
    HC_TRY(forward_ubatch(model, Rows::decode_steps(steps.subspan(b, n)), s, pool, 0,
                          logits->data() + b * n_vocab));
  }
  return Status::Ok();
}

}  // namespace hc
