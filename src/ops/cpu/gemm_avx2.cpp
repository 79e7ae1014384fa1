// AVX2 micro-kernels of the packed float GEMM (layouts in gemm_kernels.h) for CPUs without
// AVX-512: a panel's 16 rows as two ymm halves. Every output is the same fma chain over k as in
// the scalar twin (gemm.cpp) and the AVX-512 kernel, so the bits are theirs. Integer weights
// have no AVX2 GEMM: they take the per-row dot products (matmul.cpp).
#include <immintrin.h>

#include <cstdint>

#include "ops/cpu/gemm_kernels.h"

namespace hc::ops::gemm_detail {
namespace {

// Lanes [8h, 8h + 8) of a row mask for nrows rows, as maskload / maskstore want it.
inline __m256i half_mask(int nrows, int h) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(nrows - 8 * h), lane);
}

// One column of 16 weights as two halves: float, or fp16 (the F16 decode layout, 32-byte
// aligned) widened.
inline void load_w(const float* p, __m256& lo, __m256& hi) {
  lo = _mm256_loadu_ps(p);
  hi = _mm256_loadu_ps(p + 8);
}
inline void load_w(const uint16_t* p, __m256& lo, __m256& hi) {
  lo = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(p)));
  hi = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(p + 8)));
}

// C tokens (C <= 6: 2C accumulators, two weights and a broadcast fit the 16 ymm registers).
template <int C, typename T>
void float_tile(const T* panel, const float* x, int64_t ldx, int64_t k0, int64_t kc,
                int64_t t0, float* y, int64_t ldy, int nrows, bool accumulate) {
  const __m256i m0 = half_mask(nrows, 0), m1 = half_mask(nrows, 1);
  __m256 lo[C], hi[C];
  const float* xr[C];
#pragma GCC unroll 6
  for (int c = 0; c < C; ++c) {
    float* yc = y + (t0 + c) * ldy;
    lo[c] = accumulate ? _mm256_maskload_ps(yc, m0) : _mm256_setzero_ps();
    hi[c] = accumulate ? _mm256_maskload_ps(yc + 8, m1) : _mm256_setzero_ps();
    xr[c] = x + (t0 + c) * ldx + k0;
  }
  for (int64_t k = 0; k < kc; ++k) {
    __m256 w0, w1;
    load_w(panel + k * kLanes, w0, w1);
#pragma GCC unroll 6
    for (int c = 0; c < C; ++c) {
      const __m256 xv = _mm256_broadcast_ss(xr[c] + k);
      lo[c] = _mm256_fmadd_ps(w0, xv, lo[c]);
      hi[c] = _mm256_fmadd_ps(w1, xv, hi[c]);
    }
  }
#pragma GCC unroll 6
  for (int c = 0; c < C; ++c) {
    float* yc = y + (t0 + c) * ldy;
    _mm256_maskstore_ps(yc, m0, lo[c]);
    _mm256_maskstore_ps(yc + 8, m1, hi[c]);
  }
}

template <typename T>
void float_tile_n(int n, const T* panel, const float* x, int64_t ldx, int64_t k0, int64_t kc,
                  int64_t t0, float* y, int64_t ldy, int nrows, bool accumulate) {
#define HC_FT(c) \
  case c: return float_tile<c, T>(panel, x, ldx, k0, kc, t0, y, ldy, nrows, accumulate)
  switch (n) {
    HC_FT(6); HC_FT(5); HC_FT(4); HC_FT(3); HC_FT(2);
    default: return float_tile<1, T>(panel, x, ldx, k0, kc, t0, y, ldy, nrows, accumulate);
  }
#undef HC_FT
}

template <typename T>
void float_kernel(const T* panel, const float* x, int64_t ldx, int64_t k0, int64_t kc,
                  int64_t t0, int nt, float* y, int64_t ldy, int nrows, bool accumulate) {
  for (int c = 0; c < nt; c += 6) {  // the token tile in passes of 6 (the panel stays in L1)
    const int n = nt - c < 6 ? nt - c : 6;
    float_tile_n<T>(n, panel, x, ldx, k0, kc, t0 + c, y, ldy, nrows, accumulate);
  }
}

Kernels make() {
  Kernels k;
  k.float_kernel = float_kernel<float>;
  k.f16_kernel = float_kernel<uint16_t>;
  return k;
}

}  // namespace

const Kernels& avx2_float_kernels() {
  static const Kernels k = make();
  return k;
}

}  // namespace hc::ops::gemm_detail
