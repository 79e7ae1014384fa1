// AVX-512 VNNI group kernels of the decode layout (repack.h): one zmm lane per weight row, the
// activation's 4 bytes of each group broadcast from memory into vpdpbusd. The scalar twins in
// repack.cpp do the same operations in the same order.
// GCC 12 reports its own _mm512 intrinsics' internal "undefined" operands as maybe-uninitialised.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstring>
#include <type_traits>

#include "ops/cpu/repack_kernels.h"

namespace hc::ops::repack_detail {
namespace {

// Q4_K / Q5_K / Q6_K (one stream per group, scales inline): every line 4 KiB ahead, into L1. Measured
// on the Zen 5 host (11008 x 4096, 4 copies past L3, in-process A/B against a plain read of the
// same bytes): 1 thread Q6_K 31 GB/s (read 36), Q5_K 36 (read 40); 2 threads 94-98% of the
// read. One prefetch per 2 or 8 lines, T1 and 2-8 KiB leads were slower (Q6_K 2 threads:
// every 8th line 33, none 33, T1 44, T0 45 GB/s).
constexpr int64_t kPrefetchKQ = 4096;
inline void prefetch_lines(const uint8_t* p, int64_t bytes) {
  for (int64_t i = 0; i < bytes; i += 64)
    _mm_prefetch(reinterpret_cast<const char*>(p + kPrefetchKQ + i), _MM_HINT_T0);
}

// Q4_0 / Q4_1 / Q8_0 (pairs of blocks, then their scales: one stream per group): the block's
// lines and its scales' line, 4 KiB ahead into L1, as the K-quants. On the Zen 5 host
// (hc-kernel-bench matvec_repacked/*/11008x4096, 3 alternating rounds, GB/s) the layout with
// all scales after all quants (a second stream), prefetched 8 KiB ahead into L2, read Q4_0 at
// 24.8-26.3 with 1 thread and 35.4-39.4 with 2; this one 31.4-34.2 and 40.4-47.4 (Q4_1 1 thread
// 22.9-23.8 -> 28.1-30.1, Q8_0 26.6-29.9 -> 28.0-32.5). 8 KiB into L1 was as good, 8 KiB into
// L2 and 2 KiB into L1 in between. Q4_0 / Q8_0 blocks share their pair's scale line, so only
// the pair's first block (scales: true) prefetches it.
inline void prefetch_block(const uint8_t* q, int lines, const uint8_t* sc, bool scales) {
  for (int c = 0; c < lines; ++c) _mm_prefetch(reinterpret_cast<const char*>(q + 4096 + 64 * c), _MM_HINT_T0);
  if (scales) _mm_prefetch(reinterpret_cast<const char*>(sc + 4096), _MM_HINT_T0);
}

inline __m512i bcst4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

inline __m512 f16x16(const void* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(static_cast<const __m256i*>(p)));
}

// 32-element blocks. kChunks: 4 (nibbles: chunk c gives groups c and c + 4) or 8 (bytes).
// kOffset: Q4_0 / Q8_0 start each group's integer sum at a.corr (-offset * group sum).
template <int kChunks, bool kOffset, bool kMin>
void k32(const uint8_t* g, int64_t nb, const Act& a, float* out) {
  const Pairs32 pr = Pairs32::of(kChunks, kMin, nb);
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  __m512 acc[8];
#pragma GCC unroll 8
  for (int j = 0; j < 8; ++j) acc[j] = _mm512_setzero_ps();
  __m512 summ = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* q = g + pr.quants(b);
    const uint8_t* sc = g + pr.scales(b);
    const int8_t* aq = a.q + b * a.block_bytes;
    prefetch_block(q, kChunks, sc, kMin || (b & 1) == 0);  // Q4_1: a scale line per block
    const __m512 dd = _mm512_mul_ps(f16x16(sc), _mm512_set1_ps(a.d[b]));
    if constexpr (kMin) summ = _mm512_fmadd_ps(f16x16(sc + 32), _mm512_set1_ps(a.s[b]), summ);
    __m512i p[8];
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j)
      p[j] = kOffset ? _mm512_set1_epi32(a.corr[b * 8 + j]) : _mm512_setzero_si512();
    if constexpr (kChunks == 4) {
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) {
        const __m512i v = _mm512_loadu_si512(q + 64 * c);
        const __m512i lo = _mm512_and_si512(v, m4);
        const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
        p[c] = _mm512_dpbusd_epi32(p[c], lo, bcst4(aq + 4 * c));
        p[c + 4] = _mm512_dpbusd_epi32(p[c + 4], hi, bcst4(aq + 16 + 4 * c));
      }
    } else {
#pragma GCC unroll 8
      for (int c = 0; c < 8; ++c)
        p[c] = _mm512_dpbusd_epi32(p[c], _mm512_loadu_si512(q + 64 * c), bcst4(aq + 4 * c));
    }
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) acc[j] = _mm512_fmadd_ps(dd, _mm512_cvtepi32_ps(p[j]), acc[j]);
  }
  // ggml's hsum_float_8 over its 8 lanes: ((0 + 4) + (2 + 6)) + ((1 + 5) + (3 + 7)).
  __m512 r = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(acc[0], acc[4]), _mm512_add_ps(acc[2], acc[6])),
                           _mm512_add_ps(_mm512_add_ps(acc[1], acc[5]), _mm512_add_ps(acc[3], acc[7])));
  if constexpr (kMin) r = _mm512_add_ps(r, summ);
  _mm512_storeu_ps(out, r);
}

