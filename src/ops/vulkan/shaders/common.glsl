// Shared by every compute shader of the Vulkan backend (vk_abi.h is the contract):
//   - the extensions: buffers are reached through 64-bit device addresses
//     (GL_EXT_buffer_reference), read and written as 8-, 16-, 32- and 128-bit words (8/16-bit
//     storage, no 8/16-bit arithmetic);
//   - buffer_reference block types, one per element type, and small load helpers;
//   - the two dispatch grids of vk_abi.h ("rows": one workgroup per row; "elements": one
//     invocation per element), both split over (x, y) workgroups;
//   - exact fp16 <-> fp32 and fp32 -> bf16 conversions, bit for bit those of core/dtype.cpp (the
//     host's), written with integer and exactly rounded float operations only, so no denormal is
//     flushed whatever the device's float controls (or the device's own, where it is known
//     exact: HC_NATIVE_HALF);
//   - x86's float -> int32 conversion and int8 saturation (the host's activation quantisers);
//   - exactly rounded division (the device's '/' may be off by 2.5 ulp);
//   - an accurate sincos (argument reduction + minimax polynomials) for RoPE, and exp (~1 ulp);
//   - error-free float-float transformations (TwoSum, TwoProduct) and 1 / (hi + lo);
//   - the FFN activation and GLU, in the host's float operations.
//
// Device features the shaders need: bufferDeviceAddress, shaderInt64, storageBuffer16BitAccess,
// storageBuffer8BitAccess (SPIR-V capabilities Int64, PhysicalStorageBufferAddresses,
// StorageBuffer16BitAccess, StorageBuffer8BitAccess); no 8-/16-bit or fp16 arithmetic
// (shaderInt8, shaderInt16, shaderFloat16) and no fp64.
//
// `precise` marks every computation that must round exactly as the host's: it forbids both the
// contraction of a * b + c into one fma and the driver's inexact algebraic rewrites. Nothing
// that must be exact relies on fma() being fused: Vulkan only promises "a * b + c" for it, and
// lavapipe does round the product first.
#ifndef HC_VK_COMMON_GLSL
#define HC_VK_COMMON_GLSL

#extension GL_EXT_buffer_reference : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_8bit_storage : require

#define HC_LOCAL 64          // kVkLocal: invocations per workgroup
#define HC_MAX_TOK 8         // kVkMaxVecTokens
#define HC_MAX_HEAD_DIM 512  // kVkMaxHeadDim

