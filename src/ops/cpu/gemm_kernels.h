// Internal to the packed GEMM (gemm.cpp, gemm_avx512.cpp and their tests): the packed layouts
// and the micro-kernel signatures.
//
// Integer weights, one panel per group of kLanes = 16 rows: for each sub-block s of `sb`
// elements (32, or 16 for Q6_K), in this order:
//   uint8 q[sb / 4][16][4]  the row's quants, 4 consecutive k per lane: unsigned bytes, but
//                           for Q6_K the signed q - 32
//   float d[16]             the row's scale for this sub-block (K-quants: d * sc_j)
//   float m[16]             (min formats only) the row's additive min for this sub-block
//                           (K-quants: -(dmin * mn_j)); Q6_K: int32 wc[16] = -128 * the sum of
//                           the sub-block's q - 32
// so that w[r, k] = d[r] * (q - offset) for offset formats and d[r] * q + m[r] for min formats.
// Activations, in tiles of kIntTokTile tokens (the last tile's unused slots are never read):
// for each sub-block s, at s * act_sub_stride(sb) in the tile,
//   int8  q[sb / 4][kIntTokTile][4]  the token's quantised activations (ggml's Q8_0 / Q8_1 /
//                                    Q8_K levels), 4 consecutive k per token; Q6_K: the levels
//                                    + 128 as unsigned bytes
//   float dx[kIntTokTile]            the sub-block's activation scale (Q8_K: its super-block's)
//   corr[kIntTokTile]                offset formats: int32 offset * sum(q over the sub-block);
//                                    Q4_1: float dx * sum(q) (Q8_1's s); Q4_K / Q5_K: float
//                                    sum(q); Q6_K: unused
// so that a micro-kernel reads every activation of a token tile at constant offsets from one
// pointer.
// Per output (lane r, token c) the kernels compute, sub-block by sub-block in order, with isum
// = the sum of q_w * q_x (exact, int32):
//   Q8_0, Q4_0 (offset):  acc = fma(d[r], float(isum - corr) * dx, acc)
//   Q4_1 (min):           acc = fma(d[r], float(isum) * dx, acc); acc = fma(m[r], corr, acc)
// and for the K-quants, whose activation scale is one per super-block of 256, per super-block:
// as = 0; for each of its sub-blocks
//   Q4_K, Q5_K (kmin):    as = fma(d[r], float(isum), as); as = fma(m[r], corr, as)
//   Q6_K (k6):            as = fma(d[r], float(wc[r] + isum), as)
//                         (sum (q_x + 128)(q_w - 32) + wc = sum q_x (q_w - 32), exactly)
// then acc = fma(as, dx, acc): one multiply by the activation scale per super-block, not per
// sub-block, and Q6_K's offset folded into the weights, so a sub-block costs a K-quant two
// float operations per token instead of four.
//
// Float weights (F32 / F16 / BF16), one panel per group of 16 rows and chunk of kc columns:
// float w[kc][16]; activations float x[n_tok][K] (F16 / BF16 activations widened); per output
// acc = fma(w, x, acc) for k in order, the accumulator carried across chunks through y.
// F16 weights in the decode layout (repack.h: fp16 w[ne0][16] per group of 16 rows) are read
// in place as their panels, widened per column: the same bits as packing them.
//
// Integer weights in the decode layout (repack.h) are packed group by group straight from it
// (pack_group: its lines already are 16 lanes x 4 bytes, so a panel line is one layout line,
// its nibbles, or nibbles OR-ed with fifth / sixth bits; fp16 scales widened, K-quant scales
// and mins multiplied out), producing the same panel bytes as rebuilding each row's ggml
// blocks and packing them row by row (pack_int_panel_rows, the reference).
#pragma once
#include <cstdint>

#include "core/dtype.h"
#include "core/tensor_view.h"

