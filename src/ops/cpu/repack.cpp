#include "ops/cpu/repack.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/status.h"
#include "ops/cpu/repack_kernels.h"
#include "quant/blocks.h"
#include "quant/quant.h"

namespace hc::ops {

using namespace repack_detail;
using quant::QK_K;

namespace {

inline float f16(fp16_t h) { return fp16_to_fp32(h); }
inline fp16_t ld16(const uint8_t* p) {
  fp16_t h;
  std::memcpy(&h, p, 2);
  return h;
}
inline int32_t ld32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

bool is_k_quant(GgmlType t) {
  return t == GgmlType::Q4_K || t == GgmlType::Q5_K || t == GgmlType::Q6_K;
}

int64_t block_elems(GgmlType t) {
  return is_k_quant(t) ? QK_K : t == GgmlType::F16 ? 1 : 32;
}

// Quant bytes and scale bytes per block of one group.
void block_layout(GgmlType t, int64_t* qb, int64_t* sb) {
  switch (t) {
    case GgmlType::Q4_0: *qb = kQ4Chunk, *sb = 32; return;
    case GgmlType::Q4_1: *qb = kQ4Chunk, *sb = 64; return;
    case GgmlType::Q8_0: *qb = kQ8Chunk, *sb = 32; return;
    case GgmlType::Q4_K: *qb = kQ4KChunk, *sb = kQ4KScaleBytes; return;  // scales inline: block_at
    case GgmlType::Q5_K: *qb = kQ5KChunk, *sb = kQ4KScaleBytes; return;  // scales inline: block_at
    case GgmlType::Q6_K: *qb = kQ6KChunk, *sb = kQ6KScaleBytes; return;  // scales inline: block_at
    case GgmlType::F16: *qb = kF16Col, *sb = 0; return;
    default: HC_CHECK(false && "no decode layout for this type");
  }
}

// Offsets in a group of block b's quants and scales (nb blocks per row).
struct BlockAt {
  int64_t q, s;
};
BlockAt block_at(GgmlType t, int64_t nb, int64_t b) {
  if (t == GgmlType::Q4_K) return {b * kQ4KBlock, b * kQ4KBlock + kQ4KChunk};
  if (t == GgmlType::Q5_K) return {b * kQ5KBlock, b * kQ5KBlock + kQ5KChunk};
  if (t == GgmlType::Q6_K) return {q6K_quants(b), q6K_scales(b)};
  HC_CHECK(t == GgmlType::Q4_0 || t == GgmlType::Q4_1 || t == GgmlType::Q8_0);
  const Pairs32 pr = pairs32(t, nb);  // pairs of blocks, then their scales
  return {pr.quants(b), pr.scales(b)};
}

int64_t group_bytes(GgmlType t, int64_t ne0) {
  int64_t qb, sb;
  block_layout(t, &qb, &sb);
  const int64_t bytes = ne0 / block_elems(t) * (qb + sb);
  return (bytes + 63) / 64 * 64;
}

// Q4_K / Q5_K scales of row r's block (ggml's 12 bytes + d + dmin) into the layout's 320 bytes
// at sm: sc[8][16], mn[4][16][2], d[16], dmin[16].
void put_k4_scales(const uint8_t* scales, fp16_t d, fp16_t dmin, uint8_t* sm, int r) {
  for (int j = 0; j < 8; ++j)
    quant::get_scale_min_k4(j, scales, sm + 16 * j + r, sm + 128 + 32 * (j / 2) + 2 * r + j % 2);
  std::memcpy(sm + 256 + 2 * r, &d, 2);
  std::memcpy(sm + 288 + 2 * r, &dmin, 2);
}

// The inverse: lane r's scales and mins re-packed as ggml's 12 bytes (get_scale_min_k4's
// inverse), and its d / dmin.
void get_k4_scales(const uint8_t* sm, int r, uint8_t* scales, fp16_t* d, fp16_t* dmin) {
  std::memset(scales, 0, quant::K_SCALE_SIZE);
  for (int j = 0; j < 8; ++j) {
    const uint8_t s = sm[16 * j + r], m = sm[128 + 32 * (j / 2) + 2 * r + j % 2];
    if (j < 4) {
      scales[j] |= s & 63;
      scales[j + 4] |= m & 63;
    } else {
      scales[j + 4] |= (s & 0xF) | ((m & 0xF) << 4);
      scales[j - 4] |= (s >> 4) << 6;
      scales[j] |= (m >> 4) << 6;
    }
  }
  std::memcpy(d, sm + 256 + 2 * r, 2);
  std::memcpy(dmin, sm + 288 + 2 * r, 2);
}

// Lane `lane` of block b of a group (quants at bq, scales at bs) as ggml's block at out.
void unpack_block(GgmlType t, const uint8_t* bq, const uint8_t* bs, int lane, uint8_t* out) {
  switch (t) {
    case GgmlType::Q4_0: {
      auto& x = *reinterpret_cast<quant::block_q4_0*>(out);
      for (int c = 0; c < 4; ++c) std::memcpy(x.qs + 4 * c, bq + 64 * c + 4 * lane, 4);
      std::memcpy(&x.d, bs + 2 * lane, 2);
      break;
    }
    case GgmlType::Q4_1: {
      auto& x = *reinterpret_cast<quant::block_q4_1*>(out);
      for (int c = 0; c < 4; ++c) std::memcpy(x.qs + 4 * c, bq + 64 * c + 4 * lane, 4);
      std::memcpy(&x.d, bs + 2 * lane, 2);
      std::memcpy(&x.m, bs + 32 + 2 * lane, 2);
      break;
    }
    case GgmlType::Q8_0: {
      auto& x = *reinterpret_cast<quant::block_q8_0*>(out);
      for (int c = 0; c < 8; ++c) {
        const uint32_t v = static_cast<uint32_t>(ld32(bq + 64 * c + 4 * lane)) ^ 0x80808080u;
        std::memcpy(x.qs + 4 * c, &v, 4);
      }
      std::memcpy(&x.d, bs + 2 * lane, 2);
      break;
    }
    case GgmlType::Q4_K: {
      auto& x = *reinterpret_cast<quant::block_q4_K*>(out);
      for (int c = 0; c < 32; ++c) std::memcpy(x.qs + 4 * c, bq + 64 * c + 4 * lane, 4);
      get_k4_scales(bs, lane, x.scales, &x.d, &x.dmin);
      break;
    }
    case GgmlType::Q5_K: {
      auto& x = *reinterpret_cast<quant::block_q5_K*>(out);
      for (int c = 0; c < 8; ++c) std::memcpy(x.qh + 4 * c, bq + 64 * c + 4 * lane, 4);
      for (int c = 0; c < 32; ++c) std::memcpy(x.qs + 4 * c, bq + 64 * (8 + c) + 4 * lane, 4);
      get_k4_scales(bs, lane, x.scales, &x.d, &x.dmin);
      break;
    }
    case GgmlType::Q6_K: {
      auto& x = *reinterpret_cast<quant::block_q6_K*>(out);
      for (int t = 0; t < 16; ++t) {
        const int h = t / 8, cc = t % 8;
        const uint8_t* line = bq + 3 * 64 * t + 4 * lane;
        std::memcpy(x.ql + 64 * h + 4 * cc, line, 4);
        std::memcpy(x.ql + 64 * h + 32 + 4 * cc, line + 64, 4);
        std::memcpy(x.qh + 32 * h + 4 * cc, line + 128, 4);
      }
      for (int j = 0; j < 16; ++j) std::memcpy(&x.scales[j], bs + 16 * j + lane, 1);
      std::memcpy(&x.d, bs + 256 + 2 * lane, 2);
      break;
    }
    default: HC_CHECK(false && "no decode layout for this type");
  }
}

// ---- Scalar twins of the group kernels (same operations, same order, per lane).

inline int32_t dot4(const uint8_t* w, const int8_t* x) {
  return w[0] * x[0] + w[1] * x[1] + w[2] * x[2] + w[3] * x[3];
}
// dot4 of one lane's 4 bytes after (byte >> shift) & mask: the nibble unpacking of the kernels.
inline int32_t dot4_nib(const uint8_t* w, int shift, uint8_t mask, const int8_t* x) {
  const uint8_t v[4] = {uint8_t((w[0] >> shift) & mask), uint8_t((w[1] >> shift) & mask),
                        uint8_t((w[2] >> shift) & mask), uint8_t((w[3] >> shift) & mask)};
  return dot4(v, x);
}

template <int kChunks, bool kOffset, bool kMin>
void k32_ref(const uint8_t* g, int64_t nb, const Act& a, float* out) {
  const Pairs32 pr = Pairs32::of(kChunks, kMin, nb);
  for (int r = 0; r < kRepackRows; ++r) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    float summ = 0;
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* q = g + pr.quants(b);
      const uint8_t* sc = g + pr.scales(b);
      const int8_t* aq = a.q + b * a.block_bytes;
      const float dd = f16(ld16(sc + 2 * r)) * a.d[b];
      if (kMin) summ = std::fma(f16(ld16(sc + 32 + 2 * r)), a.s[b], summ);
      int32_t p[8];
      for (int j = 0; j < 8; ++j) p[j] = kOffset ? a.corr[b * 8 + j] : 0;
      for (int c = 0; c < kChunks; ++c) {
        const uint8_t* w = q + 64 * c + 4 * r;
        if (kChunks == 4) {
          p[c] += dot4_nib(w, 0, 0x0F, aq + 4 * c);
          p[c + 4] += dot4_nib(w, 4, 0x0F, aq + 16 + 4 * c);
        } else {
          p[c] += dot4(w, aq + 4 * c);
        }
      }
      for (int j = 0; j < 8; ++j) acc[j] = std::fma(dd, static_cast<float>(p[j]), acc[j]);
    }
    float res = ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
    if (kMin) res = res + summ;
    out[r] = res;
  }
}

