// Dequantisation of weight groups on the GPU: Dequant<T>::group reads elements [k0, k0 + 8) of
// one row of type T (ggml block layout, quant/blocks.h) into 8 floats. k0 is a multiple of 8;
// for block types 8 divides the block, so a group never straddles two blocks.
//
// Every value equals quant::dequantize_row_ref's bit for bit: the same operations in the same
// order, with __fmul_rn / __fadd_rn / __fsub_rn where the reference multiplies and then adds,
// because nvcc would otherwise contract the pair into one FMA (rounding once, not twice).
//
// Blocks are only 2-byte aligned (18-, 34- and 210-byte blocks), so quantised bytes are read
// as 16-bit words; F16 / BF16 / F32 rows use 16-byte vector loads where the group is aligned.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "core/dtype.h"

namespace hc::ops::cuda {

constexpr int kGroup = 8;  // elements per Dequant<T>::group

__device__ __forceinline__ uint32_t load_u16(const uint8_t* p) {
  return *reinterpret_cast<const uint16_t*>(p);
}
// Four bytes from a 2-byte aligned address, little endian.
__device__ __forceinline__ uint32_t load_u32_a2(const uint8_t* p) {
  return load_u16(p) | (load_u16(p + 2) << 16);
}
__device__ __forceinline__ float load_half(const uint8_t* p) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(load_u16(p))));
}
__device__ __forceinline__ float half_bits(uint32_t h) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(h & 0xFFFF)));
}
__device__ __forceinline__ float bf16_bits(uint32_t h) { return __uint_as_float(h << 16); }
__device__ __forceinline__ bool aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15) == 0;
}

// 6-bit scale and min j (0..7) of a Q4_K / Q5_K block (quant::get_scale_min_k4).
__device__ __forceinline__ void scale_min_k4(int j, const uint8_t* q, int* d, int* m) {
  if (j < 4) {
    *d = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

template <GgmlType T>
struct Dequant;

// Float rows: n elements (any n); elements at or past n read as 0.
template <>
struct Dequant<GgmlType::F32> {
  static constexpr int kBlock = 1;
  __device__ static void group(const uint8_t* row, int64_t k0, int64_t n, float (&w)[kGroup]) {
    const float* p = reinterpret_cast<const float*>(row) + k0;
    if (k0 + kGroup <= n && aligned16(p)) {
      const float4 a = reinterpret_cast<const float4*>(p)[0];
      const float4 b = reinterpret_cast<const float4*>(p)[1];
      w[0] = a.x, w[1] = a.y, w[2] = a.z, w[3] = a.w;
      w[4] = b.x, w[5] = b.y, w[6] = b.z, w[7] = b.w;
      return;
    }
#pragma unroll
    for (int e = 0; e < kGroup; ++e) w[e] = k0 + e < n ? p[e] : 0.0f;
  }
};

// F16 and BF16 share the load; Conv turns 16 bits into a float.
template <float (*Conv)(uint32_t)>
__device__ __forceinline__ void group_16bit(const uint8_t* row, int64_t k0, int64_t n,
                                            float (&w)[kGroup]) {
  const uint16_t* p = reinterpret_cast<const uint16_t*>(row) + k0;
  if (k0 + kGroup <= n && aligned16(p)) {
    const uint4 v = *reinterpret_cast<const uint4*>(p);
    const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      w[2 * i] = Conv(words[i]);
      w[2 * i + 1] = Conv(words[i] >> 16);
    }
    return;
  }
#pragma unroll
  for (int e = 0; e < kGroup; ++e) w[e] = k0 + e < n ? Conv(p[e]) : 0.0f;
}

template <>
struct Dequant<GgmlType::F16> {
  static constexpr int kBlock = 1;
  __device__ static void group(const uint8_t* row, int64_t k0, int64_t n, float (&w)[kGroup]) {
    group_16bit<half_bits>(row, k0, n, w);
  }
};

template <>
struct Dequant<GgmlType::BF16> {
  static constexpr int kBlock = 1;
  __device__ static void group(const uint8_t* row, int64_t k0, int64_t n, float (&w)[kGroup]) {
    group_16bit<bf16_bits>(row, k0, n, w);
  }
};

// Q4_0 (18 bytes: d, qs[16]): element j < 16 is the low nibble of qs[j], j + 16 the high one.
template <>
struct Dequant<GgmlType::Q4_0> {
  static constexpr int kBlock = 32;
  __device__ static void group(const uint8_t* row, int64_t k0, int64_t, float (&w)[kGroup]) {
    const uint8_t* b = row + (k0 / 32) * 18;
    const int o = static_cast<int>(k0 % 32);
    const float d = load_half(b);
    const uint8_t* q = b + 2 + (o & 15);
    const uint32_t lo = load_u32_a2(q), hi = load_u32_a2(q + 4);
    const int shift = o >= 16 ? 4 : 0;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      w[e] = static_cast<float>(static_cast<int>((lo >> (8 * e + shift)) & 15) - 8) * d;
      w[e + 4] = static_cast<float>(static_cast<int>((hi >> (8 * e + shift)) & 15) - 8) * d;
    }
  }
};

