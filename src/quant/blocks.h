// ggml block layouts (ggml-common.h), byte for byte: GGUF tensors are used in place, so the
// structs must match the file format exactly. All fp16 fields hold IEEE half bits.
// Blocks only need their natural alignment (2 bytes, 4 for block_q8_K); SIMD code uses
// unaligned loads throughout.
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace hc::quant {

constexpr int QK4_0 = 32;
constexpr int QK4_1 = 32;
constexpr int QK5_0 = 32;
constexpr int QK5_1 = 32;
constexpr int QK8_0 = 32;
constexpr int QK8_1 = 32;
constexpr int QK_K = 256;         // super-block size of the K-quants
constexpr int K_SCALE_SIZE = 12;  // 8 six-bit scales + 8 six-bit mins of Q4_K / Q5_K

// x = d * (q - 8), q in [0, 15]; qs[j] holds element j (low nibble) and j + 16 (high nibble).
struct block_q4_0 {
  fp16_t d;
  uint8_t qs[QK4_0 / 2];
};
static_assert(sizeof(block_q4_0) == 18, "block_q4_0 must match ggml");

// x = d * q + m, q in [0, 15]; same nibble order as Q4_0.
struct block_q4_1 {
  fp16_t d;
  fp16_t m;
  uint8_t qs[QK4_1 / 2];
};
static_assert(sizeof(block_q4_1) == 20, "block_q4_1 must match ggml");

// x = d * (q - 16), q in [0, 31]: the low 4 bits as Q4_0's nibbles, bit j of qh (little
// endian) the fifth bit of element j. llama-quantize's fallback for Q4_K tensors whose rows are
// not a multiple of 256 (SmolLM2's 576), so it fills Q4_K_M files of such models.
struct block_q5_0 {
  fp16_t d;
  uint8_t qh[4];
  uint8_t qs[QK5_0 / 2];
};
static_assert(sizeof(block_q5_0) == 22, "block_q5_0 must match ggml");

// x = d * q + m, q in [0, 31], bits as Q5_0 (Q5_K's fallback).
struct block_q5_1 {
  fp16_t d;
  fp16_t m;
  uint8_t qh[4];
  uint8_t qs[QK5_1 / 2];
};
static_assert(sizeof(block_q5_1) == 24, "block_q5_1 must match ggml");

// x = d * q, q in [-127, 127] when produced by the quantiser.
struct block_q8_0 {
  fp16_t d;
  int8_t qs[QK8_0];
};
static_assert(sizeof(block_q8_0) == 34, "block_q8_0 must match ggml");

// Activation block for Q4_1: s = d * sum(qs) lets the dot product add m * sum(a) for free.
struct block_q8_1 {
  fp16_t d;
  fp16_t s;
  int8_t qs[QK8_1];
};
static_assert(sizeof(block_q8_1) == 36, "block_q8_1 must match ggml");

// 8 sub-blocks of 32: x = d * sc[j] * q - dmin * m[j], q in [0, 15], 6-bit sc/m packed in
// `scales` (see get_scale_min_k4). qs: 4 runs of 32 bytes; run r holds sub-block 2r in the low
// nibbles and sub-block 2r + 1 in the high nibbles.
struct block_q4_K {
  fp16_t d;
  fp16_t dmin;
  uint8_t scales[K_SCALE_SIZE];
  uint8_t qs[QK_K / 2];
};
static_assert(sizeof(block_q4_K) == 144, "block_q4_K must match ggml");

// As Q4_K with a fifth bit: bit (2r) of qh[l] is the high bit of element l of sub-block 2r,
// bit (2r + 1) that of sub-block 2r + 1.
struct block_q5_K {
  fp16_t d;
  fp16_t dmin;
  uint8_t scales[K_SCALE_SIZE];
  uint8_t qh[QK_K / 8];
  uint8_t qs[QK_K / 2];
};
static_assert(sizeof(block_q5_K) == 176, "block_q5_K must match ggml");

// 16 sub-blocks of 16: x = d * scales[j] * (q - 32), q in [0, 63]. Two halves of 128; in half
// h, ql[64h + l] holds elements l (low) and l + 64 (high), ql[64h + 32 + l] elements l + 32 and
// l + 96; qh[32h + l] holds their top two bits at shifts 0, 2, 4, 6.
struct block_q6_K {
  uint8_t ql[QK_K / 2];
  uint8_t qh[QK_K / 4];
  int8_t scales[QK_K / 16];
  fp16_t d;
};
static_assert(sizeof(block_q6_K) == 210, "block_q6_K must match ggml");

// Activation block for the K-quants: x = d * q; bsums[j] = sum of qs[16j .. 16j + 15], which
// lets the dot products apply the per-sub-block mins without touching qs again.
struct block_q8_K {
  float d;
  int8_t qs[QK_K];
  int16_t bsums[QK_K / 16];
};
static_assert(sizeof(block_q8_K) == 292, "block_q8_K must match ggml");

// Unpacks the j-th (0..7) 6-bit scale and min of a Q4_K / Q5_K block.
inline void get_scale_min_k4(int j, const uint8_t* q, uint8_t* d, uint8_t* m) {
  if (j < 4) {
    *d = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4);
  }
}

}  // namespace hc::quant
