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

// ---- Many rows against one y (dot_f16_rows, dot_f16_tinyblas_rows).

// _mm512_reduce_add_ps of 16 vectors at once: lane r of the result is the reduction of v[r],
// made of the same additions in the same pairs as GCC's avx512fintrin.h (__MM512_REDUCE_OP):
// t8[l] = a[l + 8] + a[l], t4[l] = t8[l + 4] + t8[l], (t4[0] + t4[2]) + (t4[1] + t4[3]).
// Each step adds two shuffles of a pair of inputs, so one vector addition serves two to eight
// rows where reducing each row alone costs four dependent shuffle + add steps. The steps leave
// the rows transposed (input p at lane 4 * (p % 4) + p / 4), so the inputs are taken in that
// order, and row r ends in lane r.
inline __m512 reduce_add_16x16(const __m512* v) {
  static constexpr int kOrder[16] = {0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15};
  __m512 t8[8], t4[4], t2[2];
#pragma GCC unroll 8
  for (int p = 0; p < 8; ++p) {  // [lo256 a | lo256 b] + [hi256 a | hi256 b]
    const __m512 a = v[kOrder[2 * p]], b = v[kOrder[2 * p + 1]];
    t8[p] = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xEE));
  }
#pragma GCC unroll 4
  for (int p = 0; p < 4; ++p) {  // 128-bit lanes (0 + 1) of each 256-bit half: 4 rows, 4 lanes
    const __m512 a = t8[2 * p], b = t8[2 * p + 1];
    t4[p] = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x88), _mm512_shuffle_f32x4(a, b, 0xDD));
  }
#pragma GCC unroll 2
  for (int p = 0; p < 2; ++p) {  // lanes (0 + 2, 1 + 3) within each 128 bits
    const __m512 a = t4[2 * p], b = t4[2 * p + 1];
    t2[p] = _mm512_add_ps(_mm512_shuffle_ps(a, b, 0x44), _mm512_shuffle_ps(a, b, 0xEE));
  }
  return _mm512_add_ps(_mm512_shuffle_ps(t2[0], t2[1], 0x88),
                       _mm512_shuffle_ps(t2[0], t2[1], 0xDD));  // (0 + 1) within each 128 bits
}

// y[i0, i1) as fp32 into yf, lanes at or beyond `valid` zero exactly as load_f16x16 reads them
// (so a product with a masked x lane is 0 * 0, as in the one-row kernels). (i1 - i0) % 16 == 0.
inline void load_y(float* yf, const fp16_t* y, int64_t i0, int64_t i1, int64_t valid) {
  for (int64_t e = i0; e < i1; e += 16)
    _mm512_storeu_ps(yf + (e - i0), load_f16x16(y + e, valid - e));
}

// y is converted once per block of this many elements (16 KiB of fp32, L1-resident) and
// shared by the rows; longer rows keep their accumulators in memory between blocks.
constexpr int64_t kRowsBlock = 4096;

// kRows rows (x + r * ldx) accumulated over elements [b0, b1) in steps of 16 * kAcc, lane
// chunk c of each step into a[r][c], x masked at `valid`, y read from yf = y + b0: the FMAs of
// dot_f16 (kAcc = 4) or dot_f16_tinyblas (kAcc = 1) per row, in the same order. Several rows
// at once give independent chains to hide the FMA latency.
template <int kRows, int kAcc>
inline void accumulate(const fp16_t* x, int64_t ldx, const float* yf, int64_t b0, int64_t b1,
                       int64_t valid, __m512 (&a)[kRows][kAcc]) {
  constexpr int64_t kStep = 16 * kAcc;
  int64_t i = b0;
  for (; i < b1 && i + kStep <= valid; i += kStep) {  // whole steps: no masks
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r)
#pragma GCC unroll 4
      for (int c = 0; c < kAcc; ++c) {
        const int64_t e = i + 16 * c;
        const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + r * ldx + e));
        a[r][c] = _mm512_fmadd_ps(_mm512_cvtph_ps(h), _mm512_loadu_ps(yf + (e - b0)), a[r][c]);
      }
  }
  for (; i < b1; i += kStep) {  // the step that crosses `valid` and any beyond it
    __mmask16 m[kAcc];          // load_f16x16's masks, shared by the rows
    for (int c = 0; c < kAcc; ++c) {
      const int64_t left = valid - (i + 16 * c);
      m[c] = left >= 16 ? 0xFFFF : left <= 0 ? 0 : static_cast<__mmask16>((1u << left) - 1);
    }
    // Chunks wholly past `valid` (a suffix) are skipped: each would add 0 * 0 to an
    // accumulator, which changes no bit (an fma chain from +0 never holds -0), and their masked
    // loads, though they read nothing, still wait for the cache line past the row's data (a
    // decode step's V^T rows: the miss nothing prefetched).
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r)
#pragma GCC unroll 4
      for (int c = 0; c < kAcc; ++c) {
        if (m[c] == 0) break;
        const int64_t e = i + 16 * c;
        const __m512 xv = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m[c], x + r * ldx + e));
        a[r][c] = _mm512_fmadd_ps(xv, _mm512_loadu_ps(yf + (e - b0)), a[r][c]);
      }
  }
}

// A row's accumulators combined as dot_f16 ((a0 + a2) + (a1 + a3)) or tinyBLAS (one) do.
template <int kAcc>
inline __m512 combine(const __m512* a) {
  if constexpr (kAcc == 4)
    return _mm512_add_ps(_mm512_add_ps(a[0], a[2]), _mm512_add_ps(a[1], a[3]));
  return a[0];
}