void q4_1(const uint8_t* g, int64_t nb, const Act& a, float* out) { k32<4, false, true>(g, nb, a, out); }
void q8_0(const uint8_t* g, int64_t nb, const Act& a, float* out) { k32<8, true, false>(g, nb, a, out); }

// Q4_K's one 64-byte weight line in a register. GCC otherwise folds the load into both of the
// line's vpandd (two 64-byte loads per line; Zen 4 issues one per cycle); the empty asm makes
// the value opaque so it is loaded once.
inline __m512i load_line(const uint8_t* p) {
  __m512i v = _mm512_loadu_si512(p);
  asm("" : "+v"(v));
  return v;
}

// acc += vpdpbusd(w, the 4 activation bytes at p broadcast to every lane), the broadcast
// embedded in the instruction ({1to16}); GCC 12 emits a separate vpbroadcastd for
// _mm512_set1_epi32 of a loaded value. (AT&T syntax, GCC's and Clang's default.)
inline __m512i dpbusd_bcst(__m512i acc, __m512i w, const int8_t* p) {
  using bytes4 = int32_t __attribute__((may_alias, aligned(1)));  // the asm reads p[0 .. 3]
  asm("vpdpbusd %[x]%{1to16%}, %[w], %[acc]"
      : [acc] "+v"(acc)
      : [w] "v"(w), [x] "m"(*reinterpret_cast<const bytes4*>(p)));
  return acc;
}

// NT = 1 .. kMultiTokens instantiations of a multi-token kernel.
template <template <int> class K>
void any_nt(const uint8_t* g, int64_t nb, const Act* a, int nt, float* out) {
  static_assert(kMultiTokens == 4);
  switch (nt) {
    case 1: return K<1>::run(g, nb, a, out);
    case 2: return K<2>::run(g, nb, a, out);
    case 3: return K<3>::run(g, nb, a, out);
    default: return K<4>::run(g, nb, a, out);
  }
}
// Q4_0 in a shorter order than ggml's (llama.cpp repacks Q4_0 as well): one integer sum per
// block, started at -8 * (sum of the block's activation levels), then one convert and one FMA.
// The high nibbles stay in place (v & 0xF0 = 16 * q), so the sum is kept as 16x and the scale
// divided by 16 (exact). NT tokens per call: each block's lines loaded and masked once, then
// each token's operations as with NT = 1 (the single-token kernel, q4_0).
template <int NT>
void q4_0_n(const uint8_t* g, int64_t nb, const Act* acts, float* out) {
  const Pairs32 pr = pairs32(GgmlType::Q4_0, nb);
  const __m512i m_lo = _mm512_set1_epi8(0x0F), m_hi = _mm512_set1_epi8(static_cast<char>(0xF0));
  __m512 acc[NT];
#pragma GCC unroll 8
  for (int i = 0; i < NT; ++i) acc[i] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* q = g + pr.quants(b);
    const uint8_t* sc = g + pr.scales(b);
    prefetch_block(q, 4, sc, (b & 1) == 0);
    __m512i lo[4], hi[4];
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      const __m512i v = _mm512_loadu_si512(q + 64 * c);
      lo[c] = _mm512_and_si512(v, m_lo);
      hi[c] = _mm512_and_si512(v, m_hi);
    }
    const __m512 dw = f16x16(sc);
#pragma GCC unroll 8
    for (int i = 0; i < NT; ++i) {
      const Act& a = acts[i];
      const int8_t* aq = a.q + b * a.block_bytes;
      __m512i plo = _mm512_set1_epi32(a.corr_sum[b]), phi = _mm512_setzero_si512();
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) {
        plo = dpbusd_bcst(plo, lo[c], aq + 4 * c);
        phi = dpbusd_bcst(phi, hi[c], aq + 16 + 4 * c);
      }
      const __m512 dd16 = _mm512_mul_ps(_mm512_mul_ps(dw, _mm512_set1_ps(a.d[b])),
                                        _mm512_set1_ps(0.0625f));
      const __m512i p16 = _mm512_add_epi32(_mm512_slli_epi32(plo, 4), phi);
      acc[i] = _mm512_fmadd_ps(dd16, _mm512_cvtepi32_ps(p16), acc[i]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < NT; ++i) _mm512_storeu_ps(out + 16 * i, acc[i]);
}

