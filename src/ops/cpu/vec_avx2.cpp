// AVX2 versions of ggml's vector primitives in its AVX2 build's order (the avx2 flavour of
// vec.h): the instructions llama.cpp executes on an x86 CPU without AVX-512, so the bits equal
// the avx2 scalar twins in vec.cpp.
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "ops/cpu/vec.h"

namespace hc::ops::vec {
namespace {

// 8 fp16 -> fp32; lanes at or beyond `valid` read as zero (and are not loaded).
inline __m256 load_f16x8(const fp16_t* p, int64_t valid) {
  if (valid >= 8) return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  alignas(16) fp16_t t[8] = {};
  if (valid > 0) std::memcpy(t, p, static_cast<size_t>(valid) * sizeof(fp16_t));
  return _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(t)));
}

// GGML_F32x8_REDUCE's last step: (lo + hi), then two hadds.
inline float reduce_dot(__m256 s) {
  const __m128 t0 = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  const __m128 t1 = _mm_hadd_ps(t0, t0);
  return _mm_cvtss_f32(_mm_hadd_ps(t1, t1));
}

// sgemm's hsum(__m256), also soft_max's block sum.
inline float hsum(__m256 v) {
  __m128 x = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
  x = _mm_add_ps(x, _mm_movehl_ps(x, x));
  x = _mm_add_ss(x, _mm_movehdup_ps(x));
  return _mm_cvtss_f32(x);
}

// The products of x and yf (y widened) over [0, iend) in steps of 32 as ggml_vec_dot_f16: four
// accumulators of 8 lanes, x read only below `valid`.
inline __m256 dot_f16_body(const fp16_t* x, const float* yf, int64_t iend, int64_t valid) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = 0;
  for (; i < iend && i + 32 <= valid; i += 32) {
    a0 = _mm256_fmadd_ps(load_f16x8(x + i, 8), _mm256_loadu_ps(yf + i), a0);
    a1 = _mm256_fmadd_ps(load_f16x8(x + i + 8, 8), _mm256_loadu_ps(yf + i + 8), a1);
    a2 = _mm256_fmadd_ps(load_f16x8(x + i + 16, 8), _mm256_loadu_ps(yf + i + 16), a2);
    a3 = _mm256_fmadd_ps(load_f16x8(x + i + 24, 8), _mm256_loadu_ps(yf + i + 24), a3);
  }
  if (i < iend) {  // the step that crosses `valid`: chunks wholly past it add nothing
    __m256* a[4] = {&a0, &a1, &a2, &a3};
    for (int c = 0; c < 4; ++c) {
      const int64_t e = i + 8 * c, left = valid - e;
      if (left <= 0) break;
      *a[c] = _mm256_fmadd_ps(load_f16x8(x + e, left), _mm256_loadu_ps(yf + e), *a[c]);
    }
  }
  return _mm256_add_ps(_mm256_add_ps(a0, a2), _mm256_add_ps(a1, a3));
}

// y widened once per call (zero beyond `valid`), shared by every row of a call.
const float* widen_y(const fp16_t* y, int64_t iend, int64_t valid) {
  thread_local std::vector<float> buf;
  if (buf.size() < static_cast<size_t>(iend)) buf.resize(static_cast<size_t>(iend));
  for (int64_t e = 0; e < iend; e += 8) _mm256_storeu_ps(buf.data() + e, load_f16x8(y + e, valid - e));
  return buf.data();
}

float dot_f16_one(const fp16_t* x, const fp16_t* y, const float* yf, int64_t iend, int64_t np,
                  int64_t n_valid) {
  double sum = reduce_dot(dot_f16_body(x, yf, iend, n_valid));
  for (int64_t e = np; e < n_valid; ++e)
    sum += static_cast<double>(fp16_to_fp32(x[e]) * fp16_to_fp32(y[e]));
  return static_cast<float>(sum);
}

// The elements dot_f16 visits in steps: [0, iend), iend a multiple of 32.
inline int64_t dot_steps_end(int64_t n_valid, int64_t np) {
  const int64_t steps_end = n_valid <= 0 ? 0 : (n_valid + 31) & ~int64_t{31};
  return np < steps_end ? np : steps_end;
}