void q4_0_ref(const uint8_t* g, int64_t nb, const Act& a, float* out) {
  const Pairs32 pr = pairs32(GgmlType::Q4_0, nb);
  for (int r = 0; r < kRepackRows; ++r) {
    float acc = 0;
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* q = g + pr.quants(b);
      const uint8_t* sc = g + pr.scales(b);
      const int8_t* aq = a.q + b * a.block_bytes;
      int32_t plo = a.corr_sum[b], phi = 0;
      for (int c = 0; c < 4; ++c) {
        const uint8_t* w = q + 64 * c + 4 * r;
        plo += dot4_nib(w, 0, 0x0F, aq + 4 * c);
        phi += dot4_nib(w, 0, 0xF0, aq + 16 + 4 * c);
      }
      const float dd16 = (f16(ld16(sc + 2 * r)) * a.d[b]) * 0.0625f;
      acc = std::fma(dd16, static_cast<float>(plo * 16 + phi), acc);
    }
    out[r] = acc;
  }
}
void q4_1_ref(const uint8_t* g, int64_t nb, const Act& a, float* out) { k32_ref<4, false, true>(g, nb, a, out); }

// Block sums (Q4_1, Q8_0): per block one integer sum (Q8_0's started at -128 x the block's
// activation sum), dd = f16(d_w) * d_a, acc = fma(dd, float(sum), acc); Q4_1 adds
// summ = fma(f16(m_w), s_a, summ) per block and returns acc + summ.
template <int kChunks, bool kMin>
void k32_bs_ref(const uint8_t* g, int64_t nb, const Act* acts, int nt, float* out) {
  const Pairs32 pr = Pairs32::of(kChunks, kMin, nb);
  for (int i = 0; i < nt; ++i) {
    const Act& a = acts[i];
    for (int r = 0; r < kRepackRows; ++r) {
      float acc = 0, summ = 0;
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* q = g + pr.quants(b);
        const uint8_t* sc = g + pr.scales(b);
        const int8_t* aq = a.q + b * a.block_bytes;
        int32_t plo = kMin ? 0 : a.corr_sum[b], phi = 0;
        for (int c = 0; c < 4; ++c) {
          const uint8_t* w = q + 64 * c + 4 * r;
          if (kChunks == 4) {
            plo += dot4_nib(w, 0, 0x0F, aq + 4 * c);
            phi += dot4_nib(w, 4, 0x0F, aq + 16 + 4 * c);
          } else {
            plo += dot4(w, aq + 4 * c);
            phi += dot4(w + 256, aq + 16 + 4 * c);
          }
        }
        const float dd = f16(ld16(sc + 2 * r)) * a.d[b];
        acc = std::fma(dd, static_cast<float>(plo + phi), acc);
        if (kMin) summ = std::fma(f16(ld16(sc + 32 + 2 * r)), a.s[b], summ);
      }
      out[i * kRepackRows + r] = kMin ? acc + summ : acc;
    }
  }
}
void q4_1_bs_ref(const uint8_t* g, int64_t nb, const Act* a, int nt, float* out) { k32_bs_ref<4, true>(g, nb, a, nt, out); }
void q8_0_bs_ref(const uint8_t* g, int64_t nb, const Act* a, int nt, float* out) { k32_bs_ref<8, false>(g, nb, a, nt, out); }
void q8_0_ref(const uint8_t* g, int64_t nb, const Act& a, float* out) { k32_ref<8, true, false>(g, nb, a, out); }

