// AVX2 + FMA + F16C kernels: every weight type's dot product and the activation quantisers.
// Integer parts are exact; float accumulation order differs from the references (several
// accumulators, FMA), which the tests bound. Only reached after quant.cpp checked the CPU.
#include <immintrin.h>

#include <cstdint>

#include "quant/blocks.h"
#include "quant/kernels.h"

namespace hc::quant {
namespace {

#include "quant/x86_common.inc"

// sum of u8 x i8 products in groups of 4 -> 8 x int32. maddubs saturates pairs at int16: every
// caller keeps 2 * max|u| * max|s| below 2^15.
inline __m256i dot_u8i8(__m256i u, __m256i s) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

// i8 x i8 via |x| (u8, exact even for -128) and y with x's sign. Exact when y != -128, which
// the activation quantisers guarantee (levels stay in [-127, 127]).
inline __m256i dot_i8i8(__m256i x, __m256i y) {
  return dot_u8i8(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
}

// ---- Float types: 4 x 8 lanes of FMA, scalar tail.

// The weight row (w, kElemBytes per element) is prefetched 8 KiB ahead into L2: matrix rows
// are contiguous, so this runs into the next rows of a matrix-vector product, which the
// hardware prefetchers alone left at ~75% of the read bandwidth on long F16 rows.
template <int kElemBytes, class Load8, class Load1>
float dot_floats(int64_t n, const void* w, Load8 load8, Load1 load1) {
  constexpr int64_t kAhead = 8192;
  const char* wp = static_cast<const char*>(w);
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
#pragma GCC unroll 2
    for (int l = 0; l < 32 * kElemBytes / 64; ++l)
      _mm_prefetch(wp + i * kElemBytes + kAhead + 64 * l, _MM_HINT_T1);
    a0 = _mm256_fmadd_ps(load8(0, i + 0), load8(1, i + 0), a0);
    a1 = _mm256_fmadd_ps(load8(0, i + 8), load8(1, i + 8), a1);
    a2 = _mm256_fmadd_ps(load8(0, i + 16), load8(1, i + 16), a2);
    a3 = _mm256_fmadd_ps(load8(0, i + 24), load8(1, i + 24), a3);
  }
  for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(load8(0, i), load8(1, i), a0);
  float sum = hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  for (; i < n; ++i) sum += load1(0, i) * load1(1, i);
  return sum;
}

float vec_dot_f32(int64_t n, const void* w, const void* a) {
  const float* p[2] = {static_cast<const float*>(w), static_cast<const float*>(a)};
  return dot_floats<4>(
      n, w, [&](int s, int64_t i) { return _mm256_loadu_ps(p[s] + i); },
      [&](int s, int64_t i) { return p[s][i]; });
}

// ggml_vec_dot_f16 exactly as ggml's AVX2 build computes it (the F16 weights' dot product
// llama.cpp runs on a CPU without AVX-512): 4 x 8 lanes of FMA over steps of 32, reduced as
// GGML_F32x8_REDUCE ((a0 + a2) + (a1 + a3), lo + hi, two hadds), the tail added in double.
// (AVX-512 hosts take the 16-lane decode layout, ops/cpu/repack.h, for F16 weights.)
float vec_dot_f16(int64_t n, const void* w, const void* a) {
  constexpr int64_t kAhead = 8192;  // as dot_floats: the next rows into L2
  const fp16_t* x = static_cast<const fp16_t*>(w);
  const fp16_t* y = static_cast<const fp16_t*>(a);
  const char* wp = static_cast<const char*>(w);
  const int64_t np = n & ~int64_t{31};
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (int64_t i = 0; i < np; i += 32) {
    _mm_prefetch(wp + 2 * i + kAhead, _MM_HINT_T1);
    a0 = _mm256_fmadd_ps(_mm256_cvtph_ps(loadu128(x + i)), _mm256_cvtph_ps(loadu128(y + i)), a0);
    a1 = _mm256_fmadd_ps(_mm256_cvtph_ps(loadu128(x + i + 8)), _mm256_cvtph_ps(loadu128(y + i + 8)), a1);
    a2 = _mm256_fmadd_ps(_mm256_cvtph_ps(loadu128(x + i + 16)), _mm256_cvtph_ps(loadu128(y + i + 16)), a2);
    a3 = _mm256_fmadd_ps(_mm256_cvtph_ps(loadu128(x + i + 24)), _mm256_cvtph_ps(loadu128(y + i + 24)), a3);
  }
  const __m256 s = _mm256_add_ps(_mm256_add_ps(a0, a2), _mm256_add_ps(a1, a3));
  const __m128 t0 = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  const __m128 t1 = _mm_hadd_ps(t0, t0);
  double sum = _mm_cvtss_f32(_mm_hadd_ps(t1, t1));
  for (int64_t i = np; i < n; ++i) sum += static_cast<double>(f16(x[i]) * f16(y[i]));
  return static_cast<float>(sum);
}

inline __m256 bf16x8(const bf16_t* p) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(loadu128(p)), 16));
}

