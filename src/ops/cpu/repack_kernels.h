// Internal to the decode layout (repack.cpp, repack_avx512.cpp and their tests): the group
// kernels' signature. Layouts and arithmetic are described in repack.h.
#pragma once
#include <cstdint>

namespace hc::ops::repack_detail {

// One token's activations, prepared once per matmul call and token.
struct Act {
  const int8_t* q = nullptr;       // block 0's qs in the quantised activation row
  int64_t block_bytes = 0;         // bytes between consecutive blocks' qs
  const float* d = nullptr;        // [nb] activation scale per block
  const float* s = nullptr;        // [nb] Q4_1 only: f16(s) of each Q8_1 block
  const int32_t* corr = nullptr;   // [nb][8]: Q4_0 / Q8_0: -offset * sum of each group of 4
                                   // activation levels; Q4_K: [nb][4] the sums of sub-blocks
                                   // 2p and 2p + 1 as int16 pairs (low word first)
  const int32_t* corr_sum = nullptr;  // [nb] Q4_0: -8 * sum of the block's activation levels
  const float* xf = nullptr;       // [ne0] F16: the activation row (F16) widened to float
};

// One group of 16 rows: out[r] for r < 16 (padding rows included).
using GroupKernelFn = void (*)(const uint8_t* group, int64_t nb, const Act& a, float* out);

struct Kernels {
  GroupKernelFn q4_0 = nullptr, q4_1 = nullptr, q8_0 = nullptr, q4_K = nullptr, f16 = nullptr;
};

// The F16 group kernel (nb = ne0: one "block" per column); defined in repack_f16_avx512.cpp.
void f16_group_avx512(const uint8_t* group, int64_t nb, const Act& a, float* out);

// Defined in repack_avx512.cpp; call only on an AVX-512 VNNI CPU.
const Kernels& avx512_kernels();
// Scalar twins, defined in repack.cpp.
const Kernels& scalar_kernels();

// Quant bytes per block of one group (the scales follow all of them), and scale bytes per block.
constexpr int64_t kQ4Chunk = 4 * 64, kQ8Chunk = 8 * 64, kQ4KChunk = 32 * 64;
constexpr int64_t kQ4KScaleBytes = 8 * 16 + 8 * 16 + 32 + 32;
constexpr int64_t kF16Col = 16 * 2;  // F16: bytes per column of one group (16 fp16 values)

}  // namespace hc::ops::repack_detail
