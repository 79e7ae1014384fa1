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

inline int32_t load32(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

inline __mmask16 row_mask(int nrows) {
  return nrows >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << nrows) - 1);
}

// The 32-element formats (kOffset: Q8_0, Q4_0, Q5_0; kMin: Q4_1, Q5_1): one activation scale
// per sub-block.
template <IntKind K, int C>
void int_tile(const uint8_t* panel, const IntAct& a, int64_t t0, float* y, int64_t ldy,
              int nrows) {
  constexpr int SB = int_sb(K);
  constexpr bool kMin = int_has_min(K);
  constexpr int64_t stride = int_sub_stride(K);
  constexpr int64_t astride = act_sub_stride(SB);
  const int64_t ns = a.ns;
  const uint8_t* xs = a.tiles + t0 / kIntTokTile * a.tile_bytes;
  __m512 acc[C];
  #pragma GCC unroll 16
  for (int c = 0; c < C; ++c) acc[c] = _mm512_setzero_ps();
  for (int64_t s = 0; s < ns; ++s, xs += astride) {
    const uint8_t* p = panel + s * stride;
    // Offset formats start each sum at -corr (the same integer as subtracting it after).
    const int32_t* ci = reinterpret_cast<const int32_t*>(xs + (SB + 4) * kIntTokTile);
    __m512i is[C];
    #pragma GCC unroll 16
    for (int c = 0; c < C; ++c) is[c] = kMin ? _mm512_setzero_si512() : _mm512_set1_epi32(-ci[c]);
#pragma GCC unroll 8
    for (int i = 0; i < SB / 4; ++i) {
      const __m512i wv = _mm512_loadu_si512(p + 64 * i);
      #pragma GCC unroll 16
      for (int c = 0; c < C; ++c)
        is[c] = _mm512_dpbusd_epi32(
            is[c], wv, _mm512_set1_epi32(load32(xs + 4 * (i * kIntTokTile + c))));
    }
    const float* dx = reinterpret_cast<const float*>(xs + SB * kIntTokTile);
    const __m512 dv = _mm512_loadu_ps(reinterpret_cast<const float*>(p + SB * kLanes));
    if constexpr (kMin) {
      const float* cf = reinterpret_cast<const float*>(xs + (SB + 4) * kIntTokTile);
      const __m512 mv = _mm512_loadu_ps(reinterpret_cast<const float*>(p + SB * kLanes + 64));
      #pragma GCC unroll 16
      for (int c = 0; c < C; ++c) {
        const __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(is[c]), _mm512_set1_ps(dx[c]));
        acc[c] = _mm512_fmadd_ps(dv, v, acc[c]);
        acc[c] = _mm512_fmadd_ps(mv, _mm512_set1_ps(cf[c]), acc[c]);
      }
    } else {
      #pragma GCC unroll 16
      for (int c = 0; c < C; ++c) {
        const __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(is[c]), _mm512_set1_ps(dx[c]));
        acc[c] = _mm512_fmadd_ps(dv, v, acc[c]);
      }
    }
  }
  const __mmask16 m = row_mask(nrows);
  #pragma GCC unroll 16
  for (int c = 0; c < C; ++c) _mm512_mask_storeu_ps(y + (t0 + c) * ldy, m, acc[c]);
}

// The K-quants (kKMin: Q4_K, Q5_K; kK6: Q6_K): the sub-blocks of a super-block accumulate
// into as[c] unscaled, and the activation scale multiplies once per super-block. The token
// accumulators live in memory (12 sub-block sums and 12 super-block sums fill the registers).
template <IntKind K, int C>
void int_tile_k(const uint8_t* panel, const IntAct& a, int64_t t0, float* y, int64_t ldy,
                int nrows) {
  constexpr bool kK6 = K == IntKind::kK6;
  constexpr int SB = int_sb(K);
  constexpr int per = int_subs_per_scale(K);
  constexpr int64_t stride = int_sub_stride(K);
  constexpr int64_t astride = act_sub_stride(SB);
  const uint8_t* xs = a.tiles + t0 / kIntTokTile * a.tile_bytes;
  const uint8_t* p = panel;
  alignas(64) float accm[C][kLanes] = {};
  for (int64_t s0 = 0; s0 < a.ns; s0 += per) {
    __m512 as[C];
    #pragma GCC unroll 16
    for (int c = 0; c < C; ++c) as[c] = _mm512_setzero_ps();
    for (int j = 0; j < per; ++j, p += stride, xs += astride) {
      __m512i is[C];
      if constexpr (kK6) {
        const __m512i wc = _mm512_loadu_si512(p + SB * kLanes + 64);
        #pragma GCC unroll 16
        for (int c = 0; c < C; ++c) is[c] = wc;
      } else {
        #pragma GCC unroll 16
        for (int c = 0; c < C; ++c) is[c] = _mm512_setzero_si512();
      }
#pragma GCC unroll 8
      for (int i = 0; i < SB / 4; ++i) {
        const __m512i wv = _mm512_loadu_si512(p + 64 * i);
        #pragma GCC unroll 16
        for (int c = 0; c < C; ++c) {
          const __m512i xv = _mm512_set1_epi32(load32(xs + 4 * (i * kIntTokTile + c)));
          is[c] = kK6 ? _mm512_dpbusd_epi32(is[c], xv, wv) : _mm512_dpbusd_epi32(is[c], wv, xv);
        }
      }
      const __m512 dv = _mm512_loadu_ps(reinterpret_cast<const float*>(p + SB * kLanes));
      if constexpr (kK6) {
        #pragma GCC unroll 16
        for (int c = 0; c < C; ++c) as[c] = _mm512_fmadd_ps(dv, _mm512_cvtepi32_ps(is[c]), as[c]);
      } else {
        const float* cf = reinterpret_cast<const float*>(xs + (SB + 4) * kIntTokTile);
        const __m512 mv = _mm512_loadu_ps(reinterpret_cast<const float*>(p + SB * kLanes + 64));
        #pragma GCC unroll 16
        for (int c = 0; c < C; ++c) {
          as[c] = _mm512_fmadd_ps(dv, _mm512_cvtepi32_ps(is[c]), as[c]);
          as[c] = _mm512_fmadd_ps(mv, _mm512_set1_ps(cf[c]), as[c]);
        }
      }
    }
    // The super-block's activation scales (every sub-block of it holds them).
    const float* dx = reinterpret_cast<const float*>(xs - astride + SB * kIntTokTile);
    #pragma GCC unroll 16
    for (int c = 0; c < C; ++c)
      _mm512_store_ps(accm[c], _mm512_fmadd_ps(as[c], _mm512_set1_ps(dx[c]), _mm512_load_ps(accm[c])));
  }
  const __mmask16 m = row_mask(nrows);
  #pragma GCC unroll 16
  for (int c = 0; c < C; ++c) _mm512_mask_storeu_ps(y + (t0 + c) * ldy, m, _mm512_load_ps(accm[c]));
}

