// AVX-512 versions of ggml's vector primitives (see vec.h): the same instructions ggml's
// AVX-512 build executes, so the bits equal the scalar twins in vec.cpp.
//
// GCC 12's own 512-bit intrinsics (_mm512_cvtph_ps, _mm512_reduce_add_ps) start from
// _mm512_undefined_ps() and trip -W(maybe-)uninitialized: a known false positive.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "ops/cpu/vec.h"

namespace hc::ops::vec {
namespace {

// 16 fp16 -> fp32, lanes at or beyond `valid` read as zero (and are not loaded).
inline __m512 load_f16x16(const fp16_t* p, int64_t valid) {
  if (valid >= 16) return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  const __mmask16 m = valid <= 0 ? 0 : static_cast<__mmask16>((1u << valid) - 1);
  return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
}

float dot_f16(const fp16_t* x, const fp16_t* y, int64_t n_valid, int64_t n) {
  const int64_t np = n & ~int64_t{63};
  __m512 a[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                 _mm512_setzero_ps()};
  for (int64_t i = 0; i < np && i < n_valid; i += 64) {
    for (int c = 0; c < 4; ++c) {
      const int64_t e = i + 16 * c, left = n_valid - e;
      a[c] = _mm512_fmadd_ps(load_f16x16(x + e, left), load_f16x16(y + e, left), a[c]);
    }
  }
  a[0] = _mm512_add_ps(a[0], a[2]);
  a[1] = _mm512_add_ps(a[1], a[3]);
  double sum = _mm512_reduce_add_ps(_mm512_add_ps(a[0], a[1]));
  for (int64_t e = np; e < n_valid; ++e)
    sum += static_cast<double>(fp16_to_fp32(x[e]) * fp16_to_fp32(y[e]));
  return static_cast<float>(sum);
}

float dot_f16_tinyblas(const fp16_t* x, const fp16_t* y, int64_t n_valid, int64_t n) {
  __m512 acc = _mm512_setzero_ps();
  const int64_t end = n_valid < n ? n_valid : n;
  for (int64_t e = 0; e < end; e += 16)
    acc = _mm512_fmadd_ps(load_f16x16(x + e, end - e), load_f16x16(y + e, end - e), acc);
  return _mm512_reduce_add_ps(acc);
}

// ggml_v_expf, AVX-512 branch of ggml-cpu/vec.h.
inline __m512 v_expf16(__m512 x) {
  const __m512 r = _mm512_set1_ps(0x1.8p23f);
  const __m512 z = _mm512_fmadd_ps(x, _mm512_set1_ps(0x1.715476p+0f), r);
  const __m512 n = _mm512_sub_ps(z, r);
  const __m512 b = _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.7f7d1cp-20f),
                                    _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.62e4p-1f), x));
  const __mmask16 d = _mm512_cmp_ps_mask(_mm512_abs_ps(n), _mm512_set1_ps(192), _CMP_GT_OQ);
  const __m512 u = _mm512_mul_ps(b, b);
  const __m512 j = _mm512_fmadd_ps(
      _mm512_fmadd_ps(
          _mm512_fmadd_ps(_mm512_set1_ps(0x1.0e4020p-7f), b, _mm512_set1_ps(0x1.573e2ep-5f)), u,
          _mm512_fmadd_ps(_mm512_set1_ps(0x1.555e66p-3f), b, _mm512_set1_ps(0x1.fffdb6p-2f))),
      u, _mm512_fmadd_ps(_mm512_set1_ps(0x1.ffffecp-1f), b, _mm512_set1_ps(1.0f)));
  const __m512 res = _mm512_scalef_ps(j, n);
  if (_mm512_kortestz(d, d)) return res;
  const __m512 alt = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(n, _mm512_setzero_ps(), _CMP_LE_OQ),
                                          _mm512_set1_ps(INFINITY), _mm512_setzero_ps());
  return _mm512_mask_blend_ps(d, res, alt);
}

double soft_max(float* y, const float* x, int64_t n_valid, int64_t n, float max) {
  const int64_t n16 = n & ~int64_t{15};
  double sum = 0.0;
  const __m512 vmax = _mm512_set1_ps(max);
  for (int64_t i = 0; i < n16 && i < n_valid; i += 16) {
    const int64_t left = n_valid - i;
    if (left >= 16) {
      const __m512 v = v_expf16(_mm512_sub_ps(_mm512_loadu_ps(x + i), vmax));
      _mm512_storeu_ps(y + i, v);
      sum += static_cast<double>(_mm512_reduce_add_ps(v));
    } else {  // masked lanes: exp(-inf) = 0, as ggml's mask gives
      const __mmask16 m = static_cast<__mmask16>((1u << left) - 1);
      const __m512 v =
          _mm512_maskz_mov_ps(m, v_expf16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), vmax)));
      _mm512_mask_storeu_ps(y + i, m, v);
      sum += static_cast<double>(_mm512_reduce_add_ps(v));
    }
  }
  for (int64_t i = n16; i < n_valid; ++i) {
    const float v = std::exp(x[i] - max);
    sum += static_cast<double>(v);
    y[i] = v;
  }
  return sum;
}

void swiglu(float* y, const float* x, const float* g, int64_t n) {
  const int64_t n16 = n & ~int64_t{15};
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int64_t i = 0; i < n16; i += 16) {
    const __m512 xv = _mm512_loadu_ps(x + i);
    const __m512 e = v_expf16(_mm512_sub_ps(_mm512_setzero_ps(), xv));
    const __m512 silu = _mm512_div_ps(xv, _mm512_add_ps(one, e));
    _mm512_storeu_ps(y + i, _mm512_mul_ps(silu, _mm512_loadu_ps(g + i)));
  }
  for (int64_t i = n16; i < n; ++i) y[i] = x[i] / (1.0f + std::exp(-x[i])) * g[i];
}

}  // namespace

extern const Kernels kAvx512VecKernels;
const Kernels kAvx512VecKernels = {"avx512", dot_f16, dot_f16_tinyblas, soft_max, swiglu};

}  // namespace hc::ops::vec