namespace hc::ops::gemm_detail {

constexpr int kLanes = 16;
constexpr int kIntTokTile = 12;    // tokens per integer micro-kernel call
constexpr int kFloatTokTile = 12;  // tokens per float micro-kernel call
constexpr int kFloatKc = 512;      // columns per float panel chunk

// How a type's integer sub-blocks are scaled (the arithmetic above).
enum class IntKind { kOffset, kMin, kKMin, kK6 };
constexpr int kIntKinds = 4;

// Everything else about a kind follows from it: its sub-block length, whether its panel holds
// a second slot (mins, or Q6_K's wc), its panel bytes per sub-block, and how many sub-blocks
// share one activation scale (the K-quants' Q8_K: one scale per 256 elements).
constexpr int int_sb(IntKind k) { return k == IntKind::kK6 ? 16 : 32; }
constexpr bool int_has_min(IntKind k) { return k == IntKind::kMin || k == IntKind::kKMin; }
constexpr int64_t int_sub_stride(IntKind k) {
  return int_sb(k) * kLanes + 64 * (k == IntKind::kOffset ? 1 : 2);
}
constexpr int int_subs_per_scale(IntKind k) {
  return k == IntKind::kKMin || k == IntKind::kK6 ? 256 / int_sb(k) : 1;
}

struct IntFormat {
  IntKind kind = IntKind::kOffset;
  int offset = 0;  // kOffset: the value subtracted from each unsigned quant
  int sb() const { return int_sb(kind); }
  bool has_min() const { return int_has_min(kind); }
  int64_t sub_stride() const { return int_sub_stride(kind); }
};

// Bytes of one sub-block of an activation tile.
constexpr int64_t act_sub_stride(int sb) { return (sb + 8) * kIntTokTile; }

struct IntAct {
  const uint8_t* tiles = nullptr;  // tile j (tokens from j * kIntTokTile) at j * tile_bytes
  int64_t ns = 0;                  // sub-blocks per row
  int64_t tile_bytes = 0;          // ns * act_sub_stride(sb)
};

// Integer micro-kernel: tokens t0 .. t0 + nt - 1 (t0 a multiple of kIntTokTile, nt <=
// kIntTokTile) against one panel; writes
// y[t * ldy + r] for rows r < nrows of the group.
using IntKernelFn = void (*)(const uint8_t* panel, const IntAct& a, int64_t t0, int nt, float* y,
                             int64_t ldy, int nrows);
// Float micro-kernel: tokens t0 .. t0 + nt - 1 (nt <= kFloatTokTile), columns k0 .. k0 + kc - 1.
// accumulate: start from y (later chunks) instead of 0.
using FloatKernelFn = void (*)(const float* panel, const float* x, int64_t ldx, int64_t k0,
                               int64_t kc, int64_t t0, int nt, float* y, int64_t ldy, int nrows,
                               bool accumulate);

// The float micro-kernel on an F16 panel of the decode layout (column k at panel + 16 k).
using F16KernelFn = void (*)(const uint16_t* panel, const float* x, int64_t ldx, int64_t k0,
                             int64_t kc, int64_t t0, int nt, float* y, int64_t ldy, int nrows,
                             bool accumulate);

// One group of 16 rows of the decode layout (group: its first byte; k: elements per row) into
// one panel; lanes >= nrows are zero. Integer types only.
using PackGroupFn = void (*)(GgmlType t, const uint8_t* group, int64_t k, int nrows,
                             uint8_t* panel);

struct Kernels {
  IntKernelFn int_kernel[kIntKinds] = {};  // by IntKind
  PackGroupFn pack_group = nullptr;
  FloatKernelFn float_kernel = nullptr;
  F16KernelFn f16_kernel = nullptr;
};

// The AVX-512 (F, BW, VL, VNNI) kernels; defined in gemm_avx512.cpp. Call only on such a CPU.
const Kernels& avx512_kernels();
// The float kernels alone on AVX2 + FMA + F16C (int_kernel and pack_group are null); defined
// in gemm_avx2.cpp. Call only on such a CPU.
const Kernels& avx2_float_kernels();
// Their scalar twins; defined in gemm.cpp.
const Kernels& scalar_kernels();

// Sub-block length, min / offset of integer weight type t (HC_CHECK: an integer GEMM type).
IntFormat int_format(GgmlType t);
// Bytes of one integer panel of rows of k elements of type t.
int64_t int_panel_bytes(GgmlType t, int64_t k);
// Rows r0 .. r0 + nrows - 1 (nrows <= kLanes) of w into one panel: with kern.pack_group when w
// carries the decode layout and r0 starts a group, else pack_int_panel_rows.
void pack_int_panel(const TensorView& w, int64_t r0, int nrows, uint8_t* panel,
                    const Kernels& kern);
// The row-by-row path: each row's ggml blocks (rebuilt by repack_unpack_row when w carries the
// decode layout) through the scalar row packer. The reference pack_group is tested against.
void pack_int_panel_rows(const TensorView& w, int64_t r0, int nrows, uint8_t* panel);

}  // namespace hc::ops::gemm_detail