// Rows [0, rows) of x over [b0, b1), kRows at a time. kWhole: [b0, b1) is the whole row, so
// the accumulators start from zero and end combined in v[r]; otherwise they come from and go
// back to acc[r], between blocks of a long row.
template <int kRows, int kAcc, bool kWhole>
inline void rows_range(const fp16_t* x, int64_t ldx, int rows, const float* yf, int64_t b0,
                       int64_t b1, int64_t valid, __m512 (*acc)[kAcc], __m512* v) {
  int r = 0;
  for (; r + kRows <= rows; r += kRows) {
    __m512 a[kRows][kAcc];
#pragma GCC unroll 4
    for (int k = 0; k < kRows; ++k)
#pragma GCC unroll 4
      for (int c = 0; c < kAcc; ++c) a[k][c] = kWhole ? _mm512_setzero_ps() : acc[r + k][c];
    accumulate<kRows, kAcc>(x + r * ldx, ldx, yf, b0, b1, valid, a);
#pragma GCC unroll 4
    for (int k = 0; k < kRows; ++k) {
      if constexpr (kWhole) {
        v[r + k] = combine<kAcc>(a[k]);
      } else {
#pragma GCC unroll 4
        for (int c = 0; c < kAcc; ++c) acc[r + k][c] = a[k][c];
      }
    }
  }
  if constexpr (kRows > 1)
    rows_range<1, kAcc, kWhole>(x + r * ldx, ldx, rows - r, yf, b0, b1, valid, acc + r, v + r);
}

// v[r] for r < rows (<= 16): row r of x (x + r * ldx) over [0, iend) as `accumulate` sums it,
// then combined; v[r] = 0 beyond. y_loaded: yf already holds y[0, iend) (iend <= kRowsBlock)
// and the accumulators stay in registers; otherwise y is converted block by block and the
// accumulators wait in memory between blocks.
template <int kRows, int kAcc>
inline void row_sums(const fp16_t* x, int64_t ldx, int rows, const fp16_t* y, int64_t iend,
                     int64_t valid, float* yf, bool y_loaded, __m512* v) {
  if (y_loaded) {
    rows_range<kRows, kAcc, true>(x, ldx, rows, yf, 0, iend, valid, nullptr, v);
  } else {
    __m512 acc[16][kAcc];
    for (int r = 0; r < rows; ++r)
      for (__m512& a : acc[r]) a = _mm512_setzero_ps();
    for (int64_t b0 = 0; b0 < iend; b0 += kRowsBlock) {
      const int64_t b1 = b0 + kRowsBlock < iend ? b0 + kRowsBlock : iend;
      load_y(yf, y, b0, b1, valid);
      rows_range<kRows, kAcc, false>(x, ldx, rows, yf, b0, b1, valid, acc, v);
    }
    for (int r = 0; r < rows; ++r) v[r] = combine<kAcc>(acc[r]);
  }
  for (int r = rows; r < 16; ++r) v[r] = _mm512_setzero_ps();
}

void dot_f16_rows(const fp16_t* x, int64_t ldx, int64_t nr, const fp16_t* y, int64_t n_valid,
                  int64_t n, float* out) {
  const int64_t np = n & ~int64_t{63};
  // dot_f16 visits steps of 64 while i < np and i < n_valid.
  const int64_t steps_end = n_valid <= 0 ? 0 : (n_valid + 63) & ~int64_t{63};
  const int64_t iend = np < steps_end ? np : steps_end;
  alignas(64) float yf[kRowsBlock];
  const bool y_loaded = iend <= kRowsBlock;
  if (y_loaded) load_y(yf, y, 0, iend, n_valid);
  for (int64_t r0 = 0; r0 < nr; r0 += 16) {
    const int rows = static_cast<int>(nr - r0 < 16 ? nr - r0 : 16);
    __m512 v[16];
    row_sums<2, 4>(x + r0 * ldx, ldx, rows, y, iend, n_valid, yf, y_loaded, v);
    const __m512 s = reduce_add_16x16(v);
    if (np >= n_valid) {  // no tail: the float sum goes through double and back unchanged
      _mm512_mask_storeu_ps(out + r0, static_cast<__mmask16>((1u << rows) - 1), s);
      continue;
    }
    alignas(64) float part[16];
    _mm512_store_ps(part, s);
    for (int r = 0; r < rows; ++r) {  // dot_f16's tail, added in double after the reduction
      const fp16_t* xr = x + (r0 + r) * ldx;
      double sum = part[r];
      for (int64_t e = np; e < n_valid; ++e)
        sum += static_cast<double>(fp16_to_fp32(xr[e]) * fp16_to_fp32(y[e]));
      out[r0 + r] = static_cast<float>(sum);
    }
  }
}

void dot_f16_tinyblas_rows(const fp16_t* x, int64_t ldx, int64_t nr, const fp16_t* y,
                           int64_t n_valid, int64_t n, float* out) {
  const int64_t end = n_valid < n ? n_valid : n;
  const int64_t iend = end <= 0 ? 0 : (end + 15) & ~int64_t{15};
  alignas(64) float yf[kRowsBlock];
  const bool y_loaded = iend <= kRowsBlock;
  if (y_loaded) load_y(yf, y, 0, iend, end);
  for (int64_t r0 = 0; r0 < nr; r0 += 16) {
    const int rows = static_cast<int>(nr - r0 < 16 ? nr - r0 : 16);
    __m512 v[16];
    row_sums<4, 1>(x + r0 * ldx, ldx, rows, y, iend, end, yf, y_loaded, v);
    _mm512_mask_storeu_ps(out + r0, static_cast<__mmask16>((1u << rows) - 1), reduce_add_16x16(v));
  }
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
const Kernels kAvx512VecKernels = {
    "avx512", dot_f16, dot_f16_tinyblas, dot_f16_rows, dot_f16_tinyblas_rows, soft_max, swiglu};

}  // namespace hc::ops::vec