template <IntKind K>
void int_kernel(const uint8_t* panel, const IntAct& a, int64_t t0, int nt, float* y, int64_t ldy,
                int nrows) {
  static_assert(kIntTokTile == 12);
#define HC_IT(n)                                                                        \
  case n:                                                                               \
    if constexpr (int_subs_per_scale(K) == 1) return int_tile<K, n>(panel, a, t0, y, ldy, nrows); \
    else return int_tile_k<K, n>(panel, a, t0, y, ldy, nrows)
  switch (nt) {
    HC_IT(12); HC_IT(11); HC_IT(10); HC_IT(9); HC_IT(8); HC_IT(7);
    HC_IT(6); HC_IT(5); HC_IT(4); HC_IT(3); HC_IT(2);
    default: HC_IT(1);
  }
#undef HC_IT
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
  void min_i(int64_t s, __m512i v) const {  // Q6_K's wc[16] in the second slot
    _mm512_storeu_si512(panel + s * stride + sb * kLanes + 64, _mm512_maskz_mov_epi32(m, v));
  }
};

void pack_q8_0(const uint8_t* g, int64_t nb, const PanelOut& o) {
  const repack_detail::Pairs32 pr = repack_detail::pairs32(GgmlType::Q8_0, nb);
  for (int64_t b = 0; b < nb; ++b) {
    #pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) o.q(b, i, line(g + pr.quants(b) + 64 * i));
    o.d(b, f16x16(g + pr.scales(b)));
  }
}

template <bool kQ41>
void pack_q4(const uint8_t* g, int64_t nb, const PanelOut& o) {
  const repack_detail::Pairs32 pr =
      repack_detail::pairs32(kQ41 ? GgmlType::Q4_1 : GgmlType::Q4_0, nb);
  for (int64_t b = 0; b < nb; ++b) {
    #pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      const __m512i v = line(g + pr.quants(b) + 64 * c);
      o.q(b, c, lo4(v));
      o.q(b, c + 4, hi4(v));
    }
    const uint8_t* sc = g + pr.scales(b);
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
      const __m512i m32 = bytes(32);  // signed q - 32 in the panel
      o.q(s, i, _mm512_sub_epi8(_mm512_or_si512(lo4(A), _mm512_and_si512(_mm512_slli_epi16(H, 4), hi2)), m32));
      o.q(s + 2, i, _mm512_sub_epi8(_mm512_or_si512(lo4(B), _mm512_and_si512(_mm512_slli_epi16(H, 2), hi2)), m32));
      o.q(s + 4, i, _mm512_sub_epi8(_mm512_or_si512(hi4(A), _mm512_and_si512(H, hi2)), m32));
      o.q(s + 6, i, _mm512_sub_epi8(_mm512_or_si512(hi4(B), _mm512_and_si512(_mm512_srli_epi16(H, 2), hi2)), m32));
    }
    // wc = -128 * each lane's sum of its signed quants, per sub-block (from the lines written;
    // lanes >= nrows were stored as zero).
    #pragma GCC unroll 4
    for (int sub = 0; sub < 16; ++sub) {
      const uint8_t* l = o.panel + (16 * b + sub) * o.stride;
      __m512i sum = _mm512_setzero_si512();
      #pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) sum = _mm512_dpbusd_epi32(sum, bytes(1), line(l + 64 * i));
      o.min_i(16 * b + sub, _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(sum, 7)));
    }
  }
}

void pack_group(GgmlType t, const uint8_t* group, int64_t k, int nrows, uint8_t* panel) {
  const IntFormat f = int_format(t);
  const PanelOut o{panel, f.sub_stride(), f.sb(), row_mask(nrows)};
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
  k.int_kernel[static_cast<int>(IntKind::kOffset)] = int_kernel<IntKind::kOffset>;
  k.int_kernel[static_cast<int>(IntKind::kMin)] = int_kernel<IntKind::kMin>;
  k.int_kernel[static_cast<int>(IntKind::kKMin)] = int_kernel<IntKind::kKMin>;
  k.int_kernel[static_cast<int>(IntKind::kK6)] = int_kernel<IntKind::kK6>;
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
