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
//              Except: an integer-type weight in the decode layout (repack.h) runs batches of
//              up to kRepackMaxTokens with the decode kernels, since the GEMM would first pack
//              the whole matrix's panels from that layout for a few tokens (F16's layout is
//              the GEMM's panel, read in place, so F16 keeps the GEMM).
//   kPerToken: every row gets exactly the arithmetic of a one-token call (the decode kernels,
//              the weights still streamed once for the batch): batch invariance, for decoding
//              several independent sequences in one pass.
enum class MatmulMode { kAuto, kPerToken };

// Largest batch that kAuto runs with the decode kernels on a repacked integer-type weight.
// Measured (hotcold bench -p N -b N, 2 threads; docs/BENCHMARKS.md): 16-token prompts 2.5x
// (SmolLM2 Q4_1) to 3.5x (7B-shaped Q5_K_M) faster than through the GEMM, 64 tokens 1.0-1.3x,
// 128 tokens 0.7-0.9x.
constexpr int64_t kRepackMaxTokens = 64;

// One matmul input x [n_tok, ne0] and its quantised forms, made on first use per dot type.
// reset() starts a new input; buffers are kept, so steady-state decode allocates nothing.
// The mode (kAuto unless set) belongs to the object, not to one input: it survives reset(), so
// helpers that reuse a caller's MatmulInput as scratch (matmul's one-off overload) honour it.
class MatmulInput {
 public:
  void reset(const float* x, int64_t n_tok, int64_t ne0);
  void set_mode(MatmulMode mode) { mode_ = mode; }
  MatmulMode mode() const { return mode_; }
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
  MatmulMode mode_ = MatmulMode::kAuto;
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
