#version 450
// quantize (vk_abi.h QuantizePC; "elements" grid over n_tok * units): activation rows x [n_tok,
// ne0] fp32 to rows of the weight's vec_dot_type, nbq bytes apart, exactly as the host's
// quant::quantize_activations (ggml-cpu's run-time from_float) writes them, byte for byte:
//   vtype 1 F16   unit = element: fp16(x) (hc::fp32_to_fp16)
//   vtype 2 BF16  unit = element: bf16(x) (hc::fp32_to_bf16)
//   vtype 3 Q8_0  unit = block of 32 (34 bytes: d, qs[32]); ggml's x86 quantize_row_q8_0:
//                 amax = max |x|, d = amax / 127, id = amax ? 127 / amax : 0,
//                 qs = roundEven(x * id), d stored as fp16(d)
//   vtype 4 Q8_1  the same in 36 bytes (d, s, qs[32]) with s = fp16(d * sum(qs))
//   vtype 5 Q8_K  unit = block of 256 (292 bytes: d fp32, qs[256], bsums[16] int16);
//                 quantize_row_q8_K_ref: max = the x of largest |x| (the first such),
//                 iscale = -127 / max, qs = min(roundEven(iscale * x), 127), d = 1 / iscale,
//                 bsums = sums of 16 qs; an all-zero block is all zeros.
// Divisions are the exactly rounded hc_div_rn (the device's '/' may be off by 2.5 ulp); every
// product is one exactly rounded multiply (`precise`), roundEven is exact, and a product that
// is NaN or past the int32 range (an all-subnormal block: id = inf) converts as x86's cvtps2dq
// to INT32_MIN, stored saturated as -128 and summed as INT32_MIN (hc_cvt_i32): the bytes equal
// the host's on every device, edge cases included. One invocation per unit.
#include "common.glsl"

layout(local_size_x = 64, local_size_y = 1, local_size_z = 1) in;

layout(push_constant) uniform PC {
  uint64_t x, q;
  int64_t nbq;
  int ne0, n_tok, vtype, pad;
} pc;

// Stores a 32-bit word at a 2-byte aligned address.
void st32a2(uint64_t p, uint v) { U32Ref2(p).v[0] = v; }

void main() {
  const int unit = pc.vtype <= 2 ? 1 : pc.vtype == 5 ? 256 : 32;
  const int units = pc.ne0 / unit;
  const uint64_t i = hc_element_index();
  if (units <= 0 || i >= uint64_t(pc.n_tok) * uint64_t(units)) return;
  const int t = int(i / uint64_t(units)), u = int(i % uint64_t(units));
  const uint64_t xp = pc.x + off4(int64_t(t) * pc.ne0 + int64_t(u) * unit);
  const uint64_t row = pc.q + uint64_t(int64_t(t) * pc.nbq);

  if (pc.vtype <= 2) {
    const float v = FloatRef(xp).v[0];
    U16Ref(row).v[u] = uint16_t(pc.vtype == 1 ? hc_float_to_half(v) : hc_float_to_bf16(v));
    return;
  }

  if (pc.vtype == 3 || pc.vtype == 4) {
    const uint64_t b = row + uint64_t(u) * (pc.vtype == 3 ? 34ul : 36ul);
    const uint64_t qs = b + (pc.vtype == 3 ? 2ul : 4ul);
    float amax = 0.0;
    for (int j = 0; j < 32; ++j) {
      const float ax = abs(FloatRef(xp).v[j]);
      amax = amax > ax ? amax : ax;
    }
    const float d = amax != 0.0 ? hc_div_rn(amax, 127.0) : 0.0;
    const float id = amax != 0.0 ? hc_div_rn(127.0, amax) : 0.0;
    int sum = 0;
    for (int j = 0; j < 32; j += 4) {
      uint w = 0u;
      for (int k = 0; k < 4; ++k) {
        precise float v = FloatRef(xp).v[j + k] * id;
        const int qv = hc_cvt_i32(v);
        sum += qv;
        w |= hc_sat_i8(qv) << (8 * k);
      }
      st32a2(qs + uint64_t(j), w);
    }
    U16Ref(b).v[0] = uint16_t(hc_float_to_half(d));
    if (pc.vtype == 4) {
      precise float s = d * float(sum);
      U16Ref(b + 2ul).v[0] = uint16_t(hc_float_to_half(s));
    }
    return;
  }

  // Q8_K
  const uint64_t b = row + uint64_t(u) * 292ul;
  float amax = 0.0, mx = 0.0;
  for (int j = 0; j < 256; ++j) {
    const float v = FloatRef(xp).v[j];
    if (abs(v) > amax) {
      amax = abs(v);
      mx = v;
    }
  }
  if (amax == 0.0) {
    for (int j = 0; j < 292; j += 4) st32a2(b + uint64_t(j), 0u);
    return;
  }
  const float iscale = hc_div_rn(-127.0, mx);
  for (int g = 0; g < 16; ++g) {
    int bsum = 0;
    for (int j = 0; j < 16; j += 4) {
      uint w = 0u;
      for (int k = 0; k < 4; ++k) {
        precise float v = iscale * FloatRef(xp).v[16 * g + j + k];
        const int qv = min(hc_cvt_i32(v), 127);
        bsum += qv;
        w |= hc_sat_i8(qv) << (8 * k);
      }
      st32a2(b + 4ul + uint64_t(16 * g + j), w);
    }
    U16Ref(b + 260ul + uint64_t(2 * g)).v[0] = uint16_t(uint(bsum) & 0xffffu);
  }
  st32a2(b, floatBitsToUint(hc_div_rn(1.0, iscale)));
}