// Block sums (Q4_1, Q8_0; the order of repack.cpp's k32_bs_ref): NT tokens against one group,
// each block's weights loaded (Q4_1: unpacked) once for all of them. Per token one integer sum
// per block in two vpdpbusd chains, one convert, one multiply, one FMA (Q4_1: one more for the
// min): ggml's order (k32) converts and accumulates every group of 4 separately.
template <int kChunks, bool kMin, int NT>
void k32_bs(const uint8_t* g, int64_t nb, const Act* acts, float* out) {
  const Pairs32 pr = Pairs32::of(kChunks, kMin, nb);
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  __m512 acc[NT], summ[NT];
#pragma GCC unroll 8
  for (int i = 0; i < NT; ++i) acc[i] = summ[i] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* q = g + pr.quants(b);
    const uint8_t* sc = g + pr.scales(b);
    prefetch_block(q, kChunks, sc, kMin || (b & 1) == 0);
    __m512i w[8];  // w[c]: elements 4c .. 4c + 3 of the block, c < 8
    if constexpr (kChunks == 4) {
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) {
        const __m512i v = _mm512_loadu_si512(q + 64 * c);
        w[c] = _mm512_and_si512(v, m4);
        w[c + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
      }
    } else {
#pragma GCC unroll 8
      for (int c = 0; c < 8; ++c)  // one token: the loads folded into vpdpbusd (a little faster)
        w[c] = NT == 1 ? _mm512_loadu_si512(q + 64 * c) : load_line(q + 64 * c);
    }
    const __m512 dw = f16x16(sc);
    __m512 mw = _mm512_setzero_ps();
    if constexpr (kMin) mw = f16x16(sc + 32);
#pragma GCC unroll 8
    for (int i = 0; i < NT; ++i) {
      const Act& a = acts[i];
      const int8_t* aq = a.q + b * a.block_bytes;
      __m512i plo = kMin ? _mm512_setzero_si512() : _mm512_set1_epi32(a.corr_sum[b]);
      __m512i phi = _mm512_setzero_si512();
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) {
        plo = dpbusd_bcst(plo, w[c], aq + 4 * c);
        phi = dpbusd_bcst(phi, w[c + 4], aq + 16 + 4 * c);
      }
      const __m512 dd = _mm512_mul_ps(dw, _mm512_set1_ps(a.d[b]));
      acc[i] = _mm512_fmadd_ps(dd, _mm512_cvtepi32_ps(_mm512_add_epi32(plo, phi)), acc[i]);
      if constexpr (kMin) summ[i] = _mm512_fmadd_ps(mw, _mm512_set1_ps(a.s[b]), summ[i]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < NT; ++i)
    _mm512_storeu_ps(out + 16 * i, kMin ? _mm512_add_ps(acc[i], summ[i]) : acc[i]);
}

template <int NT> struct Q41BS { static void run(const uint8_t* g, int64_t nb, const Act* a, float* o) { k32_bs<4, true, NT>(g, nb, a, o); } };
template <int NT> struct Q80BS { static void run(const uint8_t* g, int64_t nb, const Act* a, float* o) { k32_bs<8, false, NT>(g, nb, a, o); } };
void q4_1_bs(const uint8_t* g, int64_t nb, const Act* a, int nt, float* out) { any_nt<Q41BS>(g, nb, a, nt, out); }
void q8_0_bs(const uint8_t* g, int64_t nb, const Act* a, int nt, float* out) { any_nt<Q80BS>(g, nb, a, nt, out); }

