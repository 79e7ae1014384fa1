// Weight-times-activation products for every supported weight type.
//   W: [ne1 rows = outputs, ne0 = inputs] any supported GgmlType, one row per output neuron
//   x: [n_tok, ne0] fp32 row-major
//   y: [n_tok, ne1] fp32 row-major
// Activations are quantised to vec_dot_type(W.type) (as ggml does), once per input and dot
// type: a MatmulInput is shared by every weight that reads the same activations (Q/K/V,
// gate/up). Each thread then computes its own contiguous block of output rows for all tokens:
// no shared accumulators.
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor_view.h"
#include "core/thread_pool.h"

namespace hc::ops {

// One matmul input x [n_tok, ne0] and its quantised forms, made on first use per dot type.
// reset() starts a new input; buffers are kept, so steady-state decode allocates nothing.
class MatmulInput {
 public:
  void reset(const float* x, int64_t n_tok, int64_t ne0);
  int64_t n_tok() const { return n_tok_; }
  int64_t ne0() const { return ne0_; }
  // [n_tok, row_bytes(vt, ne0)] rows quantised to vt (x itself for F32).
  const uint8_t* quantized(GgmlType vt, ThreadPool& pool);

 private:
  struct Slot {
    GgmlType vt = GgmlType::F32;
    bool valid = false;
    std::vector<uint8_t> rows;
  };
  const float* x_ = nullptr;
  int64_t n_tok_ = 0, ne0_ = 0;
  std::vector<Slot> slots_;  // one per dot type seen; a model uses one or two
};

// y = x W^T for the input set in `in` (in.ne0() == w.ne0).
void matmul(const TensorView& w, MatmulInput& in, float* y, ThreadPool& pool);
// The same for a one-off input; `scratch` only holds buffers between calls.
void matmul(const TensorView& w, const float* x, int64_t n_tok, float* y, ThreadPool& pool,
            MatmulInput& scratch);

// Scalar reference (single thread, _ref quant kernels) used to test matmul.
void matmul_ref(const TensorView& w, const float* x, int64_t n_tok, float* y);

}  // namespace hc::ops
