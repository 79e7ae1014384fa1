// The down half of the hot-neuron FFN over the transposed down matrix Dt [n_rows, n_out]:
// out[t] = sum_j h[t, j] * Dt[row j], reading only the rows some token activates.
//
// sparse_down_kernel<T, NT>: grid (column blocks, splits). A block of 128 threads owns 1024
// output columns (8 per thread) of one contiguous range of neurons (its split). It walks its
// range 128 neurons at a time: each thread tests one neuron (h != 0 for some token), a ballot
// and a prefix over the warps compact the active ones, in order, into shared memory; then every
// thread streams its 8 columns of each active row. Each thread owns its accumulators, so no
// atomics; the splits (which give the GPU enough blocks when n_out is small) are added in split
// order by sum_partials_kernel, so the result does not depend on scheduling.
#include "ops/cuda/cuda_common.cuh"
#include "ops/cuda/dequant.cuh"
#include "ops/cuda/kernels.h"

namespace hc::ops::cuda {
namespace {

constexpr int kDownThreads = kDownColumns / kGroup;  // 128
constexpr int kDownWarps = kDownThreads / kWarp;

template <GgmlType T, int NT>
__global__ void __launch_bounds__(kDownThreads) sparse_down_kernel(const DownParams p) {
  __shared__ int64_t rows[kDownThreads];  // compacted active neurons' rows of Dt
  __shared__ float hs[kDownThreads][NT];  // [active, NT] their activations
  __shared__ int warp_count[kDownWarps];
  const int tid = threadIdx.x, lane = tid % kWarp, warp = tid / kWarp;
  const int64_t col0 = static_cast<int64_t>(blockIdx.x) * kDownColumns + tid * kGroup;
  const int64_t per_split = (p.n_rows + p.n_split - 1) / p.n_split;
  const int64_t jb = blockIdx.y * per_split;
  const int64_t je = jb + per_split < p.n_rows ? jb + per_split : p.n_rows;
  float acc[NT][kGroup] = {};
  for (int64_t s0 = jb; s0 < je; s0 += kDownThreads) {
    const int64_t j = s0 + tid;
    float hv[NT];
    bool active = false;
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      hv[t] = j < je && t < p.n_tok ? p.h[t * p.n_rows + j] : 0.0f;
      active = active || hv[t] != 0.0f;
    }
    const unsigned ballot = __ballot_sync(0xffffffffu, active);
    if (lane == 0) warp_count[warp] = __popc(ballot);
    __syncthreads();
    int base = 0, total = 0;
#pragma unroll
    for (int w = 0; w < kDownWarps; ++w) {
      base += w < warp ? warp_count[w] : 0;
      total += warp_count[w];
    }
    if (active) {
      const int pos = base + __popc(ballot & ((1u << lane) - 1u));
      rows[pos] = p.idx ? p.idx[j] : j;
#pragma unroll
      for (int t = 0; t < NT; ++t) hs[pos][t] = hv[t];
    }
    __syncthreads();
    if (col0 < p.n_out) {
#pragma unroll 4
      for (int i = 0; i < total; ++i) {
        float w[kGroup];
        Dequant<T>::group(p.dt + rows[i] * p.nb1, col0, p.n_out, w);
#pragma unroll
        for (int t = 0; t < NT; ++t) {
          const float hh = hs[i][t];
#pragma unroll
          for (int e = 0; e < kGroup; ++e) acc[t][e] = fmaf(hh, w[e], acc[t][e]);
        }
      }
    }
    __syncthreads();  // rows / hs / warp_count are rewritten by the next step
  }
  if (col0 >= p.n_out) return;
  float* part = p.part + blockIdx.y * p.n_tok * p.n_out;  // [n_tok, n_out] of this split
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    if (t >= p.n_tok) break;
#pragma unroll
    for (int e = 0; e < kGroup; ++e) {
      if (col0 + e < p.n_out) part[t * p.n_out + col0 + e] = acc[t][e];
    }
  }
}

// out[i] = sum over s of part[s * n + i], in split order.
__global__ void sum_partials_kernel(const float* part, int n_split, int64_t n, float* out) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    float s = 0.0f;
    for (int k = 0; k < n_split; ++k) s += part[k * n + i];
    out[i] = s;
  }
}

}  // namespace

bool launch_sparse_down(GgmlType t, const DownParams& p, cudaStream_t stream) {
  const int64_t col_blocks = (p.n_out + kDownColumns - 1) / kDownColumns;
  return dispatch_weight_type(t, [&](auto tag) {
    if (col_blocks == 0 || p.n_tok <= 0) return;
    const dim3 grid(static_cast<unsigned>(col_blocks), static_cast<unsigned>(p.n_split));
    dispatch_tokens(p.n_tok, [&](auto nt) {
      sparse_down_kernel<decltype(tag)::value, decltype(nt)::value>
          <<<grid, kDownThreads, 0, stream>>>(p);
    });
  });
}

void launch_sum_partials(const float* part, int n_split, int64_t n, float* out,
                         cudaStream_t stream) {
  constexpr int kThreads = 256;
  if (n <= 0) return;
  sum_partials_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(part, n_split, n, out);
}

}  // namespace hc::ops::cuda
