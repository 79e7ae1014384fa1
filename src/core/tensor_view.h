// Non-owning typed 2-D matrix view, used alike for weights (mmapped), activations and caches.
// Rows are contiguous: ne0 elements of `type` per row, `nb1` bytes between rows.
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace hc {

struct TensorView {
  GgmlType type = GgmlType::F32;
  const void* data = nullptr;
  int64_t ne0 = 0;  // elements per row (contiguous)
  int64_t ne1 = 1;  // rows
  int64_t nb1 = 0;  // bytes between rows
  // Weights only: the same matrix in the decode layout of ops/cpu/repack.h, or null. `data`
  // stays valid either way; kernels that know the layout read this instead.
  const void* packed = nullptr;
  // With `packed` only: Q4_1 / Q8_0 products in block sums (ops/cpu/repack.h) instead of
  // ggml's order; the model's LoadOptions::block_sums sets it. Other types ignore it.
  bool block_sums = false;

  static TensorView make(GgmlType t, const void* d, int64_t ne0, int64_t ne1) {
    return {t, d, ne0, ne1, row_bytes(t, ne0), nullptr};
  }
  const uint8_t* row(int64_t i) const { return static_cast<const uint8_t*>(data) + i * nb1; }
  bool empty() const { return data == nullptr; }
};

// Bytes of n rows of t as stored (what a kernel reads for them); 0 for an absent matrix.
inline uint64_t rows_bytes(const TensorView& t, int64_t n) {
  return t.empty() || n <= 0 ? 0 : static_cast<uint64_t>(t.nb1) * static_cast<uint64_t>(n);
}

}  // namespace hc