// Q4_K / Q5_K: sum_j mn_j * (activation sum of sub-block j) from the (2p, 2p + 1) pairs.
inline int32_t k4_min_sum(const uint8_t* sm, const Act& a, int64_t b, int r) {
  int32_t msum = 0;
  for (int pr = 0; pr < 4; ++pr) {
    const int32_t pair = a.corr[b * 8 + pr];
    const int16_t b0 = static_cast<int16_t>(pair & 0xFFFF), b1 = static_cast<int16_t>(pair >> 16);
    msum += sm[128 + 32 * pr + 2 * r] * b0 + sm[128 + 32 * pr + 2 * r + 1] * b1;
  }
  return msum;
}

void q4_K_ref(const uint8_t* g, int64_t nb, const Act& a, float* out) {
  for (int r = 0; r < kRepackRows; ++r) {
    float acc = 0;
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* q = g + b * kQ4KBlock;
      const int8_t* aq = a.q + b * a.block_bytes;
      const uint8_t* sm = q + kQ4KChunk;
      int32_t lo_sum = 0, hi_sum = 0;
      for (int pr = 0; pr < 4; ++pr) {
        int32_t slo = 0, shi = 0;
        for (int c = 0; c < 8; ++c) {
          const uint8_t* w = q + (pr * 8 + c) * 64 + 4 * r;
          slo += dot4_nib(w, 0, 0x0F, aq + 64 * pr + 4 * c);
          shi += dot4_nib(w, 0, 0xF0, aq + 64 * pr + 32 + 4 * c);
        }
        lo_sum += slo * sm[32 * pr + r];
        hi_sum += shi * sm[32 * pr + 16 + r];
      }
      const int32_t isum16 = lo_sum * 16 + hi_sum;
      const int32_t msum = k4_min_sum(sm, a, b, r);
      const float dd16 = (f16(ld16(sm + 256 + 2 * r)) * a.d[b]) * 0.0625f;
      const float dm = 0.0f - f16(ld16(sm + 288 + 2 * r)) * a.d[b];
      acc = std::fma(static_cast<float>(isum16), dd16, acc);
      acc = std::fma(static_cast<float>(msum), dm, acc);
    }
    out[r] = acc;
  }
}

