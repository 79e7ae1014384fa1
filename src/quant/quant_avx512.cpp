// AVX-512 (F, BW, VL, DQ, VNNI) kernels, only where they beat AVX2 when measured (AMD Zen 4
// class CPU): the 32-element block types, where one VNNI vpdpbusd replaces the maddubs + madd
// pair (+5..25% in cache). Measured and left to AVX2: the float types (16-lane F32 / BF16 were
// no faster, F16 slower: vcvtph2ps zmm is double-pumped) and the K-quants (their sub-block
// scales ride for free in madd_epi16, so VNNI would only move the multiply elsewhere).
#include <immintrin.h>

#include <cstdint>

#include "quant/blocks.h"
#include "quant/kernels.h"

namespace hc::quant {
namespace {

#include "quant/x86_common.inc"

// ---- 32-element blocks with VNNI: u8 x i8 -> int32 in one instruction, no int16 saturation.

inline __m256i dot_u8i8(__m256i u, __m256i s) {
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
}

// |x| as u8 is exact even for -128; y must not be -128 (activation levels are in [-127, 127]).
inline __m256i dot_i8i8(__m256i x, __m256i y) {
  return dot_u8i8(_mm256_abs_epi8(x), _mm256_sign_epi8(y, x));
}

float vec_dot_q8_0_q8_0(int64_t n, const void* w, const void* a) {
  const block_q8_0* x = static_cast<const block_q8_0*>(w);
  const block_q8_0* y = static_cast<const block_q8_0*>(a);
  return sum_blocks_in_order(n / QK8_0, [&](int64_t i, __m256 acc) {
    const __m256i p = dot_i8i8(loadu256(x[i].qs), loadu256(y[i].qs));
    return _mm256_fmadd_ps(_mm256_set1_ps(f16(x[i].d) * f16(y[i].d)), _mm256_cvtepi32_ps(p), acc);
  });
}

float vec_dot_q4_0_q8_0(int64_t n, const void* w, const void* a) {
  const block_q4_0* x = static_cast<const block_q4_0*>(w);
  const block_q8_0* y = static_cast<const block_q8_0*>(a);
  return sum_blocks_in_order(n / QK8_0, [&](int64_t i, __m256 acc) {
    const __m256i q = _mm256_sub_epi8(unpack_nibbles(x[i].qs), _mm256_set1_epi8(8));
    const __m256i p = dot_i8i8(q, loadu256(y[i].qs));
    return _mm256_fmadd_ps(_mm256_set1_ps(f16(x[i].d) * f16(y[i].d)), _mm256_cvtepi32_ps(p), acc);
  });
}

float vec_dot_q4_1_q8_1(int64_t n, const void* w, const void* a) {
  const block_q4_1* x = static_cast<const block_q4_1*>(w);
  const block_q8_1* y = static_cast<const block_q8_1*>(a);
  float summs = 0;  // sum of m_w * s_a: the block minima times the activation sums
  const float main = sum_blocks_in_order(n / QK8_1, [&](int64_t i, __m256 acc) {
    // An FMA in ggml's build; fp16 x fp16 is exact in float, so a separate product agrees.
    summs = __builtin_fmaf(f16(x[i].m), f16(y[i].s), summs);
    const __m256i p = dot_u8i8(unpack_nibbles(x[i].qs), loadu256(y[i].qs));
    return _mm256_fmadd_ps(_mm256_set1_ps(f16(x[i].d) * f16(y[i].d)), _mm256_cvtepi32_ps(p), acc);
  });
  return main + summs;
}

constexpr IsaKernels make_table() {
  IsaKernels k;
  k.name = "avx512";
  k.types[type_slot(GgmlType::Q8_0)].vec_dot = vec_dot_q8_0_q8_0;
  k.types[type_slot(GgmlType::Q4_0)].vec_dot = vec_dot_q4_0_q8_0;
  k.types[type_slot(GgmlType::Q4_1)].vec_dot = vec_dot_q4_1_q8_1;
  // Same code as the AVX2 quantisers (x86_common.inc); listed so the tests cover this build too.
  k.types[type_slot(GgmlType::Q8_0)].quantize = quantize_q8_0;
  k.types[type_slot(GgmlType::Q8_1)].quantize = quantize_q8_1;
  k.types[type_slot(GgmlType::Q8_K)].quantize = quantize_q8_K;
  k.types[type_slot(GgmlType::Q8_0)].from_float = quantize_q8_0_x86;
  k.types[type_slot(GgmlType::Q8_1)].from_float = quantize_q8_1_x86;
  return k;
}

}  // namespace

constinit const IsaKernels kAvx512Kernels = make_table();

}  // namespace hc::quant