// Q4_1 (20 bytes: d, m, qs[16]): x = q * d + m, nibbles as Q4_0.
template <>
struct Dequant<GgmlType::Q4_1> {
  static constexpr int kBlock = 32;
  __device__ static void group(const uint8_t* row, int64_t k0, int64_t, float (&w)[kGroup]) {
    const uint8_t* b = row + (k0 / 32) * 20;
    const int o = static_cast<int>(k0 % 32);
    const float d = load_half(b), m = load_half(b + 2);
    const uint8_t* q = b + 4 + (o & 15);
    const uint32_t lo = load_u32_a2(q), hi = load_u32_a2(q + 4);
    const int shift = o >= 16 ? 4 : 0;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      w[e] = __fadd_rn(__fmul_rn(static_cast<float>((lo >> (8 * e + shift)) & 15), d), m);
      w[e + 4] = __fadd_rn(__fmul_rn(static_cast<float>((hi >> (8 * e + shift)) & 15), d), m);
    }
  }
};

// Q8_0 (34 bytes: d, qs[32] int8): x = q * d.
template <>
struct Dequant<GgmlType::Q8_0> {
  static constexpr int kBlock = 32;
  __device__ static void group(const uint8_t* row, int64_t k0, int64_t, float (&w)[kGroup]) {
    const uint8_t* b = row + (k0 / 32) * 34;
    const float d = load_half(b);
    const uint8_t* q = b + 2 + k0 % 32;
    const uint32_t lo = load_u32_a2(q), hi = load_u32_a2(q + 4);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      w[e] = static_cast<float>(static_cast<int8_t>(lo >> (8 * e))) * d;
      w[e + 4] = static_cast<float>(static_cast<int8_t>(hi >> (8 * e))) * d;
    }
  }
};

// Q4_K (144 bytes: d, dmin, scales[12], qs[128]): sub-block s (32 elements) uses the low (s
// even) or high (s odd) nibbles of qs[32 (s / 2) ..]; x = (d * sc) * q - dmin * m.
template <>
struct Dequant<GgmlType::Q4_K> {
  static constexpr int kBlock = 256;
  __device__ static void group(const uint8_t* row, int64_t k0, int64_t, float (&w)[kGroup]) {
    const uint8_t* b = row + (k0 / 256) * 144;
    const int kb = static_cast<int>(k0 % 256), s = kb / 32, l0 = kb % 32;
    int sc, mn;
    scale_min_k4(s, b + 4, &sc, &mn);
    const float d1 = __fmul_rn(load_half(b), static_cast<float>(sc));
    const float m1 = __fmul_rn(load_half(b + 2), static_cast<float>(mn));
    const uint8_t* q = b + 16 + 32 * (s / 2) + l0;
    const uint32_t lo = load_u32_a2(q), hi = load_u32_a2(q + 4);
    const int shift = (s & 1) * 4;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      w[e] = __fsub_rn(__fmul_rn(d1, static_cast<float>((lo >> (8 * e + shift)) & 15)), m1);
      w[e + 4] = __fsub_rn(__fmul_rn(d1, static_cast<float>((hi >> (8 * e + shift)) & 15)), m1);
    }
  }
};

