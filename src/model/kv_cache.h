// Per-session key/value cache, fp16 like llama.cpp's default (--cache-type-k/v f16). V is kept
// transposed, as llama.cpp does without flash attention, so that the weighted sum over
// positions is a contiguous dot product per dimension (the order ggml's kqv matmul uses).
#pragma once
#include <cstdint>
#include <vector>

#include "core/dtype.h"

namespace hc {

struct KvCache {
  int n_layer = 0;
  int n_ctx = 0;
  int64_t kv_dim = 0;     // n_head_kv * head_dim
  std::vector<fp16_t> k;  // [n_layer, n_ctx, kv_dim]
  std::vector<fp16_t> v;  // [n_layer, kv_dim, n_ctx]: row d holds dimension d of every position

  KvCache() = default;
  KvCache(int n_layer_, int n_ctx_, int64_t kv_dim_)
      : n_layer(n_layer_), n_ctx(n_ctx_), kv_dim(kv_dim_),
        k(static_cast<size_t>(n_layer_) * n_ctx_ * kv_dim_),
        v(static_cast<size_t>(n_layer_) * n_ctx_ * kv_dim_) {}
  fp16_t* k_at(int il, int64_t pos) { return k.data() + (static_cast<int64_t>(il) * n_ctx + pos) * kv_dim; }
  const fp16_t* k_at(int il, int64_t pos) const {
    return k.data() + (static_cast<int64_t>(il) * n_ctx + pos) * kv_dim;
  }
  // Row d (0 <= d < kv_dim) of layer il's transposed V: n_ctx positions.
  fp16_t* v_row(int il, int64_t d) { return v.data() + (static_cast<int64_t>(il) * kv_dim + d) * n_ctx; }
  const fp16_t* v_row(int il, int64_t d) const {
    return v.data() + (static_cast<int64_t>(il) * kv_dim + d) * n_ctx;
  }
  uint64_t bytes() const { return (k.size() + v.size()) * sizeof(fp16_t); }
};

}  // namespace hc