float dot_f16(const fp16_t* x, const fp16_t* y, int64_t n_valid, int64_t n) {
  const int64_t np = n & ~int64_t{31};
  const int64_t iend = dot_steps_end(n_valid, np);
  return dot_f16_one(x, y, widen_y(y, iend, n_valid), iend, np, n_valid);
}

void dot_f16_rows(const fp16_t* x, int64_t ldx, int64_t nr, const fp16_t* y, int64_t n_valid,
                  int64_t n, float* out) {
  const int64_t np = n & ~int64_t{31};
  const int64_t iend = dot_steps_end(n_valid, np);
  const float* yf = widen_y(y, iend, n_valid);
  for (int64_t r = 0; r < nr; ++r) out[r] = dot_f16_one(x + r * ldx, y, yf, iend, np, n_valid);
}

// tinyBLAS<8, __m256>: one accumulator over [0, end), x and y read only below end.
inline float tinyblas_one(const fp16_t* x, const float* yf, int64_t end) {
  __m256 acc = _mm256_setzero_ps();
  for (int64_t e = 0; e < end; e += 8)
    acc = _mm256_fmadd_ps(load_f16x8(x + e, end - e), _mm256_loadu_ps(yf + e), acc);
  return hsum(acc);
}

float dot_f16_tinyblas(const fp16_t* x, const fp16_t* y, int64_t n_valid, int64_t n) {
  const int64_t end = n_valid < n ? n_valid : n;
  const int64_t iend = end <= 0 ? 0 : (end + 7) & ~int64_t{7};
  return tinyblas_one(x, widen_y(y, iend, end), end);
}

void dot_f16_tinyblas_rows(const fp16_t* x, int64_t ldx, int64_t nr, const fp16_t* y,
                           int64_t n_valid, int64_t n, float* out) {
  const int64_t end = n_valid < n ? n_valid : n;
  const int64_t iend = end <= 0 ? 0 : (end + 7) & ~int64_t{7};
  const float* yf = widen_y(y, iend, end);
  int64_t r = 0;
  for (; r + 4 <= nr; r += 4) {  // four rows: independent FMA chains, y loaded once
    __m256 a[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};
    const fp16_t* xr = x + r * ldx;
    for (int64_t e = 0; e < end; e += 8) {
      const __m256 yv = _mm256_loadu_ps(yf + e);
      for (int k = 0; k < 4; ++k)
        a[k] = _mm256_fmadd_ps(load_f16x8(xr + k * ldx + e, end - e), yv, a[k]);
    }
    for (int k = 0; k < 4; ++k) out[r + k] = hsum(a[k]);
  }
  for (; r < nr; ++r) out[r] = tinyblas_one(x + r * ldx, yf, end);
}

