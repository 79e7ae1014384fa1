// AVX-512 micro-kernels of the packed GEMM (layouts in gemm_kernels.h). One zmm lane per
// weight row: an integer sub-block costs sb / 4 vpdpbusd per token (64 products each, the
// activation's 4 bytes broadcast from memory), then four float ops per token; the scalar twins
// in gemm.cpp follow the same operation order.
// GCC 12 reports its own _mm512 intrinsics' internal "undefined" operands as maybe-uninitialised
// (and, inlined into the panel packers, as uninitialised).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <cstring>

#include "core/status.h"
#include "ops/cpu/gemm_kernels.h"
#include "ops/cpu/repack_kernels.h"

namespace hc::ops::gemm_detail {
namespace {

using repack_detail::kQ4Chunk, repack_detail::kQ8Chunk, repack_detail::kQ4KChunk;
using repack_detail::kQ4KBlock, repack_detail::kQ5KBlock, repack_detail::kQ5KChunk;
using repack_detail::q6K_quants, repack_detail::q6K_scales;

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

// ---- Packing one group of the decode layout (repack.h) into a panel: a layout line already is
// 16 lanes x 4 bytes, so each panel line is one layout line, its low or high nibbles, or those
// OR-ed with fifth / sixth bits (16-bit shifts: every byte's wanted bits stay in that byte
// under the masks). Lanes >= nrows are zeroed. Same bytes as pack_group_scalar in gemm.cpp.

inline __m512i line(const uint8_t* p) { return _mm512_loadu_si512(p); }
inline __m512 f16x16(const uint8_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
inline __m512i bytes(int v) { return _mm512_set1_epi8(static_cast<char>(v)); }
inline __m512i lo4(__m512i v) { return _mm512_and_si512(v, bytes(0x0F)); }
inline __m512i hi4(__m512i v) { return _mm512_and_si512(_mm512_srli_epi16(v, 4), bytes(0x0F)); }
inline __m512 neg(__m512 v) {
  return _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(v), _mm512_set1_epi32(INT32_MIN)));
}

struct PanelOut {
  uint8_t* panel;
  int64_t stride;
  int sb;
  __mmask16 m;
  void q(int64_t s, int i, __m512i v) const {
    _mm512_storeu_si512(panel + s * stride + 64 * i, _mm512_maskz_mov_epi32(m, v));
  }
  void d(int64_t s, __m512 v) const {
    _mm512_storeu_ps(panel + s * stride + sb * kLanes, _mm512_maskz_mov_ps(m, v));
  }
  void min(int64_t s, __m512 v) const {
    _mm512_storeu_ps(panel + s * stride + sb * kLanes + 64, _mm512_maskz_mov_ps(m, v));
  }
};

void pack_q8_0(const uint8_t* g, int64_t nb, const PanelOut& o) {
  for (int64_t b = 0; b < nb; ++b) {
    #pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) o.q(b, i, line(g + b * kQ8Chunk + 64 * i));
    o.d(b, f16x16(g + nb * kQ8Chunk + 32 * b));
  }
}

template <bool kQ41>
void pack_q4(const uint8_t* g, int64_t nb, const PanelOut& o) {
  for (int64_t b = 0; b < nb; ++b) {
    #pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      const __m512i v = line(g + b * kQ4Chunk + 64 * c);
      o.q(b, c, lo4(v));
      o.q(b, c + 4, hi4(v));
    }
    const uint8_t* sc = g + nb * kQ4Chunk + b * (kQ41 ? 64 : 32);
    o.d(b, f16x16(sc));
    if constexpr (kQ41) o.min(b, f16x16(sc + 32));
  }
}

// Q4_K / Q5_K scales of block b (sm: the layout's sc[8][16], mn[4][16][2], d[16], dmin[16]):
// d * sc and -(dmin * mn) per sub-block, the 6-bit values masked as ggml's scale bytes hold them.
void pack_k4_scales(const uint8_t* sm, int64_t b, const PanelOut& o) {
  const __m512 d = f16x16(sm + 256), dmin = f16x16(sm + 288);
  const __m512i six = _mm512_set1_epi32(63);
  #pragma GCC unroll 4
  for (int p = 0; p < 4; ++p) {
    const __m512i mn = _mm512_cvtepu16_epi32(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sm + 128 + 32 * p)));
    #pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const int j = 2 * p + h;
      const __m512i sc = _mm512_cvtepu8_epi32(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(sm + 16 * j)));
      const __m512i m = h ? _mm512_srli_epi32(mn, 8) : mn;
      o.d(8 * b + j, _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_and_si512(sc, six))));
      o.min(8 * b + j, neg(_mm512_mul_ps(dmin, _mm512_cvtepi32_ps(_mm512_and_si512(m, six)))));
    }
  }
}

