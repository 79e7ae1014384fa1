// Scalar references for the K-quants (super-blocks of 256) and their activation type Q8_K:
// ggml-quants.c quantize_row_*_ref / dequantize_row_* (the path llama-quantize takes when no
// importance matrix is given) and ggml-cpu/quants.c ggml_vec_dot_*_q8_K_generic, with ggml's
// operand order and 8-lane float accumulation kept so results match bit for bit.
// Compiled without FMA on purpose (see quant_ref.cpp).
#include <cmath>
#include <cstring>

#include "quant/blocks.h"
#include "quant/ref.h"

namespace hc::quant::ref {
namespace {

constexpr float kGroupMaxEps = 1e-15f;  // ggml GROUP_MAX_EPS: below this a group is all zero

// Adding 1.5 * 2^23 pushes the fraction out of the mantissa: round to nearest, ties to even
// (default rounding mode). Valid for |fval| <= 2^22, which every caller guarantees.
int nearest_int(float fval) {
  const float val = fval + 12582912.f;
  int i;
  std::memcpy(&i, &val, sizeof(int));
  return (i & 0x007fffff) - 0x00400000;
}

int clamp_int(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }

// ggml make_qx_quants with rmse_type = 1 and no importance weights (w = x^2): symmetric levels
// L in [0, 2 nmax) around nmax; tries 19 scales near -nmax/max and keeps the one maximising
// (sum w x l)^2 / sum w l^2, i.e. minimising the weighted squared error. Returns the scale.
float make_qx_quants(int n, int nmax, const float* x, int8_t* L) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.f;
  }
  float iscale = -nmax / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = clamp_int(nearest_int(iscale * x[i]), -nmax, nmax - 1);
    L[i] = static_cast<int8_t>(l + nmax);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * l;
    suml2 += w * l * l;
  }
  float scale = suml2 ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(nmax + 0.1f * is) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = clamp_int(nearest_int(iscale * x[i]), -nmax, nmax - 1);
      const float w = x[i] * x[i];
      sumlx += w * x[i] * l;
      suml2 += w * l * l;
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) {
        L[i] = static_cast<int8_t>(nmax + clamp_int(nearest_int(iscale * x[i]), -nmax, nmax - 1));
      }
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// ggml make_qkx2_quants: asymmetric levels L in [0, nmax] with x ~ scale * L - the_min.
// Starts from the min/max fit, then tries nstep + 1 level spacings and solves the weighted
// least-squares (scale, min) for each, keeping the lowest weighted error. Returns the scale.
float make_qkx2_quants(int n, int nmax, const float* x, const float* weights, uint8_t* L,
                       float* the_min, uint8_t* Laux, float rmin, float rdelta, int nstep,
                       bool use_mad) {
  float min = x[0], max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    const float w = weights[i];
    sum_w += w;
    sum_x += w * x[i];
  }
  if (min > 0) min = 0;  // the offset only ever lowers the range, so zero stays representable
  if (max == min) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    *the_min = -min;
    return 0.f;
  }
  float iscale = nmax / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    L[i] = static_cast<uint8_t>(clamp_int(nearest_int(iscale * (x[i] - min)), 0, nmax));
    float diff = scale * L[i] + min - x[i];
    diff = use_mad ? std::fabs(diff) : diff * diff;
    best_error += weights[i] * diff;
  }
  if (nstep < 1) {
    *the_min = -min;
    return scale;
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * is + nmax) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = clamp_int(nearest_int(iscale * (x[i] - min)), 0, nmax);
      Laux[i] = static_cast<uint8_t>(l);
      const float w = weights[i];
      sum_l += w * l;
      sum_l2 += w * l * l;
      sum_xl += w * l * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float cur_error = 0;
      for (int i = 0; i < n; ++i) {
        float diff = this_scale * Laux[i] + this_min - x[i];
        diff = use_mad ? std::fabs(diff) : diff * diff;
        cur_error += weights[i] * diff;
      }
      if (cur_error < best_error) {
        for (int i = 0; i < n; ++i) L[i] = Laux[i];
        best_error = cur_error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *the_min = -min;
  return scale;
}