float vec_dot_bf16(int64_t n, const void* w, const void* a) {
  const bf16_t* p[2] = {static_cast<const bf16_t*>(w), static_cast<const bf16_t*>(a)};
  return dot_floats<2>(
      n, w, [&](int s, int64_t i) { return bf16x8(p[s] + i); },
      [&](int s, int64_t i) {
        const uint32_t bits = static_cast<uint32_t>(p[s][i]) << 16;
        float f;
        __builtin_memcpy(&f, &bits, 4);
        return f;
      });
}

// ---- Float conversions (weights dequantised into GEMM panels, F16 activations). F16C
// converts with round-to-nearest-even, exactly as the scalar references do.

void dequantize_f16(const void* src, float* dst, int64_t n) {
  const fp16_t* p = static_cast<const fp16_t*>(src);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(loadu128(p + i)));
  for (; i < n; ++i) dst[i] = f16(p[i]);
}

void quantize_f16(const float* src, void* dst, int64_t n) {
  fp16_t* p = static_cast<fp16_t*>(dst);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  for (; i < n; ++i) p[i] = _cvtss_sh(src[i], _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

void dequantize_bf16(const void* src, float* dst, int64_t n) {
  const bf16_t* p = static_cast<const bf16_t*>(src);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, bf16x8(p + i));
  for (; i < n; ++i) {
    const uint32_t bits = static_cast<uint32_t>(p[i]) << 16;
    __builtin_memcpy(dst + i, &bits, 4);
  }
}

// ---- K-quants against Q8_K.

// Q4_K / Q5_K 6-bit scales and mins (12 packed bytes) -> 16 x int16: sc[0..7], m[0..7].
inline __m256i unpack_scales_mins_k4(const uint8_t* packed) {
  constexpr uint32_t kmask1 = 0x3f3f3f3f, kmask2 = 0x0f0f0f0f, kmask3 = 0x03030303;
  uint32_t u[4];
  __builtin_memcpy(u, packed, 12);
  u[3] = ((u[2] >> 4) & kmask2) | (((u[1] >> 6) & kmask3) << 4);
  const uint32_t uaux = u[1] & kmask1;
  u[1] = (u[2] & kmask2) | (((u[0] >> 6) & kmask3) << 4);
  u[2] = uaux;
  u[0] &= kmask1;
  return _mm256_cvtepu8_epi16(_mm_set_epi32(static_cast<int>(u[3]), static_cast<int>(u[2]),
                                            static_cast<int>(u[1]), static_cast<int>(u[0])));
}

// Shuffle that broadcasts int16 element s of each 128-bit lane across that lane.
inline __m256i broadcast_i16_mask(int s) {
  return _mm256_set1_epi16(static_cast<int16_t>(((2 * s + 1) << 8) | (2 * s)));
}

// The min term of Q4_K / Q5_K, -dmin * sum_j m_j * (sum of q8 over sub-block j), as 4 lanes.
inline __m256 k4_min_term(__m256i scales_mins, const block_q8_K& y, float dmin_neg) {
  const __m256i bsums = loadu256(y.bsums);
  const __m128i q8s =
      _mm_hadd_epi16(_mm256_castsi256_si128(bsums), _mm256_extracti128_si256(bsums, 1));
  const __m128i prod = _mm_madd_epi16(_mm256_extracti128_si256(scales_mins, 1), q8s);
  return _mm256_mul_ps(_mm256_set1_ps(dmin_neg), _mm256_zextps128_ps256(_mm_cvtepi32_ps(prod)));
}

// sum over 64 elements (sub-blocks 2j, 2j+1) of scale * q * q8, as 8 x int32.
inline __m256i k4_pair(__m256i scales, int j, __m256i q_lo, __m256i q_hi, const int8_t* q8) {
  const __m256i s_lo = _mm256_shuffle_epi8(scales, broadcast_i16_mask(2 * j));
  const __m256i s_hi = _mm256_shuffle_epi8(scales, broadcast_i16_mask(2 * j + 1));
  const __m256i p_lo = _mm256_madd_epi16(s_lo, _mm256_maddubs_epi16(q_lo, loadu256(q8)));
  const __m256i p_hi = _mm256_madd_epi16(s_hi, _mm256_maddubs_epi16(q_hi, loadu256(q8 + 32)));
  return _mm256_add_epi32(p_lo, p_hi);
}

__m256 q4_K_block(const block_q4_K& x, const block_q8_K& y, __m256 acc) {
  const __m256i sm = unpack_scales_mins_k4(x.scales);
  const __m256i scales = _mm256_broadcastsi128_si256(_mm256_castsi256_si128(sm));
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  __m256i sumi = _mm256_setzero_si256();
  for (int j = 0; j < QK_K / 64; ++j) {
    const __m256i bits = loadu256(x.qs + 32 * j);
    const __m256i lo = _mm256_and_si256(bits, m4);
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
    sumi = _mm256_add_epi32(sumi, k4_pair(scales, j, lo, hi, y.qs + 64 * j));
  }
  acc = _mm256_add_ps(acc, k4_min_term(sm, y, -y.d * f16(x.dmin)));
  return _mm256_fmadd_ps(_mm256_set1_ps(y.d * f16(x.d)), _mm256_cvtepi32_ps(sumi), acc);
}

float vec_dot_q4_K_q8_K(int64_t n, const void* w, const void* a) {
  const block_q4_K* x = static_cast<const block_q4_K*>(w);
  const block_q8_K* y = static_cast<const block_q8_K*>(a);
  return sum_blocks(n / QK_K, [&](int64_t i, __m256 acc) { return q4_K_block(x[i], y[i], acc); });
}

__m256 q5_K_block(const block_q5_K& x, const block_q8_K& y, __m256 acc) {
  const __m256i sm = unpack_scales_mins_k4(x.scales);
  const __m256i scales = _mm256_broadcastsi128_si256(_mm256_castsi256_si128(sm));
  const __m256i m4 = _mm256_set1_epi8(0x0F), m1 = _mm256_set1_epi8(1);
  // Bit 2j (2j + 1) of byte l: fifth bit of element l of sub-block 2j (2j + 1). Shifted right
  // once per sub-block so the wanted bit is always bit 0.
  __m256i hb = loadu256(x.qh);
  __m256i sumi = _mm256_setzero_si256();
  for (int j = 0; j < QK_K / 64; ++j) {
    const __m256i bits = loadu256(x.qs + 32 * j);
    const __m256i lo =
        _mm256_add_epi8(_mm256_and_si256(bits, m4), _mm256_slli_epi16(_mm256_and_si256(hb, m1), 4));
    hb = _mm256_srli_epi16(hb, 1);
    const __m256i hi = _mm256_add_epi8(_mm256_and_si256(_mm256_srli_epi16(bits, 4), m4),
                                       _mm256_slli_epi16(_mm256_and_si256(hb, m1), 4));
    hb = _mm256_srli_epi16(hb, 1);
    sumi = _mm256_add_epi32(sumi, k4_pair(scales, j, lo, hi, y.qs + 64 * j));
  }
  acc = _mm256_add_ps(acc, k4_min_term(sm, y, -y.d * f16(x.dmin)));
  return _mm256_fmadd_ps(_mm256_set1_ps(y.d * f16(x.d)), _mm256_cvtepi32_ps(sumi), acc);
}

float vec_dot_q5_K_q8_K(int64_t n, const void* w, const void* a) {
  const block_q5_K* x = static_cast<const block_q5_K*>(w);
  const block_q8_K* y = static_cast<const block_q8_K*>(a);
  return sum_blocks(n / QK_K, [&](int64_t i, __m256 acc) { return q5_K_block(x[i], y[i], acc); });
}

// sum over 32 elements (two sub-blocks of 16 with scales sc[p], sc[p + 1]) of
// scale * (q - 32) * q8, as 8 x int32. q is in [0, 63], so maddubs stays unsaturated.
inline __m256i q6_K_32(__m128i scales, int p, __m256i q, const int8_t* q8p) {
  const __m256i q8 = loadu256(q8p);
  const __m256i p16 =
      _mm256_sub_epi16(_mm256_maddubs_epi16(q, q8), _mm256_maddubs_epi16(_mm256_set1_epi8(32), q8));
  const __m128i pick =
      _mm_add_epi8(_mm_set_epi64x(0x0101010101010101, 0), _mm_set1_epi8(static_cast<char>(p)));
  const __m256i sc = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(scales, pick));
  return _mm256_madd_epi16(sc, p16);
}

