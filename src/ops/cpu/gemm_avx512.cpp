// AVX-512 micro-kernels of the packed GEMM (layouts in gemm_kernels.h). One zmm lane per
// weight row: an integer sub-block costs sb / 4 vpdpbusd per token (64 products each, the
// activation's 4 bytes broadcast from memory), then four float ops per token; the scalar twins
// in gemm.cpp follow the same operation order.
// GCC 12 reports its own _mm512 intrinsics' internal "undefined" operands as maybe-uninitialised.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstring>

#include "ops/cpu/gemm_kernels.h"

namespace hc::ops::gemm_detail {
namespace {

inline int32_t load32(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

inline __mmask16 row_mask(int nrows) {
  return nrows >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << nrows) - 1);
}

template <int SB, bool kMin, int C>
void int_tile(const uint8_t* panel, const IntAct& a, int64_t t0, float* y, int64_t ldy,
              int nrows) {
  const IntFormat f{SB, kMin, 0};
  const int64_t stride = f.sub_stride();
  const int64_t ns = a.ns;
  const int8_t* xq[C];
  const float* dx[C];
  const int32_t* ci[C];
  const float* cf[C];
  #pragma GCC unroll 16
  for (int c = 0; c < C; ++c) {
    xq[c] = a.q + (t0 + c) * a.ldq;
    dx[c] = a.dx + (t0 + c) * ns;
    ci[c] = static_cast<const int32_t*>(a.corr) + (t0 + c) * ns;
    cf[c] = static_cast<const float*>(a.corr) + (t0 + c) * ns;
  }
  __m512 acc[C];
  #pragma GCC unroll 16
  for (int c = 0; c < C; ++c) acc[c] = _mm512_setzero_ps();
  for (int64_t s = 0; s < ns; ++s) {
    const uint8_t* p = panel + s * stride;
    __m512i is[C];
    #pragma GCC unroll 16
    for (int c = 0; c < C; ++c) is[c] = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int i = 0; i < SB / 4; ++i) {
      const __m512i wv = _mm512_loadu_si512(p + 64 * i);
      #pragma GCC unroll 16
      for (int c = 0; c < C; ++c)
        is[c] = _mm512_dpbusd_epi32(is[c], wv, _mm512_set1_epi32(load32(xq[c] + s * SB + 4 * i)));
    }
    const __m512 dv = _mm512_loadu_ps(reinterpret_cast<const float*>(p + SB * kLanes));
    if constexpr (kMin) {
      const __m512 mv = _mm512_loadu_ps(reinterpret_cast<const float*>(p + SB * kLanes + 64));
      #pragma GCC unroll 16
      for (int c = 0; c < C; ++c) {
        const __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(is[c]), _mm512_set1_ps(dx[c][s]));
        acc[c] = _mm512_fmadd_ps(dv, v, acc[c]);
        acc[c] = _mm512_fmadd_ps(mv, _mm512_set1_ps(cf[c][s]), acc[c]);
      }
    } else {
      #pragma GCC unroll 16
      for (int c = 0; c < C; ++c) {
        const __m512i d = _mm512_sub_epi32(is[c], _mm512_set1_epi32(ci[c][s]));
        const __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(d), _mm512_set1_ps(dx[c][s]));
        acc[c] = _mm512_fmadd_ps(dv, v, acc[c]);
      }
    }
  }
  const __mmask16 m = row_mask(nrows);
  #pragma GCC unroll 16
  for (int c = 0; c < C; ++c) _mm512_mask_storeu_ps(y + (t0 + c) * ldy, m, acc[c]);
}

template <int SB, bool kMin>
void int_kernel(const uint8_t* panel, const IntAct& a, int64_t t0, int nt, float* y, int64_t ldy,
                int nrows) {
  static_assert(kIntTokTile == 8);
  switch (nt) {
    case 8: return int_tile<SB, kMin, 8>(panel, a, t0, y, ldy, nrows);
    case 7: return int_tile<SB, kMin, 7>(panel, a, t0, y, ldy, nrows);
    case 6: return int_tile<SB, kMin, 6>(panel, a, t0, y, ldy, nrows);
    case 5: return int_tile<SB, kMin, 5>(panel, a, t0, y, ldy, nrows);
    case 4: return int_tile<SB, kMin, 4>(panel, a, t0, y, ldy, nrows);
    case 3: return int_tile<SB, kMin, 3>(panel, a, t0, y, ldy, nrows);
    case 2: return int_tile<SB, kMin, 2>(panel, a, t0, y, ldy, nrows);
    default: return int_tile<SB, kMin, 1>(panel, a, t0, y, ldy, nrows);
  }
}

// One column of 16 weights: float, or fp16 (the F16 decode layout, 32-byte aligned) widened.
inline __m512 load_w(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 load_w(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(p)));
}

template <int C, typename T>
void float_tile(const T* panel, const float* x, int64_t ldx, int64_t k0, int64_t kc,
                int64_t t0, float* y, int64_t ldy, int nrows, bool accumulate) {
  const __mmask16 m = row_mask(nrows);
  __m512 acc[C];
  const float* xr[C];
  #pragma GCC unroll 16
  for (int c = 0; c < C; ++c) {
    acc[c] = accumulate ? _mm512_maskz_loadu_ps(m, y + (t0 + c) * ldy) : _mm512_setzero_ps();
    xr[c] = x + (t0 + c) * ldx + k0;
  }
  for (int64_t k = 0; k < kc; ++k) {
    const __m512 w = load_w(panel + k * kLanes);
    #pragma GCC unroll 16
    for (int c = 0; c < C; ++c) acc[c] = _mm512_fmadd_ps(w, _mm512_set1_ps(xr[c][k]), acc[c]);
  }
  #pragma GCC unroll 16
  for (int c = 0; c < C; ++c) _mm512_mask_storeu_ps(y + (t0 + c) * ldy, m, acc[c]);
}

template <typename T>
void float_kernel(const T* panel, const float* x, int64_t ldx, int64_t k0, int64_t kc,
                  int64_t t0, int nt, float* y, int64_t ldy, int nrows, bool accumulate) {
  static_assert(kFloatTokTile == 12);
#define HC_FT(n) \
  case n: return float_tile<n, T>(panel, x, ldx, k0, kc, t0, y, ldy, nrows, accumulate)
  switch (nt) {
    HC_FT(12); HC_FT(11); HC_FT(10); HC_FT(9); HC_FT(8); HC_FT(7);
    HC_FT(6); HC_FT(5); HC_FT(4); HC_FT(3); HC_FT(2);
    default: return float_tile<1, T>(panel, x, ldx, k0, kc, t0, y, ldy, nrows, accumulate);
  }
#undef HC_FT
}

Kernels make() {
  Kernels k;
  k.int_kernel[0][0] = int_kernel<32, false>;
  k.int_kernel[0][1] = int_kernel<32, true>;
  k.int_kernel[1][0] = int_kernel<16, false>;
  k.int_kernel[1][1] = int_kernel<16, true>;
  k.float_kernel = float_kernel<float>;
  k.f16_kernel = float_kernel<uint16_t>;
  return k;
}

}  // namespace

const Kernels& avx512_kernels() {
  static const Kernels k = make();
  return k;
}

}  // namespace hc::ops::gemm_detail