// Shared part of quantize_row_q4_K_ref / q5_K_ref for one super-block x[256]: fits each
// sub-block of 32 with make_qkx2_quants, quantises the 8 scales and 8 mins to 6 bits against
// the block maxima (d, dmin), then re-derives L[256] in [0, nmax] from the rounded scales.
struct KQuantParams {
  int nmax;
  float rmin, rdelta;
  int nstep;
};
void quantize_super_block_k4(const float* x, const KQuantParams& p, uint8_t* L, fp16_t* d_out,
                             fp16_t* dmin_out, uint8_t* scales_out) {
  float mins[QK_K / 32], scales[QK_K / 32], weights[32];
  uint8_t Laux[32];
  float max_scale = 0, max_min = 0;  // scales are positive because the min is subtracted
  for (int j = 0; j < QK_K / 32; ++j) {
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[32 * j + l]);
    scales[j] = make_qkx2_quants(32, p.nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux,
                                 p.rmin, p.rdelta, p.nstep, false);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  for (int j = 0; j < QK_K / 32; ++j) {
    uint8_t ls = static_cast<uint8_t>(nearest_int(inv_scale * scales[j]));
    uint8_t lm = static_cast<uint8_t>(nearest_int(inv_min * mins[j]));
    ls = ls < 63 ? ls : 63;
    lm = lm < 63 ? lm : 63;
    if (j < 4) {
      scales_out[j] = ls;
      scales_out[j + 4] = lm;
    } else {
      scales_out[j + 4] = static_cast<uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
      scales_out[j - 4] |= static_cast<uint8_t>((ls >> 4) << 6);
      scales_out[j - 0] |= static_cast<uint8_t>((lm >> 4) << 6);
    }
  }
  *d_out = fp32_to_fp16(max_scale / 63.f);
  *dmin_out = fp32_to_fp16(max_min / 63.f);
  for (int j = 0; j < QK_K / 32; ++j) {
    uint8_t sc, m;
    get_scale_min_k4(j, scales_out, &sc, &m);
    const float d = fp16_to_fp32(*d_out) * sc;
    if (!d) continue;
    const float dm = fp16_to_fp32(*dmin_out) * m;
    for (int ii = 0; ii < 32; ++ii) {
      L[32 * j + ii] =
          static_cast<uint8_t>(clamp_int(nearest_int((x[32 * j + ii] + dm) / d), 0, p.nmax));
    }
  }
}

// The 8 scales and 8 mins of a Q4_K / Q5_K block, unpacked.
struct ScalesMins {
  uint8_t sc[8], m[8];
};
ScalesMins unpack_scales_mins(const uint8_t* packed) {
  ScalesMins r;
  for (int j = 0; j < 8; ++j) get_scale_min_k4(j, packed, &r.sc[j], &r.m[j]);
  return r;
}

// The tail of ggml's generic K-quant dot products: q[256] (the weight levels, offset removed)
// times the activation block, integer sums in 8 lanes (lane = element index mod 8) with one
// scale per `group` elements; then sums[lane] += d * lane_sum in float.
template <class Scale>
void accumulate_lanes(const int8_t* q, const int8_t* q8, int group, const Scale* scale, float d,
                      float* sums) {
  int32_t aux32[8] = {};
  for (int k = 0; k < QK_K; ++k) {
    aux32[k % 8] += static_cast<int32_t>(scale[k / group]) * static_cast<int16_t>(q8[k] * q[k]);
  }
  for (int l = 0; l < 8; ++l) sums[l] += d * aux32[l];
}

}  // namespace

// ---- Q4_K: x = d * sc * q - dmin * m per sub-block of 32, q in [0, 15].

void dequantize_q4_K(const void* src, float* dst, int64_t n) {
  const block_q4_K* x = static_cast<const block_q4_K*>(src);  // [n / 256]
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    const float min = fp16_to_fp32(x[i].dmin);
    const ScalesMins sm = unpack_scales_mins(x[i].scales);
    const uint8_t* q = x[i].qs;
    for (int j = 0; j < QK_K / 64; ++j, q += 32) {
      const float d1 = d * sm.sc[2 * j], m1 = min * sm.m[2 * j];
      const float d2 = d * sm.sc[2 * j + 1], m2 = min * sm.m[2 * j + 1];
      for (int l = 0; l < 32; ++l) *dst++ = d1 * (q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *dst++ = d2 * (q[l] >> 4) - m2;
    }
  }
}

