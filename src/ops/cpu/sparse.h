// Neuron-aware sparse operators for the FFN: compute only the selected neurons (rows of
// up / gate, rows of the transposed down matrix), for every supported weight type.
//
//   sparse_rows:  y[t * n_idx + j] = W[idx[j]] . x[t]          (up / gate over the firing set)
//   sparse_down:  out[t * n_out + r] = sum_j h[t * n_idx + j] * Dt[idx[j]][r]
//                 Dt = W_down^T, [n_ff rows, n_embd]: each selected neuron's output weights
//                 are one contiguous row (PowerInfer's ffn_down_t), so the work and the bytes
//                 read are proportional to the number of neurons that fire.
//
// Arithmetic:
//   sparse_rows quantises x to vec_dot_type(W) (a MatmulInput, shared with the dense matmuls
//   reading the same input) and takes quant::vec_dot per selected row: the same bits as the
//   dense matmul of the file layout for those rows.
//   sparse_down: per output r and token, in index order j = 0 .. n_idx - 1:
//   acc = fma(h_j, w, acc) from acc = 0, where w is Dt[idx[j]][r] exactly as
//   quant::dequantize_row_ref gives it. The SIMD kernels (sparse_avx512.cpp) do the same
//   operations per lane, so they are bit-identical to the scalar twin and the result does not
//   depend on the thread count.
//
// Threads: sparse_rows splits the index list; sparse_down splits the output columns at block
// boundaries and each thread accumulates its own slice over every selected neuron, so no
// accumulator is shared (PowerInfer's CPU down projection adds rows into one shared output
// from every thread without synchronisation).
#pragma once
#include <cstdint>

#include "core/tensor_view.h"
#include "core/thread_pool.h"
#include "ops/cpu/matmul.h"

namespace hc::ops {

// in: n_tok tokens of w.ne0 inputs; idx: n_idx row indices in [0, w.ne1) (any order, repeats
// allowed); y: [n_tok, n_idx].
void sparse_rows(const TensorView& w, MatmulInput& in, const int32_t* idx, int64_t n_idx,
                 float* y, ThreadPool& pool);

// dt: the transposed down matrix [ne1 = n_ff rows, ne0 = n_out]; idx: n_idx neuron indices;
// h: [n_tok, n_idx] the selected neurons' activations; out: [n_tok, dt.ne0] (overwritten).
void sparse_down(const TensorView& dt, const int32_t* idx, int64_t n_idx, const float* h,
                 int64_t n_tok, float* out, ThreadPool& pool);
// h rounded value by value as a dot product with dt reads it in ggml, when dt's vec_dot_type
// is F16 or BF16 (h -> fp16 / bf16 -> fp32, round to nearest even); true if it was. Other types
// leave h alone and return false (their dot types quantise blocks of neurons: the caller decides).
bool round_h_by_value(GgmlType dt, float* h, int64_t n);
// Scalar twin (one thread, reference dequantisation): bit-identical to sparse_down.
void sparse_down_ref(const TensorView& dt, const int32_t* idx, int64_t n_idx, const float* h,
                     int64_t n_tok, float* out);

// The type a transposed down matrix of a `down_type` matrix is stored in: F32 / F16 / BF16
// keep theirs (exact); block types become Q8_0 (re-quantising a transposed 4-bit matrix to 4
// bits rounds every weight a second time; Q8_0 adds under 1% of a 4-bit step).
GgmlType down_t_type(GgmlType down_type);

// Bytes of the transpose of w ([ne1, ne0] -> [ne0 rows, ne1]) stored as type t.
int64_t transpose_bytes(GgmlType t, const TensorView& w);
// Writes w^T as rows of type t (quantised with quantize_row: for block types the transposed
// rows are re-quantised from w's dequantised values; exact for F32 / F16 / BF16 when t == type).
// w.ne1 must be a multiple of t's block size. Single-threaded, memory bounded (column chunks).
void transpose_weights(const TensorView& w, GgmlType t, uint8_t* dst);

}  // namespace hc::ops
