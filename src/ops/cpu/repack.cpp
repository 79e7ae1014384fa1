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

int64_t block_elems(GgmlType t) {
  return t == GgmlType::Q4_K ? QK_K : t == GgmlType::F16 ? 1 : 32;
}

// Quant bytes and scale bytes per block of one group.
void block_layout(GgmlType t, int64_t* qb, int64_t* sb) {
  switch (t) {
    case GgmlType::Q4_0: *qb = kQ4Chunk, *sb = 32; return;
    case GgmlType::Q4_1: *qb = kQ4Chunk, *sb = 64; return;
    case GgmlType::Q8_0: *qb = kQ8Chunk, *sb = 32; return;
    case GgmlType::Q4_K: *qb = kQ4KChunk, *sb = kQ4KScaleBytes; return;
    case GgmlType::F16: *qb = kF16Col, *sb = 0; return;
    default: HC_CHECK(false && "no decode layout for this type");
  }
}

int64_t group_bytes(GgmlType t, int64_t ne0) {
  int64_t qb, sb;
  block_layout(t, &qb, &sb);
  const int64_t bytes = ne0 / block_elems(t) * (qb + sb);
  return (bytes + 63) / 64 * 64;
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
  const uint8_t* sc = g + nb * kChunks * 64;
  constexpr int kScale = kMin ? 64 : 32;
  for (int r = 0; r < kRepackRows; ++r) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    float summ = 0;
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* q = g + b * kChunks * 64;
      const int8_t* aq = a.q + b * a.block_bytes;
      const float dd = f16(ld16(sc + b * kScale + 2 * r)) * a.d[b];
      if (kMin) summ = std::fma(f16(ld16(sc + b * kScale + 32 + 2 * r)), a.s[b], summ);
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
  const uint8_t* sc = g + nb * kQ4Chunk;
  for (int r = 0; r < kRepackRows; ++r) {
    float acc = 0;
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* q = g + b * kQ4Chunk;
      const int8_t* aq = a.q + b * a.block_bytes;
      int32_t plo = a.corr_sum[b], phi = 0;
      for (int c = 0; c < 4; ++c) {
        const uint8_t* w = q + 64 * c + 4 * r;
        plo += dot4_nib(w, 0, 0x0F, aq + 4 * c);
        phi += dot4_nib(w, 0, 0xF0, aq + 16 + 4 * c);
      }
      const float dd16 = (f16(ld16(sc + b * 32 + 2 * r)) * a.d[b]) * 0.0625f;
      acc = std::fma(dd16, static_cast<float>(plo * 16 + phi), acc);
    }
    out[r] = acc;
  }
}
void q4_1_ref(const uint8_t* g, int64_t nb, const Act& a, float* out) { k32_ref<4, false, true>(g, nb, a, out); }
void q8_0_ref(const uint8_t* g, int64_t nb, const Act& a, float* out) { k32_ref<8, true, false>(g, nb, a, out); }