// Q5_K (176 bytes: d, dmin, scales[12], qh[32], qs[128]): as Q4_K plus bit s of qh[l] as the
// fifth bit (value 16) of element l of sub-block s.
template <>
struct Dequant<GgmlType::Q5_K> {
  static constexpr int kBlock = 256;
  __device__ static void group(const uint8_t* row, int64_t k0, int64_t, float (&w)[kGroup]) {
    const uint8_t* b = row + (k0 / 256) * 176;
    const int kb = static_cast<int>(k0 % 256), s = kb / 32, l0 = kb % 32;
    int sc, mn;
    scale_min_k4(s, b + 4, &sc, &mn);
    const float d1 = __fmul_rn(load_half(b), static_cast<float>(sc));
    const float m1 = __fmul_rn(load_half(b + 2), static_cast<float>(mn));
    const uint8_t* q = b + 48 + 32 * (s / 2) + l0;
    const uint32_t lo = load_u32_a2(q), hi = load_u32_a2(q + 4);
    const uint32_t hlo = load_u32_a2(b + 16 + l0), hhi = load_u32_a2(b + 20 + l0);
    const int shift = (s & 1) * 4;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const uint32_t q0 = ((lo >> (8 * e + shift)) & 15) | (((hlo >> (8 * e + s)) & 1) << 4);
      const uint32_t q1 = ((hi >> (8 * e + shift)) & 15) | (((hhi >> (8 * e + s)) & 1) << 4);
      w[e] = __fsub_rn(__fmul_rn(d1, static_cast<float>(q0)), m1);
      w[e + 4] = __fsub_rn(__fmul_rn(d1, static_cast<float>(q1)), m1);
    }
  }
};

// Q6_K (210 bytes: ql[128], qh[64], scales[16] int8, d): half h (128 elements), quarter qq:
// element 32 qq + l has its low 4 bits in ql[64 h + 32 (qq & 1) + l] (high nibble for qq >= 2)
// and its top 2 bits at shift 2 qq of qh[32 h + l]; x = (d * scales[8 h + l / 16 + 2 qq]) *
// (q - 32).
template <>
struct Dequant<GgmlType::Q6_K> {
  static constexpr int kBlock = 256;
  __device__ static void group(const uint8_t* row, int64_t k0, int64_t, float (&w)[kGroup]) {
    const uint8_t* b = row + (k0 / 256) * 210;
    const int kb = static_cast<int>(k0 % 256), h = kb / 128, qq = (kb % 128) / 32, l0 = kb % 32;
    const uint8_t* ql = b + 64 * h + 32 * (qq & 1) + l0;
    const uint8_t* qh = b + 128 + 32 * h + l0;
    const uint32_t lo = load_u32_a2(ql), hi = load_u32_a2(ql + 4);
    const uint32_t hlo = load_u32_a2(qh), hhi = load_u32_a2(qh + 4);
    const int8_t sc = static_cast<int8_t>(b[192 + 8 * h + l0 / 16 + 2 * qq]);
    const float ds = __fmul_rn(load_half(b + 208), static_cast<float>(sc));
    const int sl = qq >= 2 ? 4 : 0, sh = 2 * qq;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int q0 =
          static_cast<int>(((lo >> (8 * e + sl)) & 15) | (((hlo >> (8 * e + sh)) & 3) << 4));
      const int q1 =
          static_cast<int>(((hi >> (8 * e + sl)) & 15) | (((hhi >> (8 * e + sh)) & 3) << 4));
      w[e] = __fmul_rn(ds, static_cast<float>(q0 - 32));
      w[e + 4] = __fmul_rn(ds, static_cast<float>(q1 - 32));
    }
  }
};

}  // namespace hc::ops::cuda