// ---- buffer references ----------------------------------------------------------------------
// An address is a uint64_t; FloatRef(addr).v[i] is the float at addr + 4 i. The declared
// alignment is what the compiler may assume of `addr`: Vec4Ref / UVec4Ref are only built from
// 16-byte aligned addresses (the callers check), U16Ref from 2-byte aligned ones.
layout(buffer_reference, std430, buffer_reference_align = 4) buffer FloatRef { float v[]; };
layout(buffer_reference, std430, buffer_reference_align = 16) buffer Vec4Ref { vec4 v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer IntRef { int v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer UintRef { uint v[]; };
layout(buffer_reference, std430, buffer_reference_align = 2) buffer U16Ref { uint16_t v[]; };
layout(buffer_reference, std430, buffer_reference_align = 1) buffer U8Ref { uint8_t v[]; };
layout(buffer_reference, std430, buffer_reference_align = 16) buffer UVec4Ref { uvec4 v[]; };
// 32- and 64-bit words at addresses only 2-byte aligned (ggml's 18-, 34- and 210-byte blocks):
// the SPIR-V says "Aligned 2", so every device must handle them (a GPU may split the load);
// lavapipe loads each lane's word with one scalar load, and as it runs every load of a
// per-lane address as a loop over the lanes, fewer and wider loads are what make it fast.
layout(buffer_reference, std430, buffer_reference_align = 2) buffer U32Ref2 { uint v[]; };
layout(buffer_reference, std430, buffer_reference_align = 2) buffer U64Ref2 { uint64_t v[]; };

// The byte / 16-bit word at address p (p 2-byte aligned for ld16), zero-extended.
// An operation's row-0 position: pos0, or the int32 at address pos_at when it is not 0
// (vk_abi.h RopePC), negative taken as 0.
int hc_pos(uint64_t pos_at, int pos0) { return pos_at != 0ul ? max(IntRef(pos_at).v[0], 0) : pos0; }

uint ld8(uint64_t p) { return uint(U8Ref(p).v[0]); }
uint ld16(uint64_t p) { return uint(U16Ref(p).v[0]); }
// Four / eight bytes from a 2-byte aligned address, little endian.
uint ld32a2(uint64_t p) { return U32Ref2(p).v[0]; }
uvec2 ld64a2(uint64_t p) { return unpackUint2x32(U64Ref2(p).v[0]); }
// Signed / unsigned byte k (0..3) of a 32-bit word.
int sbyte(uint w, int k) { return bitfieldExtract(int(w), 8 * k, 8); }
uint ubyte(uint w, int k) { return bitfieldExtract(w, 8 * k, 8); }
// Byte offset of element i of a 4-byte array, in 64 bits.
uint64_t off4(int64_t i) { return uint64_t(i) * 4ul; }

// ---- grids ----------------------------------------------------------------------------------
// "rows": workgroup r = y * num_x + x of the (min(R, 65535), ceil(R / 65535)) grid.
uint hc_row_index() { return gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x; }
// "elements": invocation i of workgroup r owns element r * 64 + local id (64-bit: the grid may
// cover more than 2^32 elements).
uint64_t hc_element_index() {
  return uint64_t(hc_row_index()) * uint64_t(HC_LOCAL) + uint64_t(gl_LocalInvocationID.x);
}


// ---- fp16 <-> fp32 --------------------------------------------------------------------------
// IEEE half bits (low 16 bits of h) to float, exactly (hc::fp16_to_fp32, NaNs included: the
// host's returns them quiet): subnormal halves are m * 2^-24, computed from small integers so
// every float involved is normal.
float hc_half_to_float(uint h) {
  const uint a = h & 0x7fffu;
  uint bits;
  if (a >= 0x7c00u) {
    const uint m = a & 0x3ffu;
    bits = 0x7f800000u | (m << 13) | (m != 0u ? 0x00400000u : 0u);  // inf / quiet nan
  } else if (a >= 0x0400u) {
    bits = (a << 13) + 0x38000000u;  // normal: rebias the exponent (127 - 15) << 23
  } else {
    bits = floatBitsToUint(float(a) * 5.9604644775390625e-8);  // subnormal / zero: a * 2^-24
  }
  return uintBitsToFloat(bits | ((h & 0x8000u) << 16));
}
// Specialisation constant 3: the device's own fp16 conversion (unpackHalf2x16) is exact, subnormal
// halves included. The runtime sets it on CPU implementations (lavapipe converts with F16C's
// vcvtph2ps; tests/vulkan checks every finite half), where it is much cheaper than the integer
// conversion above; elsewhere the integer one is used, whatever the float controls.
layout(constant_id = 3) const bool HC_NATIVE_HALF = false;
// Half bits (low 16 bits of h) to float, exactly.
float hc_half(uint h) {
  return HC_NATIVE_HALF ? unpackHalf2x16(h & 0xffffu).x : hc_half_to_float(h);
}

// bf16 bits (low 16 bits of h) to float: the top half of the float's bits.
float hc_bf16_to_float(uint h) { return uintBitsToFloat((h & 0xffffu) << 16); }

// Float to IEEE half bits, round to nearest even: hc::fp32_to_fp16 step for step (Maratea's
// branch-free conversion; the float adds and multiplies are exactly rounded on every device).
uint hc_float_to_half(float f) {
  const float scale_to_inf = uintBitsToFloat(0x77800000u);   // 2^112
  const float scale_to_zero = uintBitsToFloat(0x08800000u);  // 2^-110
  precise float base = ((f < 0.0 ? -f : f) * scale_to_inf) * scale_to_zero;
  const uint w = floatBitsToUint(f);
  const uint shl1_w = w + w;
  const uint sign = w & 0x80000000u;
  uint bias = shl1_w & 0xFF000000u;
  if (bias < 0x71000000u) bias = 0x71000000u;
  precise float rounded = uintBitsToFloat((bias >> 1) + 0x07800000u) + base;
  const uint bits = floatBitsToUint(rounded);
  const uint exp_bits = (bits >> 13) & 0x00007C00u;
  const uint mantissa_bits = bits & 0x00000FFFu;
  const uint nonsign = exp_bits + mantissa_bits;
  return (sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign);
}
// f rounded to the nearest half, as a float.
float hc_round_half(float f) { return hc_half_to_float(hc_float_to_half(f)); }

// Float to bf16 bits, round to nearest even, NaNs kept quiet: hc::fp32_to_bf16.
uint hc_float_to_bf16(float f) {
  const uint u = floatBitsToUint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (u >> 16) | 64u;
  return (u + (0x7fffu + ((u >> 16) & 1u))) >> 16;
}

// v rounded half to even and converted to int32 as x86's cvtps2dq does (what the host's
// activation quantisers run): NaN and values out of the int32 range become INT32_MIN.
int hc_cvt_i32(float v) { return abs(v) < 2147483648.0 ? int(roundEven(v)) : int(0x80000000u); }
// An int32 to int8 with saturation (x86's packs), as its low byte.
uint hc_sat_i8(int v) { return uint(clamp(v, -128, 127)) & 255u; }

// ---- exact division ---------------------------------------------------------------------------
// a / b rounded to nearest even, as the host's IEEE division, for a and b not NaN (zeros,
// subnormals and infinities included, except 0 / 0 and inf / inf; a result past the float range
// is infinite, one below it rounds to a subnormal or zero). Vulkan lets the device's own '/' be
// off by 2.5 ulp, and the activation quantisers must give the host's bytes exactly, so this one
// works on the integer significands: q = floor(ma 2^40 / mb) has 40 or 41 bits, enough for a
// 24-bit result, a guard bit and (with the remainder) the sticky bit.
float hc_div_rn(float a, float b) {
  const uint ua = floatBitsToUint(a), ub = floatBitsToUint(b);
  const uint sign = (ua ^ ub) & 0x80000000u;
  if ((ua & 0x7fffffffu) == 0u || (ub & 0x7fffffffu) == 0x7f800000u)
    return uintBitsToFloat(sign);  // 0 / b, a / inf
  if ((ua & 0x7fffffffu) == 0x7f800000u || (ub & 0x7fffffffu) == 0u)
    return uintBitsToFloat(sign | 0x7f800000u);  // inf / b, a / 0
  // Value = m 2^e with m normalised to [2^23, 2^24).
  uint ea = (ua >> 23) & 255u, eb = (ub >> 23) & 255u;
  uint ma = ua & 0x7fffffu, mb = ub & 0x7fffffu;
  int xa = int(ea) - 150, xb = int(eb) - 150;
  if (ea == 0u) {
    const int s = 23 - findMSB(ma);
    ma <<= s;
    xa = -149 - s;
  } else {
    ma |= 0x800000u;
  }
  if (eb == 0u) {
    const int s = 23 - findMSB(mb);
    mb <<= s;
    xb = -149 - s;
  } else {
    mb |= 0x800000u;
  }
  const uint64_t num = uint64_t(ma) << 40;
  const uint64_t q = num / uint64_t(mb);
  const bool rest = num - q * uint64_t(mb) != 0ul;
  const int msb = (q >> 40) != 0ul ? 40 : 39;
  // Unbiased exponent of the result: its leading bit is 2^(msb + xa - xb - 40).
  const int er = msb + xa - xb - 40;
  if (er > 127) return uintBitsToFloat(sign | 0x7f800000u);
  // Bits to drop: down to 24 significant bits, more for a subnormal result (er < -126).
  int shift = msb - 23;
  if (er < -126) shift += -126 - er;
  if (shift > 63) return uintBitsToFloat(sign);  // far below the smallest subnormal
  const uint64_t kept = q >> uint(shift);
  const uint64_t dropped = q - (kept << uint(shift));
  const uint64_t halfway = uint64_t(1) << uint(shift - 1);
  const bool up = dropped > halfway || (dropped == halfway && (rest || (kept & 1ul) != 0ul));
  const uint m = uint(kept) + (up ? 1u : 0u);
  // Normal: exponent field er + 127 with m's leading bit (2^23) adding the 1 (a carry to 2^24
  // bumps the exponent, as it should). Subnormal: m itself (2^23 after rounding up is the
  // smallest normal).
  const uint bits = er < -126 ? m : (uint(er + 126) << 23) + m;
  return uintBitsToFloat(sign | bits);
}

// ---- sincos ---------------------------------------------------------------------------------
// sin and cos of x to within about 2 ulp of the true values for |x| < 2^17 (host: glibc
// sincosf). The device's own sin / cos are only specified to 2^-11 absolute on [-pi, pi] and lose
// the argument's low bits beyond, while RoPE angles reach the context length in radians.
// Reduction x = j pi/2 + r, j = round(x 2/pi), by Cody and Waite with pi/2 = p1 + p2 + p3 + p4:
// p1..p3 have 7 significant bits, so j p1, j p2, j p3 and the differences are exact for
// |j| < 2^17 without relying on a fused fma (lavapipe does not fuse GLSL fma()); then Cephes'
// sinf / cosf polynomials on |r| <= pi/4 and the quadrant j mod 4.
void hc_sincos(float x, out float s, out float c) {
  const float p1 = uintBitsToFloat(0x3fc80000u);  // 1.5625
  const float p2 = uintBitsToFloat(0x3c060000u);  // 0.0081787109375
  const float p3 = uintBitsToFloat(0x38f60000u);  // 0.00011730194091796875
  const float p4 = uintBitsToFloat(0x34a8885au);  // 3.1391647326017846e-07
  const float j = roundEven(x * 0.636619772);
  precise float r = x - j * p1;
  r = r - j * p2;
  r = r - j * p3;
  r = r - j * p4;
  const float z = r * r;
  const float sp = ((-1.9515295891e-4 * z + 8.3321608736e-3) * z - 1.6666654611e-1) * z * r + r;
  const float cp =
      ((2.443315711809948e-5 * z - 1.388731625493765e-3) * z + 4.166664568298827e-2) * z * z -
      0.5 * z + 1.0;
  const int q = int(j) & 3;  // two's complement: right for negative j too
  const float s0 = (q & 1) != 0 ? cp : sp;
  const float c0 = (q & 1) != 0 ? sp : cp;
  s = (q & 2) != 0 ? -s0 : s0;         // sin(r + q pi/2): S, C, -S, -C
  c = ((q + 1) & 2) != 0 ? -c0 : c0;   // cos(r + q pi/2): C, -S, -C, S
}

// ---- exp --------------------------------------------------------------------------------------
// e^x to about 1 ulp (Cephes expf: x = n ln2 + r, |r| <= ln2 / 2, by Cody and Waite with
// ln2 = C1 + C2, C1 of 9 significant bits so n C1 is exact; a degree-7 polynomial; 2^n applied
// in two exact halves so that subnormal results come out right). The device's own exp() is
// specified only to 3 + 2 |x| ulp; the host's softmax uses ggml's expf, also about 1 ulp.
float hc_exp(float x) {
  if (!(x > -104.0)) return x != x ? x : 0.0;  // NaN stays NaN; e^x < 2^-150 rounds to 0
  if (x > 88.72284) return uintBitsToFloat(0x7f800000u);
  const float n = roundEven(x * 1.44269504088896341);
  precise float r = x - n * 0.693359375;
  r = r - n * -2.12194440e-4;
  const float z = r * r;
  float p = ((((1.9875691500e-4 * r + 1.3981999507e-3) * r + 8.3334519073e-3) * r +
              4.1665795894e-2) * r + 1.6666665459e-1) * r + 5.0000001201e-1;
  p = p * z + r + 1.0;
  const int ni = int(n), n1 = ni / 2, n2 = ni - n1;  // each in [-76, 64]: normal powers of two
  precise float y = p * uintBitsToFloat(uint(n1 + 127) << 23);
  y = y * uintBitsToFloat(uint(n2 + 127) << 23);
  return y;
}

// ---- float-float arithmetic ----------------------------------------------------------------
// Error-free transformations with exactly rounded adds and multiplies only (no fma needed):
// s + e == a + b exactly (Knuth's TwoSum), and p + e == a * b exactly (Dekker's TwoProduct with
// Veltkamp's split; |a|, |b| < 2^100).
void hc_two_sum(float a, float b, out float s, out float e) {
  precise float t = a + b;
  precise float bb = t - a;
  precise float err = (a - (t - bb)) + (b - bb);
  s = t;
  e = err;
}
void hc_split(float a, out float hi, out float lo) {
  precise float c = 4097.0 * a;
  precise float h = c - (c - a);
  precise float l = a - h;
  hi = h;
  lo = l;
}
void hc_two_prod(float a, float b, out float p, out float e) {
  float ah, al, bh, bl;
  hc_split(a, ah, al);
  hc_split(b, bh, bl);
  precise float pp = a * b;
  precise float err = ((ah * bh - pp) + ah * bl + al * bh) + al * bl;
  p = pp;
  e = err;
}
// 1 / (hi + lo) rounded to float, for hi > 0 normal and |lo| <= ulp(hi): y = 1 / hi exactly
// rounded, then one Newton step on the float-float residual 1 - y (hi + lo).
float hc_recip_ff(float hi, float lo) {
  const float y = hc_div_rn(1.0, hi);
  float p, pe;
  hc_two_prod(y, hi, p, pe);
  precise float r = ((1.0 - p) - pe) - y * lo;  // 1 - p is exact (p is within an ulp of 1)
  precise float out_ = y + y * r;
  return out_;
}

// ---- activation -----------------------------------------------------------------------------
// act: kind 0 SiLU x / (1 + e^-x), 1 ReLU and 2 dReLU (x > 0 ? x : 0 on the gate), the host's
// float operations in its order (ops::swiglu, sparse ffn_activation) with hc_exp (~1 ulp, as
// the host's expf) and the exactly rounded division.
float hc_act(float x, int kind) {
  if (kind == 0) {
    precise float den = 1.0 + hc_exp(-x);
    return hc_div_rn(x, den);
  }
  return x > 0.0 ? x : 0.0;
}
// act(g) * u as ggml's swiglu / reglu (ReGLU: 0 for g <= 0 whatever u is); dReLU (kind 2):
// relu(g) * relu(u) (ops::dreglu); ungated ReLU (kind 3, Falcon): relu(g), u unused.
float hc_glu(float g, float u, int kind) {
  if (kind == 0) {
    precise float y = hc_act(g, 0) * u;
    return y;
  }
  if (kind == 3) return g > 0.0 ? g : 0.0;
  if (kind == 2) u = u > 0.0 ? u : 0.0;
  return g > 0.0 ? g * u : 0.0;
}

#endif  // HC_VK_COMMON_GLSL