// Q4_K: each 64-byte chunk feeds sub-block 2p from its low nibbles (v & 0x0F) and sub-block
// 2p + 1 from its high nibbles left in place (v & 0xF0 = 16 * q), which saves the shift: the
// integer sum is kept as 16 * isum and the scale divided by 16 (exact). The mins' term is a
// vpdpwssd of the (mn_2p, mn_2p+1) word pairs against the activations' sub-block sums.
// Each super-block's 32 lines are followed by its 5 lines of scales (one stream per group), all
// prefetched as Q5_K's: every line 4 KiB ahead into L1. On the Zen 5 host (11008 x 4096, one
// thread) that read 35 GB/s against 32-33 for every line 8 KiB ahead into L2 and 27 for every
// other line 4 KiB ahead into L1, and 21 for the earlier layout's scheme (one line in 8 and the
// scales, 8 KiB ahead into L2; it was best on Zen 4 with the scales in a second stream).
void q4_K(const uint8_t* g, int64_t nb, const Act& a, float* out) {
  const __m512i m_lo = _mm512_set1_epi8(0x0F), m_hi = _mm512_set1_epi8(static_cast<char>(0xF0));
  __m512 acc = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* q = g + b * kQ4KBlock;
    const int8_t* aq = a.q + b * a.block_bytes;
    const uint8_t* sm = q + kQ4KChunk;
    prefetch_lines(q, kQ4KBlock);
    __m512i lo_sum = _mm512_setzero_si512(), hi_sum = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int pr = 0; pr < 4; ++pr) {
      __m512i slo = _mm512_setzero_si512(), shi = _mm512_setzero_si512();
#pragma GCC unroll 8
      for (int c = 0; c < 8; ++c) {
        const __m512i v = load_line(q + (pr * 8 + c) * 64);
        slo = dpbusd_bcst(slo, _mm512_and_si512(v, m_lo), aq + 64 * pr + 4 * c);
        shi = dpbusd_bcst(shi, _mm512_and_si512(v, m_hi), aq + 64 * pr + 32 + 4 * c);
      }
      const __m512i s0 = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sm + 32 * pr)));
      const __m512i s1 = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sm + 32 * pr + 16)));
      lo_sum = _mm512_add_epi32(lo_sum, _mm512_mullo_epi32(slo, s0));
      hi_sum = _mm512_add_epi32(hi_sum, _mm512_mullo_epi32(shi, s1));
    }
    const __m512i isum16 = _mm512_add_epi32(_mm512_slli_epi32(lo_sum, 4), hi_sum);
    __m512i msum = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int pr = 0; pr < 4; ++pr) {
      const __m512i mn = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sm + 128 + 32 * pr)));
      msum = _mm512_dpwssd_epi32(msum, mn, _mm512_set1_epi32(a.corr[b * 8 + pr]));
    }
    const __m512 da = _mm512_set1_ps(a.d[b]);
    const __m512 dd16 = _mm512_mul_ps(_mm512_mul_ps(f16x16(sm + 256), da), _mm512_set1_ps(0.0625f));
    const __m512 dm = _mm512_sub_ps(_mm512_setzero_ps(), _mm512_mul_ps(f16x16(sm + 288), da));
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum16), dd16, acc);
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(msum), dm, acc);
  }
  _mm512_storeu_ps(out, acc);
}

// (x & 0x0F) | t in one instruction (t has no bits in the low nibble).
inline __m512i nib_or(__m512i x, __m512i m_lo, __m512i t) {
  return _mm512_ternarylogic_epi32(x, m_lo, t, 0xEA);  // (a & b) | c
}

// Bytes shifted left by kS bits (right by -kS), through 16-bit shifts: the caller masks out
// what crossed from the neighbouring byte.
template <int kS>
inline __m512i shift_bytes(__m512i x) {
  if constexpr (kS > 0) return _mm512_slli_epi16(x, kS);
  else if constexpr (kS < 0) return _mm512_srli_epi16(x, -kS);
  else return x;
}

// Q5_K, pair p (sub-blocks 2p and 2p + 1) of one super-block: Q4_K's nibbles with the fifth
// bit (bit 2p, resp. 2p + 1, of the qh line of the same chunk) moved to bit 4 and or-ed in.
// Unlike Q4_K the high nibbles are shifted down (16 q + 256 * bit would not fit a byte).
template <int kP>
inline void q5_K_pair(const uint8_t* q, const __m512i* hb, const int8_t* aq, const uint8_t* sm,
                      __m512i& lo_sum, __m512i& hi_sum) {
  const __m512i m_lo = _mm512_set1_epi8(0x0F), m_b4 = _mm512_set1_epi8(0x10);
  __m512i slo = _mm512_setzero_si512(), shi = _mm512_setzero_si512();
#pragma GCC unroll 8
  for (int c = 0; c < 8; ++c) {
    const __m512i v = load_line(q + 8 * 64 + (kP * 8 + c) * 64);
    const __m512i tlo = _mm512_and_si512(shift_bytes<4 - 2 * kP>(hb[c]), m_b4);
    const __m512i thi = _mm512_and_si512(shift_bytes<3 - 2 * kP>(hb[c]), m_b4);
    slo = dpbusd_bcst(slo, nib_or(v, m_lo, tlo), aq + 64 * kP + 4 * c);
    shi = dpbusd_bcst(shi, nib_or(_mm512_srli_epi16(v, 4), m_lo, thi), aq + 64 * kP + 32 + 4 * c);
  }
  const __m512i s0 = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sm + 32 * kP)));
  const __m512i s1 = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sm + 32 * kP + 16)));
  lo_sum = _mm512_add_epi32(lo_sum, _mm512_mullo_epi32(slo, s0));
  hi_sum = _mm512_add_epi32(hi_sum, _mm512_mullo_epi32(shi, s1));
}

