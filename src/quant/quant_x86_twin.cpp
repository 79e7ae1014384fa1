// Scalar twins of ggml-cpu's x86 kernels for the 32-element block types (ggml-cpu/arch/x86/
// quants.c, AVX2 / AVX-512 VNNI build). llama.cpp runs these, not the generic references, on
// an x86 CPU, and they round differently:
//
//   * activation quantisers (quantize_row_q8_0 / q8_1): id = 127 / amax instead of 1 / d, and
//     x * id rounded half to even (_mm256_round_ps) instead of roundf;
//   * dot products: 8 float lanes, lane j of block i gets float(sum of the integer products of
//     elements 4j .. 4j + 3) and is accumulated as acc_j = fma(d_x * d_y, lane_j, acc_j), block
//     after block; the lanes are summed by hsum_float_8; Q4_1 adds the block-minimum term,
//     accumulated as summs = fma(m, s, summs) (GCC contracts that line in libggml-cpu.so; the
//     fp16 x fp16 product is exact in float, so this equals summs + m * s).
//
// The SIMD kernels in quant_avx2.cpp / quant_avx512.cpp are tested against these bit for bit.
// Compiled without -mfma: std::fma is the correctly rounded libm call, i.e. what vfmadd does.
#include <cmath>
#include <cstring>

#include "quant/blocks.h"
#include "quant/ref.h"

namespace hc::quant::ref::x86 {
namespace {

// hsum_float_8: (hi 128 + lo 128), then lanes (0 + 2, 1 + 3), then their sum.
float hsum8(const float* a) {
  float t[4];
  for (int k = 0; k < 4; ++k) t[k] = a[k + 4] + a[k];
  return (t[0] + t[2]) + (t[1] + t[3]);
}

// Shared by Q8_0 and Q8_1: fills qs[32] and returns d; *sum gets sum(qs).
float quantize_block_q8(const float* x, int8_t* qs, int* sum) {
  float amax = 0.0f;
  for (int j = 0; j < QK8_0; ++j) {
    const float ax = std::fabs(x[j]);
    amax = amax > ax ? amax : ax;
  }
  const float d = amax / 127.f;
  const float id = amax != 0.0f ? 127.f / amax : 0.0f;
  *sum = 0;
  for (int j = 0; j < QK8_0; ++j) {
    const float v = x[j] * id;  // one rounding: this file is compiled without contraction
    qs[j] = static_cast<int8_t>(std::nearbyint(v));  // default mode: half to even
    *sum += qs[j];
  }
  return d;
}

// Element e of a Q4_0 / Q4_1 block: low nibbles hold 0..15, high nibbles 16..31.
inline int nibble(const uint8_t* qs, int e) { return e < 16 ? (qs[e] & 0x0F) : (qs[e - 16] >> 4); }

// The 8-lane block loop shared by the three dot products. block_lane(i, j) returns the exact
// integer sum of lane j of block i; scale(i) returns d_x * d_y as a float.
template <class Lane, class Scale>
float lanes_dot(int64_t nb, Lane block_lane, Scale scale) {
  float acc[8] = {};
  for (int64_t i = 0; i < nb; ++i) {
    const float d = scale(i);
    for (int j = 0; j < 8; ++j) {
      acc[j] = std::fma(d, static_cast<float>(block_lane(i, j)), acc[j]);
    }
  }
  return hsum8(acc);
}

}  // namespace

void quantize_q8_0(const float* src, void* dst, int64_t n) {
  block_q8_0* y = static_cast<block_q8_0*>(dst);
  for (int64_t i = 0; i < n / QK8_0; ++i) {
    int sum;
    y[i].d = fp32_to_fp16(quantize_block_q8(src + i * QK8_0, y[i].qs, &sum));
  }
}

void quantize_q8_1(const float* src, void* dst, int64_t n) {
  block_q8_1* y = static_cast<block_q8_1*>(dst);
  for (int64_t i = 0; i < n / QK8_1; ++i) {
    int sum;
    const float d = quantize_block_q8(src + i * QK8_1, y[i].qs, &sum);
    y[i].d = fp32_to_fp16(d);
    y[i].s = fp32_to_fp16(d * static_cast<float>(sum));
  }
}

namespace {

// d-scaled blocks (Q4_0, Q5_0, Q8_0 against Q8_0): lane j of block i is the sum of level(x[i], e)
// * y[i].qs[e] over its 4 elements.
template <class Block, class Level>
float scaled_dot(int64_t n, const void* w, const void* a, Level level) {
  const Block* x = static_cast<const Block*>(w);
  const block_q8_0* y = static_cast<const block_q8_0*>(a);
  return lanes_dot(
      n / QK8_0,
      [&](int64_t i, int j) {
        int s = 0;
        for (int e = 4 * j; e < 4 * j + 4; ++e) s += level(x[i], e) * y[i].qs[e];
        return s;
      },
      [&](int64_t i) { return fp16_to_fp32(x[i].d) * fp16_to_fp32(y[i].d); });
}

// Blocks with a minimum (Q4_1, Q5_1 against Q8_1): the same lanes, plus the minimum term.
template <class Block, class Level>
float min_dot(int64_t n, const void* w, const void* a, Level level) {
  const Block* x = static_cast<const Block*>(w);
  const block_q8_1* y = static_cast<const block_q8_1*>(a);
  float summs = 0.0f;
  for (int64_t i = 0; i < n / QK8_1; ++i) {
    summs = std::fma(fp16_to_fp32(x[i].m), fp16_to_fp32(y[i].s), summs);
  }
  const float main = lanes_dot(
      n / QK8_1,
      [&](int64_t i, int j) {
        int s = 0;
        for (int e = 4 * j; e < 4 * j + 4; ++e) s += level(x[i], e) * y[i].qs[e];
        return s;
      },
      [&](int64_t i) { return fp16_to_fp32(x[i].d) * fp16_to_fp32(y[i].d); });
  return main + summs;
}

// Q5_0 / Q5_1: ggml's x86 loop ors the fifth bits into the unpacked nibbles (Q5_0: 0xF0 where
// the bit is clear, i.e. q - 16 as a signed byte), then the same 8 lanes as Q4_0 / Q4_1.
inline int q5(const uint8_t* qs, const uint8_t* qh, int e) {
  uint32_t h;
  std::memcpy(&h, qh, 4);
  return nibble(qs, e) | static_cast<int>(((h >> e) & 1u) << 4);
}

}  // namespace

float vec_dot_q4_0_q8_0(int64_t n, const void* w, const void* a) {
  return scaled_dot<block_q4_0>(n, w, a, [](const block_q4_0& b, int e) { return nibble(b.qs, e) - 8; });
}

float vec_dot_q4_1_q8_1(int64_t n, const void* w, const void* a) {
  return min_dot<block_q4_1>(n, w, a, [](const block_q4_1& b, int e) { return nibble(b.qs, e); });
}

float vec_dot_q5_0_q8_0(int64_t n, const void* w, const void* a) {
  return scaled_dot<block_q5_0>(n, w, a,
                                [](const block_q5_0& b, int e) { return q5(b.qs, b.qh, e) - 16; });
}

float vec_dot_q5_1_q8_1(int64_t n, const void* w, const void* a) {
  return min_dot<block_q5_1>(n, w, a, [](const block_q5_1& b, int e) { return q5(b.qs, b.qh, e); });
}

float vec_dot_q8_0_q8_0(int64_t n, const void* w, const void* a) {
  return scaled_dot<block_q8_0>(n, w, a, [](const block_q8_0& b, int e) { return int{b.qs[e]}; });
}

}  // namespace hc::quant::ref::x86
