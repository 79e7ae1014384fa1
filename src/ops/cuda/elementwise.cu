// Row-wise and element-wise kernels (rmsnorm, rope, kv_store, glu, add, add_rows, argmax, the
// predictor's fire mask, and the row gather / scaled scatter of mixture-of-experts layers) and the two kernels the profile
// measures with (an empty kernel, a streaming read).
#include <cuda_fp16.h>

#include "ops/cuda/cuda_common.cuh"
#include "ops/cuda/kernels.h"

namespace hc::ops::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ int64_t thread_index() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t thread_stride() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

// Sum of v over the block (every thread gets it); `red` holds one float per warp.
__device__ float block_sum(float v, float* red) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  v = warp_sum(v);
  if (lane == 0) red[warp] = v;
  __syncthreads();
  float s = 0.0f;
  for (int w = 0; w < static_cast<int>(blockDim.x / kWarp); ++w) s += red[w];
  return s;
}

// fire[t * n_cols + j] = x[t * n + c(j)] >= threshold, c(j) = cols ? cols[j] : j (NaN: 0).
__global__ void fire_mask_kernel(const float* x, int64_t n, const int32_t* cols, int64_t n_cols,
                                 int64_t total, float threshold, uint8_t* fire) {
  for (int64_t e = thread_index(); e < total; e += thread_stride()) {
    const int64_t t = e / n_cols, j = e % n_cols;
    const int64_t c = cols ? static_cast<int64_t>(cols[j]) : j;
    fire[e] = x[t * n + c] >= threshold ? 1 : 0;
  }
}

// In place over p [n]: e_i = expf(p_i - max), then e_i * (float)(1 / their double sum).
__device__ void softmax_row(float* p, int n) {
  float m = -INFINITY;
  for (int i = 0; i < n; ++i) m = fmaxf(m, p[i]);
  double s = 0.0;
  for (int i = 0; i < n; ++i) {
    p[i] = expf(__fsub_rn(p[i], m));
    s += static_cast<double>(p[i]);
  }
  const float inv = static_cast<float>(1.0 / s);
  for (int i = 0; i < n; ++i) p[i] = __fmul_rn(p[i], inv);
}

// ops/cpu/moe_topk.h for row t of x (one thread a row; pick j is the largest (value, -index)
// below pick j - 1 in that order).
__global__ void moe_topk_kernel(float* x, int64_t n_tok, int n_expert, int k, int kind,
                                bool norm_w, float w_scale, int32_t* ids, float* w) {
  for (int64_t t = thread_index(); t < n_tok; t += thread_stride()) {
    float* p = x + t * n_expert;
    if (kind == 0) {
      softmax_row(p, n_expert);
    } else if (kind == 1) {
      for (int e = 0; e < n_expert; ++e) p[e] = __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-p[e])));
    }
    int32_t* id = ids + t * k;
    float* wt = w + t * k;
    float pv = 0.0f;
    int pe = -1;
    for (int j = 0; j < k; ++j) {
      int best = -1;
      float bv = 0.0f;
      for (int e = 0; e < n_expert; ++e) {
        const float v = p[e];
        const bool below = pe < 0 || v < pv || (v == pv && e > pe);
        if (below && (best < 0 || v > bv)) {
          best = e;
          bv = v;
        }
      }
      if (best < 0) best = 0;
      id[j] = best;
      wt[j] = bv;
      pv = bv;
      pe = best;
    }
    if (kind == 2) softmax_row(wt, k);
    if (norm_w) {
      double s = 0.0;
      for (int j = 0; j < k; ++j) s += static_cast<double>(wt[j]);
      const float sf = fmaxf(static_cast<float>(s), 6.103515625e-5f);
      for (int j = 0; j < k; ++j) wt[j] = __fdiv_rn(wt[j], sf);
    }
    if (w_scale != 0.0f && w_scale != 1.0f)
      for (int j = 0; j < k; ++j) wt[j] = __fmul_rn(wt[j], w_scale);
  }
}

__global__ void moe_combine_kernel(const float* y, const float* w, int k, int64_t n,
                                   int64_t total, float* out) {
  for (int64_t e = thread_index(); e < total; e += thread_stride()) {
    const int64_t t = e / n, i = e % n;
    float acc = __fmul_rn(y[(t * k) * n + i], w[t * k]);
    for (int j = 1; j < k; ++j) acc = __fadd_rn(acc, __fmul_rn(y[(t * k + j) * n + i], w[t * k + j]));
    out[e] = acc;
  }
}