// Q4_K / Q5_K: sum_j mn_j * (activation sum of sub-block j) through vpdpwssd of the (mn_2p,
// mn_2p+1) word pairs against the activation's pair of sub-block sums.
inline __m512i k4_min_sum(const uint8_t* sm, const Act& a, int64_t b) {
  __m512i msum = _mm512_setzero_si512();
#pragma GCC unroll 4
  for (int pr = 0; pr < 4; ++pr) {
    const __m512i mn = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sm + 128 + 32 * pr)));
    msum = _mm512_dpwssd_epi32(msum, mn, _mm512_set1_epi32(a.corr[b * 8 + pr]));
  }
  return msum;
}

// Q4_K / Q5_K, NT tokens: sub-blocks 2p (lo) and 2p + 1 (hi) of one super-block, line c's
// weights from unpack(c, &lo, &hi) once for all tokens; per token q4_K's / q5_K_pair's integer
// steps: the pair's sums scaled by the sub-blocks' scales into lo_sum / hi_sum.
template <int NT, class Unpack>
inline void k4_pair_n(int pr, Unpack unpack, const Act* acts, int64_t b, const uint8_t* sm,
                      __m512i* lo_sum, __m512i* hi_sum) {
  __m512i slo[NT], shi[NT];
#pragma GCC unroll 8
  for (int i = 0; i < NT; ++i) slo[i] = shi[i] = _mm512_setzero_si512();
#pragma GCC unroll 8
  for (int c = 0; c < 8; ++c) {
    __m512i lo, hi;
    unpack(c, &lo, &hi);
#pragma GCC unroll 8
    for (int i = 0; i < NT; ++i) {
      const int8_t* aq = acts[i].q + b * acts[i].block_bytes;
      slo[i] = dpbusd_bcst(slo[i], lo, aq + 64 * pr + 4 * c);
      shi[i] = dpbusd_bcst(shi[i], hi, aq + 64 * pr + 32 + 4 * c);
    }
  }
  const __m512i s0 = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sm + 32 * pr)));
  const __m512i s1 = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sm + 32 * pr + 16)));
#pragma GCC unroll 8
  for (int i = 0; i < NT; ++i) {
    lo_sum[i] = _mm512_add_epi32(lo_sum[i], _mm512_mullo_epi32(slo[i], s0));
    hi_sum[i] = _mm512_add_epi32(hi_sum[i], _mm512_mullo_epi32(shi[i], s1));
  }
}

// Q4_K / Q5_K, NT tokens: a super-block's float steps per token, as q4_K (kHigh16: the high
// nibbles were used in place, so isum = 16 lo + hi and the scale is divided by 16) or q5_K.
template <int NT, bool kHigh16>
inline void k4_finish_n(const __m512i* lo_sum, const __m512i* hi_sum, const uint8_t* sm,
                        const Act* acts, int64_t b, __m512* acc) {
  const __m512 dw = f16x16(sm + 256), dmw = f16x16(sm + 288);
  __m512i mn[4];  // k4_min_sum's (mn_2p, mn_2p+1) word pairs, converted once for the tokens
#pragma GCC unroll 4
  for (int pr = 0; pr < 4; ++pr)
    mn[pr] = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sm + 128 + 32 * pr)));
#pragma GCC unroll 8
  for (int i = 0; i < NT; ++i) {
    const __m512i isum = kHigh16 ? _mm512_add_epi32(_mm512_slli_epi32(lo_sum[i], 4), hi_sum[i])
                                 : _mm512_add_epi32(lo_sum[i], hi_sum[i]);
    __m512i msum = _mm512_setzero_si512();  // k4_min_sum's sum
#pragma GCC unroll 4
    for (int pr = 0; pr < 4; ++pr)
      msum = _mm512_dpwssd_epi32(msum, mn[pr], _mm512_set1_epi32(acts[i].corr[b * 8 + pr]));
    const __m512 da = _mm512_set1_ps(acts[i].d[b]);
    const __m512 dd = kHigh16 ? _mm512_mul_ps(_mm512_mul_ps(dw, da), _mm512_set1_ps(0.0625f))
                              : _mm512_mul_ps(dw, da);
    const __m512 dm = _mm512_sub_ps(_mm512_setzero_ps(), _mm512_mul_ps(dmw, da));
    acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), dd, acc[i]);
    acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(msum), dm, acc[i]);
  }
}

