// Causal multi-head attention with grouped-query heads over an fp16 KV cache, computed as
// llama.cpp's non-flash CPU graph does, bit for bit:
//   kq   = mul_mat(k, q)        q rounded to fp16, f16 x f16 dot products
//   kq   = soft_max_ext(kq, mask, scale)
//   kqv  = mul_mat(v^T, kq)     softmax weights rounded to fp16, f16 x f16 dot products
// over llama.cpp's padded cache view of n_kv_pad positions (masked beyond the causal limit).
#pragma once
#include <cstdint>

#include <vector>

#include "core/dtype.h"
#include "core/thread_pool.h"

namespace hc::ops {

struct AttentionShape {
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;
  int64_t k_stride = 0;  // fp16 elements between consecutive positions of the K cache
  int64_t v_stride = 0;  // fp16 elements between consecutive rows (dims) of the transposed V cache
};

// ggml computes a f16 matmul with ggml_vec_dot_f16 when it has one column (a single token) and
// with llamafile's tinyBLAS when it has more and the shapes allow; the two round differently.
enum class F16Matmul { kVecDot, kTinyBlas };

// The kernels ggml picks for kq (rows = n_kv_pad, inner = head_dim) and kqv (rows = head_dim,
// inner = n_kv_pad) when the batch has n_tokens query tokens.
struct AttentionKernels {
  F16Matmul kq = F16Matmul::kVecDot;
  F16Matmul kqv = F16Matmul::kVecDot;
};
AttentionKernels attention_kernels(int64_t n_tokens, int head_dim, int64_t n_kv_pad);

// llama.cpp's KV view length for n_kv used cells: padded to 256, at least 256. Positions beyond
// n_kv are masked and never read, so it may exceed our cache size.
int64_t attention_kv_pad(int64_t n_kv);

// Prefetches the cache lines attention_one reads for KV heads [hk_begin, hk_end): their part
// of K positions [0, n) and their V^T rows over [0, n), n = n_kv or fewer, so that at most
// kAttentionPrefetchBytes are asked for (a long context's rows would only evict each other
// from L1; the hardware prefetcher follows the rest of each row). A decode step's caches are
// usually in DRAM (the weights have streamed through the CPU caches since that sequence's
// previous step), so the step's loop prefetches the next sequence's while computing one.
constexpr int64_t kAttentionPrefetchBytes = 64 * 1024;
void attention_prefetch(const fp16_t* k, const fp16_t* v_t, int64_t n_kv,
                        const AttentionShape& shape, int hk_begin, int hk_end);

// One query token attending to cache positions [0, n_kv) of a view of n_kv_pad >= n_kv
// positions (the rest masked), for query heads [h_begin, h_end).
//   q:   [n_head, head_dim] fp32 (already rotated)
//   k:   [n_ctx, k_stride] fp16, head h_kv at offset h_kv * head_dim
//   v_t: [n_head_kv * head_dim, v_stride] fp16, row h_kv * head_dim + d = dim d over positions
//   out: [n_head, head_dim] fp32
//   scratch: [2 * n_kv_pad] fp32
void attention_one(const float* q, const fp16_t* k, const fp16_t* v_t, int64_t n_kv,
                   int64_t n_kv_pad, const AttentionShape& shape, float scale,
                   AttentionKernels kernels, int h_begin, int h_end, float* out, float* scratch);

// Prompt batches (the packed float GEMM of gemm.h; not ggml's rounding): tokens t in
// [0, n_tok) at positions pos0 + t attend causally to cache positions [0, pos0 + t]. Per (query
// head, block of kAttentionBlock tokens): scores = K q as one GEMM over the keys the block can
// see, an exact-zero-masked softmax per token in fp32, then out = V^T p as a second GEMM. q is
// not rounded to fp16 and the weights stay fp32 (ggml rounds both to fp16), so results differ
// from attention_one by fp16 rounding. Threads take (head, block) items.
//   q: [n_tok, n_head * head_dim]; out: [n_tok, n_head * head_dim]; scratch: grown as needed.
constexpr int64_t kAttentionBlock = 32;
bool attention_batch_available();
void attention_batch(const float* q, const fp16_t* k, const fp16_t* v_t, int64_t pos0,
                     int64_t n_tok, const AttentionShape& shape, float scale, float* out,
                     ThreadPool& pool, std::vector<float>& scratch);

}  // namespace hc::ops
