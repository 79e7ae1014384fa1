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

// How matmul computes a batch of token rows.
//   kAuto:     batches of kGemmMinTokens (gemm.h) or more run the packed GEMM when it is
//              available: fastest for prompts, but it rounds differently from one token.
//              Except: a K-quant weight in the decode layout (repack.h) runs batches of up to
//              repack_batch_max(type) tokens with the decode kernels, since the GEMM would
//              first pack the whole matrix's panels from that layout for a few tokens.
//   kPerToken: every row gets exactly the arithmetic of a one-token call (the decode kernels,
//              the weights still streamed once for the batch): batch invariance, for decoding
//              several independent sequences in one pass.
// A kAuto input may limit the batch rules to its first rows (MatmulInput::set_auto_rows): the
// server's mixed pass, one sequence's prompt micro-batch followed by other sequences' decode
// steps, computes the first part as that micro-batch alone and every later row per token.
enum class MatmulMode { kAuto, kPerToken };

// Largest batch that kAuto runs with the decode kernels on a weight of type t in the decode
// layout (0: none, the GEMM from kGemmMinTokens). Measured with the GEMM packing its panels
// from the layout with AVX-512 (hotcold bench -p N -b N, 2 threads; docs/BENCHMARKS.md): the
// K-quants' decode kernels win below 16 tokens (7B-shaped Q5_K_M: 8 tokens 1.35x, 12 tokens
// 1.12x, 16 even); for Q4_0 / Q4_1 / Q8_0 the GEMM already wins at 8-12.
constexpr int64_t kRepackKQuantMaxTokens = 15;
int64_t repack_batch_max(GgmlType t);

// One matmul input x [n_tok, ne0] and its quantised forms, made on first use per dot type.
// reset() starts a new input; buffers are kept, so steady-state decode allocates nothing.
// The mode (kAuto unless set) belongs to the object, not to one input: it survives reset(), so
// helpers that reuse a caller's MatmulInput as scratch (matmul's one-off overload) honour it.
class MatmulInput {
 public:
  void reset(const float* x, int64_t n_tok, int64_t ne0);
  void set_mode(MatmulMode mode) { mode_ = mode; }
  MatmulMode mode() const { return mode_; }
  // kAuto only: rows [0, n) are one batch under kAuto's rules, rows from n on get kPerToken's
  // arithmetic (n >= n_tok: no split, the default). Like the mode, survives reset().
  void set_auto_rows(int64_t n) { auto_rows_ = n; }
  int64_t auto_rows() const { return auto_rows_; }
  int64_t n_tok() const { return n_tok_; }
  int64_t ne0() const { return ne0_; }
  const float* x() const { return x_; }  // the rows reset() was given
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
  MatmulMode mode_ = MatmulMode::kAuto;
  int64_t auto_rows_ = INT64_MAX;
  std::vector<Slot> slots_;  // one per dot type seen; a model uses one or two
};

// y = x W^T for the input set in `in` (in.ne0() == w.ne0), computed as in.mode() says.
void matmul(const TensorView& w, MatmulInput& in, float* y, ThreadPool& pool);
// The same for a one-off input; `scratch` holds buffers between calls and gives the mode.
void matmul(const TensorView& w, const float* x, int64_t n_tok, float* y, ThreadPool& pool,
            MatmulInput& scratch);

// Scalar reference (single thread, _ref quant kernels) used to test matmul.
void matmul_ref(const TensorView& w, const float* x, int64_t n_tok, float* y);

}  // namespace hc::ops