__m256 q6_K_block(const block_q6_K& x, const block_q8_K& y, __m256 acc) {
  const __m128i scales = loadu128(x.scales);
  const __m256i m4 = _mm256_set1_epi8(0x0F), m3 = _mm256_set1_epi8(3);
  __m256i sumi = _mm256_setzero_si256();
  for (int h = 0; h < QK_K / 128; ++h) {
    const __m256i l0 = loadu256(x.ql + 64 * h), l1 = loadu256(x.ql + 64 * h + 32);
    const __m256i hb = loadu256(x.qh + 32 * h);
    const int8_t* q8 = y.qs + 128 * h;
    // Elements 0..31, 32..63, 64..95, 96..127 of this half: low nibbles of l0, l1, then high
    // nibbles, each with two bits of hb at shifts 0, 2, 4, 6.
    for (int k = 0; k < 4; ++k) {
      const __m256i lq = k % 2 == 0 ? l0 : l1;
      const __m256i nib = _mm256_and_si256(k < 2 ? lq : _mm256_srli_epi16(lq, 4), m4);
      const __m256i top = _mm256_and_si256(_mm256_srl_epi16(hb, _mm_cvtsi32_si128(2 * k)), m3);
      const __m256i q = _mm256_or_si256(nib, _mm256_slli_epi16(top, 4));
      sumi = _mm256_add_epi32(sumi, q6_K_32(scales, 8 * h + 2 * k, q, q8 + 32 * k));
    }
  }
  return _mm256_fmadd_ps(_mm256_set1_ps(y.d * f16(x.d)), _mm256_cvtepi32_ps(sumi), acc);
}

