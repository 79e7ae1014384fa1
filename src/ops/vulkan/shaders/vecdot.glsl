// Block dot products of one weight row with one activation row, for the weight type WTYPE
// (glslc -DWTYPE=<n>, VkWType of vk_abi.h), with the activations already quantised to the
// host's vec_dot_type (quantize.comp): the arithmetic of the host's vec_dot (quant/quant.h,
// ggml's ggml_vec_dot_*), block by block.
//
//   VD_UNIT                           elements per unit: a block (32 or 256), 8 for float types
//   VD_WB vd_load_w(row, u, ne0)      unit u of a weight row (its address), in registers
//   VD_XB vd_load_x(xrow, u, ne0)     unit u of a quantised activation row
//   float vd_dot(VD_WB w, VD_XB x)    their dot product
//
// Arithmetic (w: weight block, a: activation block; integer sums are exact):
//   Q4_0 x Q8_0  (d_w d_a) * float(sum (q_w - 8) q_a)
//   Q8_0 x Q8_0  (d_w d_a) * float(sum q_w q_a)
//   Q4_1 x Q8_1  (d_w d_a) * float(sum q_w q_a) + m_w s_a  (s_a = fp16(d_a sum q_a): the m term)
//   Q4_K x Q8_K  (d_w d_a) * float(sum_s sc_s sum q_w q_a) - (dmin_w d_a) * float(sum_s mn_s
//                bsum_s), s over the 8 sub-blocks of 32 (Q5_K: 5-bit q_w)
//   Q6_K x Q8_K  (d_w d_a) * float(sum_g sc_g sum (q_w - 32) q_a), g over 16 groups of 16
//   F16 x F16, BF16 x BF16: fp32 sums of the exact products; F32 x F32: fp32 sums (fma).
// d_w d_a of two fp16 scales is exact in fp32. The host sums the same block terms in another
// order (ggml's 8 float lanes, hsum at the end), so results differ from it by fp32 accumulation
// rounding only (~1e-7 relative), never by a quantisation step.
//
// Loads: block data is only 2-byte aligned (18-, 20-, 34-, 144-, 176-, 210-byte blocks), so it
// is read as 64- and 32-bit words declared 2-byte aligned (common.glsl ld64a2 / ld32a2).
// Q8_K rows (292-byte blocks, 4-byte aligned d) are read the same way.
#ifndef HC_VK_VECDOT_GLSL
#define HC_VK_VECDOT_GLSL

#include "common.glsl"

#ifndef WTYPE
#error "compile with -DWTYPE=<VkWType>"
#endif

// The eight bytes at p (2-byte aligned) as two words, stored at q[i], q[i + 1].
#define VD_LD64(p, q, i)         \
  {                              \
    const uvec2 v_ = ld64a2(p);  \
    q[i] = v_.x;                 \
    q[i + 1] = v_.y;             \
  }

// Integer dot products two elements per 32-bit multiply. An activation word of four signed
// bytes x0..x3 is packed as P02 = x2 + 2^16 x0 and P13 = x3 + 2^16 x1 (vd_pack; once per
// activation unit, shared by every row). A weight word N = n_a + 2^16 n_b of two small levels
// times P = x_b + 2^16 x_a is n_a x_b + 2^16 (n_a x_a + n_b x_b) modulo 2^32: the high half
// holds the pair's dot product, the low half a bounded leftover. Sums of such products keep
// both halves apart while |sum of high halves| < 2^15 - 1 and |sum of low halves| < 2^15;
// vd_high then recovers the exact sum of the high halves. Each caller states its bound.
void vd_pack(uint v, out uint p02, out uint p13) {
  const int s = int(v);
  p02 = uint(((s << 8) >> 24) + ((s << 24) >> 8));
  p13 = uint((s >> 24) + (((s << 16) >> 8) & int(0xffff0000u)));
}
int vd_high(int acc) { return (acc + 32768) >> 16; }
// Levels of bytes 0 and 2 (N02) or 1 and 3 (N13) of a word of nibbles, the nibble at `shift`.
int vd_n02(uint w, int shift) { return int((w >> shift) & 0x000F000Fu); }
int vd_n13(uint w, int shift) { return int((w >> (shift + 8)) & 0x000F000Fu); }
// Sum over bytes k of signed(w byte k) * signed(x byte k).
int vd_s8x4(uint w, uint x) {
  int s = 0;
  for (int k = 0; k < 4; ++k) s += sbyte(w, k) * sbyte(x, k);
  return s;
}

