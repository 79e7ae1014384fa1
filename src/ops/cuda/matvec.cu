// Weight-streaming kernels: the dequantising mat-vec (decode matmuls and the gate / up passes
// of the FFN operators) and the row dequantiser feeding cuBLAS for larger batches.
//
// matvec_kernel<T, NT>: a block of 8 warps owns 16 consecutive output rows (2 per warp). The
// block stages x in shared memory 2048 elements (1024 for NT = 8) of each of NT <= 8 tokens at
// a time; per staged chunk each lane dequantises 8-element groups of its rows at
// lane-interleaved offsets (a warp reads 256 consecutive elements of a row per step, so weight
// reads are coalesced; all of a chunk's loads are issued before the first is used) and
// accumulates NT dot products in fp32 registers; a warp shuffle sums the lanes at the end. The
// weights are read exactly once per launch, which is what bounds the kernel (memory speed).
// A token's result does not depend on NT or on the other tokens: the chunk (2048 or 1024
// elements) is a multiple of a warp step (256), so every lane visits the groups lane * 8 +
// 256 * k of a row in the same order for any NT, with the same fmaf chain, and the same
// shuffle sum (CudaDevice::matmul_rows relies on this; the device contract's
// DeviceMatmul.RowsEqualOneRowCalls holds it).
#include "ops/cuda/cuda_common.cuh"
#include "ops/cuda/dequant.cuh"
#include "ops/cuda/kernels.h"