void q5_K_ref(const uint8_t* g, int64_t nb, const Act& a, float* out) {
  for (int r = 0; r < kRepackRows; ++r) {
    float acc = 0;
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* q = g + b * kQ5KBlock;
      const int8_t* aq = a.q + b * a.block_bytes;
      const uint8_t* sm = q + kQ5KChunk;
      int32_t isum = 0;
      for (int pr = 0; pr < 4; ++pr) {
        int32_t slo = 0, shi = 0;
        for (int c = 0; c < 8; ++c) {
          const uint8_t* w = q + 8 * 64 + (pr * 8 + c) * 64 + 4 * r;
          const uint8_t* h = q + c * 64 + 4 * r;  // fifth bits: bit j for sub-block j
          uint8_t lo[4], hi[4];
          for (int i = 0; i < 4; ++i) {
            lo[i] = static_cast<uint8_t>((w[i] & 0x0F) | (((h[i] >> (2 * pr)) & 1) << 4));
            hi[i] = static_cast<uint8_t>((w[i] >> 4) | (((h[i] >> (2 * pr + 1)) & 1) << 4));
          }
          slo += dot4(lo, aq + 64 * pr + 4 * c);
          shi += dot4(hi, aq + 64 * pr + 32 + 4 * c);
        }
        isum += slo * sm[32 * pr + r] + shi * sm[32 * pr + 16 + r];
      }
      const int32_t msum = k4_min_sum(sm, a, b, r);
      const float dd = f16(ld16(sm + 256 + 2 * r)) * a.d[b];
      const float dm = 0.0f - f16(ld16(sm + 288 + 2 * r)) * a.d[b];
      acc = std::fma(static_cast<float>(isum), dd, acc);
      acc = std::fma(static_cast<float>(msum), dm, acc);
    }
    out[r] = acc;
  }
}

// Q6_K: triplet t = 8h + cc holds ql bytes 64h + 4cc (elements 128h + 4cc .. in the low
// nibbles, + 64 in the high ones), ql bytes 64h + 32 + 4cc (+ 32, + 96) and qh bytes 32h + 4cc
// (their top two bits at shifts 0, 2, 4, 6). Each sub-block's sum starts at -32 * its
// activation sum (a.corr), so it is sum (q - 32) x exactly.
void q6_K_ref(const uint8_t* g, int64_t nb, const Act& a, float* out) {
  for (int r = 0; r < kRepackRows; ++r) {
    float acc = 0;
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* q = g + q6K_quants(b);
      const int8_t* aq = a.q + b * a.block_bytes;
      const uint8_t* sm = g + q6K_scales(b);
      int32_t total = 0;
      for (int h = 0; h < 2; ++h) {
        for (int s = 0; s < 2; ++s) {  // sub-blocks 8h + s + 2k, k = 0 .. 3
          int32_t p[4];
          for (int k = 0; k < 4; ++k) p[k] = a.corr[b * 16 + 8 * h + s + 2 * k];
          for (int c4 = 0; c4 < 4; ++c4) {
            const int cc = 4 * s + c4, t = 8 * h + cc;
            const uint8_t* A = q + (3 * t) * 64 + 4 * r;
            const uint8_t* B = A + 64;
            const uint8_t* H = A + 128;
            uint8_t v[4][4];
            for (int i = 0; i < 4; ++i) {
              v[0][i] = static_cast<uint8_t>((A[i] & 0x0F) | ((H[i] & 3) << 4));
              v[1][i] = static_cast<uint8_t>((B[i] & 0x0F) | (((H[i] >> 2) & 3) << 4));
              v[2][i] = static_cast<uint8_t>((A[i] >> 4) | (((H[i] >> 4) & 3) << 4));
              v[3][i] = static_cast<uint8_t>((B[i] >> 4) | (((H[i] >> 6) & 3) << 4));
            }
            for (int k = 0; k < 4; ++k) p[k] += dot4(v[k], aq + 128 * h + 32 * k + 4 * cc);
          }
          for (int k = 0; k < 4; ++k)
            total += p[k] * static_cast<int8_t>(sm[16 * (8 * h + s + 2 * k) + r]);
        }
      }
      const float dd = f16(ld16(sm + 256 + 2 * r)) * a.d[b];
      acc = std::fma(static_cast<float>(total), dd, acc);
    }
    out[r] = acc;
  }
}