// One block per row: the first index of the row's largest value (NaN never; all NaN: 0). Each
// thread keeps its stride's first largest, then the block keeps, of two candidates, the larger
// value or, on equal values, the smaller index (comparisons with NaN are false).
__global__ void argmax_kernel(const float* x, int64_t n, int32_t* out) {
  __shared__ float bv[kThreads];
  __shared__ int64_t bi[kThreads];
  const float* xr = x + blockIdx.x * n;
  float v = -INFINITY;
  int64_t i = n;  // none yet
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const float xj = xr[j];
    if (xj > v || (xj == v && j < i)) {
      v = xj;
      i = j;
    }
  }
  bv[threadIdx.x] = v;
  bi[threadIdx.x] = i;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (static_cast<int>(threadIdx.x) < s) {
      const float ov = bv[threadIdx.x + s];
      const int64_t oi = bi[threadIdx.x + s];
      if (ov > bv[threadIdx.x] || (ov == bv[threadIdx.x] && oi < bi[threadIdx.x])) {
        bv[threadIdx.x] = ov;
        bi[threadIdx.x] = oi;
      }
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = bi[0] < n ? static_cast<int32_t>(bi[0]) : 0;
}

// One block per row: out = x / sqrt(mean(x^2) + eps) * w, (x * scale) * w as ggml.
__global__ void rmsnorm_kernel(float* out, const float* x, const float* w, int64_t n, float eps) {
  __shared__ float red[kThreads / kWarp];
  const float* xr = x + blockIdx.x * n;
  float* o = out + blockIdx.x * n;
  float s = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s = fmaf(xr[i], xr[i], s);
  const float mean = block_sum(s, red) / static_cast<float>(n);
  const float scale = 1.0f / sqrtf(mean + eps);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) o[i] = __fmul_rn(xr[i], scale) * w[i];
}

// One thread per (token, head, pair i): theta_i = pos * theta_scale^i by ggml's float
// recurrence, divided by freq_factors[i], scaled; the pair (x[2i], x[2i + 1]) rotated as
// ops::rope_apply, or with neox (x[i], x[i + n_rot/2]) as ops::rope_apply_neox.
__global__ void rope_kernel(float* x, int64_t n_tok, int n_head, int head_dim, int n_rot, int pos0,
                            const int32_t* pos_at, float theta_scale, float freq_scale, const float* freq_factors,
                            bool neox) {
  const int n_pair = n_rot / 2;
  const int64_t n = n_tok * n_head * n_pair;
  if (pos_at) pos0 = max(*pos_at, 0);
  for (int64_t i = thread_index(); i < n; i += thread_stride()) {
    const int pair = static_cast<int>(i % n_pair);
    const int64_t th = i / n_pair;  // token * n_head + head
    const int64_t t = th / n_head;
    float theta = static_cast<float>(pos0 + t);
    for (int k = 0; k < pair; ++k) theta *= theta_scale;
    const float ff = freq_factors ? freq_factors[pair] : 1.0f;
    float s, c;
    sincosf(freq_scale * (theta / ff), &s, &c);
    float* p = x + th * head_dim + (neox ? pair : 2 * pair);
    const int gap = neox ? n_pair : 1;  // the pair's second element
    const float x0 = p[0], x1 = p[gap];
    p[0] = fmaf(x0, c, -__fmul_rn(x1, s));
    p[gap] = fmaf(x0, s, __fmul_rn(x1, c));
  }
}

__global__ void kv_store_kernel(const float* k, const float* v, int64_t n_tok, int pos0,
                                const int32_t* pos_at, int64_t kv_dim, int n_ctx,
                                __half* k_cache, __half* v_cache_t) {
  if (pos_at) pos0 = max(*pos_at, 0);
  for (int64_t i = thread_index(); i < n_tok * kv_dim; i += thread_stride()) {
    const int64_t t = i / kv_dim, d = i % kv_dim;
    if (pos0 + t >= n_ctx) continue;  // a device position past the cache
    k_cache[(pos0 + t) * kv_dim + d] = __float2half_rn(k[i]);
    v_cache_t[d * n_ctx + pos0 + t] = __float2half_rn(v[i]);
  }
}

