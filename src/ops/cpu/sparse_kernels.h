// Internal to the sparse operators (sparse.cpp, sparse_avx512.cpp and their tests).
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace hc::ops::sparse_detail {

// out[i] = fma(h, w[i], out[i]) for i < n, w = the n weights at `blocks` (whole blocks of the
// type) dequantised exactly as quant::dequantize_row_ref does.
using AxpyFn = void (*)(const uint8_t* blocks, float h, float* out, int64_t n);
// out[i] = fma(h, w[i], out[i]) over floats.
using FmaRowFn = void (*)(const float* w, float h, float* out, int64_t n);

// Outputs [off_elems, off_elems + kTile) of one token: out[i] = sum over j in order of
// fma(h[j], w(idx[j], i), .) from 0, each row of dt at base + idx[j] * nb1, tile starting
// `off` bytes into the row (a block boundary).
constexpr int64_t kTile = 256;
using TileFn = void (*)(const uint8_t* base, int64_t nb1, int64_t off, const int32_t* idx,
                        int64_t n_idx, const float* h, float* out);

constexpr int kTypeSlots = 40;  // GgmlType ids are below this

struct Kernels {
  AxpyFn axpy[kTypeSlots] = {};  // by type id; null: dequantise the slice, then fma_row
  TileFn tile[kTypeSlots] = {};  // by type id; null: axpy per neuron
  FmaRowFn fma_row = nullptr;
};

// AVX-512 kernels (sparse_avx512.cpp): call only on an AVX-512 CPU.
const Kernels& avx512_kernels();

}  // namespace hc::ops::sparse_detail