// q4_K for NT tokens: each line loaded and masked once, the scales and mins once per
// super-block; per token exactly q4_K's operations (every token's lanes are q4_K's bits).
template <int NT>
void q4_K_n(const uint8_t* g, int64_t nb, const Act* acts, float* out) {
  const __m512i m_lo = _mm512_set1_epi8(0x0F), m_hi = _mm512_set1_epi8(static_cast<char>(0xF0));
  __m512 acc[NT];
#pragma GCC unroll 8
  for (int i = 0; i < NT; ++i) acc[i] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* q = g + b * kQ4KBlock;
    const uint8_t* sm = q + kQ4KChunk;
    prefetch_lines(q, kQ4KBlock);
    __m512i lo_sum[NT], hi_sum[NT];
#pragma GCC unroll 8
    for (int i = 0; i < NT; ++i) lo_sum[i] = hi_sum[i] = _mm512_setzero_si512();
#pragma GCC unroll 1
    for (int pr = 0; pr < 4; ++pr) {
      k4_pair_n<NT>(pr, [&](int c, __m512i* lo, __m512i* hi) {
        const __m512i v = load_line(q + (pr * 8 + c) * 64);
        *lo = _mm512_and_si512(v, m_lo);
        *hi = _mm512_and_si512(v, m_hi);
      }, acts, b, sm, lo_sum, hi_sum);
    }
    k4_finish_n<NT, true>(lo_sum, hi_sum, sm, acts, b, acc);
  }
#pragma GCC unroll 8
  for (int i = 0; i < NT; ++i) _mm512_storeu_ps(out + 16 * i, acc[i]);
}

template <int NT> struct Q40N { static void run(const uint8_t* g, int64_t nb, const Act* a, float* o) { q4_0_n<NT>(g, nb, a, o); } };
void q4_0(const uint8_t* g, int64_t nb, const Act& a, float* out) { q4_0_n<1>(g, nb, &a, out); }
template <int NT> struct Q4KN { static void run(const uint8_t* g, int64_t nb, const Act* a, float* o) { q4_K_n<NT>(g, nb, a, o); } };

// Q5_K: per super-block the 8 qh lines (kept in registers for the 4 pairs), then Q4_K's 32
// nibble lines; one integer sum of sc_j * (q . x) and one of the mins, each scaled once.
void q5_K(const uint8_t* g, int64_t nb, const Act& a, float* out) {
  __m512 acc = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* q = g + b * kQ5KBlock;
    const int8_t* aq = a.q + b * a.block_bytes;
    const uint8_t* sm = q + kQ5KChunk;
    prefetch_lines(q, kQ5KBlock);
    __m512i hb[8];
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) hb[c] = _mm512_loadu_si512(q + 64 * c);
    __m512i lo_sum = _mm512_setzero_si512(), hi_sum = _mm512_setzero_si512();
    q5_K_pair<0>(q, hb, aq, sm, lo_sum, hi_sum);
    q5_K_pair<1>(q, hb, aq, sm, lo_sum, hi_sum);
    q5_K_pair<2>(q, hb, aq, sm, lo_sum, hi_sum);
    q5_K_pair<3>(q, hb, aq, sm, lo_sum, hi_sum);
    const __m512i isum = _mm512_add_epi32(lo_sum, hi_sum);
    const __m512i msum = k4_min_sum(sm, a, b);
    const __m512 da = _mm512_set1_ps(a.d[b]);
    const __m512 dd = _mm512_mul_ps(f16x16(sm + 256), da);
    const __m512 dm = _mm512_sub_ps(_mm512_setzero_ps(), _mm512_mul_ps(f16x16(sm + 288), da));
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), dd, acc);
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(msum), dm, acc);
  }
  _mm512_storeu_ps(out, acc);
}

