// Causal multi-head attention with grouped-query heads over an fp16 KV cache.
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace hc::ops {

struct AttentionShape {
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;
  int64_t kv_stride = 0;  // fp16 elements between consecutive positions in the cache
};

// One query token attending to cache positions [0, n_kv), for query heads [h_begin, h_end).
//   q:   [n_head, head_dim] fp32 (already rotated)
//   k,v: [n_ctx, kv_stride] fp16, head h_kv at offset h_kv * head_dim
//   out: [n_head, head_dim] fp32
//   scratch: [n_kv] fp32
// Mirrors ggml's non-flash path numerically: q is rounded to fp16 for Q.K, and the softmax
// weights are rounded to fp16 before the weighted sum of V.
void attention_one(const float* q, const fp16_t* k, const fp16_t* v, int64_t n_kv,
                   const AttentionShape& shape, float scale, int h_begin, int h_end, float* out,
                   float* scratch);

}  // namespace hc::ops
