// The LLaMA-family forward pass over a batch of tokens at consecutive positions of one
// sequence, or over one decode step each of several independent sequences.
// Weights come from the shared immutable LlamaModel; the KV caches and the scratch buffers
// belong to the caller's sessions.
#pragma once
#include <span>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "model/device_model.h"
#include "model/kv_cache.h"
#include "model/llama_model.h"
#include "model/moe_ffn.h"
#include "model/sparse_ffn.h"
#include "ops/cpu/matmul.h"

namespace hc {

struct ForwardScratch {
  std::vector<float> x;         // [n_tok, n_embd] residual stream
  std::vector<float> xb;        // [n_tok, n_embd] normed input of a block
  std::vector<float> proj;      // [n_tok, n_embd] block output before the residual add
  std::vector<float> attn_out;  // [n_tok, n_embd] attention output of a parallel block (falcon)
  // The attention block's q, k, v and att and the FFN's gate and up are never live together:
  // they share `work` (SmolLM2 0.75 MiB, a 7B shape 8 MiB less per 128-token micro-batch than
  // six buffers). The pointers are set for each micro-batch.
  std::vector<float> work;
  float* q = nullptr;           // [n_tok, n_head*head_dim]
  float* k = nullptr;           // [n_tok, kv_dim]
  float* v = nullptr;           // [n_tok, kv_dim]
  float* att = nullptr;         // [n_tok, n_head*head_dim] attention output
  float* gate = nullptr;        // [n_tok, n_ff]
  float* up = nullptr;          // [n_tok, n_ff]
  std::vector<float> rope;      // [n_tok, n_rot] cos/sin pairs per position
  std::vector<float> att_blk;   // attention_batch scratch (prompt batches)
  std::vector<fp16_t> v16;      // [threads, kv_dim] a token's V in fp16 before the transposed
                                // store, one row per thread of the RoPE / store split
  std::vector<float> att_tmp;   // [n_threads, 2 * n_kv_pad] attention scores per thread
  ops::MatmulInput in;          // current matmul input, quantised once per dot type
  // Activation-sparse FFN (model/sparse_ffn.h), or null for the dense FFN; its buffers and
  // counters.
  const SparseFfn* sparse = nullptr;
  SparseScratch sparse_scratch;
  MoeScratch moe;  // mixture-of-experts layers' routing and buffers
  FfnObserver* observer = nullptr;  // sees every layer's FFN activations, or null
  // Layers a DeviceModel placed on a second device run there (model/device_model.h), with this
  // session's device KV cache and buffers; null = everything on the host. Not with observers.
  // In llama_forward_multi only its buffers carry the batch (each step brings its own KV).
  DeviceSession* device = nullptr;
};

// Largest number of tokens one forward pass computes at once; longer calls run in several
// micro-batches (like llama.cpp's n_ubatch), so the scratch stays bounded.
constexpr int64_t kForwardUbatch = 128;
// Mixture-of-experts models: each expert sees only its share of a micro-batch's tokens (Qwen3's
// 8 of 128: 1/16), so larger micro-batches read each expert's weights for more tokens at once:
// prompt processing +30-45% at 512 over 128 (docs/BENCHMARKS.md, "Mixture of experts").
constexpr int64_t kMoeForwardUbatch = 512;
inline int64_t forward_ubatch(const LlamaHParams& hp) {
  return hp.is_moe() ? kMoeForwardUbatch : kForwardUbatch;
}

// xb [n_tok, n_embd] = the model's norm (RMSNorm or LayerNorm with bias b) of x's rows.
void norm_rows(const LlamaHParams& hp, const float* x, float* xb, const TensorView& w,
               const TensorView& b, int64_t n_tok);
// Adds layer il's FFN output s.proj to the residual s.x: x += proj, or for a parallel block
// (falcon) x += (proj + s.attn_out), as llama.cpp orders the sums; opt's ffn_down_b is added to
// proj first (PowerInfer: the axpy's sum, then the bias, then the residual).
void add_ffn_out(const LlamaModel& model, int il, ForwardScratch& s, int64_t n_tok);
// y [n_tok, b.ne0] += b on every row; nothing when b is empty.
void add_bias_rows(float* y, const TensorView& b, int64_t n_tok);

// Runs tokens at positions [pos0, pos0 + tokens.size()), appending their K/V to the cache.
// logits receives [n_vocab] for the last token, or [n_tok, n_vocab] when all_logits.
// With argmax (not all_logits): *argmax = the last token's greedy choice (ops::argmax_row of
// its logits); when the output layer is on a device only that id comes back and logits holds
// no meaningful values.
Status llama_forward(const LlamaModel& model, KvCache& cache, ForwardScratch& s,
                     ThreadPool& pool, std::span<const int32_t> tokens, int pos0,
                     bool all_logits, std::vector<float>* logits, int32_t* argmax = nullptr);

// One decode step of one sequence: `token` goes to position `pos` of `cache` (the cache already
// holds positions [0, pos)). Different steps use different caches (one per server slot).
// With a second device (ForwardScratch::device), `device` is the sequence's own
// DeviceSession: the KV of its device attention layers (the scratch's session carries the
// batch's activations).
struct SeqStep {
  KvCache* cache;
  int pos;
  int32_t token;
  DeviceSession* device = nullptr;
};

// Runs every step in one forward pass (continuous batching): the weight matmuls read each
// weight once for all steps (ops::MatmulMode::kPerToken), attention runs per step over its own
// cache, RoPE at each step's position, K/V stored into each step's cache. logits receives
// [steps.size(), n_vocab]. More than kForwardUbatch steps run in several passes.
// Batch invariance: with the dense FFN, each step's logits (and its cache afterwards) are
// bit-identical to llama_forward(model, *step.cache, ..., {step.token}, step.pos, false, ...)
// alone: every row gets a one-token call's matmul and attention arithmetic. With s.sparse the
// FFN runs over the union of the steps' firing sets, and stays batch-invariant: a zero h adds
// nothing to a row's fma chain, SwiGLU is computed per element (ops::swiglu_each), and each
// step takes the dense fallback exactly when its own set would (a batch mixing both runs its
// steps one by one in that layer). With s.device (a hybrid placement) every step brings its
// own DeviceSession (step.device: its device layers' KV) and every row gets the device
// operations of its one-token decode (hybrid_forward.h), the same invariance.
// Errors (nothing is computed): no steps, a null cache or logits, a position outside its
// cache's context, a token id out of range, two steps sharing a cache, a cache whose shape
// does not match the model; with a device: a step without a session, a session of another
// placement or with fewer positions than its cache, two steps sharing a session, a scratch
// session with room for fewer rows than a micro-batch of the steps; a step's session
// without a device in the pass.
Status llama_forward_multi(const LlamaModel& model, std::span<const SeqStep> steps,
                           ForwardScratch& s, ThreadPool& pool, std::vector<float>* logits);

// One prompt micro-batch of one sequence and a decode step each of other sequences in one pass
// (the server's mixed step): the weights are streamed once for both, and no bit changes. The
// chunk's rows get exactly the arithmetic llama_forward gives that micro-batch (the packed GEMM
// and batched attention from ops::kGemmMinTokens tokens), each step's row that of
// llama_forward_multi (a one-token call's). So `chunk` must be one of the micro-batches
// llama_forward would make of the prompt (at most forward_ubatch tokens, starting on its grid)
// for the cache contents and logits to equal that call's.
// logits receives [chunk_logits + steps.size(), n_vocab]: the chunk's last token's first when
// chunk_logits, then the steps'. Steps beyond kForwardUbatch run in further passes.
// Dense host models only (no device session, sparse FFN, observer or experts). Errors, all
// before anything is computed: llama_forward's for the chunk, llama_forward_multi's for the
// steps, a chunk longer than one micro-batch, a step that shares the chunk's cache.
Status llama_forward_mixed(const LlamaModel& model, KvCache& cache,
                           std::span<const int32_t> chunk, int pos0, bool chunk_logits,
                           std::span<const SeqStep> steps, ForwardScratch& s, ThreadPool& pool,
                           std::vector<float>* logits);

}  // namespace hc