// Q6_K, half h and sub-block parity s of one super-block: the four triplets (ql lo, ql hi, qh)
// t = 8h + 4s + c4 give elements 128h + 32k + 4(4s + c4) .. + 3 for k = 0 .. 3 (sub-blocks
// 8h + s + 2k): nibble | two top bits moved to bits 4-5. Each sub-block's sum starts at
// -32 * its activation sum, then is scaled by its int8 scale.
template <int kH, int kS>
inline __m512i q6_K_quarter(const uint8_t* q, const int8_t* aq, const uint8_t* sm, const Act& a,
                            int64_t b, __m512i total) {
  const __m512i m_lo = _mm512_set1_epi8(0x0F), m_hi = _mm512_set1_epi8(0x30);
  __m512i p[4];
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) p[k] = _mm512_set1_epi32(a.corr[b * 16 + 8 * kH + kS + 2 * k]);
#pragma GCC unroll 4
  for (int c4 = 0; c4 < 4; ++c4) {
    const int cc = 4 * kS + c4;
    const uint8_t* line = q + 3 * 64 * (8 * kH + cc);
    const __m512i A = load_line(line), B = load_line(line + 64), H = load_line(line + 128);
    const __m512i t0 = _mm512_and_si512(_mm512_slli_epi16(H, 4), m_hi);
    const __m512i t1 = _mm512_and_si512(_mm512_slli_epi16(H, 2), m_hi);
    const __m512i t2 = _mm512_and_si512(H, m_hi);
    const __m512i t3 = _mm512_and_si512(_mm512_srli_epi16(H, 2), m_hi);
    const int8_t* x = aq + 128 * kH + 4 * cc;
    p[0] = dpbusd_bcst(p[0], nib_or(A, m_lo, t0), x);
    p[1] = dpbusd_bcst(p[1], nib_or(B, m_lo, t1), x + 32);
    p[2] = dpbusd_bcst(p[2], nib_or(_mm512_srli_epi16(A, 4), m_lo, t2), x + 64);
    p[3] = dpbusd_bcst(p[3], nib_or(_mm512_srli_epi16(B, 4), m_lo, t3), x + 96);
  }
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    const __m512i sc = _mm512_cvtepi8_epi32(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(sm + 16 * (8 * kH + kS + 2 * k))));
    total = _mm512_add_epi32(total, _mm512_mullo_epi32(p[k], sc));
  }
  return total;
}

// Q6_K: one integer sum per super-block (sum_j sc_j * sum (q - 32) x over sub-block j), one
// convert and one FMA.
void q6_K(const uint8_t* g, int64_t nb, const Act& a, float* out) {
  __m512 acc = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* q = g + q6K_quants(b);
    const int8_t* aq = a.q + b * a.block_bytes;
    const uint8_t* sm = g + q6K_scales(b);
    prefetch_lines(q, kQ6KChunk);
    prefetch_lines(sm, kQ6KScaleBytes + 32);  // 5 lines: the scales may start mid-line
    __m512i total = _mm512_setzero_si512();
    total = q6_K_quarter<0, 0>(q, aq, sm, a, b, total);
    total = q6_K_quarter<0, 1>(q, aq, sm, a, b, total);
    total = q6_K_quarter<1, 0>(q, aq, sm, a, b, total);
    total = q6_K_quarter<1, 1>(q, aq, sm, a, b, total);
    const __m512 dd = _mm512_mul_ps(f16x16(sm + 256), _mm512_set1_ps(a.d[b]));
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(total), dd, acc);
  }
  _mm512_storeu_ps(out, acc);
}

// q5_K for NT tokens: each nibble line loaded and its fifth bits merged once; per token
// exactly q5_K's operations (q5_K_pair's sums, k4_min_sum, the same float steps).
template <int NT>
void q5_K_n(const uint8_t* g, int64_t nb, const Act* acts, float* out) {
  const __m512i m_lo = _mm512_set1_epi8(0x0F), m_b4 = _mm512_set1_epi8(0x10);
  __m512 acc[NT];
#pragma GCC unroll 8
  for (int i = 0; i < NT; ++i) acc[i] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* q = g + b * kQ5KBlock;
    const uint8_t* sm = q + kQ5KChunk;
    prefetch_lines(q, kQ5KBlock);
    __m512i lo_sum[NT], hi_sum[NT];
#pragma GCC unroll 8
    for (int i = 0; i < NT; ++i) lo_sum[i] = hi_sum[i] = _mm512_setzero_si512();
    auto pair = [&](auto kp) {
      constexpr int kP = decltype(kp)::value;
      k4_pair_n<NT>(kP, [&](int c, __m512i* lo, __m512i* hi) {
        const __m512i hb = _mm512_loadu_si512(q + 64 * c);
        const __m512i v = load_line(q + 8 * 64 + (kP * 8 + c) * 64);
        *lo = nib_or(v, m_lo, _mm512_and_si512(shift_bytes<4 - 2 * kP>(hb), m_b4));
        *hi = nib_or(_mm512_srli_epi16(v, 4), m_lo, _mm512_and_si512(shift_bytes<3 - 2 * kP>(hb), m_b4));
      }, acts, b, sm, lo_sum, hi_sum);
    };
    pair(std::integral_constant<int, 0>{});
    pair(std::integral_constant<int, 1>{});
    pair(std::integral_constant<int, 2>{});
    pair(std::integral_constant<int, 3>{});
    k4_finish_n<NT, false>(lo_sum, hi_sum, sm, acts, b, acc);
  }
#pragma GCC unroll 8
  for (int i = 0; i < NT; ++i) _mm512_storeu_ps(out + 16 * i, acc[i]);
}