#if WTYPE == 3 || WTYPE == 4 || WTYPE == 5  // ------------------------- Q4_0, Q4_1, Q8_0 weights
#define VD_UNIT 32

#if WTYPE == 4
// Q8_1, 36 bytes: d, s (fp16), qs[32].
#define VD_XBYTES 36ul
#define VD_XQS 4ul
#else
// Q8_0, 34 bytes: d (fp16), qs[32].
#define VD_XBYTES 34ul
#define VD_XQS 2ul
#endif
struct VD_XB {
  float d, s;  // s: Q8_1's d * sum(qs); for Q4_0: sum(qs), as an exact integer
#if WTYPE == 5
  uint q[8];   // element e is byte e % 4 of q[e / 4]
#else
  uint p[16];  // word i of qs packed: P02 at p[2 i], P13 at p[2 i + 1] (vd_pack)
#endif
};
VD_XB vd_load_x(uint64_t xrow, int u, int ne0) {
  const uint64_t b = xrow + uint64_t(u) * VD_XBYTES;
  VD_XB x;
  uint q[8];
  for (int i = 0; i < 8; i += 2) VD_LD64(b + VD_XQS + uint64_t(4 * i), q, i);
#if WTYPE == 4
  const uint ds = ld32a2(b);
  x.d = hc_half(ds & 0xffffu);
  x.s = hc_half(ds >> 16);
#else
  x.d = hc_half(ld16(b));
  x.s = 0.0;
#endif
#if WTYPE == 3
  int sum = 0;
  for (int i = 0; i < 8; ++i) {
    for (int k = 0; k < 4; ++k) sum += sbyte(q[i], k);
  }
  x.s = float(sum);
#endif
#if WTYPE == 5
  x.q = q;
#else
  for (int i = 0; i < 8; ++i) vd_pack(q[i], x.p[2 * i], x.p[2 * i + 1]);
#endif
  return x;
}

#if WTYPE == 5
// Q8_0 weights, 34 bytes: d, qs[32].
struct VD_WB {
  float d;
  uint q[8];
};
VD_WB vd_load_w(uint64_t row, int u, int ne0) {
  const uint64_t b = row + uint64_t(u) * 34ul;
  VD_WB w;
  w.d = hc_half(ld16(b));
  for (int i = 0; i < 8; i += 2) VD_LD64(b + 2ul + uint64_t(4 * i), w.q, i);
  return w;
}
float vd_dot(VD_WB w, VD_XB x) {
  int s = 0;
  for (int i = 0; i < 8; ++i) s += vd_s8x4(w.q[i], x.q[i]);
  return (w.d * x.d) * float(s);
}
#else
// Q4_0 (18 bytes: d, qs[16]) / Q4_1 (20 bytes: d, m, qs[16]): element j < 16 is the low nibble
// of qs[j], j + 16 the high nibble.
#if WTYPE == 3
#define VD_WBYTES 18ul
#define VD_WQS 2ul
#else
#define VD_WBYTES 20ul
#define VD_WQS 4ul
#endif
struct VD_WB {
  float d, m;
  uint q[4];
};
VD_WB vd_load_w(uint64_t row, int u, int ne0) {
  const uint64_t b = row + uint64_t(u) * VD_WBYTES;
  VD_WB w;
#if WTYPE == 4
  const uint dm = ld32a2(b);
  w.d = hc_half(dm & 0xffffu);
  w.m = hc_half(dm >> 16);
#else
  w.d = hc_half(ld16(b));
  w.m = 0.0;
#endif
  VD_LD64(b + VD_WQS, w.q, 0);
  VD_LD64(b + VD_WQS + 8ul, w.q, 2);
  return w;
}
float vd_dot(VD_WB w, VD_XB x) {
  // Weight word i holds elements 4i .. 4i + 3 (low nibbles, x word i) and 16 + 4i .. (high
  // nibbles, x word i + 4). Pairs of levels <= 15 and |x| <= 127: 8 pairs per accumulator keep
  // the high halves within 8 * 2 * 15 * 127 = 30480 and the low within 15240.
  int a[2] = {0, 0};
  for (int i = 0; i < 4; ++i) {
    const uint q = w.q[i];
    a[i / 2] += vd_n02(q, 0) * int(x.p[2 * i]) + vd_n13(q, 0) * int(x.p[2 * i + 1]) +
                vd_n02(q, 4) * int(x.p[2 * i + 8]) + vd_n13(q, 4) * int(x.p[2 * i + 9]);
  }
  const int s = vd_high(a[0]) + vd_high(a[1]);
#if WTYPE == 3
  return (w.d * x.d) * float(s - 8 * int(x.s));  // sum (q - 8) a = sum q a - 8 sum a
#else
  return (w.d * x.d) * float(s) + w.m * x.s;
#endif
}
#endif