void quantize_q4_K(const float* src, void* dst, int64_t n) {
  block_q4_K* y = static_cast<block_q4_K*>(dst);
  uint8_t L[QK_K];
  for (int64_t i = 0; i < n / QK_K; ++i) {
    quantize_super_block_k4(src + i * QK_K, {15, -1.f, 0.1f, 20}, L, &y[i].d, &y[i].dmin,
                            y[i].scales);
    uint8_t* q = y[i].qs;
    for (int j = 0; j < QK_K; j += 64, q += 32) {
      for (int l = 0; l < 32; ++l) q[l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 4));
    }
  }
}

float vec_dot_q4_K_q8_K(int64_t n, const void* w, const void* a) {
  const block_q4_K* x = static_cast<const block_q4_K*>(w);
  const block_q8_K* y = static_cast<const block_q8_K*>(a);
  float sums[8] = {}, sumf = 0;
  int8_t aux8[QK_K];  // weight levels of one block, in element order
  for (int64_t i = 0; i < n / QK_K; ++i) {
    for (int j = 0; j < QK_K / 64; ++j) {
      for (int l = 0; l < 32; ++l)
        aux8[64 * j + l] = static_cast<int8_t>(x[i].qs[32 * j + l] & 0xF);
      for (int l = 0; l < 32; ++l)
        aux8[64 * j + 32 + l] = static_cast<int8_t>(x[i].qs[32 * j + l] >> 4);
    }
    const ScalesMins sm = unpack_scales_mins(x[i].scales);
    int sumi = 0;  // sum over sub-blocks of m * sum(q8): the min term
    for (int j = 0; j < QK_K / 16; ++j) sumi += y[i].bsums[j] * sm.m[j / 2];
    accumulate_lanes(aux8, y[i].qs, 32, sm.sc, fp16_to_fp32(x[i].d) * y[i].d, sums);
    const float dmin = fp16_to_fp32(x[i].dmin) * y[i].d;
    sumf -= dmin * sumi;
  }
  for (int l = 0; l < 8; ++l) sumf += sums[l];
  return sumf;
}

// ---- Q5_K: as Q4_K with q in [0, 31]; the fifth bits live in qh.