// q6_K for NT tokens: each triplet of lines loaded and unpacked once; per token exactly
// q6_K_quarter's sums and q6_K's float steps.
template <int NT>
void q6_K_n(const uint8_t* g, int64_t nb, const Act* acts, float* out) {
  const __m512i m_lo = _mm512_set1_epi8(0x0F), m_hi = _mm512_set1_epi8(0x30);
  __m512 acc[NT];
#pragma GCC unroll 8
  for (int i = 0; i < NT; ++i) acc[i] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* q = g + q6K_quants(b);
    const uint8_t* sm = g + q6K_scales(b);
    prefetch_lines(q, kQ6KChunk);
    prefetch_lines(sm, kQ6KScaleBytes + 32);
    __m512i total[NT];
#pragma GCC unroll 8
    for (int i = 0; i < NT; ++i) total[i] = _mm512_setzero_si512();
#pragma GCC unroll 1
    for (int hs = 0; hs < 4; ++hs) {  // (kH, kS) = (0, 0), (0, 1), (1, 0), (1, 1) as q6_K
      const int kH = hs >> 1, kS = hs & 1;
      __m512i p[NT][4];
#pragma GCC unroll 8
      for (int i = 0; i < NT; ++i)
#pragma GCC unroll 4
        for (int k = 0; k < 4; ++k)
          p[i][k] = _mm512_set1_epi32(acts[i].corr[b * 16 + 8 * kH + kS + 2 * k]);
#pragma GCC unroll 4
      for (int c4 = 0; c4 < 4; ++c4) {
        const int cc = 4 * kS + c4;
        const uint8_t* line = q + 3 * 64 * (8 * kH + cc);
        const __m512i A = load_line(line), B = load_line(line + 64), H = load_line(line + 128);
        const __m512i t0 = _mm512_and_si512(_mm512_slli_epi16(H, 4), m_hi);
        const __m512i t1 = _mm512_and_si512(_mm512_slli_epi16(H, 2), m_hi);
        const __m512i t2 = _mm512_and_si512(H, m_hi);
        const __m512i t3 = _mm512_and_si512(_mm512_srli_epi16(H, 2), m_hi);
        const __m512i w0 = nib_or(A, m_lo, t0), w1 = nib_or(B, m_lo, t1);
        const __m512i w2 = nib_or(_mm512_srli_epi16(A, 4), m_lo, t2);
        const __m512i w3 = nib_or(_mm512_srli_epi16(B, 4), m_lo, t3);
#pragma GCC unroll 8
        for (int i = 0; i < NT; ++i) {
          const int8_t* x = acts[i].q + b * acts[i].block_bytes + 128 * kH + 4 * cc;
          p[i][0] = dpbusd_bcst(p[i][0], w0, x);
          p[i][1] = dpbusd_bcst(p[i][1], w1, x + 32);
          p[i][2] = dpbusd_bcst(p[i][2], w2, x + 64);
          p[i][3] = dpbusd_bcst(p[i][3], w3, x + 96);
        }
      }
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
        const __m512i sc = _mm512_cvtepi8_epi32(
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(sm + 16 * (8 * kH + kS + 2 * k))));
#pragma GCC unroll 8
        for (int i = 0; i < NT; ++i) total[i] = _mm512_add_epi32(total[i], _mm512_mullo_epi32(p[i][k], sc));
      }
    }
    const __m512 dw = f16x16(sm + 256);
#pragma GCC unroll 8
    for (int i = 0; i < NT; ++i) {
      const __m512 dd = _mm512_mul_ps(dw, _mm512_set1_ps(acts[i].d[b]));
      acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(total[i]), dd, acc[i]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < NT; ++i) _mm512_storeu_ps(out + 16 * i, acc[i]);
}

template <int NT> struct Q5KN { static void run(const uint8_t* g, int64_t nb, const Act* a, float* o) { q5_K_n<NT>(g, nb, a, o); } };
template <int NT> struct Q6KN { static void run(const uint8_t* g, int64_t nb, const Act* a, float* o) { q6_K_n<NT>(g, nb, a, o); } };

// A type's multi-token entry: one token runs the single-token kernel (the same bits, its loops
// fully unrolled), more run K<NT>.
template <GroupKernelFn kOne, template <int> class K>
void multi(const uint8_t* g, int64_t nb, const Act* a, int nt, float* out) {
  if (nt == 1) return kOne(g, nb, a[0], out);
  any_nt<K>(g, nb, a, nt, out);
}

}  // namespace

const Kernels& avx512_kernels() {
  static const Kernels k{q4_0, q4_1, q8_0, q4_K, f16_group_avx512, q5_K, q6_K,
                         q4_1_bs, q8_0_bs, multi<q4_0, Q40N>, multi<q4_K, Q4KN>,
                         multi<q5_K, Q5KN>, multi<q6_K, Q6KN>};
  return k;
}

}  // namespace hc::ops::repack_detail
