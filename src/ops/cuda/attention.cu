// Causal grouped-query attention over the fp16 KV cache (layouts of ops/device.h):
//   k_cache   [n_ctx, k_stride] fp16, KV head hk at offset hk * head_dim of a position's row
//   v_cache_t [n_head_kv * head_dim, v_stride] fp16, row hk * head_dim + d = dim d over positions
//
// attention_kernel: one block of 128 threads per (query head, token). q is rounded to fp16 as
// the host's attention does (ggml's f16 matmul rounds it); scores are fp32 dot products of that
// with the fp16 keys. The cache positions [0, pos0 + t] are walked 128 at a time with an online
// softmax in fp32 (running max m, running sum l, output rescaled by e^(m_old - m_new)); the
// softmax weights stay fp32 (the host rounds them to fp16: the tests allow for that). Each
// warp scores positions (lanes over the head dimension, coalesced key reads); each thread owns
// up to 4 output dimensions (head_dim <= 512).
#include <cuda_fp16.h>

#include "ops/cuda/cuda_common.cuh"
#include "ops/cuda/kernels.h"

namespace hc::ops::cuda {
namespace {

constexpr int kAttnThreads = 128;
constexpr int kAttnWarps = kAttnThreads / kWarp;
constexpr int kAttnChunk = 128;                        // cache positions per step
constexpr int kAttnDims = kMaxHeadDim / kAttnThreads;  // output dims per thread

// ps[jj] = scale * (q . k[j0 + jj]) for the chunk's nc positions.
__device__ void score_chunk(const AttentionParams& p, const float* qs, const __half* k, int64_t j0,
                            int nc, float* ps) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  for (int jj = warp; jj < nc; jj += kAttnWarps) {
    const __half* kr = k + (j0 + jj) * p.k_stride;
    float s = 0.0f;
    for (int d = lane; d < p.head_dim; d += kWarp) s = fmaf(qs[d], __half2float(kr[d]), s);
    s = warp_sum(s);
    if (lane == 0) ps[jj] = s * p.scale;
  }
}

__global__ void __launch_bounds__(kAttnThreads)
    attention_kernel(const AttentionParams p, int64_t t0) {
  __shared__ float qs[kMaxHeadDim];  // [head_dim] this head's q, rounded to fp16
  __shared__ float ps[kAttnChunk];   // the chunk's scores, then e^(score - m)
  const int h = blockIdx.x, tid = threadIdx.x, hd = p.head_dim;
  const int64_t t = t0 + blockIdx.y;
  const int hk = h / (p.n_head / p.n_head_kv);
  const int64_t q_dim = static_cast<int64_t>(p.n_head) * hd;
  const float* q = p.q + t * q_dim + static_cast<int64_t>(h) * hd;
  for (int d = tid; d < hd; d += kAttnThreads) qs[d] = __half2float(__float2half_rn(q[d]));
  __syncthreads();
  const __half* k = reinterpret_cast<const __half*>(p.k_cache) + static_cast<int64_t>(hk) * hd;
  const __half* v =
      reinterpret_cast<const __half*>(p.v_cache_t) + static_cast<int64_t>(hk) * hd * p.v_stride;
  const int64_t pos0 = p.pos_at ? max(*p.pos_at, 0) : p.pos0;
  const int64_t n_kv = min(pos0 + t + 1, p.v_stride);
  float m = -INFINITY, l = 0.0f;
  float acc[kAttnDims] = {};
  for (int64_t j0 = 0; j0 < n_kv; j0 += kAttnChunk) {
    const int nc = static_cast<int>(n_kv - j0 < kAttnChunk ? n_kv - j0 : kAttnChunk);
    score_chunk(p, qs, k, j0, nc, ps);
    __syncthreads();
    float m_new = m;
    for (int jj = 0; jj < nc; ++jj) m_new = fmaxf(m_new, ps[jj]);
    __syncthreads();  // every thread has the max before ps is overwritten
    if (tid < nc) ps[tid] = expf(ps[tid] - m_new);
    __syncthreads();
    const float corr = expf(m - m_new);  // 0 on the first chunk (m = -inf)
    float sum = 0.0f;
    for (int jj = 0; jj < nc; ++jj) sum += ps[jj];
    l = l * corr + sum;
#pragma unroll
    for (int i = 0; i < kAttnDims; ++i) {
      const int d = tid + i * kAttnThreads;
      if (d >= hd) break;
      const __half* vr = v + d * p.v_stride + j0;
      float s = 0.0f;
      for (int jj = 0; jj < nc; ++jj) s = fmaf(ps[jj], __half2float(vr[jj]), s);
      acc[i] = acc[i] * corr + s;
    }
    m = m_new;
    __syncthreads();  // ps is rewritten by the next chunk
  }
  float* o = p.out + t * q_dim + static_cast<int64_t>(h) * hd;
#pragma unroll
  for (int i = 0; i < kAttnDims; ++i) {
    const int d = tid + i * kAttnThreads;
    if (d < hd) o[d] = acc[i] / l;
  }
}

}  // namespace

void launch_attention(const AttentionParams& p, cudaStream_t stream) {
  constexpr int64_t kMaxGridY = 65535;
  for (int64_t t0 = 0; t0 < p.n_tok; t0 += kMaxGridY) {
    const int64_t nt = p.n_tok - t0 < kMaxGridY ? p.n_tok - t0 : kMaxGridY;
    const dim3 grid(static_cast<unsigned>(p.n_head), static_cast<unsigned>(nt));
    attention_kernel<<<grid, kAttnThreads, 0, stream>>>(p, t0);
  }
}

}  // namespace hc::ops::cuda