void dequantize_q5_K(const void* src, float* dst, int64_t n) {
  const block_q5_K* x = static_cast<const block_q5_K*>(src);  // [n / 256]
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    const float min = fp16_to_fp32(x[i].dmin);
    const ScalesMins sm = unpack_scales_mins(x[i].scales);
    const uint8_t* ql = x[i].qs;
    const uint8_t* qh = x[i].qh;
    uint8_t u1 = 1, u2 = 2;
    for (int j = 0; j < QK_K / 64; ++j, ql += 32, u1 <<= 2, u2 <<= 2) {
      const float d1 = d * sm.sc[2 * j], m1 = min * sm.m[2 * j];
      const float d2 = d * sm.sc[2 * j + 1], m2 = min * sm.m[2 * j + 1];
      for (int l = 0; l < 32; ++l) *dst++ = d1 * ((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
      for (int l = 0; l < 32; ++l) *dst++ = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
    }
  }
}

void quantize_q5_K(const float* src, void* dst, int64_t n) {
  block_q5_K* y = static_cast<block_q5_K*>(dst);
  uint8_t L[QK_K];
  for (int64_t i = 0; i < n / QK_K; ++i) {
    quantize_super_block_k4(src + i * QK_K, {31, -0.5f, 0.1f, 15}, L, &y[i].d, &y[i].dmin,
                            y[i].scales);
    uint8_t* qh = y[i].qh;
    uint8_t* ql = y[i].qs;
    std::memset(qh, 0, QK_K / 8);
    uint8_t m1 = 1, m2 = 2;
    for (int n0 = 0; n0 < QK_K; n0 += 64, ql += 32, m1 <<= 2, m2 <<= 2) {
      for (int j = 0; j < 32; ++j) {
        int l1 = L[n0 + j], l2 = L[n0 + j + 32];
        if (l1 > 15) {
          l1 -= 16;
          qh[j] |= m1;
        }
        if (l2 > 15) {
          l2 -= 16;
          qh[j] |= m2;
        }
        ql[j] = static_cast<uint8_t>(l1 | (l2 << 4));
      }
    }
  }
}

float vec_dot_q5_K_q8_K(int64_t n, const void* w, const void* a) {
  const block_q5_K* x = static_cast<const block_q5_K*>(w);
  const block_q8_K* y = static_cast<const block_q8_K*>(a);
  float sums[8] = {}, sumf = 0;
  int8_t aux8[QK_K];
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const uint8_t* q4 = x[i].qs;
    const uint8_t* hm = x[i].qh;
    uint8_t m = 1;
    for (int j = 0; j < QK_K / 64; ++j, q4 += 32) {
      int8_t* a0 = aux8 + 64 * j;
      for (int l = 0; l < 32; ++l)
        a0[l] = static_cast<int8_t>((q4[l] & 0xF) + (hm[l] & m ? 16 : 0));
      m <<= 1;
      for (int l = 0; l < 32; ++l)
        a0[32 + l] = static_cast<int8_t>((q4[l] >> 4) + (hm[l] & m ? 16 : 0));
      m <<= 1;
    }
    const ScalesMins sm = unpack_scales_mins(x[i].scales);
    int sumi = 0;
    for (int j = 0; j < QK_K / 16; ++j) sumi += y[i].bsums[j] * sm.m[j / 2];
    accumulate_lanes(aux8, y[i].qs, 32, sm.sc, fp16_to_fp32(x[i].d) * y[i].d, sums);
    const float dmin = fp16_to_fp32(x[i].dmin) * y[i].d;
    sumf -= dmin * sumi;
  }
  for (int l = 0; l < 8; ++l) sumf += sums[l];
  return sumf;
}

// ---- Q6_K: x = d * scales[j] * (q - 32) per sub-block of 16, q in [0, 63], no min.

