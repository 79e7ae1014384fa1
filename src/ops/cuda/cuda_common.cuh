// Device-side helpers shared by the CUDA kernels (ops/cuda/*.cu): reductions, activations and
// the per-weight-type dispatch used by every kernel that reads a weight matrix.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "core/dtype.h"

namespace hc::ops::cuda {

constexpr int kWarp = 32;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = kWarp / 2; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// act(g) of ops::GluKind (0 = SiLU, 1 = ReLU, 2 = dReLU: ReLU on the gate): silu(g) = g /
// (1 + e^-g), as ggml_silu_f32.
__device__ __forceinline__ float glu_act(float g, int kind) {
  if (kind == 0) return g / (1.0f + expf(-g));
  return g > 0.0f ? g : 0.0f;
}

// act(g) * u as ggml's swiglu / reglu (ReGLU: 0 for g <= 0 whatever u is); dReLU (2):
// relu(g) * relu(u).
__device__ __forceinline__ float glu_value(float g, float u, int kind) {
  if (kind == 0) return glu_act(g, 0) * u;
  if (kind == 3) return g > 0.0f ? g : 0.0f;  // ungated ReLU (Falcon): u unused
  if (kind == 2) u = u > 0.0f ? u : 0.0f;
  return g > 0.0f ? g * u : 0.0f;
}

// A weight type as a compile-time tag, so one generic lambda launches the kernel of each type.
template <GgmlType T>
struct TypeTag {
  static constexpr GgmlType value = T;
};

// Calls f(TypeTag<t>{}) for every weight type the CUDA kernels implement (the set of
// quant::is_supported_weight_type); returns false, calling nothing, for any other type.
template <class F>
bool dispatch_weight_type(GgmlType t, F&& f) {
  switch (t) {
    case GgmlType::F32:
      f(TypeTag<GgmlType::F32>{});
      return true;
    case GgmlType::F16:
      f(TypeTag<GgmlType::F16>{});
      return true;
    case GgmlType::BF16:
      f(TypeTag<GgmlType::BF16>{});
      return true;
    case GgmlType::Q4_0:
      f(TypeTag<GgmlType::Q4_0>{});
      return true;
    case GgmlType::Q4_1:
      f(TypeTag<GgmlType::Q4_1>{});
      return true;
    case GgmlType::Q8_0:
      f(TypeTag<GgmlType::Q8_0>{});
      return true;
    case GgmlType::Q4_K:
      f(TypeTag<GgmlType::Q4_K>{});
      return true;
    case GgmlType::Q5_K:
      f(TypeTag<GgmlType::Q5_K>{});
      return true;
    case GgmlType::Q6_K:
      f(TypeTag<GgmlType::Q6_K>{});
      return true;
    default:
      return false;
  }
}

// Kernels templated on a token count NT run any n_tok <= NT; NT is the next of 1, 2, 4, 8.
template <class F>
void dispatch_tokens(int64_t n_tok, F&& f) {
  if (n_tok <= 1) {
    f(std::integral_constant<int, 1>{});
  } else if (n_tok <= 2) {
    f(std::integral_constant<int, 2>{});
  } else if (n_tok <= 4) {
    f(std::integral_constant<int, 4>{});
  } else {
    f(std::integral_constant<int, 8>{});
  }
}

// Blocks for n items of `per_block` each, capped for grid-stride kernels.
inline unsigned grid_for(int64_t n, int per_block) {
  const int64_t b = (n + per_block - 1) / per_block;
  return static_cast<unsigned>(b < 1 ? 1 : (b > 65535 * 16 ? 65535 * 16 : b));
}

}  // namespace hc::ops::cuda