float vec_dot_q6_K_q8_K(int64_t n, const void* w, const void* a) {
  const block_q6_K* x = static_cast<const block_q6_K*>(w);
  const block_q8_K* y = static_cast<const block_q8_K*>(a);
  return sum_blocks(n / QK_K, [&](int64_t i, __m256 acc) { return q6_K_block(x[i], y[i], acc); });
}

constexpr IsaKernels make_table() {
  IsaKernels k;
  k.name = "avx2";
  k.types[type_slot(GgmlType::F32)].vec_dot = vec_dot_f32;
  k.types[type_slot(GgmlType::F16)].vec_dot = vec_dot_f16;
  k.types[type_slot(GgmlType::BF16)].vec_dot = vec_dot_bf16;
  k.types[type_slot(GgmlType::F16)].dequantize = dequantize_f16;
  k.types[type_slot(GgmlType::F16)].quantize = quantize_f16;
  k.types[type_slot(GgmlType::F16)].from_float = quantize_f16;
  k.types[type_slot(GgmlType::BF16)].dequantize = dequantize_bf16;
  add_shared_kernels(k);
  k.types[type_slot(GgmlType::Q4_K)].vec_dot = vec_dot_q4_K_q8_K;
  k.types[type_slot(GgmlType::Q5_K)].vec_dot = vec_dot_q5_K_q8_K;
  k.types[type_slot(GgmlType::Q6_K)].vec_dot = vec_dot_q6_K_q8_K;
  return k;
}

}  // namespace

constinit const IsaKernels kAvx2Kernels = make_table();

}  // namespace hc::quant
