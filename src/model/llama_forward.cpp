#include "model/llama_forward.h"

#include <algorithm>

#include <cmath>

#include "ops/cpu/attention.h"
#include "ops/cpu/gemm.h"
#include "quant/quant.h"
#include "ops/cpu/ops.h"

namespace hc {

namespace {

void ensure(std::vector<float>& v, size_t n) {
  if (v.size() < n) v.resize(n);
}

Status validate(const LlamaModel& model, const KvCache& cache, std::span<const int32_t> tokens,
                int pos0) {
  const LlamaHParams& hp = model.hparams();
  if (tokens.empty()) return Status::Error("no tokens to evaluate");
  if (pos0 < 0 || pos0 + static_cast<int64_t>(tokens.size()) > cache.n_ctx)
    return Status::Error("context overflow: positions " + std::to_string(pos0) + ".." +
                         std::to_string(pos0 + tokens.size() - 1) + " do not fit a context of " +
                         std::to_string(cache.n_ctx) + " tokens");
  for (int32_t t : tokens)
    if (t < 0 || t >= hp.n_vocab)
      return Status::Error("token id " + std::to_string(t) + " out of range [0, " +
                           std::to_string(hp.n_vocab) + ")");
  HC_CHECK(cache.n_layer == hp.n_layer && cache.kv_dim == int64_t{hp.n_head_kv} * hp.head_dim);
  return Status::Ok();
}

// Normalises every token row of x into xb.
void norm_rows(const float* x, float* xb, const TensorView& w, int64_t n_tok, int64_t n, float eps) {
  for (int64_t t = 0; t < n_tok; ++t)
    ops::rmsnorm(xb + t * n, x + t * n, static_cast<const float*>(w.data), n, eps);
}

void attention_block(const LlamaModel& model, const LlamaLayerWeights& L, int il, KvCache& cache,
                     ForwardScratch& s, ThreadPool& pool, int64_t n_tok, int pos0) {
  const LlamaHParams& hp = model.hparams();
  const int64_t q_dim = int64_t{hp.n_head} * hp.head_dim, kv_dim = cache.kv_dim;
  norm_rows(s.x.data(), s.xb.data(), L.attn_norm, n_tok, hp.n_embd, hp.rms_eps);
  s.in.reset(s.xb.data(), n_tok, hp.n_embd);  // Q, K and V read the same quantised input
  ops::matmul(L.wq, s.in, s.q.data(), pool);
  ops::matmul(L.wk, s.in, s.k.data(), pool);
  ops::matmul(L.wv, s.in, s.v.data(), pool);
  for (int64_t t = 0; t < n_tok; ++t) {
    const float* cs = s.rope.data() + t * hp.n_rot;
    for (int h = 0; h < hp.n_head; ++h) ops::rope_apply(s.q.data() + t * q_dim + h * hp.head_dim, hp.n_rot, cs);
    for (int h = 0; h < hp.n_head_kv; ++h) ops::rope_apply(s.k.data() + t * kv_dim + h * hp.head_dim, hp.n_rot, cs);
    // fp32 -> fp16 with round-to-nearest-even (the SIMD row converter gives the same bits).
    quant::quantize_row(GgmlType::F16, s.k.data() + t * kv_dim, cache.k_at(il, pos0 + t), kv_dim);
    fp16_t* vh = s.v16.data();
    quant::quantize_row(GgmlType::F16, s.v.data() + t * kv_dim, vh, kv_dim);
    for (int64_t d = 0; d < kv_dim; ++d) cache.v_row(il, d)[pos0 + t] = vh[d];
  }
  const ops::AttentionShape shape{hp.n_head, hp.n_head_kv, hp.head_dim, kv_dim, cache.n_ctx};
  const float scale = 1.0f / std::sqrt(static_cast<float>(hp.head_dim));
  if (n_tok >= ops::kGemmMinTokens && ops::attention_batch_available()) {
    // Prompt batches: blocked score / value GEMMs instead of one dot per (token, head, key).
    ops::attention_batch(s.q.data(), cache.k_at(il, 0), cache.v_row(il, 0), pos0, n_tok, shape,
                         scale, s.att.data(), pool, s.att_blk);
  } else {
    // llama.cpp attends over a cache view padded to 256 positions and picks its f16 matmul
    // kernels by the batch size; both change the rounding, so mirror them.
    const int64_t n_kv_pad = ops::attention_kv_pad(pos0 + n_tok);
    const ops::AttentionKernels kernels = ops::attention_kernels(n_tok, hp.head_dim, n_kv_pad);
    // Work items are (token, head) pairs so that single-token decode still uses every thread.
    const int64_t n_items = n_tok * hp.n_head;
    pool.run([&](int ith, int nth) {
      int64_t b, e;
      ThreadPool::split(n_items, ith, nth, &b, &e);
      float* tmp = s.att_tmp.data() + static_cast<int64_t>(ith) * 2 * n_kv_pad;
      for (int64_t it = b; it < e; ++it) {
        const int64_t t = it / hp.n_head;
        const int h = static_cast<int>(it % hp.n_head);
        ops::attention_one(s.q.data() + t * q_dim, cache.k_at(il, 0), cache.v_row(il, 0),
                           pos0 + t + 1, n_kv_pad, shape, scale, kernels, h, h + 1,
                           s.att.data() + t * q_dim, tmp);
      }
    });
  }
  ops::matmul(L.wo, s.att.data(), n_tok, s.proj.data(), pool, s.in);
  ops::add_inplace(s.x.data(), s.proj.data(), n_tok * hp.n_embd);
}

void ffn_block(const LlamaModel& model, int il, ForwardScratch& s, ThreadPool& pool,
               int64_t n_tok) {
  const LlamaLayerWeights& L = model.weights().layers[static_cast<size_t>(il)];
  const LlamaHParams& hp = model.hparams();
  norm_rows(s.x.data(), s.xb.data(), L.ffn_norm, n_tok, hp.n_embd, hp.rms_eps);
  s.in.reset(s.xb.data(), n_tok, hp.n_embd);  // gate and up read the same quantised input
  if (s.observer) s.observer->on_ffn_input(il, s.xb.data(), n_tok, hp.n_embd);
  if (s.sparse) {
    sparse_ffn_layer(model, *s.sparse, il, s.in, s.gate.data(), s.up.data(), s.proj.data(),
                     s.sparse_scratch, pool, s.observer);
    ops::add_inplace(s.x.data(), s.proj.data(), n_tok * hp.n_embd);
    return;
  }
  ops::matmul(L.ffn_gate, s.in, s.gate.data(), pool);
  if (s.observer) {
    std::vector<float>& act = s.sparse_scratch.act;
    if (act.size() < static_cast<size_t>(n_tok * hp.n_ff)) act.resize(n_tok * hp.n_ff);
    ffn_activation(hp.ffn_act, s.gate.data(), act.data(), n_tok * hp.n_ff);
    s.observer->on_ffn_activation(il, act.data(), n_tok, hp.n_ff);
  }
  ops::matmul(L.ffn_up, s.in, s.up.data(), pool);
  // One row per token: ggml's swiglu vectorises each row separately (tail per row).
  for (int64_t t = 0; t < n_tok; ++t) {
    float* g = s.gate.data() + t * hp.n_ff;
    const float* u = s.up.data() + t * hp.n_ff;
    if (hp.ffn_act == FfnActivation::kRelu) ops::reglu(g, u, hp.n_ff);
    else ops::swiglu(g, u, hp.n_ff);
  }
  ffn_down_dense(L, s.gate.data(), n_tok, s.proj.data(), pool, s.in, s.sparse_scratch.iota);
  ops::add_inplace(s.x.data(), s.proj.data(), n_tok * hp.n_embd);
}

}  // namespace

namespace {

// One micro-batch: tokens at [pos0, pos0 + n); logits of its last token (or of all its tokens)
// written to `out` unless it is null.
void forward_ubatch(const LlamaModel& model, KvCache& cache, ForwardScratch& s, ThreadPool& pool,
                    std::span<const int32_t> tokens, int pos0, bool all_logits, float* out) {
  const LlamaHParams& hp = model.hparams();
  const LlamaWeights& W = model.weights();
  const int64_t n_tok = static_cast<int64_t>(tokens.size());
  const int64_t q_dim = int64_t{hp.n_head} * hp.head_dim;
  ensure(s.x, n_tok * hp.n_embd);
  ensure(s.xb, n_tok * hp.n_embd);
  ensure(s.q, n_tok * q_dim);
  ensure(s.k, n_tok * cache.kv_dim);
  ensure(s.v, n_tok * cache.kv_dim);
  ensure(s.att, n_tok * q_dim);
  ensure(s.proj, n_tok * hp.n_embd);
  ensure(s.gate, n_tok * hp.n_ff);
  ensure(s.up, n_tok * hp.n_ff);
  ensure(s.rope, n_tok * hp.n_rot);
  if (s.v16.size() < static_cast<size_t>(cache.kv_dim)) s.v16.resize(cache.kv_dim);
  ensure(s.att_tmp, static_cast<size_t>(pool.size()) * 2 * ops::attention_kv_pad(pos0 + n_tok));

  for (int64_t t = 0; t < n_tok; ++t) {
    ops::get_row(W.token_embd, tokens[t], s.x.data() + t * hp.n_embd);
    ops::rope_cache(s.rope.data() + t * hp.n_rot, hp.n_rot, model.rope_theta_scale(),
                    hp.rope_freq_scale, static_cast<const float*>(W.rope_freqs.data), pos0 + t);
  }
  for (int il = 0; il < hp.n_layer; ++il) {
    attention_block(model, W.layers[il], il, cache, s, pool, n_tok, pos0);
    ffn_block(model, il, s, pool, n_tok);
  }
  if (!out) return;
  const int64_t first = all_logits ? 0 : n_tok - 1;
  const int64_t n_out = n_tok - first;
  float* xo = s.x.data() + first * hp.n_embd;
  norm_rows(xo, s.xb.data(), W.output_norm, n_out, hp.n_embd, hp.rms_eps);
  ops::matmul(W.output, s.xb.data(), n_out, out, pool, s.in);
}

}  // namespace

Status llama_forward(const LlamaModel& model, KvCache& cache, ForwardScratch& s,
                     ThreadPool& pool, std::span<const int32_t> tokens, int pos0,
                     bool all_logits, std::vector<float>* logits) {
  HC_TRY(validate(model, cache, tokens, pos0));
  const int64_t n_tok = static_cast<int64_t>(tokens.size());
  const int64_t n_vocab = model.hparams().n_vocab;
  logits->resize(static_cast<size_t>(all_logits ? n_tok : 1) * n_vocab);
  // Micro-batches bound the activation scratch (it grows with the batch: ~110 MiB at 512
  // tokens for a 7B shape) at no cost in speed: the GEMM's panels already fit per 128 tokens.
  for (int64_t b = 0; b < n_tok; b += kForwardUbatch) {
    const int64_t n = std::min<int64_t>(kForwardUbatch, n_tok - b);
    float* out = all_logits ? logits->data() + b * n_vocab
                            : (b + n == n_tok ? logits->data() : nullptr);
    forward_ubatch(model, cache, s, pool, tokens.subspan(b, n), pos0 + static_cast<int>(b),
                   all_logits, out);
  }
  return Status::Ok();
}

}  // namespace hc
