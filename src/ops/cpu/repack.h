// Decode layout for quantised and F16 weights: rows interleaved in groups of 16, one SIMD lane per row.
//
// A batch-1 matrix-vector product on ggml's row-major blocks is compute-bound on this class of
// CPU for 4-bit types (every block is unpacked, its fp16 scale converted and broadcast, its
// 8-lane partial sums converted and accumulated, all for one row). In the interleaved layout
// the same instructions serve 16 rows at once (a zmm lane per row), which is what lets decode
// stream weights at memory speed. llama.cpp does the same at load (ggml-cpu "repack",
// q4_0_8x8 and friends).
//
// The layout is made once at load (LlamaModel, unless --no-repack) into anonymous memory; the
// model then drops the mmapped pages of the original tensor so peak RSS stays ~ file size.
// TensorView::packed points to it; TensorView::data stays valid (pages are re-read from the
// file if anything still reads them), so code that ignores `packed` is correct, only slower.
//
// Group g holds rows 16g .. 16g + 15 (the last group zero-padded), for nb blocks per row:
//   Q4_0:  per block, uint8 q[4][16][4]   chunk c, lane r = bytes 4c .. 4c + 3 of row r's
//                                         block qs: low nibbles are elements 4c .. 4c+3, high
//                                         16+4c .. 16+4c+3
//          fp16 d[16]
//   Q4_1:  q as Q4_0;  fp16 dm[2][16] (d then m)
//   Q8_0:  uint8 q[8][16][4]   chunk j = bytes 4j .. 4j + 3 of qs, stored as q + 128
//          fp16 d[16]
//   Q4_0 / Q4_1 / Q8_0 blocks go in pairs: the quants of blocks 2p and 2p + 1, then both
//          blocks' scales (one line; Q4_1: two); an odd last block: its quants, then its
//          scales (repack_kernels.h, Pairs32). One stream per group, as the K-quants below:
//          with all scales after all quants (the earlier layout) Q4_0 decode read 17-30%
//          slower on the Zen 5 host.
//   F16:   fp16 w[ne0][16]          column k of the 16 rows side by side (32 bytes per column)
// The K-quants keep each block's scales next to its quants as well (one stream per group: a
// second stream of scales read slower on the Zen 5 host, repack_avx512.cpp):
//   Q4_K:  per block, 2368 bytes (37 lines): uint8 q[4][8][16][4]  pair p, chunk c = bytes
//          32p + 4c .. of qs: low nibbles are sub-block 2p, high nibbles sub-block 2p + 1;
//          then its 320 bytes of scales: uint8 sc[8][16], uint8 mn[4][16][2] (sub-blocks 2p,
//          2p + 1 side by side per lane), fp16 d[16], fp16 dmin[16]
//   Q5_K:  per block, 2880 bytes (45 lines): uint8 qh[8][16][4] (chunk c = bytes 4c .. 4c + 3
//          of qh: bit j is the fifth bit of sub-block j), uint8 q[4][8][16][4] as Q4_K's, then
//          Q4_K's 320 bytes of scales (sc, mn, d, dmin)
//   Q6_K:  per block, quants: uint8 [16][3][16][4], triplet t = 8h + c (h = half, c < 8) =
//          bytes 64h + 4c .. + 3 of ql (elements 128h + 4c .. + 3 in the low nibbles, + 64 in
//          the high), bytes 64h + 32 + 4c .. of ql (+ 32, + 96) and bytes 32h + 4c .. of qh
//          (the four elements' top two bits at shifts 0, 2, 4, 6): 3072 bytes; scales: int8
//          sc[16][16], fp16 d[16]: 288 bytes. Blocks go in pairs, quants 2p, scales 2p, scales
//          2p + 1, quants 2p + 1 (6720 bytes = 105 lines, no padding; an odd last block:
//          quants, then scales)
// Same bytes as the file, +2.8% for Q4_K and +2.3% for Q5_K (expanded scales); Q6_K exactly
// the file's.
// Each group starts on a 64-byte boundary.
//
// Arithmetic (per row r and token; the AVX-512 kernels and their scalar twins do exactly this):
//   Q8_0, Q4_1: ggml-cpu's x86 vec_dot order, so results are bit-identical to quant::vec_dot
//     (and to llama.cpp, which runs that kernel for these types): per block, dd = f16(d_w) *
//     f16(d_a); for each group j of 4 elements acc_j = fma(dd, float(int dot of group j),
//     acc_j); the 8 accumulators are reduced as ggml's hsum_float_8 reduces its 8 lanes. Q4_1
//     adds the sum of fma(f16(m_w), f16(s_a)) over blocks.
//   Q8_0, Q4_1 with TensorView::block_sums ("block sums", serve's default): per block one
//     integer sum (Q8_0: started at -128 * the block's activation sum, so it is sum q x),
//     acc = fma(f16(d_w) * f16(d_a), float(sum), acc); Q4_1 also summ = fma(f16(m_w), f16(s_a),
//     summ), result acc + summ. Up to 4 tokens per call share each loaded block; each token's
//     operations are those of a call with it alone. Agrees with vec_dot up to float rounding.
//   Q4_0: per block, acc = fma(dd / 16, float(16 * int dot of the block), acc) (the high
//     nibbles are used in place, as 16 q): 8x fewer converts and
//     FMAs than ggml's order (llama.cpp repacks Q4_0 as well, so its batch-1 result is not
//     vec_dot's either); agrees with vec_dot up to float rounding.
//   Q4_K: per super-block, isum16 = 16 * sum_j sc_j * (int dot of sub-block j), msum = sum_j
//     mn_j * (activation sum of sub-block j); acc = fma(float(isum16), (f16(d_w) * d_a) / 16,
//     acc); acc = fma(float(msum), -(f16(dmin_w) * d_a), acc). Not ggml's order (llama.cpp repacks
//     Q4_K too), so it agrees with vec_dot up to float rounding.
//   Q5_K: as Q4_K with q = nibble + 16 * fifth bit (both nibbles moved to bits 0-3: 16 q + 256
//     would not fit a byte, so no /16): isum = sum_j sc_j * (int dot of sub-block j); acc =
//     fma(float(isum), f16(d_w) * d_a, acc); then the mins as Q4_K.
//   Q6_K: per super-block, total = sum_j sc_j * (int dot of sub-block j of 16 - 32 * its
//     activation sum) (exactly sum sc (q - 32) x, in int32); acc = fma(float(total), f16(d_w) *
//     d_a, acc). Q5_K and Q6_K use the same integer sums as vec_dot (ggml sums them into 8 float
//     lanes), so they agree up to float rounding (repack_test.cpp bounds the difference).
//   F16: the activation row (F16, as ggml converts it) widened to float; column k adds
//     fma(float(w[k][r]), x[k]) into accumulator k % 4, then (acc0 + acc1) + (acc2 + acc3).
//     The packed GEMM (gemm.h) reads this layout directly as its panels: no packing, and the
//     same bits as packing the file's rows (fp16 -> fp32 is exact).
#pragma once
#include <cstdint>