// F16: column k feeds accumulator k % 4; the four are summed as (0 + 1) + (2 + 3).
void f16_ref(const uint8_t* g, int64_t nb, const Act& a, float* out) {
  for (int r = 0; r < kRepackRows; ++r) {
    float acc[4] = {0, 0, 0, 0};
    for (int64_t k = 0; k < nb; ++k)
      acc[k % 4] = std::fma(f16(ld16(g + k * kF16Col + 2 * r)), a.xf[k], acc[k % 4]);
    out[r] = (acc[0] + acc[1]) + (acc[2] + acc[3]);
  }
}

// The multi-token twins of Q4_0 / the K-quants: their single-token twins, token by token (the SIMD
// multi-token kernels do each token's operations exactly as the single-token ones).
template <GroupKernelFn F>
void per_token_ref(const uint8_t* g, int64_t nb, const Act* a, int nt, float* out) {
  for (int i = 0; i < nt; ++i) F(g, nb, a[i], out + i * kRepackRows);
}

// ---- Activations: one token's quantised row -> Act (buffers owned by the caller).

struct ActBuf {
  std::vector<float> d, s, xf;
  std::vector<int32_t> corr, corr_sum;
};

Act prepare_act(GgmlType wt, const uint8_t* row, int64_t ne0, ActBuf& buf) {
  if (wt == GgmlType::F16) {  // the activation row is F16 (ggml's vec_dot_type): widen it once
    if (static_cast<int64_t>(buf.xf.size()) < ne0) buf.xf.resize(ne0);
    quant::dequantize_row(GgmlType::F16, row, buf.xf.data(), ne0);
    Act a;
    a.xf = buf.xf.data();
    return a;
  }
  const int64_t nb = ne0 / block_elems(wt);
  if (static_cast<int64_t>(buf.d.size()) < nb) {
    buf.d.resize(nb);
    buf.s.resize(nb);
    buf.corr.resize(nb * 16);
    buf.corr_sum.resize(nb);
  }
  Act a;
  a.d = buf.d.data();
  a.s = buf.s.data();
  a.corr = buf.corr.data();
  a.corr_sum = buf.corr_sum.data();
  if (is_k_quant(wt)) {
    const auto* y = reinterpret_cast<const quant::block_q8_K*>(row);
    a.q = y[0].qs;
    a.block_bytes = sizeof(quant::block_q8_K);
    for (int64_t b = 0; b < nb; ++b) {
      buf.d[b] = y[b].d;
      if (wt == GgmlType::Q6_K) {  // the -32 offset of each sub-block of 16
        for (int j = 0; j < 16; ++j) buf.corr[b * 16 + j] = -32 * y[b].bsums[j];
        continue;
      }
      // Sub-block sums (|sum| <= 32 * 127 fits int16) as word pairs for vpdpwssd.
      for (int pr = 0; pr < 4; ++pr) {
        const int32_t s0 = y[b].bsums[4 * pr] + y[b].bsums[4 * pr + 1];
        const int32_t s1 = y[b].bsums[4 * pr + 2] + y[b].bsums[4 * pr + 3];
        buf.corr[b * 8 + pr] = static_cast<int32_t>((static_cast<uint32_t>(s0) & 0xFFFFu) |
                                                    (static_cast<uint32_t>(s1) << 16));
      }
    }
    return a;
  }
  if (wt == GgmlType::Q4_1) {
    const auto* y = reinterpret_cast<const quant::block_q8_1*>(row);
    a.q = y[0].qs;
    a.block_bytes = sizeof(quant::block_q8_1);
    for (int64_t b = 0; b < nb; ++b) {
      buf.d[b] = f16(y[b].d);
      buf.s[b] = f16(y[b].s);
    }
    return a;
  }
  const int32_t offset = wt == GgmlType::Q4_0 ? 8 : 128;
  const auto* y = reinterpret_cast<const quant::block_q8_0*>(row);
  a.q = y[0].qs;
  a.block_bytes = sizeof(quant::block_q8_0);
  for (int64_t b = 0; b < nb; ++b) {
    buf.d[b] = f16(y[b].d);
    int32_t total = 0;
    for (int j = 0; j < 8; ++j) {
      const int8_t* x = y[b].qs + 4 * j;
      buf.corr[b * 8 + j] = -offset * (x[0] + x[1] + x[2] + x[3]);
      total += buf.corr[b * 8 + j];
    }
    buf.corr_sum[b] = total;
  }
  return a;
}

