// Weight-times-activation products for every supported weight type.
//   W: [ne1 rows = outputs, ne0 = inputs] any supported GgmlType, one row per output neuron
//   x: [n_tok, ne0] fp32 row-major
//   y: [n_tok, ne1] fp32 row-major
// Activations are quantised once to vec_dot_type(W.type) (as ggml does), then each thread
// computes its own contiguous block of output rows for all tokens: no shared accumulators.
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor_view.h"
#include "core/thread_pool.h"

namespace hc::ops {

struct MatmulScratch {
  std::vector<uint8_t> xq;  // [n_tok, row_bytes(vec_dot_type, ne0)] quantised activations
};

void matmul(const TensorView& w, const float* x, int64_t n_tok, float* y, ThreadPool& pool,
            MatmulScratch& scratch);

// Scalar reference (single thread, _ref quant kernels) used to test matmul.
void matmul_ref(const TensorView& w, const float* x, int64_t n_tok, float* y);

}  // namespace hc::ops