// Bit j of every byte of h moved to bit 4.
inline __m512i fifth(__m512i h, int j) {
  return _mm512_and_si512(_mm512_slli_epi16(_mm512_srli_epi16(h, j), 4), bytes(0x10));
}

template <bool kQ5>
void pack_k4(const uint8_t* g, int64_t nb, const PanelOut& o) {
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* qh = g + b * kQ5KBlock;  // Q5_K: fifth bits, then Q4_K's lines
    const uint8_t* qs = kQ5 ? qh + 8 * 64 : g + b * kQ4KBlock;
    __m512i h[8];
    if constexpr (kQ5) {
      #pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) h[i] = line(qh + 64 * i);
    }
    #pragma GCC unroll 4
    for (int p = 0; p < 4; ++p) {
      #pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) {
        const __m512i v = line(qs + 64 * (8 * p + i));
        __m512i lo = lo4(v), hi = hi4(v);
        if constexpr (kQ5) {
          lo = _mm512_or_si512(lo, fifth(h[i], 2 * p));
          hi = _mm512_or_si512(hi, fifth(h[i], 2 * p + 1));
        }
        o.q(8 * b + 2 * p, i, lo);
        o.q(8 * b + 2 * p + 1, i, hi);
      }
    }
    pack_k4_scales(kQ5 ? qh + kQ5KChunk : qs + kQ4KChunk, b, o);  // scales after the lines
  }
}

void pack_q6_K(const uint8_t* g, int64_t nb, const PanelOut& o) {
  const __m512i hi2 = bytes(0x30);  // the two high bits' place in a 6-bit quant
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* q = g + q6K_quants(b);
    const uint8_t* sm = g + q6K_scales(b);
    const __m512 d = f16x16(sm + 256);
    #pragma GCC unroll 4
    for (int sub = 0; sub < 16; ++sub) {
      const __m512i sc = _mm512_cvtepi8_epi32(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(sm + 16 * sub)));
      o.d(16 * b + sub, _mm512_mul_ps(d, _mm512_cvtepi32_ps(sc)));
    }
    // Triplet 8h + c: lines A (ql 64h + 4c), B (ql 64h + 32 + 4c), H (qh 32h + 4c) give line
    // c % 4 of sub-blocks 8h + c / 4 + {0, 2, 4, 6}.
    #pragma GCC unroll 4
    for (int tr = 0; tr < 16; ++tr) {
      const uint8_t* l = q + 3 * 64 * tr;
      const __m512i A = line(l), B = line(l + 64), H = line(l + 128);
      const int64_t s = 16 * b + 8 * (tr / 8) + (tr % 8) / 4;
      const int i = tr % 4;
      o.q(s, i, _mm512_or_si512(lo4(A), _mm512_and_si512(_mm512_slli_epi16(H, 4), hi2)));
      o.q(s + 2, i, _mm512_or_si512(lo4(B), _mm512_and_si512(_mm512_slli_epi16(H, 2), hi2)));
      o.q(s + 4, i, _mm512_or_si512(hi4(A), _mm512_and_si512(H, hi2)));
      o.q(s + 6, i, _mm512_or_si512(hi4(B), _mm512_and_si512(_mm512_srli_epi16(H, 2), hi2)));
    }
  }
}

void pack_group(GgmlType t, const uint8_t* group, int64_t k, int nrows, uint8_t* panel) {
  const IntFormat f = int_format(t);
  const PanelOut o{panel, f.sub_stride(), f.sb, row_mask(nrows)};
  switch (t) {
    case GgmlType::Q8_0: return pack_q8_0(group, k / 32, o);
    case GgmlType::Q4_0: return pack_q4<false>(group, k / 32, o);
    case GgmlType::Q4_1: return pack_q4<true>(group, k / 32, o);
    case GgmlType::Q4_K: return pack_k4<false>(group, k / 256, o);
    case GgmlType::Q5_K: return pack_k4<true>(group, k / 256, o);
    case GgmlType::Q6_K: return pack_q6_K(group, k / 256, o);
    default: HC_CHECK(false && "not an integer GEMM type");
  }
}

Kernels make() {
  Kernels k;
  k.int_kernel[0][0] = int_kernel<32, false>;
  k.int_kernel[0][1] = int_kernel<32, true>;
  k.int_kernel[1][0] = int_kernel<16, false>;
  k.int_kernel[1][1] = int_kernel<16, true>;
  k.float_kernel = float_kernel<float>;
  k.f16_kernel = float_kernel<uint16_t>;
  k.pack_group = pack_group;
  return k;
}

}  // namespace

const Kernels& avx512_kernels() {
  static const Kernels k = make();
  return k;
}

}  // namespace hc::ops::gemm_detail