namespace hc::ops::cuda {
namespace {

constexpr int kMvWarps = 8;
constexpr int kMvRowsPerWarp = 2;
constexpr int kMvRowsPerBlock = kMvWarps * kMvRowsPerWarp;
// x elements per token staged in shared memory at a time (32 KiB for 4 and 8 tokens); a lane
// reads kSteps groups of a row per chunk, all issued before the first is used.
template <int NT>
constexpr int kMvChunk = NT >= 8 ? 1024 : 2048;

// Whether token t fires row j (modes kSkipUnfired / kGlu).
__device__ __forceinline__ bool fired(const MatvecParams& p, int64_t t, int64_t j) {
  if (p.fire) return p.fire[t * p.ld_fire + j] != 0;
  return fabsf(glu_act(p.gate[t * p.ldy + j], p.glu_kind)) > p.threshold;
}

// Whether row j is read at all: always for kPlain, else when some token fires it.
__device__ bool row_needed(const MatvecParams& p, int64_t j) {
  if (p.mode == MatvecMode::kPlain) return true;
  for (int64_t t = 0; t < p.n_tok; ++t) {
    if (fired(p, t, j)) return true;
  }
  return false;
}

__device__ void store(const MatvecParams& p, int64_t t, int64_t j, float dot, bool live) {
  // The gate pass of an FFN with biases (OPT): g = dot + bias[row] (row: the held neuron).
  if (p.bias && p.mode != MatvecMode::kGlu) dot += p.bias[p.idx ? p.idx[j] : j];
  float v = live ? dot : 0.0f;
  if (p.mode == MatvecMode::kGlu) {
    v = live && fired(p, t, j) ? glu_value(p.gate[t * p.ldy + j], dot, p.glu_kind) : 0.0f;
  }
  p.y[t * p.ldy + j] = v;
}

// xs [NT, kMvChunk] = x[t, c0 ..] for t < n_tok, 0 past the row or the tokens.
template <int NT>
__device__ void stage_x(const MatvecParams& p, int64_t c0, float (*xs)[kMvChunk<NT>]) {
  constexpr int kChunk = kMvChunk<NT>;
  __syncthreads();  // the previous chunk has been read by every warp
  for (int i = threadIdx.x; i < NT * kChunk; i += blockDim.x) {
    const int t = i / kChunk, k = i % kChunk;
    xs[t][k] = t < p.n_tok && c0 + k < p.ne0 ? p.x[t * p.ne0 + c0 + k] : 0.0f;
  }
  __syncthreads();
}

// acc[t] += row[c0 ..] . xs[t] over this lane's groups of the chunk. The groups are loaded
// (a group past the row reloads group 0 and is skipped) before any is used, so each warp
// has kSteps loads in flight.
template <GgmlType T, int NT>
__device__ void dot_chunk(const uint8_t* row, int64_t c0, int64_t ne0,
                          const float (*xs)[kMvChunk<NT>], float (&acc)[NT]) {
  constexpr int kSteps = kMvChunk<NT> / (kWarp * kGroup);
  const int lane = threadIdx.x % kWarp;
  float w[kSteps][kGroup];
#pragma unroll
  for (int s = 0; s < kSteps; ++s) {
    const int64_t k0 = c0 + (s * kWarp + lane) * kGroup;
    Dequant<T>::group(row, k0 < ne0 ? k0 : 0, ne0, w[s]);
  }
#pragma unroll
  for (int s = 0; s < kSteps; ++s) {
    const int g = (s * kWarp + lane) * kGroup;
    if (c0 + g >= ne0) break;
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      const float4 a = *reinterpret_cast<const float4*>(&xs[t][g]);
      const float4 b = *reinterpret_cast<const float4*>(&xs[t][g + 4]);
      float v = acc[t];
      v = fmaf(w[s][0], a.x, v), v = fmaf(w[s][1], a.y, v), v = fmaf(w[s][2], a.z, v);
      v = fmaf(w[s][3], a.w, v), v = fmaf(w[s][4], b.x, v), v = fmaf(w[s][5], b.y, v);
      v = fmaf(w[s][6], b.z, v), v = fmaf(w[s][7], b.w, v);
      acc[t] = v;
    }
  }
}

template <GgmlType T, int NT>
__global__ void __launch_bounds__(kMvWarps* kWarp, 2) matvec_kernel(const MatvecParams p) {
  __shared__ __align__(16) float xs[NT][kMvChunk<NT>];  // [NT, chunk] the staged x chunk
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t j0 = (static_cast<int64_t>(blockIdx.x) * kMvWarps + warp) * kMvRowsPerWarp;
  const uint8_t* rows[kMvRowsPerWarp];
  bool live[kMvRowsPerWarp];
  bool any = false;
  const uint8_t* w = p.w;
  if (p.ids) {  // matmul_id: this route's matrix of the stack
    const int64_t e = min(max(static_cast<int64_t>(p.ids[p.route]), int64_t{0}), p.n_mat - 1);
    w += e * p.id_stride;
  }
#pragma unroll
  for (int r = 0; r < kMvRowsPerWarp; ++r) {
    const int64_t j = j0 + r;
    live[r] = j < p.n_rows && row_needed(p, j);
    rows[r] = live[r] ? w + (p.idx ? p.idx[j] : j) * p.nb1 : nullptr;
    any = any || live[r];
  }
  float acc[kMvRowsPerWarp][NT] = {};
  if (__syncthreads_or(any)) {  // else no row of the block is read: skip staging x
    for (int64_t c0 = 0; c0 < p.ne0; c0 += kMvChunk<NT>) {
      stage_x<NT>(p, c0, xs);
#pragma unroll
      for (int r = 0; r < kMvRowsPerWarp; ++r) {
        if (live[r]) dot_chunk<T, NT>(rows[r], c0, p.ne0, xs, acc[r]);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kMvRowsPerWarp; ++r) {
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      const float dot = warp_sum(acc[r][t]);
      if (lane == t && t < p.n_tok && j0 + r < p.n_rows) store(p, t, j0 + r, dot, live[r]);
    }
  }
}

// launch_gate_up's kernel (kernels.h): the gate sweep over x's chunks, then, for the rows some
// token fires, the up sweep (x restaged only when a row spans more than one chunk, or when no
// row of the block needed the gate sweep).
template <GgmlType T, int NT>
__global__ void __launch_bounds__(kMvWarps* kWarp, 2) gate_up_kernel(const MatvecParams p) {
  __shared__ __align__(16) float xs[NT][kMvChunk<NT>];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t j0 = (static_cast<int64_t>(blockIdx.x) * kMvWarps + warp) * kMvRowsPerWarp;
  int64_t wrow[kMvRowsPerWarp];
  bool live[kMvRowsPerWarp];
  bool any = false;
#pragma unroll
  for (int r = 0; r < kMvRowsPerWarp; ++r) {
    const int64_t j = j0 + r;
    bool need = j < p.n_rows;
    if (need && p.fire) {  // the gate pass's kSkipUnfired: rows no token fires are not read
      need = false;
      for (int64_t t = 0; t < p.n_tok; ++t) need = need || p.fire[t * p.ld_fire + j] != 0;
    }
    live[r] = need;
    wrow[r] = need ? (p.idx ? p.idx[j] : j) : 0;
    any = any || need;
  }
  float acc[kMvRowsPerWarp][NT] = {};
  const bool block_gate = __syncthreads_or(any);
  if (block_gate) {
    for (int64_t c0 = 0; c0 < p.ne0; c0 += kMvChunk<NT>) {
      stage_x<NT>(p, c0, xs);
#pragma unroll
      for (int r = 0; r < kMvRowsPerWarp; ++r) {
        if (live[r]) dot_chunk<T, NT>(p.w + wrow[r] * p.nb1, c0, p.ne0, xs, acc[r]);
      }
    }
  }
  // g as the gate pass stores it (every lane holds the shuffle sum), and which tokens fire.
  float g[kMvRowsPerWarp][NT];
  bool fires[kMvRowsPerWarp][NT];
  bool up_live[kMvRowsPerWarp];
  bool any_up = false;
#pragma unroll
  for (int r = 0; r < kMvRowsPerWarp; ++r) {
    const int64_t j = j0 + r;
    up_live[r] = false;
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      float dot = warp_sum(acc[r][t]);
      if (p.bias && live[r]) dot += p.bias[wrow[r]];
      g[r][t] = live[r] ? dot : 0.0f;
      fires[r][t] = t < p.n_tok && j < p.n_rows &&
                    (p.fire ? p.fire[t * p.ld_fire + j] != 0
                            : fabsf(glu_act(g[r][t], p.glu_kind)) > p.threshold);
      up_live[r] = up_live[r] || fires[r][t];
    }
    any_up = any_up || up_live[r];
  }
  float acc_up[kMvRowsPerWarp][NT] = {};
  if (__syncthreads_or(any_up)) {
    const bool restage = p.ne0 > kMvChunk<NT> || !block_gate;
    for (int64_t c0 = 0; c0 < p.ne0; c0 += kMvChunk<NT>) {
      if (restage) stage_x<NT>(p, c0, xs);
#pragma unroll
      for (int r = 0; r < kMvRowsPerWarp; ++r) {
        if (up_live[r]) dot_chunk<T, NT>(p.w_up + wrow[r] * p.nb1_up, c0, p.ne0, xs, acc_up[r]);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kMvRowsPerWarp; ++r) {
    const int64_t j = j0 + r;
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      const float u = warp_sum(acc_up[r][t]);
      if (lane == t && t < p.n_tok && j < p.n_rows)
        p.y[t * p.ldy + j] = fires[r][t] ? glu_value(g[r][t], u, p.glu_kind) : 0.0f;
    }
  }
}

// out [n_rows, ne0] = rows row0.. of W as fp32, one 8-element group per thread and step.
template <GgmlType T>
__global__ void dequant_rows_kernel(const uint8_t* w, int64_t nb1, int64_t ne0, int64_t row0,
                                    int64_t n_rows, float* out) {
  const int64_t groups = (ne0 + kGroup - 1) / kGroup;  // per row
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n_rows * groups;
       i += stride) {
    const int64_t r = i / groups, k0 = (i % groups) * kGroup;
    float v[kGroup];
    Dequant<T>::group(w + (row0 + r) * nb1, k0, ne0, v);
    float* o = out + r * ne0 + k0;
#pragma unroll
    for (int e = 0; e < kGroup; ++e) {
      if (k0 + e < ne0) o[e] = v[e];
    }
  }
}

}  // namespace

