// Host-side launchers of the CUDA kernels (ops/cuda/*.cu), used by CudaDevice. Each queues its
// kernel(s) on `stream` and returns; launch errors are picked up by the caller with
// cudaGetLastError. Launchers taking a weight type return false (launching nothing) when the
// type has no kernel. All pointers are device memory; shapes as ops/device.h.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"

namespace hc::ops::cuda {

// The mat-vec kernels handle up to this many tokens per launch; larger batches go in groups
// (or through cuBLAS, see CudaDevice::matmul).
constexpr int64_t kMaxVecTokens = 8;

// What a mat-vec launch computes for row j (0 <= j < n_rows) and token t < n_tok:
//   dot[t, j] = W[row(j)] . x[t]              row(j) = idx ? idx[j] : j
//   kPlain:       y[t, j] = dot
//   kSkipUnfired: rows that no token fires (fire[t, j] == 0 for all t) are not read, y = 0;
//                 others y = dot (the gate pass of ffn_rows)
//   kGlu:         fired(t, j) = fire ? fire[t, j] : |act(gate[t, j])| > threshold;
//                 y[t, j] = fired ? act(gate[t, j]) * dot : 0, rows no token fires not read
//                 (the up pass of both FFN operators; gate may alias y)
enum class MatvecMode : int { kPlain, kSkipUnfired, kGlu };

struct MatvecParams {
  const uint8_t* w = nullptr;  // [ne1 rows, ne0] weight type, nb1 bytes between rows
  int64_t nb1 = 0;
  int64_t ne0 = 0;
  int64_t n_rows = 0;            // rows computed (= outputs per token)
  const int32_t* idx = nullptr;  // [n_rows] weight rows, or null
  const float* x = nullptr;      // [n_tok, ne0]
  int64_t n_tok = 0;             // <= kMaxVecTokens
  float* y = nullptr;            // y[t * ldy + j]
  int64_t ldy = 0;
  MatvecMode mode = MatvecMode::kPlain;
  const uint8_t* fire = nullptr;  // fire[t * ld_fire + j], or null (kGlu: threshold test)
  int64_t ld_fire = 0;
  const float* gate = nullptr;  // kGlu: gate[t * ldy + j], the gate pass's output
  float threshold = 0;
  int glu_kind = 0;  // 0 SiLU, 1 ReLU, 2 dReLU, 3 ungated ReLU
  // Modes kPlain / kSkipUnfired: y = dot + bias[row(j)] (an FFN gate's bias), or null.
  const float* bias = nullptr;
  // launch_gate_up only: the up matrix (same type and row ids as w).
  const uint8_t* w_up = nullptr;
  int64_t nb1_up = 0;
  // matmul_id: w is matrix e = ids[route] (clamped into [0, n_mat)) of a stack of n_mat
  // matrices id_stride bytes apart, from w; null: w itself.
  const int32_t* ids = nullptr;
  int64_t route = 0, n_mat = 0, id_stride = 0;
};
bool launch_matvec(GgmlType t, const MatvecParams& p, cudaStream_t stream);

// The FFN's gate and up passes in one kernel (a gated kind: glu_kind 0-2): per row j (weight
// row idx[j]) g = gate . x (+ bias), then, for the rows some token fires (p.fire, else
// |act(g)| > threshold), h = act(g) * (up . x); y[t * ldy + j] = h where token t fires, else 0.
// Each dot product is the matvec kernel's (same chunks, lanes, fmaf chain and shuffle sum), so
// y holds exactly what the gate pass (kPlain / kSkipUnfired) and then the up pass (kGlu) leave
// there: one launch instead of two, x staged once per block where a row fits one chunk.
bool launch_gate_up(GgmlType t, const MatvecParams& p, cudaStream_t stream);

// out [n_rows, ne0] fp32 = rows [row0, row0 + n_rows) of W dequantised (bit-exact with
// quant::dequantize_row_ref).
bool launch_dequant_rows(GgmlType t, const uint8_t* w, int64_t nb1, int64_t ne0, int64_t row0,
                         int64_t n_rows, float* out, cudaStream_t stream);

// The down half of the FFN: part[s][t][c] = sum over j in split s with h[t, j] != 0 for some t
// of h[t * n_rows + j] * Dt[row(j)][c], row(j) = idx ? idx[j] : j. The n_rows neurons are cut
// into n_split contiguous ranges; each thread block owns 1024 output columns of one range.
// part: [n_split, n_tok, n_out]; sum_partials adds the splits in order into out [n_tok, n_out].
struct DownParams {
  const uint8_t* dt = nullptr;  // [ne1 rows, n_out] weight type, nb1 bytes between rows
  int64_t nb1 = 0;
  int64_t n_out = 0;
  const float* h = nullptr;  // [n_tok, n_rows]
  const int32_t* idx = nullptr;
  int64_t n_rows = 0;
  int64_t n_tok = 0;  // <= kMaxVecTokens
  float* part = nullptr;
  int n_split = 1;
};
constexpr int kDownColumns = 1024;  // output columns per thread block
bool launch_sparse_down(GgmlType t, const DownParams& p, cudaStream_t stream);
void launch_sum_partials(const float* part, int n_split, int64_t n, float* out,
                         cudaStream_t stream);

// Element-wise and row-wise ops (elementwise.cu), semantics of ops/device.h. Positions: pos0,
// or (pos_at non-null) the int32 at pos_at in device memory, read by the kernel, negative taken
// as 0 (ops::DevicePos); kv_store then skips rows at or past n_ctx, attention reads at most
// v_stride positions.
void launch_rmsnorm(float* out, const float* x, const float* w, int64_t n_tok, int64_t n, float eps,
                    cudaStream_t stream);
void launch_rope(float* x, int64_t n_tok, int n_head, int head_dim, int n_rot, int pos0,
                 const int32_t* pos_at, float theta_scale, float freq_scale, const float* freq_factors, bool neox,
                 cudaStream_t stream);
void launch_kv_store(const float* k, const float* v, int64_t n_tok, int pos0,
                     const int32_t* pos_at, int64_t kv_dim,
                     int n_ctx, uint16_t* k_cache, uint16_t* v_cache_t, cudaStream_t stream);
void launch_glu(float* gate, const float* up, int64_t n, int glu_kind, cudaStream_t stream);
// h [n_tok, n_rows] = fired(t, j) ? relu(h) : 0 with fired = fire[t * ld_fire + j] != 0 (fire
// not null) or relu(h) > threshold: the ungated FFN's activation (Falcon) after the gate pass.
void launch_ungated_relu(float* h, int64_t n_rows, int64_t n_tok, const uint8_t* fire,
                         int64_t ld_fire, float threshold, cudaStream_t stream);
void launch_add(float* y, const float* x, int64_t n, cudaStream_t stream);
// out[r] = the index of the largest of x[r * n .. + n) for r < n_rows: the first on ties, NaN
// never, 0 when all are NaN (ops::argmax_row). One block per row.
void launch_argmax(const float* x, int64_t n_rows, int64_t n, int32_t* out, cudaStream_t stream);
// fire[t * n_cols + j] = x[t * n + c(j)] >= threshold (1 / 0), c(j) = cols ? cols[j] : j, for
// t < n_tok: a predictor's mask (ops/device.h fire_mask).
void launch_fire_mask(const float* x, int64_t n_tok, int64_t n, const int32_t* cols,
                      int64_t n_cols, float threshold, uint8_t* fire, cudaStream_t stream);
// Mixture-of-experts routing, ops/cpu/moe_topk.h per row of x [n_tok, n_expert] (overwritten
// with the gate's values; expf, a double sum): ids / w [n_tok, k]. One thread per row.
void launch_moe_topk(float* x, int64_t n_tok, int n_expert, int k, int kind, bool norm_w,
                     float w_scale, int32_t* ids, float* w, cudaStream_t stream);
// out[t, i] = ((y[t k, i] * w[t k]) + y[t k + 1, i] * w[t k + 1]) + ..., each product rounded.
void launch_moe_combine(const float* y, const float* w, int64_t n_tok, int k, int64_t n,
                        float* out, cudaStream_t stream);
// y[t * n + i] += b[i] for t < n_tok.
void launch_add_rows(float* y, const float* b, int64_t n_tok, int64_t n, cudaStream_t stream);
// Rows of width floats: dst[j] = src[idx[j]] (get_rows), dst[idx[j]] = src[j] * scale[j]
// (set_rows_scaled), j < n.
void launch_get_rows(float* dst, const float* src, const int32_t* idx, int64_t n, int64_t width,
                     cudaStream_t stream);
void launch_set_rows_scaled(float* dst, const float* src, const int32_t* idx, const float* scale,
                            int64_t n, int64_t width, cudaStream_t stream);

// attention.cu: causal grouped-query attention, q/out [n_tok, n_head * head_dim].
constexpr int kMaxHeadDim = 512;
struct AttentionParams {
  const float* q = nullptr;
  const uint16_t* k_cache = nullptr;    // [n_ctx, k_stride] fp16
  const uint16_t* v_cache_t = nullptr;  // [n_head_kv * head_dim, v_stride] fp16
  int pos0 = 0;
  const int32_t* pos_at = nullptr;  // device position, read instead of pos0 when set
  int64_t n_tok = 0;
  int n_head = 0, n_head_kv = 0, head_dim = 0;
  int64_t k_stride = 0, v_stride = 0;
  float scale = 1;
  float* out = nullptr;
};
void launch_attention(const AttentionParams& p, cudaStream_t stream);

// Profiling kernels (elementwise.cu).
void launch_empty(cudaStream_t stream);
// Reads n 16-byte words of `src` with every SM; writes one word to sink (never the sum).
void launch_read(const uint4* src, int64_t n, uint4* sink, cudaStream_t stream);

}  // namespace hc::ops::cuda