#elif WTYPE >= 6 && WTYPE <= 8  // -------------------------------------- Q4_K, Q5_K, Q6_K
#define VD_UNIT 256
// Q8_K, 292 bytes: d (fp32), qs[256], bsums[16] (int16: sums of 16 qs).
struct VD_XB {
  float d;
  uint p[128];  // word i of qs (elements 4i .. 4i + 3) packed: p[2 i] P02, p[2 i + 1] P13
  uint bs[8];   // bsums, two per word
};
VD_XB vd_load_x(uint64_t xrow, int u, int ne0) {
  const uint64_t b = xrow + uint64_t(u) * 292ul;
  VD_XB x;
  x.d = uintBitsToFloat(ld32a2(b));
  for (int i = 0; i < 64; i += 2) {
    const uvec2 v = ld64a2(b + 4ul + uint64_t(4 * i));
    vd_pack(v.x, x.p[2 * i], x.p[2 * i + 1]);
    vd_pack(v.y, x.p[2 * i + 2], x.p[2 * i + 3]);
  }
  for (int i = 0; i < 8; i += 2) VD_LD64(b + 260ul + uint64_t(4 * i), x.bs, i);
  return x;
}
int vd_bsum(VD_XB x, int g) { return bitfieldExtract(int(x.bs[g / 2]), 16 * (g % 2), 16); }

