#include "ops/cpu/gemm.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/status.h"
#include "ops/cpu/gemm_kernels.h"
#include "ops/cpu/repack.h"
#include "ops/cpu/repack_kernels.h"
#include "quant/blocks.h"
#include "quant/quant.h"

namespace hc::ops {

using namespace gemm_detail;
using repack_detail::kQ4Chunk, repack_detail::kQ8Chunk, repack_detail::kQ4KChunk;
using repack_detail::kQ4KBlock, repack_detail::kQ5KBlock, repack_detail::kQ5KChunk;
using repack_detail::q6K_quants, repack_detail::q6K_scales;
using quant::QK_K;

namespace {

inline uint32_t load32(const void* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline float f16(fp16_t h) { return fp16_to_fp32(h); }

bool is_float_type(GgmlType t) {
  return t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16;
}

// ---- Packing integer weights: rows r0 .. r0 + nrows - 1 into one 16-lane panel.

struct PanelWriter {
  uint8_t* panel;
  int64_t stride;
  int sb;
  void q4(int64_t s, int i, int lane, uint32_t v) const {
    std::memcpy(panel + s * stride + (i * kLanes + lane) * 4, &v, 4);
  }
  // Scale and min of a min format (only those have the m[] slots).
  void dm(int64_t s, int lane, float d, float m) const {
    float* p = reinterpret_cast<float*>(panel + s * stride + sb * kLanes);
    p[lane] = d;
    p[kLanes + lane] = m;
  }
  void d_only(int64_t s, int lane, float d) const {
    reinterpret_cast<float*>(panel + s * stride + sb * kLanes)[lane] = d;
  }
  // Q6_K: -128 * the sum of the lane's signed quants of sub-block s (its q lines written).
  void q6_wc(int64_t s, int lane) const {
    int32_t sum = 0;
    for (int i = 0; i < sb / 4; ++i)
      for (int j = 0; j < 4; ++j)
        sum += static_cast<int8_t>(panel[s * stride + (i * kLanes + lane) * 4 + j]);
    const int32_t wc = -128 * sum;
    std::memcpy(panel + s * stride + sb * kLanes + 64 + 4 * lane, &wc, 4);
  }
};

// Each byte b < 64 of v to the signed byte b - 32 (Q6_K's quants in the panel).
inline uint32_t minus32(uint32_t v) { return ((v ^ 0x80808080u) - 0x20202020u) ^ 0x80808080u; }

constexpr uint32_t kLo = 0x0F0F0F0Fu;

void pack_row(GgmlType t, const uint8_t* row, int64_t k, const PanelWriter& pw, int lane) {
  using namespace quant;
  switch (t) {
    case GgmlType::Q8_0: {
      const auto* b = reinterpret_cast<const block_q8_0*>(row);
      for (int64_t s = 0; s < k / 32; ++s) {
        for (int i = 0; i < 8; ++i) pw.q4(s, i, lane, load32(b[s].qs + 4 * i) ^ 0x80808080u);
        pw.d_only(s, lane, f16(b[s].d));
      }
      return;
    }
    case GgmlType::Q4_0:
    case GgmlType::Q4_1:
    case GgmlType::Q5_0:
    case GgmlType::Q5_1: {  // Q5: each element's fifth bit (qh) or-ed into bit 4 of its nibble
      const bool has_min = t == GgmlType::Q4_1 || t == GgmlType::Q5_1;
      const bool q5 = t == GgmlType::Q5_0 || t == GgmlType::Q5_1;
      const int64_t bs = dtype_traits(t).type_size;
      for (int64_t s = 0; s < k / 32; ++s) {
        const uint8_t* blk = row + s * bs;
        fp16_t d, m = 0;
        std::memcpy(&d, blk, 2);
        if (has_min) std::memcpy(&m, blk + 2, 2);
        const uint8_t* qh = blk + (has_min ? 4 : 2);
        const uint32_t h = q5 ? load32(qh) : 0;
        const uint8_t* qs = qh + (q5 ? 4 : 0);
        for (int i = 0; i < 4; ++i) {
          const uint32_t v = load32(qs + 4 * i);
          uint32_t lo = v & kLo, hi = (v >> 4) & kLo;
          for (int j = 0; j < 4 && q5; ++j) {
            lo |= ((h >> (4 * i + j)) & 1u) << (8 * j + 4);
            hi |= ((h >> (16 + 4 * i + j)) & 1u) << (8 * j + 4);
          }
          pw.q4(s, i, lane, lo);
          pw.q4(s, i + 4, lane, hi);
        }
        if (has_min) pw.dm(s, lane, f16(d), f16(m));
        else pw.d_only(s, lane, f16(d));
      }
      return;
    }
    case GgmlType::Q4_K:
    case GgmlType::Q5_K: {
      const bool q5 = t == GgmlType::Q5_K;
      for (int64_t b = 0; b < k / QK_K; ++b) {
        const uint8_t *scales, *qs, *qh = nullptr;
        float d, dmin;
        if (q5) {
          const auto& x = reinterpret_cast<const block_q5_K*>(row)[b];
          d = f16(x.d), dmin = f16(x.dmin), scales = x.scales, qs = x.qs, qh = x.qh;
        } else {
          const auto& x = reinterpret_cast<const block_q4_K*>(row)[b];
          d = f16(x.d), dmin = f16(x.dmin), scales = x.scales, qs = x.qs;
        }
        for (int j = 0; j < 8; ++j) {
          uint8_t sc, mn;
          get_scale_min_k4(j, scales, &sc, &mn);
          const int64_t s = 8 * b + j;
          pw.dm(s, lane, d * sc, -(dmin * mn));
          const uint8_t* src = qs + 32 * (j / 2);
          for (int i = 0; i < 8; ++i) {
            const uint32_t v = load32(src + 4 * i);
            uint32_t u = j % 2 == 0 ? v & kLo : (v >> 4) & kLo;
            if (q5) u |= ((load32(qh + 4 * i) >> j) & 0x01010101u) << 4;
            pw.q4(s, i, lane, u);
          }
        }
      }
      return;
    }
    case GgmlType::Q6_K: {
      const auto* blocks = reinterpret_cast<const block_q6_K*>(row);
      for (int64_t b = 0; b < k / QK_K; ++b) {
        const block_q6_K& x = blocks[b];
        const float d = f16(x.d);
        for (int sub = 0; sub < 16; ++sub) {
          const int64_t s = 16 * b + sub;
          const int h = sub / 8, kk = (sub % 8) / 2, lh = sub % 2;
          pw.d_only(s, lane, d * x.scales[sub]);
          const uint8_t* ql = x.ql + 64 * h + (kk % 2) * 32 + 16 * lh;
          const uint8_t* qh = x.qh + 32 * h + 16 * lh;
          for (int i = 0; i < 4; ++i) {
            const uint32_t l = load32(ql + 4 * i);
            const uint32_t nib = kk < 2 ? l & kLo : (l >> 4) & kLo;
            const uint32_t hb = (load32(qh + 4 * i) >> (2 * kk)) & 0x03030303u;
            pw.q4(s, i, lane, minus32(nib | (hb << 4)));
          }
          pw.q6_wc(s, lane);
        }
      }
      return;
    }
    default: HC_CHECK(false && "unsupported integer GEMM type");
  }
}

// ---- Packing one group of the decode layout (repack.h) directly: the scalar twin of
// gemm_avx512.cpp's pack_group, lane by lane with the same byte operations on 32-bit words (a
// layout line holds lane r's 4 bytes at 4r). K-quant scales and mins are masked to their 6 bits,
// as rebuilding ggml's 12 scale bytes would.

inline uint32_t lane32(const uint8_t* line, int r) { return load32(line + 4 * r); }
inline float lane_f16(const uint8_t* h16, int r) {
  fp16_t h;
  std::memcpy(&h, h16 + 2 * r, 2);
  return f16(h);
}

void pack_group_lane(GgmlType t, const uint8_t* g, int64_t k, const PanelWriter& pw, int r) {
  switch (t) {
    case GgmlType::Q8_0: {  // layout and panel both store q ^ 0x80
      const repack_detail::Pairs32 pr = repack_detail::pairs32(t, k / 32);
      for (int64_t b = 0; b < pr.nb; ++b) {
        for (int i = 0; i < 8; ++i) pw.q4(b, i, r, lane32(g + pr.quants(b) + 64 * i, r));
        pw.d_only(b, r, lane_f16(g + pr.scales(b), r));
      }
      return;
    }
    case GgmlType::Q4_0:
    case GgmlType::Q4_1: {
      const bool q41 = t == GgmlType::Q4_1;
      const repack_detail::Pairs32 pr = repack_detail::pairs32(t, k / 32);
      for (int64_t b = 0; b < pr.nb; ++b) {
        for (int c = 0; c < 4; ++c) {
          const uint32_t v = lane32(g + pr.quants(b) + 64 * c, r);
          pw.q4(b, c, r, v & kLo);
          pw.q4(b, c + 4, r, (v >> 4) & kLo);
        }
        const uint8_t* sc = g + pr.scales(b);
        if (q41) pw.dm(b, r, lane_f16(sc, r), lane_f16(sc + 32, r));
        else pw.d_only(b, r, lane_f16(sc, r));
      }
      return;
    }
    case GgmlType::Q4_K:
    case GgmlType::Q5_K: {
      const bool q5 = t == GgmlType::Q5_K;
      const int64_t nb = k / QK_K;
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* qh = g + b * kQ5KBlock;  // Q5_K: fifth bits, then Q4_K's lines
        const uint8_t* qs = q5 ? qh + 8 * 64 : g + b * kQ4KBlock;
        const uint8_t* sm = q5 ? qh + kQ5KChunk : qs + kQ4KChunk;  // scales after the lines
        const float d = lane_f16(sm + 256, r), dmin = lane_f16(sm + 288, r);
        for (int j = 0; j < 8; ++j) {
          const int64_t s = 8 * b + j;
          const uint8_t sc = sm[16 * j + r] & 63, mn = sm[128 + 32 * (j / 2) + 2 * r + j % 2] & 63;
          pw.dm(s, r, d * sc, -(dmin * mn));
          for (int i = 0; i < 8; ++i) {
            const uint32_t v = lane32(qs + 64 * (8 * (j / 2) + i), r);
            uint32_t u = j % 2 == 0 ? v & kLo : (v >> 4) & kLo;
            if (q5) u |= ((lane32(qh + 64 * i, r) >> j) & 0x01010101u) << 4;
            pw.q4(s, i, r, u);
          }
        }
      }
      return;
    }
    case GgmlType::Q6_K: {
      constexpr uint32_t kHi2 = 0x30303030u;  // the two high bits' place in a 6-bit quant
      for (int64_t b = 0; b < k / QK_K; ++b) {
        const uint8_t* q = g + q6K_quants(b);
        const uint8_t* sm = g + q6K_scales(b);
        const float d = lane_f16(sm + 256, r);
        for (int sub = 0; sub < 16; ++sub)
          pw.d_only(16 * b + sub, r, d * static_cast<int8_t>(sm[16 * sub + r]));
        // Triplet 8h + c: lines A (ql 64h + 4c), B (ql 64h + 32 + 4c), H (qh 32h + 4c) give
        // line c % 4 of sub-blocks 8h + c / 4 + {0, 2, 4, 6}.
        for (int tr = 0; tr < 16; ++tr) {
          const uint8_t* line = q + 3 * 64 * tr;
          const uint32_t A = lane32(line, r), B = lane32(line + 64, r), H = lane32(line + 128, r);
          const int64_t s = 16 * b + 8 * (tr / 8) + (tr % 8) / 4;
          const int i = tr % 4;
          pw.q4(s, i, r, minus32((A & kLo) | ((H << 4) & kHi2)));
          pw.q4(s + 2, i, r, minus32((B & kLo) | ((H << 2) & kHi2)));
          pw.q4(s + 4, i, r, minus32(((A >> 4) & kLo) | (H & kHi2)));
          pw.q4(s + 6, i, r, minus32(((B >> 4) & kLo) | ((H >> 2) & kHi2)));
        }
        for (int sub = 0; sub < 16; ++sub) pw.q6_wc(16 * b + sub, r);
      }
      return;
    }
    default: HC_CHECK(false && "unsupported integer GEMM type");
  }
}

void pack_group_scalar(GgmlType t, const uint8_t* group, int64_t k, int nrows, uint8_t* panel) {
  const IntFormat f = int_format(t);
  if (nrows < kLanes) std::memset(panel, 0, static_cast<size_t>(k / f.sb() * f.sub_stride()));
  const PanelWriter pw{panel, f.sub_stride(), f.sb()};
  for (int r = 0; r < nrows; ++r) pack_group_lane(t, group, k, pw, r);
}

// ---- Activations for the integer path: ggml's quantised rows -> q / dx / corr arrays.

struct ActBuffers {
  std::vector<uint8_t> tiles;  // integer path: activation tiles (gemm_kernels.h)
  std::vector<float> xf;       // float path: the activations (F16 / BF16 widened), padded rows
};

// Token c of an activation tile: its quantised levels, per-sub-block scales and corrections.
struct ActSlot {
  uint8_t* tile;
  int64_t stride;  // act_sub_stride(sb)
  int sb, c;
  bool plus128;  // Q6_K: the levels + 128 as unsigned bytes
  void q(int64_t s, const int8_t* src) const {  // the sub-block's sb levels
    uint8_t* d = tile + s * stride + 4 * c;
    for (int i = 0; i < sb / 4; ++i) {
      uint32_t v;
      std::memcpy(&v, src + 4 * i, 4);
      if (plus128) v ^= 0x80808080u;
      std::memcpy(d + 4 * kIntTokTile * i, &v, 4);
    }
  }
  void dx(int64_t s, float v) const {
    std::memcpy(tile + s * stride + sb * kIntTokTile + 4 * c, &v, 4);
  }
  void corr(int64_t s, const void* v) const {
    std::memcpy(tile + s * stride + (sb + 4) * kIntTokTile + 4 * c, v, 4);
  }
};

void pack_int_act_row(GgmlType vt, const IntFormat& f, const uint8_t* src, int64_t k,
                      const ActSlot& o) {
  using namespace quant;
  auto put_corr = [&](int64_t s, float d, int32_t sum) {
    if (f.kind == IntKind::kK6) return;  // no correction: folded into the panel (wc)
    if (f.kind == IntKind::kKMin) {
      const float v = static_cast<float>(sum);  // exact: |sum| <= 32 * 128
      o.corr(s, &v);
    } else if (f.has_min()) {
      const float v = d * static_cast<float>(sum);
      o.corr(s, &v);
    } else {
      const int32_t v = f.offset * sum;
      o.corr(s, &v);
    }
  };
  if (vt == GgmlType::Q8_0 || vt == GgmlType::Q8_1) {
    const bool q81 = vt == GgmlType::Q8_1;
    const int64_t bs = q81 ? sizeof(block_q8_1) : sizeof(block_q8_0);
    for (int64_t s = 0; s < k / 32; ++s) {
      const uint8_t* blk = src + s * bs;
      fp16_t d;
      std::memcpy(&d, blk, 2);
      const int8_t* qs = reinterpret_cast<const int8_t*>(blk + (q81 ? 4 : 2));
      o.q(s, qs);
      const float dx = f16(d);
      o.dx(s, dx);
      if (q81) {
        fp16_t sm;  // ggml's min term uses the stored fp16 s = d * sum(qs)
        std::memcpy(&sm, blk + 2, 2);
        const float v = f16(sm);
        o.corr(s, &v);
      } else {
        int32_t sum = 0;
        for (int i = 0; i < 32; ++i) sum += qs[i];
        put_corr(s, dx, sum);
      }
    }
    return;
  }
  HC_CHECK(vt == GgmlType::Q8_K);
  const auto* blocks = reinterpret_cast<const block_q8_K*>(src);
  const int per = int_subs_per_scale(f.kind);
  for (int64_t b = 0; b < k / QK_K; ++b) {
    const block_q8_K& y = blocks[b];
    for (int j = 0; j < per; ++j) {
      const int64_t s = per * b + j;
      o.q(s, y.qs + f.sb() * j);
      o.dx(s, y.d);
      const int32_t sum = f.sb() == 32 ? y.bsums[2 * j] + y.bsums[2 * j + 1] : y.bsums[j];
      put_corr(s, y.d, sum);
    }
  }
}

// ---- Packing float weights: rows r0 .. r0 + nrows - 1, columns k0 .. k0 + kc - 1.

void pack_float_panel(const TensorView& w, int64_t r0, int nrows, int64_t k0, int64_t kc,
                      float* panel, float* tmp) {
  if (nrows < kLanes) std::fill(panel, panel + kc * kLanes, 0.0f);
  const int64_t es = dtype_traits(w.type).type_size;
  for (int r = 0; r < nrows; ++r) {
    quant::dequantize_row(w.type, w.row(r0 + r) + k0 * es, tmp, kc);
    for (int64_t k = 0; k < kc; ++k) panel[k * kLanes + r] = tmp[k];
  }
}

// ---- Scalar twins of the micro-kernels (same operations, same order as gemm_avx512.cpp).

template <IntKind K>
void int_kernel_scalar(const uint8_t* panel, const IntAct& a, int64_t t0, int nt, float* y,
                       int64_t ldy, int nrows) {
  constexpr int SB = int_sb(K);
  constexpr int per = int_subs_per_scale(K);
  constexpr int64_t stride = int_sub_stride(K);
  constexpr int64_t astride = act_sub_stride(SB);
  const uint8_t* tile = a.tiles + t0 / kIntTokTile * a.tile_bytes;
  for (int c = 0; c < nt; ++c) {
    const int64_t t = t0 + c;
    for (int r = 0; r < nrows; ++r) {
      float acc = 0.0f, as = 0.0f;
      for (int64_t s = 0; s < a.ns; ++s) {
        const uint8_t* p = panel + s * stride;
        const uint8_t* xs = tile + s * astride;
        const float* dm = reinterpret_cast<const float*>(p + SB * kLanes);
        int32_t isum = 0;
        if constexpr (K == IntKind::kK6) std::memcpy(&isum, p + SB * kLanes + 64 + 4 * r, 4);
        for (int i = 0; i < SB / 4; ++i)
          for (int j = 0; j < 4; ++j) {
            const uint8_t wb = p[(i * kLanes + r) * 4 + j], xb = xs[(i * kIntTokTile + c) * 4 + j];
            isum += K == IntKind::kK6 ? static_cast<int32_t>(xb) * static_cast<int8_t>(wb)
                                      : static_cast<int32_t>(wb) * static_cast<int8_t>(xb);
          }
        float dx;
        std::memcpy(&dx, xs + (SB * kIntTokTile + 4 * c), 4);
        const uint8_t* corr = xs + (SB + 4) * kIntTokTile + 4 * c;
        if constexpr (K == IntKind::kOffset) {
          int32_t ci;
          std::memcpy(&ci, corr, 4);
          const float v = static_cast<float>(isum - ci) * dx;
          acc = std::fma(dm[r], v, acc);
        } else if constexpr (K == IntKind::kMin) {
          float cf;
          std::memcpy(&cf, corr, 4);
          const float v = static_cast<float>(isum) * dx;
          acc = std::fma(dm[r], v, acc);
          acc = std::fma(dm[kLanes + r], cf, acc);
        } else {
          as = std::fma(dm[r], static_cast<float>(isum), as);
          if constexpr (K == IntKind::kKMin) {
            float cf;
            std::memcpy(&cf, corr, 4);
            as = std::fma(dm[kLanes + r], cf, as);
          }
          if ((s + 1) % per == 0) {
            acc = std::fma(as, dx, acc);
            as = 0.0f;
          }
        }
      }
      y[t * ldy + r] = acc;
    }
  }
}

inline float widen(float v) { return v; }
inline float widen(uint16_t h) { return f16(h); }

template <typename T>
void float_kernel_scalar(const T* panel, const float* x, int64_t ldx, int64_t k0, int64_t kc,
                         int64_t t0, int nt, float* y, int64_t ldy, int nrows, bool accumulate) {
  for (int c = 0; c < nt; ++c) {
    const float* xr = x + (t0 + c) * ldx + k0;
    float* yr = y + (t0 + c) * ldy;
    for (int r = 0; r < nrows; ++r) {
      float acc = accumulate ? yr[r] : 0.0f;
      for (int64_t k = 0; k < kc; ++k) acc = std::fma(widen(panel[k * kLanes + r]), xr[k], acc);
      yr[r] = acc;
    }
  }
}

Kernels make_scalar() {
  Kernels k;
  k.int_kernel[static_cast<int>(IntKind::kOffset)] = int_kernel_scalar<IntKind::kOffset>;
  k.int_kernel[static_cast<int>(IntKind::kMin)] = int_kernel_scalar<IntKind::kMin>;
  k.int_kernel[static_cast<int>(IntKind::kKMin)] = int_kernel_scalar<IntKind::kKMin>;
  k.int_kernel[static_cast<int>(IntKind::kK6)] = int_kernel_scalar<IntKind::kK6>;
  k.float_kernel = float_kernel_scalar<float>;
  k.f16_kernel = float_kernel_scalar<uint16_t>;
  k.pack_group = pack_group_scalar;
  return k;
}

// Groups of 16 rows a thread packs together and runs each token tile against (the panels of a
// block stay in L2 while the tile's activations stay in L1).
constexpr int64_t kGroupsPerBlock = 4;

thread_local std::vector<uint8_t> tl_panel;  // per pool thread, grown once
thread_local std::vector<float> tl_tmp;
thread_local ActBuffers tl_act;              // per calling thread

void run_int(const TensorView& w, const uint8_t* xq, int64_t n_tok, float* y, ThreadPool& pool,
             const Kernels& kern) {
  const IntFormat f = int_format(w.type);
  const GgmlType vt = quant::vec_dot_type(w.type);
  const int64_t k = w.ne0, ns = k / f.sb(), ne1 = w.ne1;
  const int64_t xrb = row_bytes(vt, k);
  const int64_t tile_bytes = ns * act_sub_stride(f.sb());
  const int64_t n_tiles = (n_tok + kIntTokTile - 1) / kIntTokTile;
  ActBuffers& ab = tl_act;
  if (static_cast<int64_t>(ab.tiles.size()) < n_tiles * tile_bytes)
    ab.tiles.resize(n_tiles * tile_bytes);
  uint8_t* tiles = ab.tiles.data();
  pool.run([&](int ith, int nth) {
    int64_t b, e;
    ThreadPool::split(n_tok, ith, nth, &b, &e);
    for (int64_t t = b; t < e; ++t) {
      const ActSlot slot{tiles + t / kIntTokTile * tile_bytes, act_sub_stride(f.sb()), f.sb(),
                         static_cast<int>(t % kIntTokTile), f.kind == IntKind::kK6};
      pack_int_act_row(vt, f, xq + t * xrb, k, slot);
    }
  });
  const IntAct act{tiles, ns, tile_bytes};
  const IntKernelFn kernel = kern.int_kernel[static_cast<int>(f.kind)];
  const int64_t panel_bytes = ns * f.sub_stride();
  const int64_t n_groups = (ne1 + kLanes - 1) / kLanes;
  pool.run([&](int ith, int nth) {
    int64_t gb, ge;
    ThreadPool::split(n_groups, ith, nth, &gb, &ge);
    if (static_cast<int64_t>(tl_panel.size()) < kGroupsPerBlock * panel_bytes + 64)
      tl_panel.resize(kGroupsPerBlock * panel_bytes + 64);
    uint8_t* panels = tl_panel.data();
    for (int64_t g0 = gb; g0 < ge; g0 += kGroupsPerBlock) {
      const int64_t g1 = std::min(ge, g0 + kGroupsPerBlock);
      for (int64_t g = g0; g < g1; ++g) {
        const int nrows = static_cast<int>(std::min<int64_t>(kLanes, ne1 - g * kLanes));
        pack_int_panel(w, g * kLanes, nrows, panels + (g - g0) * panel_bytes, kern);
      }
      // The next block's decode layout is read into L2 during this block's products (64-byte
      // lines spread over the kernel calls), so packing it does not wait on memory.
      const uint8_t* pf = nullptr;
      int64_t pf_lines = 0, pf_per_call = 0;
      if (w.packed != nullptr && g1 < ge) {
        const int64_t gbytes = repack_group_bytes(w.type, k);
        pf = static_cast<const uint8_t*>(w.packed) + g1 * gbytes;
        pf_lines = std::min(ge - g1, kGroupsPerBlock) * gbytes / 64;
        const int64_t calls = n_tiles * (g1 - g0);
        pf_per_call = (pf_lines + calls - 1) / calls;
      }
      for (int64_t t0 = 0; t0 < n_tok; t0 += kIntTokTile) {
        const int nt = static_cast<int>(std::min<int64_t>(kIntTokTile, n_tok - t0));
        for (int64_t g = g0; g < g1; ++g) {
          const int nrows = static_cast<int>(std::min<int64_t>(kLanes, ne1 - g * kLanes));
          for (int64_t i = 0; i < pf_per_call && pf_lines > 0; ++i, --pf_lines, pf += 64)
            __builtin_prefetch(pf, 0, 2);
          kernel(panels + (g - g0) * panel_bytes, act, t0, nt, y + g * kLanes, ne1, nrows);
        }
      }
    }
  });
}

// Row groups [gb, ge) of a float-weight GEMM on the calling thread: y[t * ldy + r] =
// sum_k W[r, k] * x[t * ldx + k].
void float_groups(const TensorView& w, const float* x, int64_t ldx, int64_t n_tok, float* y,
                  int64_t ldy, int64_t gb, int64_t ge, const Kernels& kern) {
  const int64_t k = w.ne0, ne1 = w.ne1;
  const int64_t panel_floats = kFloatKc * kLanes;
  // F16 weights in the decode layout are their own panels (read in place, no packing).
  const bool in_place = w.packed != nullptr && w.type == GgmlType::F16;
  const auto* base = static_cast<const uint8_t*>(w.packed);
  const int64_t gbytes = in_place ? repack_group_bytes(w.type, k) : 0;
  const size_t need = static_cast<size_t>(kGroupsPerBlock * panel_floats) * sizeof(float);
  if (!in_place && tl_panel.size() < need + 64) tl_panel.resize(need + 64);
  if (!in_place && tl_tmp.size() < static_cast<size_t>(kFloatKc)) tl_tmp.resize(kFloatKc);
  float* panels = reinterpret_cast<float*>(tl_panel.data());
  for (int64_t g0 = gb; g0 < ge; g0 += kGroupsPerBlock) {
    const int64_t g1 = std::min(ge, g0 + kGroupsPerBlock);
    for (int64_t k0 = 0; k0 < k; k0 += kFloatKc) {
      const int64_t kc = std::min<int64_t>(kFloatKc, k - k0);
      for (int64_t g = g0; g < g1 && !in_place; ++g) {
        const int nrows = static_cast<int>(std::min<int64_t>(kLanes, ne1 - g * kLanes));
        pack_float_panel(w, g * kLanes, nrows, k0, kc, panels + (g - g0) * panel_floats,
                         tl_tmp.data());
      }
      for (int64_t t0 = 0; t0 < n_tok; t0 += kFloatTokTile) {
        const int nt = static_cast<int>(std::min<int64_t>(kFloatTokTile, n_tok - t0));
        for (int64_t g = g0; g < g1; ++g) {
          const int nrows = static_cast<int>(std::min<int64_t>(kLanes, ne1 - g * kLanes));
          float* yg = y + g * kLanes;
          if (in_place) {
            const auto* panel = reinterpret_cast<const uint16_t*>(base + g * gbytes) + k0 * kLanes;
            kern.f16_kernel(panel, x, ldx, k0, kc, t0, nt, yg, ldy, nrows, k0 > 0);
          } else {
            kern.float_kernel(panels + (g - g0) * panel_floats, x, ldx, k0, kc, t0, nt, yg, ldy,
                              nrows, k0 > 0);
          }
        }
      }
    }
  }
}

void run_float(const TensorView& w, const uint8_t* xq, int64_t n_tok, float* y, ThreadPool& pool,
               const Kernels& kern) {
  const int64_t k = w.ne0, ne1 = w.ne1;
  // The activations are copied (F16 / BF16: widened) into rows kPad floats longer than k: the
  // micro-kernel reads 12 token rows side by side, and at k = 4096 rows 16 KiB apart all map to
  // the same L1 sets (4K aliasing), which cost the F16 GEMM ~15% (gemm_repacked/F16 bench).
  constexpr int64_t kPad = 16;
  const int64_t ldx = k + kPad;
  ActBuffers& ab = tl_act;
  if (static_cast<int64_t>(ab.xf.size()) < n_tok * ldx) ab.xf.resize(n_tok * ldx);
  float* xf = ab.xf.data();
  const GgmlType vt = quant::vec_dot_type(w.type);
  const int64_t xrb = row_bytes(vt, k);
  pool.run([&](int ith, int nth) {
    int64_t b, e;
    ThreadPool::split(n_tok, ith, nth, &b, &e);
    for (int64_t t = b; t < e; ++t) quant::dequantize_row(vt, xq + t * xrb, xf + t * ldx, k);
  });
  const int64_t n_groups = (ne1 + kLanes - 1) / kLanes;
  pool.run([&](int ith, int nth) {
    int64_t gb, ge;
    ThreadPool::split(n_groups, ith, nth, &gb, &ge);
    float_groups(w, xf, ldx, n_tok, y, ne1, gb, ge, kern);
  });
}

void run(const TensorView& w, const uint8_t* xq, int64_t n_tok, float* y, ThreadPool& pool,
         const Kernels& kern) {
  if (is_float_type(w.type)) run_float(w, xq, n_tok, y, pool, kern);
  else run_int(w, xq, n_tok, y, pool, kern);
}

}  // namespace

namespace gemm_detail {
const Kernels& scalar_kernels() {
  static const Kernels k = make_scalar();
  return k;
}

IntFormat int_format(GgmlType t) {
  switch (t) {
    case GgmlType::Q8_0: return {IntKind::kOffset, 128};
    case GgmlType::Q4_0: return {IntKind::kOffset, 8};
    case GgmlType::Q4_1: return {IntKind::kMin};
    case GgmlType::Q5_0: return {IntKind::kOffset, 16};
    case GgmlType::Q5_1: return {IntKind::kMin};
    case GgmlType::Q4_K: return {IntKind::kKMin};
    case GgmlType::Q5_K: return {IntKind::kKMin};
    case GgmlType::Q6_K: return {IntKind::kK6};  // its -32 is in the panel's signed quants
    default: HC_CHECK(false && "not an integer GEMM type"); return {};
  }
}

int64_t int_panel_bytes(GgmlType t, int64_t k) {
  const IntFormat f = int_format(t);
  return k / f.sb() * f.sub_stride();
}

void pack_int_panel(const TensorView& w, int64_t r0, int nrows, uint8_t* panel,
                    const Kernels& kern) {
  // Repacked weights are read from the decode layout only, so the mmapped original (whose
  // pages the model has dropped) is never touched again. run_int's panels always start a group;
  // any other start takes the row-by-row path.
  if (w.packed != nullptr && r0 % kRepackRows == 0) {
    const auto* group = static_cast<const uint8_t*>(w.packed) +
                        r0 / kRepackRows * repack_group_bytes(w.type, w.ne0);
    kern.pack_group(w.type, group, w.ne0, nrows, panel);
    return;
  }
  pack_int_panel_rows(w, r0, nrows, panel);
}

void pack_int_panel_rows(const TensorView& w, int64_t r0, int nrows, uint8_t* panel) {
  const IntFormat f = int_format(w.type);
  const int64_t ns = w.ne0 / f.sb();
  if (nrows < kLanes) std::memset(panel, 0, static_cast<size_t>(ns * f.sub_stride()));
  const PanelWriter pw{panel, f.sub_stride(), f.sb()};
  if (!w.packed) {
    for (int r = 0; r < nrows; ++r) pack_row(w.type, w.row(r0 + r), w.ne0, pw, r);
    return;
  }
  // Each row's ggml blocks rebuilt from the decode layout.
  thread_local std::vector<uint8_t> row;
  row.resize(static_cast<size_t>(row_bytes(w.type, w.ne0)));
  for (int r = 0; r < nrows; ++r) {
    repack_unpack_row(w, r0 + r, row.data());
    pack_row(w.type, row.data(), w.ne0, pw, r);
  }
}
}  // namespace gemm_detail

bool gemm_supports(GgmlType t) {
  switch (t) {
    case GgmlType::F32: case GgmlType::F16: case GgmlType::BF16:
    case GgmlType::Q8_0: case GgmlType::Q4_0: case GgmlType::Q4_1:
    case GgmlType::Q5_0: case GgmlType::Q5_1:
    case GgmlType::Q4_K: case GgmlType::Q5_K: case GgmlType::Q6_K:
      return true;
    default:
      return false;
  }
}

bool gemm_available(GgmlType t) {
  // The AVX-512 kernels need F, BW, VL and VNNI: exactly what the quant layer's AVX-512 table
  // requires, and it honours HOTCOLD_ISA.
  static const bool avx512 = std::strcmp(quant::isa_name(), "avx512") == 0;
  return avx512 && gemm_supports(t);
}

void gemm(const TensorView& w, const uint8_t* xq, int64_t n_tok, float* y, ThreadPool& pool) {
  HC_CHECK(gemm_available(w.type));
  run(w, xq, n_tok, y, pool, avx512_kernels());
}

namespace {
// The float micro-kernels this CPU runs (AVX-512, else AVX2), honouring HOTCOLD_ISA; or none.
const Kernels* float_simd_kernels() {
  static const Kernels* const k = [] {
    const char* isa = quant::isa_name();
    if (std::strcmp(isa, "avx512") == 0) return &avx512_kernels();
    if (std::strcmp(isa, "avx2") == 0) return &avx2_float_kernels();
    return static_cast<const Kernels*>(nullptr);
  }();
  return k;
}
}  // namespace

bool gemm_f32_act_simd_available() { return float_simd_kernels() != nullptr; }

void gemm_f32_act(const TensorView& w, const float* x, int64_t ldx, int64_t n_tok, float* y,
                  int64_t ldy, bool simd) {
  HC_CHECK(is_float_type(w.type));
  HC_CHECK(!simd || gemm_f32_act_simd_available());
  const Kernels& kern = simd ? *float_simd_kernels() : scalar_kernels();
  float_groups(w, x, ldx, n_tok, y, ldy, 0, (w.ne1 + kLanes - 1) / kLanes, kern);
}

void gemm_ref(const TensorView& w, const uint8_t* xq, int64_t n_tok, float* y) {
  HC_CHECK(gemm_supports(w.type));
  ThreadPool single(1);
  run(w, xq, n_tok, y, single, scalar_kernels());
}

}  // namespace hc::ops