// The multi-token kernel of a weight (Q4_0 / K-quants always, Q4_1 / Q8_0 in block sums), else
// null: run_groups then calls the single-token kernel per token.
GroupMultiFn multi_for(const Kernels& k, const TensorView& w) {
  if (w.type == GgmlType::Q4_0) return k.q4_0_n;
  if (w.type == GgmlType::Q4_K) return k.q4_K_n;
  if (w.type == GgmlType::Q5_K) return k.q5_K_n;
  if (w.type == GgmlType::Q6_K) return k.q6_K_n;
  if (!w.block_sums) return nullptr;
  if (w.type == GgmlType::Q4_1) return k.q4_1_bs;
  if (w.type == GgmlType::Q8_0) return k.q8_0_bs;
  return nullptr;
}

GroupKernelFn kernel_for(const Kernels& k, GgmlType t) {
  switch (t) {
    case GgmlType::Q4_0: return k.q4_0;
    case GgmlType::Q4_1: return k.q4_1;
    case GgmlType::Q8_0: return k.q8_0;
    case GgmlType::Q4_K: return k.q4_K;
    case GgmlType::Q5_K: return k.q5_K;
    case GgmlType::Q6_K: return k.q6_K;
    case GgmlType::F16: return k.f16;
    default: HC_CHECK(false && "no decode layout for this type"); return nullptr;
  }
}

// Per-thread activations of one call: one ActBuf per token of a tile (kept between calls, so
// steady-state decode allocates nothing).
struct ActBufs {
  std::vector<ActBuf> tok;
  std::vector<Act> act;
};

// A thread runs a chunk of groups for every token of a tile before moving on, so with several
// tokens the chunk is read from memory once and from L2 after that (tokens outermost streamed
// the thread's whole slice once per token). 256 KiB leaves room in a 1 MiB L2 for the tile's
// activations and the 8 KiB prefetch lead; a group larger than that (F16 rows of > 8192) runs
// alone. Tiles of tokens bound the prepared activations (F16: 4 bytes per input per token).
constexpr int64_t kChunkBytes = 256 << 10;
constexpr int64_t kTokenTile = 16;

// Groups [g0, g1) for every token. Per (group, token) the operations are the same whatever
// n_tok is (a multi-token kernel does each token's as its single-token call, multi_for), so
// each token's rows are bit-identical to a one-token call.
void run_groups(const TensorView& w, const uint8_t* xq, int64_t n_tok, float* y, int64_t g0,
                int64_t g1, GroupKernelFn kern, GroupMultiFn multi, ActBufs& bufs) {
  const int64_t gb = group_bytes(w.type, w.ne0);
  const int64_t nb = w.ne0 / block_elems(w.type);
  const int64_t xrb = row_bytes(quant::vec_dot_type(w.type), w.ne0);
  const int64_t chunk = std::max<int64_t>(1, kChunkBytes / gb);
  const int64_t tile = std::min(n_tok, kTokenTile);
  if (static_cast<int64_t>(bufs.tok.size()) < tile) {
    bufs.tok.resize(static_cast<size_t>(tile));
    bufs.act.resize(static_cast<size_t>(tile));
  }
  alignas(64) float out[kRepackRows];
  for (int64_t t0 = 0; t0 < n_tok; t0 += tile) {
    const int64_t nt = std::min(tile, n_tok - t0);
    // Once per token and call (not per chunk): Q8_0's corrections sum every activation byte.
    for (int64_t i = 0; i < nt; ++i)
      bufs.act[i] = prepare_act(w.type, xq + (t0 + i) * xrb, w.ne0, bufs.tok[i]);
    for (int64_t c0 = g0; c0 < g1; c0 += chunk) {
      const int64_t c1 = std::min(g1, c0 + chunk);
      if (multi) {  // kMultiTokens tokens per pass over a group, unpacked once for them
        alignas(64) float outn[kMultiTokens * kRepackRows];
        for (int64_t i0 = 0; i0 < nt; i0 += kMultiTokens) {
          const int n = static_cast<int>(std::min<int64_t>(kMultiTokens, nt - i0));
          for (int64_t g = c0; g < c1; ++g) {
            multi(static_cast<const uint8_t*>(w.packed) + g * gb, nb, &bufs.act[i0], n, outn);
            const int64_t r0 = g * kRepackRows;
            const int64_t nr = std::min<int64_t>(kRepackRows, w.ne1 - r0);
            for (int i = 0; i < n; ++i)
              std::memcpy(y + (t0 + i0 + i) * w.ne1 + r0, outn + i * kRepackRows,
                          static_cast<size_t>(nr) * sizeof(float));
          }
        }
        continue;
      }
      for (int64_t i = 0; i < nt; ++i) {
        float* yt = y + (t0 + i) * w.ne1;
        for (int64_t g = c0; g < c1; ++g) {
          kern(static_cast<const uint8_t*>(w.packed) + g * gb, nb, bufs.act[i], out);
          const int64_t r0 = g * kRepackRows;
          const int64_t n = std::min<int64_t>(kRepackRows, w.ne1 - r0);
          std::memcpy(yt + r0, out, static_cast<size_t>(n) * sizeof(float));
        }
      }
    }
  }
}

}  // namespace