#if WTYPE == 6 || WTYPE == 7
// Q4_K, 144 bytes: d, dmin (fp16), scales[12], qs[128]. Q5_K, 176 bytes: d, dmin, scales[12],
// qh[32], qs[128]. Sub-block s (32 elements) has 6-bit scale sc_s and min mn_s
// (get_scale_min_k4); its element l is the low (s even) or high (s odd) nibble of
// qs[32 (s / 2) + l], plus for Q5_K bit s of qh[l] as 16.
#if WTYPE == 6
#define VD_WBYTES 144ul
#define VD_WQS 16ul
#else
#define VD_WBYTES 176ul
#define VD_WQS 48ul
#endif
struct VD_WB {
  float d, dmin;
  int sc[8], mn[8];
  uint q[32];
#if WTYPE == 7
  uint qh[8];
#endif
};
VD_WB vd_load_w(uint64_t row, int u, int ne0) {
  const uint64_t b = row + uint64_t(u) * VD_WBYTES;
  VD_WB w;
  const uint dm = ld32a2(b);
  w.d = hc_half(dm & 0xffffu);
  w.dmin = hc_half(dm >> 16);
  uint s[3];
  VD_LD64(b + 4ul, s, 0);
  s[2] = ld32a2(b + 12ul);
  for (int j = 0; j < 8; ++j) {  // get_scale_min_k4 on the bytes of s
    const uint lo = ubyte(s[j / 4], j % 4);             // scales[j] (j < 4)
    const uint hi = ubyte(s[(j + 4) / 4], (j + 4) % 4);  // scales[j + 4]
    if (j < 4) {
      w.sc[j] = int(lo & 63u);
      w.mn[j] = int(hi & 63u);
    } else {
      const uint lm4 = ubyte(s[(j - 4) / 4], (j - 4) % 4);  // scales[j - 4]
      w.sc[j] = int((hi & 0xFu) | ((lm4 >> 6) << 4));
      w.mn[j] = int((hi >> 4) | ((lo >> 6) << 4));  // lo is scales[j] here
    }
  }
  for (int i = 0; i < 32; i += 2) VD_LD64(b + VD_WQS + uint64_t(4 * i), w.q, i);
#if WTYPE == 7
  for (int i = 0; i < 8; i += 2) VD_LD64(b + 16ul + uint64_t(4 * i), w.qh, i);
#endif
  return w;
}
float vd_dot(VD_WB w, VD_XB x) {
  int isum = 0, msum = 0;
  for (int s = 0; s < 8; ++s) {
    // Q4_K: levels <= 15, 8 pairs per accumulator (high <= 30480, low <= 15240). Q5_K: levels
    // <= 31, 4 pairs per accumulator (high <= 31496, low <= 15748).
    int a[4] = {0, 0, 0, 0};
    const int sh = 4 * (s & 1);
    for (int i = 0; i < 8; ++i) {  // elements 4i .. 4i + 3 of the sub-block
      const uint qw = w.q[8 * (s / 2) + i];
      int n02 = vd_n02(qw, sh), n13 = vd_n13(qw, sh);
#if WTYPE == 7
      n02 |= int(((w.qh[i] >> s) & 0x00010001u) << 4);
      n13 |= int(((w.qh[i] >> (s + 8)) & 0x00010001u) << 4);
      a[i / 2] += n02 * int(x.p[2 * (8 * s + i)]) + n13 * int(x.p[2 * (8 * s + i) + 1]);
#else
      a[i / 4] += n02 * int(x.p[2 * (8 * s + i)]) + n13 * int(x.p[2 * (8 * s + i) + 1]);
#endif
    }
    const int d = vd_high(a[0]) + vd_high(a[1]) + vd_high(a[2]) + vd_high(a[3]);
    isum += w.sc[s] * d;
    msum += w.mn[s] * (vd_bsum(x, 2 * s) + vd_bsum(x, 2 * s + 1));
  }
  return (w.d * x.d) * float(isum) - (w.dmin * x.d) * float(msum);
}

#else
// Q6_K, 210 bytes: ql[128], qh[64], scales[16] (int8), d (fp16). Half h (128 elements),
// quarter qq: element 32 qq + l of the half has its low 4 bits in ql[64 h + 32 (qq & 1) + l]
// (high nibble for qq >= 2) and its top 2 bits at shift 2 qq of qh[32 h + l]; q - 32 in
// [-32, 31]; group g = element / 16 has scale scales[g].
struct VD_WB {
  float d;
  uint ql[32], qh[16], sc[4];
};
VD_WB vd_load_w(uint64_t row, int u, int ne0) {
  const uint64_t b = row + uint64_t(u) * 210ul;
  VD_WB w;
  for (int i = 0; i < 32; i += 2) VD_LD64(b + uint64_t(4 * i), w.ql, i);
  for (int i = 0; i < 16; i += 2) VD_LD64(b + 128ul + uint64_t(4 * i), w.qh, i);
  VD_LD64(b + 192ul, w.sc, 0);
  VD_LD64(b + 200ul, w.sc, 2);
  w.d = hc_half(ld16(b + 208ul));
  return w;
}
float vd_dot(VD_WB w, VD_XB x) {
  int isum = 0;
  for (int h = 0; h < 2; ++h) {
    for (int qq = 0; qq < 4; ++qq) {
      for (int half16 = 0; half16 < 2; ++half16) {  // group 8 h + 2 qq + half16
        // Levels q - 32 in [-32, 31] (N = U - 32 (1 + 2^16) from the unsigned levels U), 4
        // pairs per accumulator: high <= 4 * 2 * 32 * 127 = 32512, low <= 16256.
        int a[2] = {0, 0};
        for (int i = 0; i < 4; ++i) {  // elements l = 16 half16 + 4 i .. + 3
          const int l = 16 * half16 + 4 * i;
          const uint lw = w.ql[(64 * h + 32 * (qq & 1) + l) / 4];
          const uint hw = w.qh[(32 * h + l) / 4];
          const int xi = (128 * h + 32 * qq + l) / 4;
          const int sl = qq >= 2 ? 4 : 0;
          const int n02 = int(((lw >> sl) & 0x000F000Fu) | (((hw >> (2 * qq)) & 0x00030003u) << 4));
          const int n13 =
              int(((lw >> (sl + 8)) & 0x000F000Fu) | (((hw >> (2 * qq + 8)) & 0x00030003u) << 4));
          a[i / 2] += (n02 - 0x00200020) * int(x.p[2 * xi]) +
                      (n13 - 0x00200020) * int(x.p[2 * xi + 1]);
        }
        const int d = vd_high(a[0]) + vd_high(a[1]);
        const int g = 8 * h + 2 * qq + half16;
        isum += sbyte(w.sc[g / 4], g % 4) * d;
      }
    }
  }
  return (w.d * x.d) * float(isum);
}
#endif

