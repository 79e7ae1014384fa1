// Internal to the decode layout (repack.cpp, repack_avx512.cpp and their tests): the group
// kernels' signature. Layouts and arithmetic are described in repack.h.
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace hc::ops::repack_detail {

// One token's activations, prepared once per matmul call and token.
struct Act {
  const int8_t* q = nullptr;       // block 0's qs in the quantised activation row
  int64_t block_bytes = 0;         // bytes between consecutive blocks' qs
  const float* d = nullptr;        // [nb] activation scale per block
  const float* s = nullptr;        // [nb] Q4_1 only: f16(s) of each Q8_1 block
  const int32_t* corr = nullptr;   // [nb][8]: Q4_0 / Q8_0: -offset * sum of each group of 4
                                   // activation levels; Q4_K / Q5_K: [nb][4] the sums of
                                   // sub-blocks 2p and 2p + 1 as int16 pairs (low word first);
                                   // Q6_K: [nb][16] -32 * the sum of each sub-block of 16
  const int32_t* corr_sum = nullptr;  // [nb] Q4_0: -8 * sum of the block's activation levels
  const float* xf = nullptr;       // [ne0] F16: the activation row (F16) widened to float
};

// One group of 16 rows: out[r] for r < 16 (padding rows included).
using GroupKernelFn = void (*)(const uint8_t* group, int64_t nb, const Act& a, float* out);

// Several tokens against one group: nt <= kMultiTokens tokens per call, the group's weights
// loaded and unpacked once for all of them; out[i * 16 + r] for token i. Each token's lanes are
// computed exactly as in a call with that token alone. Block sums (repack.h,
// TensorView::block_sums) for Q4_1 / Q8_0; for Q4_0 and the K-quants the single-token kernel's
// own order.
constexpr int kMultiTokens = 4;
using GroupMultiFn = void (*)(const uint8_t* group, int64_t nb, const Act* a, int nt, float* out);

struct Kernels {
  GroupKernelFn q4_0 = nullptr, q4_1 = nullptr, q8_0 = nullptr, q4_K = nullptr, f16 = nullptr;
  GroupKernelFn q5_K = nullptr, q6_K = nullptr;
  GroupMultiFn q4_1_bs = nullptr, q8_0_bs = nullptr;  // block sums
  GroupMultiFn q4_0_n = nullptr, q4_K_n = nullptr;    // the single-token kernels' order,
  GroupMultiFn q5_K_n = nullptr, q6_K_n = nullptr;    // several tokens per call
};

// The F16 group kernel (nb = ne0: one "block" per column); defined in repack_f16_avx512.cpp.
void f16_group_avx512(const uint8_t* group, int64_t nb, const Act& a, float* out);

// Defined in repack_avx512.cpp; call only on an AVX-512 VNNI CPU.
const Kernels& avx512_kernels();
// Scalar twins, defined in repack.cpp.
const Kernels& scalar_kernels();

// Quant bytes per block of one group.
constexpr int64_t kQ4Chunk = 4 * 64, kQ8Chunk = 8 * 64, kQ4KChunk = 32 * 64;
// Q4_0 / Q4_1 / Q8_0: blocks go in pairs, the quants of blocks 2p and 2p + 1, then the pair's
// scales (one line: Q4_0 / Q8_0 d[16] of 2p, then of 2p + 1; Q4_1 d[16], m[16] of each); an
// odd last block has its quants, then its scales. One stream per group, as the K-quants.
// qb / sb: quant / scale bytes per block, nb: blocks per row.
struct Pairs32 {
  int64_t qb, sb, nb;
  // chunks: 64-byte quant lines per block (4 nibbles, 8 bytes); with_min: Q4_1's m[16] too.
  static Pairs32 of(int chunks, bool with_min, int64_t nb) {
    return {int64_t{chunks} * 64, with_min ? 64 : 32, nb};
  }
  int64_t quants(int64_t b) const { return (b >> 1) * 2 * (qb + sb) + (b & 1) * qb; }
  int64_t scales(int64_t b) const {
    const int64_t base = (b >> 1) * 2 * (qb + sb);
    return (b | 1) >= nb ? base + qb : base + 2 * qb + (b & 1) * sb;
  }
};
// Q4_0, Q4_1 or Q8_0 (HC_CHECK'd by the callers' type switches).
inline Pairs32 pairs32(GgmlType t, int64_t nb) {
  return Pairs32::of(t == GgmlType::Q8_0 ? 8 : 4, t == GgmlType::Q4_1, nb);
}
// Q4_K / Q5_K expanded scales per super-block: sc[8][16], mn[4][16][2], d[16], dmin[16].
constexpr int64_t kQ4KScaleBytes = 8 * 16 + 8 * 16 + 32 + 32;
// The K-quants keep each super-block's scales next to its quants (one stream per group: a
// second stream of scales read slower on the Zen 5 host).
// Q4_K block b at b * kQ4KBlock: its 32 nibble lines, then its scales.
constexpr int64_t kQ4KBlock = kQ4KChunk + kQ4KScaleBytes;  // 37 lines
// Q5_K block b at b * kQ5KBlock: the 8 lines of qh, Q4_K's 32 nibble lines, then Q4_K's scales.
constexpr int64_t kQ5KChunk = 8 * 64 + 32 * 64;
constexpr int64_t kQ5KBlock = kQ5KChunk + kQ4KScaleBytes;  // 45 lines
// Q6_K: 16 triplets of lines (ql, ql + 32, qh), 3072 bytes; scales int8 [16][16] then fp16
// d[16], 288 bytes. Blocks go in pairs of 105 lines, quants 2p, scales 2p and 2p + 1, quants
// 2p + 1 (an odd last block: its quants, then its scales).
constexpr int64_t kQ6KChunk = 48 * 64;
constexpr int64_t kQ6KScaleBytes = 16 * 16 + 32;
constexpr int64_t kQ6KPair = 2 * (kQ6KChunk + kQ6KScaleBytes);
inline int64_t q6K_quants(int64_t b) { return (b >> 1) * kQ6KPair + (b & 1) * (kQ6KChunk + 2 * kQ6KScaleBytes); }
inline int64_t q6K_scales(int64_t b) { return (b >> 1) * kQ6KPair + kQ6KChunk + (b & 1) * kQ6KScaleBytes; }
constexpr int64_t kF16Col = 16 * 2;  // F16: bytes per column of one group (16 fp16 values)

}  // namespace hc::ops::repack_detail