namespace repack_detail {
const Kernels& scalar_kernels() {
  static const Kernels k{q4_0_ref, q4_1_ref, q8_0_ref, q4_K_ref, f16_ref,
                         q5_K_ref, q6_K_ref, q4_1_bs_ref, q8_0_bs_ref,
                         per_token_ref<q4_0_ref>, per_token_ref<q4_K_ref>,
                         per_token_ref<q5_K_ref>, per_token_ref<q6_K_ref>};
  return k;
}
}  // namespace repack_detail

bool repack_supports(GgmlType t) {
  return t == GgmlType::Q4_0 || t == GgmlType::Q4_1 || t == GgmlType::Q8_0 || is_k_quant(t) ||
         t == GgmlType::F16;
}

bool repack_available(GgmlType t) {
  static const bool avx512 = std::strcmp(quant::isa_name(), "avx512") == 0;
  return avx512 && repack_supports(t);
}

int64_t repack_bytes(GgmlType t, int64_t ne0, int64_t ne1) {
  HC_CHECK(repack_supports(t) && ne0 % block_elems(t) == 0);
  return (ne1 + kRepackRows - 1) / kRepackRows * group_bytes(t, ne0);
}

int64_t repack_group_bytes(GgmlType t, int64_t ne0) {
  HC_CHECK(repack_supports(t) && ne0 % block_elems(t) == 0);
  return group_bytes(t, ne0);
}

