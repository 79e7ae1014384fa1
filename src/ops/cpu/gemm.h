// Packed GEMM for prompt processing: y[t, r] = sum_k W[r, k] * x[t, k] for a batch of tokens.
//
// The per-row dot products of matmul() re-unpack every weight block once per token. Here each
// thread packs a block of weight rows once per call into a layout made for the micro-kernel
// (16 rows side by side, one SIMD lane per row; integer types as unsigned bytes plus one float
// scale, and one float min or integer offset, per row and sub-block), keeps it in L2 and runs
// every token against it. Activations are the same quantised rows matmul() uses (ggml's Q8_0 /
// Q8_1 / Q8_K; F16 / BF16 / F32 for the float types), so integer dot products are exact and
// only the float accumulation order differs from the per-row path.
//
// Integer weight types (Q8_0 Q4_0 Q4_1 Q4_K Q5_K Q6_K) use AVX-512 VNNI (vpdpbusd: 64 u8 x s8
// products per instruction); float types (F32 F16 BF16) use AVX-512 FMA on fp32. Each kernel
// has a scalar twin (gemm_ref) doing the same operations in the same order: the two agree bit
// for bit. Without AVX-512 VNNI, or under HOTCOLD_ISA=ref|avx2, gemm_available() is false and
// matmul() keeps its per-row path.
#pragma once
#include <cstdint>

#include "core/tensor_view.h"
#include "core/thread_pool.h"

namespace hc::ops {

// Batches at least this large go through gemm() when it is available for the weight type.
constexpr int64_t kGemmMinTokens = 8;

// Weight types the packed GEMM handles at all (scalar twin included).
bool gemm_supports(GgmlType t);
// True when the SIMD GEMM runs on this CPU for weight type t.
bool gemm_available(GgmlType t);

// xq: n_tok rows of activations quantised to quant::vec_dot_type(w.type) (MatmulInput's rows;
// for F32 weights the fp32 input itself). y: [n_tok, w.ne1]. HC_CHECK: gemm_available(w.type).
void gemm(const TensorView& w, const uint8_t* xq, int64_t n_tok, float* y, ThreadPool& pool);
// The scalar twin: same packing, same arithmetic in the same order, one thread. Bit-identical
// to gemm(). HC_CHECK: gemm_supports(w.type).
void gemm_ref(const TensorView& w, const uint8_t* xq, int64_t n_tok, float* y);

// Float-weight GEMM on the calling thread with fp32 activations and explicit strides (the
// attention's score and value products): y[t * ldy + r] = sum_k W[r, k] * x[t * ldx + k] for
// W of type F32 / F16 / BF16 with any row stride. simd: the AVX-512 or AVX2 kernel (requires
// gemm_f32_act_simd_available()), else the scalar twin; all are bit-identical.
bool gemm_f32_act_simd_available();
void gemm_f32_act(const TensorView& w, const float* x, int64_t ldx, int64_t n_tok, float* y,
                  int64_t ldy, bool simd);

}  // namespace hc::ops
