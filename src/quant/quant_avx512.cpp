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
// (The block loops that use these are in x86_common.inc.)

inline __m256i dot_u8i8(__m256i u, __m256i s) {
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
}

// |x| as u8 is exact even for -128; y must not be -128 (activation levels are in [-127, 127]).
inline __m256i dot_i8i8(__m256i x, __m256i y) {
  return dot_u8i8(_mm256_abs_epi8(x), _mm256_sign_epi8(y, x));
}

constexpr IsaKernels make_table() {
  IsaKernels k;
  k.name = "avx512";
  add_shared_kernels(k);
  return k;
}

}  // namespace

constinit const IsaKernels kAvx512Kernels = make_table();

}  // namespace hc::quant