void dequantize_q6_K(const void* src, float* dst, int64_t n) {
  const block_q6_K* x = static_cast<const block_q6_K*>(src);  // [n / 256]
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    const uint8_t* ql = x[i].ql;
    const uint8_t* qh = x[i].qh;
    const int8_t* sc = x[i].scales;
    for (int h = 0; h < QK_K / 128; ++h, dst += 128, ql += 64, qh += 32, sc += 8) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int8_t q1 = static_cast<int8_t>((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int8_t q2 = static_cast<int8_t>((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int8_t q3 = static_cast<int8_t>((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int8_t q4 = static_cast<int8_t>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        dst[l + 0] = d * sc[is + 0] * q1;
        dst[l + 32] = d * sc[is + 2] * q2;
        dst[l + 64] = d * sc[is + 4] * q3;
        dst[l + 96] = d * sc[is + 6] * q4;
      }
    }
  }
}

namespace {
// Packs L[256] (levels in [0, 63]) into ql / qh in the Q6_K layout.
void pack_q6_K(const int8_t* L, block_q6_K* y) {
  uint8_t* ql = y->ql;
  uint8_t* qh = y->qh;
  for (int j = 0; j < QK_K; j += 128, ql += 64, qh += 32) {
    for (int l = 0; l < 32; ++l) {
      const uint8_t q1 = L[j + l + 0] & 0xF, q2 = L[j + l + 32] & 0xF;
      const uint8_t q3 = L[j + l + 64] & 0xF, q4 = L[j + l + 96] & 0xF;
      ql[l + 0] = static_cast<uint8_t>(q1 | (q3 << 4));
      ql[l + 32] = static_cast<uint8_t>(q2 | (q4 << 4));
      qh[l] = static_cast<uint8_t>((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) |
                                   ((L[j + l + 64] >> 4) << 4) | ((L[j + l + 96] >> 4) << 6));
    }
  }
}
}  // namespace

void quantize_q6_K(const float* src, void* dst, int64_t n) {
  block_q6_K* y = static_cast<block_q6_K*>(dst);
  int8_t L[QK_K];
  float scales[QK_K / 16];
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float* x = src + i * QK_K;
    float max_scale = 0, max_abs_scale = 0;
    for (int ib = 0; ib < QK_K / 16; ++ib) {
      scales[ib] = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib);
      if (std::fabs(scales[ib]) > max_abs_scale) {
        max_abs_scale = std::fabs(scales[ib]);
        max_scale = scales[ib];
      }
    }
    if (max_abs_scale < kGroupMaxEps) {
      std::memset(&y[i], 0, sizeof(block_q6_K));
      continue;
    }
    const float iscale = -128.f / max_scale;
    y[i].d = fp32_to_fp16(1 / iscale);
    for (int ib = 0; ib < QK_K / 16; ++ib) {
      const int s = nearest_int(iscale * scales[ib]);
      y[i].scales[ib] = static_cast<int8_t>(s < 127 ? s : 127);
    }
    for (int j = 0; j < QK_K / 16; ++j) {
      const float d = fp16_to_fp32(y[i].d) * y[i].scales[j];
      if (!d) continue;  // keeps make_qx_quants' levels, which then dequantise to 0 anyway
      for (int ii = 0; ii < 16; ++ii) {
        L[16 * j + ii] =
            static_cast<int8_t>(clamp_int(nearest_int(x[16 * j + ii] / d), -32, 31) + 32);
      }
    }
    pack_q6_K(L, &y[i]);
  }
}

float vec_dot_q6_K_q8_K(int64_t n, const void* w, const void* a) {
  const block_q6_K* x = static_cast<const block_q6_K*>(w);
  const block_q8_K* y = static_cast<const block_q8_K*>(a);
  float sums[8] = {}, sumf = 0;
  int8_t aux8[QK_K];
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const uint8_t* q4 = x[i].ql;
    const uint8_t* qh = x[i].qh;
    for (int j = 0; j < QK_K; j += 128, q4 += 64, qh += 32) {
      for (int l = 0; l < 32; ++l) {
        aux8[j + l + 0] = static_cast<int8_t>((q4[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        aux8[j + l + 32] = static_cast<int8_t>((q4[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        aux8[j + l + 64] = static_cast<int8_t>((q4[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        aux8[j + l + 96] = static_cast<int8_t>((q4[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      }
    }
    accumulate_lanes(aux8, y[i].qs, 16, x[i].scales, fp16_to_fp32(x[i].d) * y[i].d, sums);
  }
  for (int l = 0; l < 8; ++l) sumf += sums[l];
  return sumf;
}

// ---- Q8_K: x = d * q with d = max / -127 (float), plus per-16 sums for the min terms.

void dequantize_q8_K(const void* src, float* dst, int64_t n) {
  const block_q8_K* x = static_cast<const block_q8_K*>(src);  // [n / 256]
  for (int64_t i = 0; i < n / QK_K; ++i) {
    for (int j = 0; j < QK_K; ++j) dst[i * QK_K + j] = x[i].d * x[i].qs[j];
  }
}

void quantize_q8_K(const float* src, void* dst, int64_t n) {
  block_q8_K* y = static_cast<block_q8_K*>(dst);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float* x = src + i * QK_K;
    float max = 0, amax = 0;
    for (int j = 0; j < QK_K; ++j) {
      if (std::fabs(x[j]) > amax) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    if (!amax) {  // ggml leaves bsums unwritten here; zero them so the block is deterministic
      std::memset(&y[i], 0, sizeof(block_q8_K));
      continue;
    }
    // -127 rather than -128 keeps every level in [-127, 127] (ggml: needed by the SIMD paths).
    const float iscale = -127.f / max;
    for (int j = 0; j < QK_K; ++j) {
      const int v = nearest_int(iscale * x[j]);
      y[i].qs[j] = static_cast<int8_t>(v < 127 ? v : 127);
    }
    for (int j = 0; j < QK_K / 16; ++j) {
      int sum = 0;
      for (int ii = 0; ii < 16; ++ii) sum += y[i].qs[j * 16 + ii];
      y[i].bsums[j] = static_cast<int16_t>(sum);
    }
    y[i].d = 1 / iscale;
  }
}

}  // namespace hc::quant::ref