#include "core/tensor_view.h"
#include "core/thread_pool.h"

namespace hc::ops {

constexpr int kRepackRows = 16;

// Types with a decode layout.
bool repack_supports(GgmlType t);
// True when the SIMD decode kernel runs on this CPU (AVX-512 VNNI, honouring HOTCOLD_ISA).
bool repack_available(GgmlType t);

// Bytes of the layout of a [ne1 rows, ne0] matrix of type t (repack_supports(t)).
int64_t repack_bytes(GgmlType t, int64_t ne0, int64_t ne1);
// Bytes between consecutive groups (a multiple of 64).
int64_t repack_group_bytes(GgmlType t, int64_t ne0);
// Writes w's rows [g0 * 16, g1 * 16) (groups g0 .. g1 - 1) into the layout at dst (the whole
// layout's base, 64-byte aligned).
void repack_groups(const TensorView& w, int64_t g0, int64_t g1, uint8_t* dst);
// Reconstructs row r of a repacked weight in ggml's block format (row_bytes(type, ne0) bytes).
void repack_unpack_row(const TensorView& w, int64_t r, uint8_t* dst);

// y[t * w.ne1 + r] = W[r] . x[t] for t < n_tok, from the layout at w.packed; xq as matmul's
// quantised activation rows. Threads split the groups; each runs an L2-sized chunk of its
// groups for every token before the next chunk, so the weights are streamed once per call;
// Q4_0, the K-quants and block sums take 4 tokens per group call, each block unpacked once for
// them. Each (group, token) is computed as in a one-token call: every token's row is
// bit-identical to repack_matmul on that token alone. HC_CHECK: repack_available(w.type).
void repack_matmul(const TensorView& w, const uint8_t* xq, int64_t n_tok, float* y,
                   ThreadPool& pool);
// The scalar twin, one thread: bit-identical to repack_matmul.
void repack_matmul_ref(const TensorView& w, const uint8_t* xq, int64_t n_tok, float* y);

}  // namespace hc::ops
