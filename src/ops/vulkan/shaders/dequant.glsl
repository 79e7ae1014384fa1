// Dequantisation of one weight row, for the type WTYPE (glslc -DWTYPE=<n>, VkWType of vk_abi.h:
// 0 F32, 1 F16, 2 BF16, 3 Q4_0, 4 Q4_1, 5 Q8_0, 6 Q4_K, 7 Q5_K, 8 Q6_K). `row` is the address of
// the row's first byte (its first block), in ggml's block layout (quant/blocks.h).
//
//   float dq_elem(uint64_t row, int k)                        element k
//   void dq_group(uint64_t row, int k0, int ne0, out float w[8])  elements k0 .. k0 + 7
//
// dq_group: k0 is a multiple of 8 (DQ_GROUP); for block types 8 divides the block, so a group
// never straddles two blocks (ne0 is a whole number of blocks); for the float types elements at
// or past ne0 read as 0. Groups are the CUDA twin's (ops/cuda/dequant.cuh).
//
// Every value equals quant::dequantize_row_ref's bit for bit: the same float operations in the
// same order (`precise`: no fma contraction where the reference multiplies and then adds, no
// reassociation), the exact fp16 conversion of common.glsl. Block data is only 2-byte aligned
// (18-, 34- and 210-byte blocks), so it is read as bytes, 16-bit words and 32-bit words declared
// 2-byte aligned (ld8, ld16, ld32a2); the float types use 16-byte vector loads when the row is
// 16-byte aligned. Used by down.comp (the matvec takes vecdot.glsl's block dot products).
#ifndef HC_VK_DEQUANT_GLSL
#define HC_VK_DEQUANT_GLSL

#include "common.glsl"

#ifndef WTYPE
#error "compile with -DWTYPE=<VkWType>"
#endif

#define DQ_GROUP 8

// 6-bit scale and min j (0..7) of a Q4_K / Q5_K block (quant::get_scale_min_k4); q: the
// address of scales[12].
void dq_scale_min_k4(int j, uint64_t q, out uint sc, out uint mn) {
  if (j < 4) {
    sc = ld8(q + uint64_t(j)) & 63u;
    mn = ld8(q + uint64_t(j + 4)) & 63u;
  } else {
    const uint b4 = ld8(q + uint64_t(j + 4));
    sc = (b4 & 0xFu) | ((ld8(q + uint64_t(j - 4)) >> 6) << 4);
    mn = (b4 >> 4) | ((ld8(q + uint64_t(j)) >> 6) << 4);
  }
}

// Half at a 2-byte aligned address, as float.
float ldh(uint64_t p) { return hc_half(ld16(p)); }

#if WTYPE == 0  // ---------------------------------------------------------------- F32
// x = the float itself.
float dq_elem(uint64_t row, int k) { return FloatRef(row).v[k]; }

void dq_group(uint64_t row, int k0, int ne0, out float w[8]) {
  if (k0 + 8 <= ne0 && (row & 15ul) == 0ul) {
    const uint64_t p = row + uint64_t(k0) * 4ul;  // 16-byte aligned
    const vec4 a = Vec4Ref(p).v[0], b = Vec4Ref(p).v[1];
    w[0] = a.x; w[1] = a.y; w[2] = a.z; w[3] = a.w;
    w[4] = b.x; w[5] = b.y; w[6] = b.z; w[7] = b.w;
    return;
  }
  for (int e = 0; e < 8; ++e) w[e] = k0 + e < ne0 ? FloatRef(row).v[k0 + e] : 0.0;
}

#elif WTYPE == 1 || WTYPE == 2  // ------------------------------------------------- F16, BF16
#if WTYPE == 1
float dq_conv(uint h) { return hc_half(h); }  // fp16_to_fp32, exact
#else
float dq_conv(uint h) { return hc_bf16_to_float(h); }  // bf16_to_fp32: bits << 16
#endif

float dq_elem(uint64_t row, int k) { return dq_conv(uint(U16Ref(row).v[k])); }

void dq_group(uint64_t row, int k0, int ne0, out float w[8]) {
  if (k0 + 8 <= ne0 && (row & 15ul) == 0ul) {
    const uvec4 v = UVec4Ref(row + uint64_t(k0) * 2ul).v[0];  // 16-byte aligned
    w[0] = dq_conv(v.x); w[1] = dq_conv(v.x >> 16);
    w[2] = dq_conv(v.y); w[3] = dq_conv(v.y >> 16);
    w[4] = dq_conv(v.z); w[5] = dq_conv(v.z >> 16);
    w[6] = dq_conv(v.w); w[7] = dq_conv(v.w >> 16);
    return;
  }
  for (int e = 0; e < 8; ++e) {
    w[e] = k0 + e < ne0 ? dq_conv(uint(U16Ref(row).v[k0 + e])) : 0.0;
  }
}