namespace {
// One launch of a row kernel (matvec_kernel or gate_up_kernel) for weight type t and p.n_tok:
// pick(tag, nt) names the instantiation, 16 rows per block.
template <class Pick>
bool launch_rows(GgmlType t, const MatvecParams& p, cudaStream_t stream, Pick pick) {
  const int64_t blocks = (p.n_rows + kMvRowsPerBlock - 1) / kMvRowsPerBlock;
  return dispatch_weight_type(t, [&](auto tag) {
    if (blocks == 0 || p.n_tok <= 0) return;
    dispatch_tokens(p.n_tok, [&](auto nt) {
      pick(tag, nt)<<<static_cast<unsigned>(blocks), kMvWarps * kWarp, 0, stream>>>(p);
    });
  });
}
}  // namespace

bool launch_matvec(GgmlType t, const MatvecParams& p, cudaStream_t stream) {
  return launch_rows(t, p, stream, [](auto tag, auto nt) {
    return matvec_kernel<decltype(tag)::value, decltype(nt)::value>;
  });
}

bool launch_gate_up(GgmlType t, const MatvecParams& p, cudaStream_t stream) {
  return launch_rows(t, p, stream, [](auto tag, auto nt) {
    return gate_up_kernel<decltype(tag)::value, decltype(nt)::value>;
  });
}

bool launch_dequant_rows(GgmlType t, const uint8_t* w, int64_t nb1, int64_t ne0, int64_t row0,
                         int64_t n_rows, float* out, cudaStream_t stream) {
  constexpr int kThreads = 256;
  const int64_t groups = n_rows * ((ne0 + kGroup - 1) / kGroup);
  return dispatch_weight_type(t, [&](auto tag) {
    if (groups == 0) return;
    dequant_rows_kernel<decltype(tag)::value>
        <<<grid_for(groups, kThreads), kThreads, 0, stream>>>(w, nb1, ne0, row0, n_rows, out);
  });
}

}  // namespace hc::ops::cuda