#elif WTYPE <= 2  // --------------------------------------------------------- F32, F16, BF16
// Units of 8 elements; elements at or past ne0 are 0 (and not read). Weights and activations
// are widened to fp32 exactly (the activations were rounded to the weight's type by
// quantize.comp, except F32); F16 and BF16 products are then exact in fp32.
#define VD_UNIT 8
struct VD_WB {
  float v[8];
};
#define VD_XB VD_WB

#if WTYPE == 0
VD_WB vd_load_f(uint64_t row, int u, int ne0) {
  VD_WB w;
  const int k0 = 8 * u;
  const uint64_t p = row + uint64_t(k0) * 4ul;
  if (k0 + 8 <= ne0) {
    for (int i = 0; i < 8; i += 2) {
      const uvec2 v = ld64a2(p + uint64_t(4 * i));
      w.v[i] = uintBitsToFloat(v.x);
      w.v[i + 1] = uintBitsToFloat(v.y);
    }
  } else {
    for (int i = 0; i < 8; ++i) w.v[i] = k0 + i < ne0 ? FloatRef(p).v[i] : 0.0;
  }
  return w;
}
#else
#if WTYPE == 1
float vd_conv(uint h) { return hc_half(h); }
#else
float vd_conv(uint h) { return hc_bf16_to_float(h); }
#endif
VD_WB vd_load_f(uint64_t row, int u, int ne0) {
  VD_WB w;
  const int k0 = 8 * u;
  const uint64_t p = row + uint64_t(k0) * 2ul;
  if (k0 + 8 <= ne0) {
    for (int i = 0; i < 8; i += 4) {
      const uvec2 v = ld64a2(p + uint64_t(2 * i));
      w.v[i] = vd_conv(v.x);
      w.v[i + 1] = vd_conv(v.x >> 16);
      w.v[i + 2] = vd_conv(v.y);
      w.v[i + 3] = vd_conv(v.y >> 16);
    }
  } else {
    for (int i = 0; i < 8; ++i) w.v[i] = k0 + i < ne0 ? vd_conv(ld16(p + uint64_t(2 * i))) : 0.0;
  }
  return w;
}
#endif
VD_WB vd_load_w(uint64_t row, int u, int ne0) { return vd_load_f(row, u, ne0); }
VD_XB vd_load_x(uint64_t xrow, int u, int ne0) { return vd_load_f(xrow, u, ne0); }
float vd_dot(VD_WB w, VD_XB x) {
  float s = w.v[0] * x.v[0];
  for (int i = 1; i < 8; ++i) s = fma(w.v[i], x.v[i], s);
  return s;
}

#else
#error "WTYPE must be 0..8 (VkWType)"
#endif

// Units in a row of ne0 elements.
int vd_units(int ne0) { return (ne0 + VD_UNIT - 1) / VD_UNIT; }

#endif  // HC_VK_VECDOT_GLSL