void repack_groups(const TensorView& w, int64_t g0, int64_t g1, uint8_t* dst) {
  const int64_t gb = group_bytes(w.type, w.ne0);
  const int64_t nb = w.ne0 / block_elems(w.type);
  for (int64_t g = g0; g < g1; ++g) {
    uint8_t* q = dst + g * gb;
    std::memset(q, 0, static_cast<size_t>(gb));
    if (w.type == GgmlType::F16) {  // column k of row r at q[k][r]
      auto* out = reinterpret_cast<fp16_t*>(q);
      for (int r = 0; r < kRepackRows && g * kRepackRows + r < w.ne1; ++r) {
        const auto* row = reinterpret_cast<const fp16_t*>(w.row(g * kRepackRows + r));
        for (int64_t k = 0; k < nb; ++k) out[k * kRepackRows + r] = row[k];
      }
      continue;
    }
    for (int r = 0; r < kRepackRows && g * kRepackRows + r < w.ne1; ++r) {
      const uint8_t* row = w.row(g * kRepackRows + r);
      for (int64_t b = 0; b < nb; ++b) {
        const BlockAt at = block_at(w.type, nb, b);
        uint8_t* bq = q + at.q;  // the block's quants
        uint8_t* bs = q + at.s;  // and its scales
        switch (w.type) {
          case GgmlType::Q4_0: {
            const auto& x = reinterpret_cast<const quant::block_q4_0*>(row)[b];
            for (int c = 0; c < 4; ++c) std::memcpy(bq + 64 * c + 4 * r, x.qs + 4 * c, 4);
            std::memcpy(bs + 2 * r, &x.d, 2);
            break;
          }
          case GgmlType::Q4_1: {
            const auto& x = reinterpret_cast<const quant::block_q4_1*>(row)[b];
            for (int c = 0; c < 4; ++c) std::memcpy(bq + 64 * c + 4 * r, x.qs + 4 * c, 4);
            std::memcpy(bs + 2 * r, &x.d, 2);
            std::memcpy(bs + 32 + 2 * r, &x.m, 2);
            break;
          }
          case GgmlType::Q8_0: {
            const auto& x = reinterpret_cast<const quant::block_q8_0*>(row)[b];
            for (int c = 0; c < 8; ++c) {
              const uint32_t v = static_cast<uint32_t>(ld32(x.qs + 4 * c)) ^ 0x80808080u;
              std::memcpy(bq + 64 * c + 4 * r, &v, 4);
            }
            std::memcpy(bs + 2 * r, &x.d, 2);
            break;
          }
          case GgmlType::Q4_K: {
            const auto& x = reinterpret_cast<const quant::block_q4_K*>(row)[b];
            for (int c = 0; c < 32; ++c) std::memcpy(bq + 64 * c + 4 * r, x.qs + 4 * c, 4);
            put_k4_scales(x.scales, x.d, x.dmin, bs, r);
            break;
          }
          case GgmlType::Q5_K: {
            const auto& x = reinterpret_cast<const quant::block_q5_K*>(row)[b];
            for (int c = 0; c < 8; ++c) std::memcpy(bq + 64 * c + 4 * r, x.qh + 4 * c, 4);
            for (int c = 0; c < 32; ++c) std::memcpy(bq + 64 * (8 + c) + 4 * r, x.qs + 4 * c, 4);
            put_k4_scales(x.scales, x.d, x.dmin, bs, r);
            break;
          }
          case GgmlType::Q6_K: {
            const auto& x = reinterpret_cast<const quant::block_q6_K*>(row)[b];
            for (int t = 0; t < 16; ++t) {
              const int h = t / 8, cc = t % 8;
              uint8_t* line = bq + 3 * 64 * t + 4 * r;
              std::memcpy(line, x.ql + 64 * h + 4 * cc, 4);
              std::memcpy(line + 64, x.ql + 64 * h + 32 + 4 * cc, 4);
              std::memcpy(line + 128, x.qh + 32 * h + 4 * cc, 4);
            }
            for (int j = 0; j < 16; ++j) std::memcpy(bs + 16 * j + r, &x.scales[j], 1);
            std::memcpy(bs + 256 + 2 * r, &x.d, 2);
            break;
          }
          default: HC_CHECK(false && "no decode layout for this type");
        }
      }
    }
  }
}

void repack_unpack_row(const TensorView& w, int64_t r, uint8_t* dst) {
  HC_CHECK(w.packed != nullptr && r >= 0 && r < w.ne1);
  const int64_t nb = w.ne0 / block_elems(w.type);
  const uint8_t* q = static_cast<const uint8_t*>(w.packed) + r / kRepackRows * group_bytes(w.type, w.ne0);
  const int lane = static_cast<int>(r % kRepackRows);
  if (w.type == GgmlType::F16) {
    const auto* in = reinterpret_cast<const fp16_t*>(q);
    auto* out = reinterpret_cast<fp16_t*>(dst);
    for (int64_t k = 0; k < nb; ++k) out[k] = in[k * kRepackRows + lane];
    return;
  }
  const int64_t bytes = row_bytes(w.type, block_elems(w.type));  // one block
  for (int64_t b = 0; b < nb; ++b) {
    const BlockAt at = block_at(w.type, nb, b);
    unpack_block(w.type, q + at.q, q + at.s, lane, dst + b * bytes);
  }
}

void repack_matmul(const TensorView& w, const uint8_t* xq, int64_t n_tok, float* y,
                   ThreadPool& pool) {
  HC_CHECK(repack_available(w.type) && w.packed != nullptr);
  const GroupKernelFn kern = kernel_for(avx512_kernels(), w.type);
  const GroupMultiFn multi = multi_for(avx512_kernels(), w);
  const int64_t ng = (w.ne1 + kRepackRows - 1) / kRepackRows;
  pool.run([&](int ith, int nth) {
    thread_local ActBufs bufs;  // grows once per thread; decode allocates nothing after
    int64_t g0, g1;
    ThreadPool::split(ng, ith, nth, &g0, &g1);
    run_groups(w, xq, n_tok, y, g0, g1, kern, multi, bufs);
  });
}

void repack_matmul_ref(const TensorView& w, const uint8_t* xq, int64_t n_tok, float* y) {
  HC_CHECK(repack_supports(w.type) && w.packed != nullptr);
  ActBufs bufs;
  run_groups(w, xq, n_tok, y, 0, (w.ne1 + kRepackRows - 1) / kRepackRows,
             kernel_for(scalar_kernels(), w.type), multi_for(scalar_kernels(), w), bufs);
}

}  // namespace hc::ops
