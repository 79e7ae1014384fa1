// Helpers shared by the ops tests.
#pragma once
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/tensor_view.h"
#include "ops/cpu/repack.h"
#include "quant/quant.h"

namespace hc::ops_test {

// Every weight type the kernels support.
inline constexpr GgmlType kAllTypes[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16,
                                         GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1,
                                         GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q4_K,
                                         GgmlType::Q5_K, GgmlType::Q6_K};
// The weight types the devices' kernels compute with (ops::device_checks::device_weight_type):
// the host's minus Q5_0 / Q5_1.
inline constexpr GgmlType kDeviceTypes[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16,
                                            GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1,
                                            GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K};

// n normal(0, scale) floats from a seeded generator.
inline std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

inline bool is_k_quant(GgmlType t) {
  return t == GgmlType::Q4_K || t == GgmlType::Q5_K || t == GgmlType::Q6_K;
}

// Byte offsets of the fp16 scales (d, and dmin / m where the format has them) in one block.
inline std::vector<int> scale_offsets(GgmlType t) {
  switch (t) {
    case GgmlType::Q4_0: case GgmlType::Q8_0: return {0};
    case GgmlType::Q4_1: case GgmlType::Q4_K: case GgmlType::Q5_K: return {0, 2};
    case GgmlType::Q6_K: return {208};
    default: return {};
  }
}

// Random bytes for every quant and 6/8-bit scale (all bit patterns: Q6_K scales down to -128,
// 63 as Q4_K / Q5_K scales and mins, the extreme levels), with finite fp16 block scales between
// 1e-3 and 2e-2 (of either sign when signed_scales); F16 weights are random finite values.
inline void random_block_bytes(GgmlType t, uint8_t* row, int64_t cols, std::mt19937& rng,
                               bool signed_scales = false) {
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(1e-3f, 2e-2f);
  if (t == GgmlType::F16) {
    auto* h = reinterpret_cast<fp16_t*>(row);
    for (int64_t k = 0; k < cols; ++k) h[k] = fp32_to_fp16(scale(rng) * 50.0f * (byte(rng) < 128 ? -1 : 1));
    return;
  }
  const int64_t nb = cols / (is_k_quant(t) ? 256 : 32), bs = row_bytes(t, cols) / nb;
  for (int64_t i = 0; i < row_bytes(t, cols); ++i) row[i] = static_cast<uint8_t>(byte(rng));
  for (int64_t b = 0; b < nb; ++b)
    for (int off : scale_offsets(t)) {
      const float v = scale(rng) * (signed_scales && byte(rng) < 128 ? -1.0f : 1.0f);
      const fp16_t h = fp32_to_fp16(v);
      std::memcpy(row + b * bs + off, &h, 2);
    }
}

// A [rows, cols] weight of type t in ggml's layout (w) and in the decode layout (wp, 64-byte
// aligned as the model's): quantised random floats (lanes with very different scales, one
// all-zero row, one row of large values), or with raw, random_block_bytes.
struct RepackedWeights {
  std::vector<uint8_t> wbuf, packed;
  TensorView w, wp;

  RepackedWeights(GgmlType t, int64_t rows, int64_t cols, uint32_t seed, bool raw = false,
                  bool signed_scales = false) {
    const int64_t rb = row_bytes(t, cols);
    wbuf.resize(rb * rows);
    auto wf = randn(rows * cols, seed);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t k = 0; k < cols; ++k) wf[r * cols + k] *= (r % 5 == 3) ? 8.0f : (r == 1 ? 0.0f : 1.0f);
    std::mt19937 rng(seed);
    for (int64_t r = 0; r < rows; ++r) {
      if (raw) random_block_bytes(t, wbuf.data() + r * rb, cols, rng, signed_scales);
      else quant::quantize_row(t, wf.data() + r * cols, wbuf.data() + r * rb, cols);
    }
    w = TensorView::make(t, wbuf.data(), cols, rows);
    packed.resize(ops::repack_bytes(t, cols, rows) + 64);
    uint8_t* base = packed.data() + (64 - reinterpret_cast<uintptr_t>(packed.data()) % 64) % 64;
    ops::repack_groups(w, 0, (rows + ops::kRepackRows - 1) / ops::kRepackRows, base);
    wp = w;
    wp.packed = base;
  }
};

}  // namespace hc::ops_test