void q4_K_ref(const uint8_t* g, int64_t nb, const Act& a, float* out) {
  const uint8_t* scales = g + nb * kQ4KChunk;
  for (int r = 0; r < kRepackRows; ++r) {
    float acc = 0;
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* q = g + b * kQ4KChunk;
      const int8_t* aq = a.q + b * a.block_bytes;
      const uint8_t* sm = scales + b * kQ4KScaleBytes;
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
      int32_t msum = 0;
      for (int pr = 0; pr < 4; ++pr) {
        const int32_t pair = a.corr[b * 8 + pr];
        const int16_t b0 = static_cast<int16_t>(pair & 0xFFFF), b1 = static_cast<int16_t>(pair >> 16);
        msum += sm[128 + 32 * pr + 2 * r] * b0 + sm[128 + 32 * pr + 2 * r + 1] * b1;
      }
      const float dd16 = (f16(ld16(sm + 256 + 2 * r)) * a.d[b]) * 0.0625f;
      const float dm = 0.0f - f16(ld16(sm + 288 + 2 * r)) * a.d[b];
      acc = std::fma(static_cast<float>(isum16), dd16, acc);
      acc = std::fma(static_cast<float>(msum), dm, acc);
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
    buf.corr.resize(nb * 8);
    buf.corr_sum.resize(nb);
  }
  Act a;
  a.d = buf.d.data();
  a.s = buf.s.data();
  a.corr = buf.corr.data();
  a.corr_sum = buf.corr_sum.data();
  if (wt == GgmlType::Q4_K) {
    const auto* y = reinterpret_cast<const quant::block_q8_K*>(row);
    a.q = y[0].qs;
    a.block_bytes = sizeof(quant::block_q8_K);
    for (int64_t b = 0; b < nb; ++b) {
      buf.d[b] = y[b].d;
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

GroupKernelFn kernel_for(const Kernels& k, GgmlType t) {
  switch (t) {
    case GgmlType::Q4_0: return k.q4_0;
    case GgmlType::Q4_1: return k.q4_1;
    case GgmlType::Q8_0: return k.q8_0;
    case GgmlType::Q4_K: return k.q4_K;
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

// Groups [g0, g1) for every token. Per (group, token) the kernel call is the same whatever
// n_tok is, so each token's rows are bit-identical to a one-token call.
void run_groups(const TensorView& w, const uint8_t* xq, int64_t n_tok, float* y, int64_t g0,
                int64_t g1, GroupKernelFn kern, ActBufs& bufs) {
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
  static const Kernels k{q4_0_ref, q4_1_ref, q8_0_ref, q4_K_ref, f16_ref};
  return k;
}
}  // namespace repack_detail

bool repack_supports(GgmlType t) {
  return t == GgmlType::Q4_0 || t == GgmlType::Q4_1 || t == GgmlType::Q8_0 ||
         t == GgmlType::Q4_K || t == GgmlType::F16;
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
  int64_t qb, sb;
  block_layout(w.type, &qb, &sb);
  const int64_t gb = group_bytes(w.type, w.ne0);
  const int64_t nb = w.ne0 / block_elems(w.type);
  for (int64_t g = g0; g < g1; ++g) {
    uint8_t* q = dst + g * gb;
    uint8_t* sc = q + nb * qb;
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
        switch (w.type) {
          case GgmlType::Q4_0: {
            const auto& x = reinterpret_cast<const quant::block_q4_0*>(row)[b];
            for (int c = 0; c < 4; ++c) std::memcpy(q + b * qb + 64 * c + 4 * r, x.qs + 4 * c, 4);
            std::memcpy(sc + b * sb + 2 * r, &x.d, 2);
            break;
          }
          case GgmlType::Q4_1: {
            const auto& x = reinterpret_cast<const quant::block_q4_1*>(row)[b];
            for (int c = 0; c < 4; ++c) std::memcpy(q + b * qb + 64 * c + 4 * r, x.qs + 4 * c, 4);
            std::memcpy(sc + b * sb + 2 * r, &x.d, 2);
            std::memcpy(sc + b * sb + 32 + 2 * r, &x.m, 2);
            break;
          }
          case GgmlType::Q8_0: {
            const auto& x = reinterpret_cast<const quant::block_q8_0*>(row)[b];
            for (int c = 0; c < 8; ++c) {
              const uint32_t v = static_cast<uint32_t>(ld32(x.qs + 4 * c)) ^ 0x80808080u;
              std::memcpy(q + b * qb + 64 * c + 4 * r, &v, 4);
            }
            std::memcpy(sc + b * sb + 2 * r, &x.d, 2);
            break;
          }
          case GgmlType::Q4_K: {
            const auto& x = reinterpret_cast<const quant::block_q4_K*>(row)[b];
            for (int c = 0; c < 32; ++c) std::memcpy(q + b * qb + 64 * c + 4 * r, x.qs + 4 * c, 4);
            uint8_t* sm = sc + b * sb;
            for (int j = 0; j < 8; ++j)
              quant::get_scale_min_k4(j, x.scales, sm + 16 * j + r, sm + 128 + 32 * (j / 2) + 2 * r + j % 2);
            std::memcpy(sm + 256 + 2 * r, &x.d, 2);
            std::memcpy(sm + 288 + 2 * r, &x.dmin, 2);
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
  int64_t qb, sb;
  block_layout(w.type, &qb, &sb);
  const int64_t nb = w.ne0 / block_elems(w.type);
  const uint8_t* q = static_cast<const uint8_t*>(w.packed) + r / kRepackRows * group_bytes(w.type, w.ne0);
  const uint8_t* sc = q + nb * qb;
  const int lane = static_cast<int>(r % kRepackRows);
  if (w.type == GgmlType::F16) {
    const auto* in = reinterpret_cast<const fp16_t*>(q);
    auto* out = reinterpret_cast<fp16_t*>(dst);
    for (int64_t k = 0; k < nb; ++k) out[k] = in[k * kRepackRows + lane];
    return;
  }
  for (int64_t b = 0; b < nb; ++b) {
    switch (w.type) {
      case GgmlType::Q4_0: {
        auto& x = reinterpret_cast<quant::block_q4_0*>(dst)[b];
        for (int c = 0; c < 4; ++c) std::memcpy(x.qs + 4 * c, q + b * qb + 64 * c + 4 * lane, 4);
        std::memcpy(&x.d, sc + b * sb + 2 * lane, 2);
        break;
      }
      case GgmlType::Q4_1: {
        auto& x = reinterpret_cast<quant::block_q4_1*>(dst)[b];
        for (int c = 0; c < 4; ++c) std::memcpy(x.qs + 4 * c, q + b * qb + 64 * c + 4 * lane, 4);
        std::memcpy(&x.d, sc + b * sb + 2 * lane, 2);
        std::memcpy(&x.m, sc + b * sb + 32 + 2 * lane, 2);
        break;
      }
      case GgmlType::Q8_0: {
        auto& x = reinterpret_cast<quant::block_q8_0*>(dst)[b];
        for (int c = 0; c < 8; ++c) {
          const uint32_t v = static_cast<uint32_t>(ld32(q + b * qb + 64 * c + 4 * lane)) ^ 0x80808080u;
          std::memcpy(x.qs + 4 * c, &v, 4);
        }
        std::memcpy(&x.d, sc + b * sb + 2 * lane, 2);
        break;
      }
      case GgmlType::Q4_K: {
        auto& x = reinterpret_cast<quant::block_q4_K*>(dst)[b];
        for (int c = 0; c < 32; ++c) std::memcpy(x.qs + 4 * c, q + b * qb + 64 * c + 4 * lane, 4);
        const uint8_t* sm = sc + b * sb;
        // Re-pack the 6-bit scales and mins as ggml's 12 bytes (inverse of get_scale_min_k4).
        std::memset(x.scales, 0, sizeof(x.scales));
        for (int j = 0; j < 8; ++j) {
          const uint8_t s = sm[16 * j + lane], m = sm[128 + 32 * (j / 2) + 2 * lane + j % 2];
          if (j < 4) {
            x.scales[j] |= s & 63;
            x.scales[j + 4] |= m & 63;
          } else {
            x.scales[j + 4] |= (s & 0xF) | ((m & 0xF) << 4);
            x.scales[j - 4] |= (s >> 4) << 6;
            x.scales[j] |= (m >> 4) << 6;
          }
        }
        std::memcpy(&x.d, sm + 256 + 2 * lane, 2);
        std::memcpy(&x.dmin, sm + 288 + 2 * lane, 2);
        break;
      }
      default: HC_CHECK(false && "no decode layout for this type");
    }
  }
}

void repack_matmul(const TensorView& w, const uint8_t* xq, int64_t n_tok, float* y,
                   ThreadPool& pool) {
  HC_CHECK(repack_available(w.type) && w.packed != nullptr);
  const GroupKernelFn kern = kernel_for(avx512_kernels(), w.type);
  const int64_t ng = (w.ne1 + kRepackRows - 1) / kRepackRows;
  pool.run([&](int ith, int nth) {
    thread_local ActBufs bufs;  // grows once per thread; decode allocates nothing after
    int64_t g0, g1;
    ThreadPool::split(ng, ith, nth, &g0, &g1);
    run_groups(w, xq, n_tok, y, g0, g1, kern, bufs);
  });
}

void repack_matmul_ref(const TensorView& w, const uint8_t* xq, int64_t n_tok, float* y) {
  HC_CHECK(repack_supports(w.type) && w.packed != nullptr);
  ActBufs bufs;
  run_groups(w, xq, n_tok, y, 0, (w.ne1 + kRepackRows - 1) / kRepackRows,
             kernel_for(scalar_kernels(), w.type), bufs);
}

}  // namespace hc::ops