__global__ void glu_kernel(float* gate, const float* up, int64_t n, int kind) {
  for (int64_t i = thread_index(); i < n; i += thread_stride()) {
    gate[i] = glu_value(gate[i], kind == 3 ? 0.0f : up[i], kind);
  }
}

__global__ void ungated_relu_kernel(float* h, int64_t n_rows, int64_t n, const uint8_t* fire,
                                    int64_t ld_fire, float threshold) {
  for (int64_t i = thread_index(); i < n; i += thread_stride()) {
    const int64_t t = i / n_rows, j = i % n_rows;
    const float r = h[i] > 0.0f ? h[i] : 0.0f;
    const bool f = fire ? fire[t * ld_fire + j] != 0 : r > threshold;
    h[i] = f ? r : 0.0f;
  }
}

__global__ void add_kernel(float* y, const float* x, int64_t n) {
  for (int64_t i = thread_index(); i < n; i += thread_stride()) y[i] += x[i];
}

__global__ void add_rows_kernel(float* y, const float* b, int64_t n_tok, int64_t n) {
  for (int64_t i = thread_index(); i < n_tok * n; i += thread_stride()) y[i] += b[i % n];
}

// One thread per element of the n rows: dst[j] = src[idx[j]], a plain copy.
__global__ void get_rows_kernel(float* dst, const float* src, const int32_t* idx, int64_t n,
                                int64_t width) {
  for (int64_t e = thread_index(); e < n * width; e += thread_stride()) {
    const int64_t j = e / width, i = e % width;
    dst[e] = src[static_cast<int64_t>(idx[j]) * width + i];
  }
}

// dst[idx[j]] = src[j] * scale[j], one rounded product (__fmul_rn: never fused into anything).
__global__ void set_rows_scaled_kernel(float* dst, const float* src, const int32_t* idx,
                                       const float* scale, int64_t n, int64_t width) {
  for (int64_t e = thread_index(); e < n * width; e += thread_stride()) {
    const int64_t j = e / width, i = e % width;
    dst[static_cast<int64_t>(idx[j]) * width + i] = __fmul_rn(src[e], scale[j]);
  }
}

__global__ void empty_kernel() {}

// Streams src with 4 independent loads in flight per thread; the xor of everything is written
// only if it matches an unlikely constant, so the loads cannot be optimised away.
__global__ void read_kernel(const uint4* src, int64_t n, uint4* sink) {
  const int64_t stride = thread_stride();
  int64_t i = thread_index();
  uint4 acc = make_uint4(0, 0, 0, 0);
  for (; i + 3 * stride < n; i += 4 * stride) {
    const uint4 a = src[i], b = src[i + stride], c = src[i + 2 * stride], d = src[i + 3 * stride];
    acc.x ^= a.x ^ b.x ^ c.x ^ d.x;
    acc.y ^= a.y ^ b.y ^ c.y ^ d.y;
    acc.z ^= a.z ^ b.z ^ c.z ^ d.z;
    acc.w ^= a.w ^ b.w ^ c.w ^ d.w;
  }
  for (; i < n; i += stride) {
    const uint4 a = src[i];
    acc.x ^= a.x, acc.y ^= a.y, acc.z ^= a.z, acc.w ^= a.w;
  }
  if (acc.x == 0x9e3779b9u && acc.y == 0x7f4a7c15u && acc.z == acc.w) *sink = acc;
}

}  // namespace

void launch_rmsnorm(float* out, const float* x, const float* w, int64_t n_tok, int64_t n, float eps,
                    cudaStream_t stream) {
  if (n_tok <= 0 || n <= 0) return;
  rmsnorm_kernel<<<static_cast<unsigned>(n_tok), kThreads, 0, stream>>>(out, x, w, n, eps);
}

void launch_rope(float* x, int64_t n_tok, int n_head, int head_dim, int n_rot, int pos0,
                 const int32_t* pos_at, float theta_scale, float freq_scale, const float* freq_factors, bool neox,
                 cudaStream_t stream) {
  if (n_tok <= 0 || n_head <= 0 || n_rot < 2) return;
  const int64_t n = n_tok * n_head * (n_rot / 2);
  rope_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(
      x, n_tok, n_head, head_dim, n_rot, pos0, pos_at, theta_scale, freq_scale, freq_factors, neox);
}

