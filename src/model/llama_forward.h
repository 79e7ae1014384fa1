// The LLaMA-family forward pass over a batch of tokens at consecutive positions.
// Weights come from the shared immutable LlamaModel; the KV cache and the scratch buffers
// belong to the caller's session.
#pragma once
#include <span>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "model/kv_cache.h"
#include "model/llama_model.h"
#include "model/sparse_ffn.h"
#include "ops/cpu/matmul.h"

namespace hc {

struct ForwardScratch {
  std::vector<float> x;         // [n_tok, n_embd] residual stream
  std::vector<float> xb;        // [n_tok, n_embd] normed input of a block
  std::vector<float> q;         // [n_tok, n_head*head_dim]
  std::vector<float> k;         // [n_tok, kv_dim]
  std::vector<float> v;         // [n_tok, kv_dim]
  std::vector<float> att;       // [n_tok, n_head*head_dim] attention output
  std::vector<float> proj;      // [n_tok, n_embd] block output before the residual add
  std::vector<float> gate;      // [n_tok, n_ff]
  std::vector<float> up;        // [n_tok, n_ff]
  std::vector<float> rope;      // [n_tok, n_rot] cos/sin pairs per position
  std::vector<float> att_blk;   // attention_batch scratch (prompt batches)
  std::vector<fp16_t> v16;      // [kv_dim] one token's V in fp16 before the transposed store
  std::vector<float> att_tmp;   // [n_threads, n_ctx] attention scores per thread
  ops::MatmulInput in;          // current matmul input, quantised once per dot type
  // Activation-sparse FFN (model/sparse_ffn.h), or null for the dense FFN; its buffers and
  // counters.
  const SparseFfn* sparse = nullptr;
  SparseScratch sparse_scratch;
  FfnObserver* observer = nullptr;  // sees every layer's FFN activations, or null
};

// Largest number of tokens one forward pass computes at once; longer calls run in several
// micro-batches (like llama.cpp's n_ubatch), so the scratch stays bounded.
constexpr int64_t kForwardUbatch = 128;

// Runs tokens at positions [pos0, pos0 + tokens.size()), appending their K/V to the cache.
// logits receives [n_vocab] for the last token, or [n_tok, n_vocab] when all_logits.
Status llama_forward(const LlamaModel& model, KvCache& cache, ForwardScratch& s,
                     ThreadPool& pool, std::span<const int32_t> tokens, int pos0,
                     bool all_logits, std::vector<float>* logits);

}  // namespace hc