#elif WTYPE == 3  // ---------------------------------------------------------------- Q4_0
// 18 bytes: d (fp16), qs[16]; element j < 16 is the low nibble of qs[j], j + 16 the high one;
// x = (q - 8) * d (int q - 8 converted to float, one multiply).
float dq_elem(uint64_t row, int k) {
  const uint64_t b = row + uint64_t(k / 32) * 18ul;
  const int o = k % 32;
  const uint byte = ld8(b + 2ul + uint64_t(o & 15));
  const uint q = o >= 16 ? byte >> 4 : byte & 15u;
  precise float x = float(int(q) - 8) * ldh(b);
  return x;
}

void dq_group(uint64_t row, int k0, int ne0, out float w[8]) {
  const uint64_t b = row + uint64_t(k0 / 32) * 18ul;
  const int o = k0 % 32;
  const float d = ldh(b);
  const uint64_t q = b + 2ul + uint64_t(o & 15);
  const uint lo = ld32a2(q), hi = ld32a2(q + 4ul);
  const int shift = o >= 16 ? 4 : 0;
  for (int e = 0; e < 4; ++e) {
    precise float x0 = float(int((lo >> (8 * e + shift)) & 15u) - 8) * d;
    precise float x1 = float(int((hi >> (8 * e + shift)) & 15u) - 8) * d;
    w[e] = x0;
    w[e + 4] = x1;
  }
}

#elif WTYPE == 4  // ---------------------------------------------------------------- Q4_1
// 20 bytes: d, m (fp16), qs[16]; nibbles as Q4_0; x = q * d + m (two roundings).
float dq_elem(uint64_t row, int k) {
  const uint64_t b = row + uint64_t(k / 32) * 20ul;
  const int o = k % 32;
  const uint byte = ld8(b + 4ul + uint64_t(o & 15));
  const uint q = o >= 16 ? byte >> 4 : byte & 15u;
  precise float x = float(q) * ldh(b) + ldh(b + 2ul);
  return x;
}

void dq_group(uint64_t row, int k0, int ne0, out float w[8]) {
  const uint64_t b = row + uint64_t(k0 / 32) * 20ul;
  const int o = k0 % 32;
  const float d = ldh(b), m = ldh(b + 2ul);
  const uint64_t q = b + 4ul + uint64_t(o & 15);
  const uint lo = ld32a2(q), hi = ld32a2(q + 4ul);
  const int shift = o >= 16 ? 4 : 0;
  for (int e = 0; e < 4; ++e) {
    precise float x0 = float((lo >> (8 * e + shift)) & 15u) * d + m;
    precise float x1 = float((hi >> (8 * e + shift)) & 15u) * d + m;
    w[e] = x0;
    w[e + 4] = x1;
  }
}

#elif WTYPE == 5  // ---------------------------------------------------------------- Q8_0
// 34 bytes: d (fp16), qs[32] int8; x = q * d.
float dq_elem(uint64_t row, int k) {
  const uint64_t b = row + uint64_t(k / 32) * 34ul;
  const int q = bitfieldExtract(int(ld8(b + 2ul + uint64_t(k % 32))), 0, 8);  // sign-extended
  precise float x = float(q) * ldh(b);
  return x;
}

void dq_group(uint64_t row, int k0, int ne0, out float w[8]) {
  const uint64_t b = row + uint64_t(k0 / 32) * 34ul;
  const float d = ldh(b);
  const uint64_t q = b + 2ul + uint64_t(k0 % 32);
  const int lo = int(ld32a2(q)), hi = int(ld32a2(q + 4ul));
  for (int e = 0; e < 4; ++e) {
    precise float x0 = float(bitfieldExtract(lo, 8 * e, 8)) * d;  // signed byte e
    precise float x1 = float(bitfieldExtract(hi, 8 * e, 8)) * d;
    w[e] = x0;
    w[e + 4] = x1;
  }
}

#elif WTYPE == 6 || WTYPE == 7  // ---------------------------------------------- Q4_K, Q5_K
// Q4_K, 144 bytes: d, dmin (fp16), scales[12], qs[128]. Q5_K, 176 bytes: d, dmin, scales[12],
// qh[32], qs[128]. Sub-block s (32 elements) has 6-bit scale sc and min mn (get_scale_min_k4);
// element l of it is the low (s even) or high (s odd) nibble of qs[32 (s / 2) + l], plus for
// Q5_K bit s of qh[l] as the fifth bit (16). x = (d * sc) * q - (dmin * mn), each step rounded.
#if WTYPE == 6
#define DQ_KBYTES 144ul
#define DQ_QS 16ul
#else
#define DQ_KBYTES 176ul
#define DQ_QS 48ul
#define DQ_QH 16ul
#endif