// ggml_v_expf, __AVX2__ && __FMA__ branch of ggml-cpu/vec.h.
inline __m256 v_expf8(__m256 x) {
  const __m256 r = _mm256_set1_ps(0x1.8p23f);
  const __m256 z = _mm256_fmadd_ps(x, _mm256_set1_ps(0x1.715476p+0f), r);
  const __m256 n = _mm256_sub_ps(z, r);
  const __m256 b = _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.7f7d1cp-20f),
                                    _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.62e4p-1f), x));
  const __m256i e = _mm256_slli_epi32(_mm256_castps_si256(z), 23);
  const __m256 k = _mm256_castsi256_ps(_mm256_add_epi32(e, _mm256_castps_si256(_mm256_set1_ps(1))));
  const __m256i c = _mm256_castps_si256(
      _mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.f), n), _mm256_set1_ps(126), _CMP_GT_OQ));
  const __m256 u = _mm256_mul_ps(b, b);
  const __m256 j = _mm256_fmadd_ps(
      _mm256_fmadd_ps(
          _mm256_fmadd_ps(_mm256_set1_ps(0x1.0e4020p-7f), b, _mm256_set1_ps(0x1.573e2ep-5f)), u,
          _mm256_fmadd_ps(_mm256_set1_ps(0x1.555e66p-3f), b, _mm256_set1_ps(0x1.fffdb6p-2f))),
      u, _mm256_mul_ps(_mm256_set1_ps(0x1.ffffecp-1f), b));
  if (!_mm256_movemask_ps(_mm256_castsi256_ps(c))) return _mm256_fmadd_ps(j, k, k);
  const __m256i g = _mm256_and_si256(
      _mm256_castps_si256(_mm256_cmp_ps(n, _mm256_setzero_ps(), _CMP_LE_OQ)),
      _mm256_set1_epi32(static_cast<int>(0x82000000u)));
  const __m256 s1 = _mm256_castsi256_ps(_mm256_add_epi32(g, _mm256_set1_epi32(0x7f000000)));
  const __m256 s2 = _mm256_castsi256_ps(_mm256_sub_epi32(e, g));
  const __m256i d = _mm256_castps_si256(
      _mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.f), n), _mm256_set1_ps(192), _CMP_GT_OQ));
  return _mm256_or_ps(
      _mm256_and_ps(_mm256_castsi256_ps(d), _mm256_mul_ps(s1, s1)),
      _mm256_andnot_ps(
          _mm256_castsi256_ps(d),
          _mm256_or_ps(_mm256_and_ps(_mm256_castsi256_ps(c), _mm256_mul_ps(_mm256_fmadd_ps(s2, j, s2), s1)),
                       _mm256_andnot_ps(_mm256_castsi256_ps(c), _mm256_fmadd_ps(k, j, k)))));
}

double soft_max(float* y, const float* x, int64_t n_valid, int64_t n, float max) {
  const int64_t n8 = n & ~int64_t{7};
  double sum = 0.0;
  const __m256 vmax = _mm256_set1_ps(max);
  for (int64_t i = 0; i < n8 && i < n_valid; i += 8) {
    const int64_t left = n_valid - i;
    if (left >= 8) {
      const __m256 v = v_expf8(_mm256_sub_ps(_mm256_loadu_ps(x + i), vmax));
      _mm256_storeu_ps(y + i, v);
      sum += static_cast<double>(hsum(v));
    } else {  // masked lanes: exp(-inf) = 0, as ggml's mask gives; only valid lanes stored
      alignas(32) float t[8] = {};
      std::memcpy(t, x + i, static_cast<size_t>(left) * sizeof(float));
      const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
      const __m256 keep =
          _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(left)), lane));
      const __m256 v = _mm256_and_ps(keep, v_expf8(_mm256_sub_ps(_mm256_load_ps(t), vmax)));
      _mm256_store_ps(t, v);
      std::memcpy(y + i, t, static_cast<size_t>(left) * sizeof(float));
      sum += static_cast<double>(hsum(v));
    }
  }
  for (int64_t i = n8; i < n_valid; ++i) {
    const float v = std::exp(x[i] - max);
    sum += static_cast<double>(v);
    y[i] = v;
  }
  return sum;
}

void swiglu(float* y, const float* x, const float* g, int64_t n) {
  const int64_t n8 = n & ~int64_t{7};
  const __m256 one = _mm256_set1_ps(1.0f);
  for (int64_t i = 0; i < n8; i += 8) {
    const __m256 xv = _mm256_loadu_ps(x + i);
    const __m256 e = v_expf8(_mm256_sub_ps(_mm256_setzero_ps(), xv));
    const __m256 silu = _mm256_div_ps(xv, _mm256_add_ps(one, e));
    _mm256_storeu_ps(y + i, _mm256_mul_ps(silu, _mm256_loadu_ps(g + i)));
  }
  for (int64_t i = n8; i < n; ++i) y[i] = x[i] / (1.0f + std::exp(-x[i])) * g[i];
}

}  // namespace

extern const Kernels kAvx2VecKernels;
const Kernels kAvx2VecKernels = {
    "avx2", dot_f16, dot_f16_tinyblas, dot_f16_rows, dot_f16_tinyblas_rows, soft_max, swiglu};

}  // namespace hc::ops::vec