void launch_kv_store(const float* k, const float* v, int64_t n_tok, int pos0,
                     const int32_t* pos_at, int64_t kv_dim,
                     int n_ctx, uint16_t* k_cache, uint16_t* v_cache_t, cudaStream_t stream) {
  const int64_t n = n_tok * kv_dim;
  if (n <= 0) return;
  kv_store_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(
      k, v, n_tok, pos0, pos_at, kv_dim, n_ctx, reinterpret_cast<__half*>(k_cache),
      reinterpret_cast<__half*>(v_cache_t));
}

void launch_glu(float* gate, const float* up, int64_t n, int glu_kind, cudaStream_t stream) {
  if (n <= 0) return;
  glu_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(gate, up, n, glu_kind);
}

void launch_ungated_relu(float* h, int64_t n_rows, int64_t n_tok, const uint8_t* fire,
                         int64_t ld_fire, float threshold, cudaStream_t stream) {
  const int64_t n = n_rows * n_tok;
  if (n <= 0) return;
  ungated_relu_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(h, n_rows, n, fire, ld_fire,
                                                                     threshold);
}

void launch_moe_topk(float* x, int64_t n_tok, int n_expert, int k, int kind, bool norm_w,
                     float w_scale, int32_t* ids, float* w, cudaStream_t stream) {
  if (n_tok <= 0) return;
  moe_topk_kernel<<<grid_for(n_tok, kThreads), kThreads, 0, stream>>>(x, n_tok, n_expert, k, kind,
                                                                     norm_w, w_scale, ids, w);
}

void launch_moe_combine(const float* y, const float* w, int64_t n_tok, int k, int64_t n,
                        float* out, cudaStream_t stream) {
  const int64_t total = n_tok * n;
  if (total <= 0) return;
  moe_combine_kernel<<<grid_for(total, kThreads), kThreads, 0, stream>>>(y, w, k, n, total, out);
}

void launch_argmax(const float* x, int64_t n_rows, int64_t n, int32_t* out, cudaStream_t stream) {
  if (n_rows <= 0) return;
  argmax_kernel<<<static_cast<unsigned>(n_rows), kThreads, 0, stream>>>(x, n, out);
}

void launch_fire_mask(const float* x, int64_t n_tok, int64_t n, const int32_t* cols,
                      int64_t n_cols, float threshold, uint8_t* fire, cudaStream_t stream) {
  const int64_t total = n_tok * n_cols;
  if (total <= 0) return;
  fire_mask_kernel<<<grid_for(total, kThreads), kThreads, 0, stream>>>(x, n, cols, n_cols, total,
                                                                      threshold, fire);
}

void launch_add(float* y, const float* x, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  add_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(y, x, n);
}

void launch_add_rows(float* y, const float* b, int64_t n_tok, int64_t n, cudaStream_t stream) {
  if (n_tok <= 0 || n <= 0) return;
  add_rows_kernel<<<grid_for(n_tok * n, kThreads), kThreads, 0, stream>>>(y, b, n_tok, n);
}

void launch_get_rows(float* dst, const float* src, const int32_t* idx, int64_t n, int64_t width,
                     cudaStream_t stream) {
  if (n <= 0 || width <= 0) return;
  get_rows_kernel<<<grid_for(n * width, kThreads), kThreads, 0, stream>>>(dst, src, idx, n, width);
}

void launch_set_rows_scaled(float* dst, const float* src, const int32_t* idx, const float* scale,
                            int64_t n, int64_t width, cudaStream_t stream) {
  if (n <= 0 || width <= 0) return;
  set_rows_scaled_kernel<<<grid_for(n * width, kThreads), kThreads, 0, stream>>>(dst, src, idx,
                                                                                 scale, n, width);
}

void launch_empty(cudaStream_t stream) { empty_kernel<<<1, 1, 0, stream>>>(); }

void launch_read(const uint4* src, int64_t n, uint4* sink, cudaStream_t stream) {
  constexpr int kReadThreads = 512;
  if (n <= 0) return;
  const int64_t per_thread = 16;  // words per thread: enough blocks for every SM
  read_kernel<<<grid_for((n + per_thread - 1) / per_thread, kReadThreads), kReadThreads, 0,
                stream>>>(src, n, sink);
}

}  // namespace hc::ops::cuda