float dq_elem(uint64_t row, int k) {
  const uint64_t b = row + uint64_t(k / 256) * DQ_KBYTES;
  const int kb = k % 256, s = kb / 32, l = kb % 32;
  uint sc, mn;
  dq_scale_min_k4(s, b + 4ul, sc, mn);
  precise float d1 = ldh(b) * float(sc);
  precise float m1 = ldh(b + 2ul) * float(mn);
  const uint byte = ld8(b + DQ_QS + uint64_t(32 * (s / 2) + l));
  uint q = (s & 1) != 0 ? byte >> 4 : byte & 15u;
#if WTYPE == 7
  q |= ((ld8(b + DQ_QH + uint64_t(l)) >> s) & 1u) << 4;
#endif
  precise float x = d1 * float(q) - m1;
  return x;
}

void dq_group(uint64_t row, int k0, int ne0, out float w[8]) {
  const uint64_t b = row + uint64_t(k0 / 256) * DQ_KBYTES;
  const int kb = k0 % 256, s = kb / 32, l0 = kb % 32;
  uint sc, mn;
  dq_scale_min_k4(s, b + 4ul, sc, mn);
  precise float d1 = ldh(b) * float(sc);
  precise float m1 = ldh(b + 2ul) * float(mn);
  const uint64_t q = b + DQ_QS + uint64_t(32 * (s / 2) + l0);
  const uint lo = ld32a2(q), hi = ld32a2(q + 4ul);
  const int shift = (s & 1) * 4;
#if WTYPE == 7
  const uint hlo = ld32a2(b + DQ_QH + uint64_t(l0)), hhi = ld32a2(b + DQ_QH + uint64_t(l0 + 4));
#endif
  for (int e = 0; e < 4; ++e) {
    uint q0 = (lo >> (8 * e + shift)) & 15u;
    uint q1 = (hi >> (8 * e + shift)) & 15u;
#if WTYPE == 7
    q0 |= ((hlo >> (8 * e + s)) & 1u) << 4;
    q1 |= ((hhi >> (8 * e + s)) & 1u) << 4;
#endif
    precise float x0 = d1 * float(q0) - m1;
    precise float x1 = d1 * float(q1) - m1;
    w[e] = x0;
    w[e + 4] = x1;
  }
}

#elif WTYPE == 8  // ---------------------------------------------------------------- Q6_K
// 210 bytes: ql[128], qh[64], scales[16] int8, d (fp16). Half h (128 elements), quarter qq:
// element 32 qq + l of the half has its low 4 bits in ql[64 h + 32 (qq & 1) + l] (high nibble
// for qq >= 2) and its top 2 bits at shift 2 qq of qh[32 h + l];
// x = (d * scales[8 h + l / 16 + 2 qq]) * (q - 32).
float dq_elem(uint64_t row, int k) {
  const uint64_t b = row + uint64_t(k / 256) * 210ul;
  const int kb = k % 256, h = kb / 128, qq = (kb % 128) / 32, l = kb % 32;
  const uint lb = ld8(b + uint64_t(64 * h + 32 * (qq & 1) + l));
  const uint hb = ld8(b + 128ul + uint64_t(32 * h + l));
  const int q = int(((qq >= 2 ? lb >> 4 : lb) & 15u) | (((hb >> (2 * qq)) & 3u) << 4));
  const int sc = bitfieldExtract(int(ld8(b + 192ul + uint64_t(8 * h + l / 16 + 2 * qq))), 0, 8);
  precise float ds = ldh(b + 208ul) * float(sc);
  precise float x = ds * float(q - 32);
  return x;
}

void dq_group(uint64_t row, int k0, int ne0, out float w[8]) {
  const uint64_t b = row + uint64_t(k0 / 256) * 210ul;
  const int kb = k0 % 256, h = kb / 128, qq = (kb % 128) / 32, l0 = kb % 32;
  const uint64_t ql = b + uint64_t(64 * h + 32 * (qq & 1) + l0);
  const uint64_t qh = b + 128ul + uint64_t(32 * h + l0);
  const uint lo = ld32a2(ql), hi = ld32a2(ql + 4ul);
  const uint hlo = ld32a2(qh), hhi = ld32a2(qh + 4ul);
  const int sc = bitfieldExtract(int(ld8(b + 192ul + uint64_t(8 * h + l0 / 16 + 2 * qq))), 0, 8);
  precise float ds = ldh(b + 208ul) * float(sc);
  const int sl = qq >= 2 ? 4 : 0, sh = 2 * qq;
  for (int e = 0; e < 4; ++e) {
    const int q0 = int(((lo >> (8 * e + sl)) & 15u) | (((hlo >> (8 * e + sh)) & 3u) << 4));
    const int q1 = int(((hi >> (8 * e + sl)) & 15u) | (((hhi >> (8 * e + sh)) & 3u) << 4));
    precise float x0 = ds * float(q0 - 32);
    precise float x1 = ds * float(q1 - 32);
    w[e] = x0;
    w[e + 4] = x1;
  }
}

#else
#error "WTYPE must be 0..8 (VkWType)"
#endif

#endif  // HC_VK_DEQUANT_GLSL
