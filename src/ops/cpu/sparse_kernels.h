// Internal to the sparse operators (sparse.cpp, sparse_avx512.cpp and their tests).
#pragma once
#include <cstdint>

#include "core/dtype.h"
#include "core/tensor_view.h"
#include "core/thread_pool.h"

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
// AVX2 kernels (sparse_avx2.cpp): call only on a CPU with AVX2, FMA and F16C.
const Kernels& avx2_kernels();
// What sparse_down uses on this CPU: the AVX-512 kernels, else AVX2, else none (the scalar twin),
// as quant::isa_name() says.
const Kernels* simd_kernels();
// sparse_down (sparse.h) with the given kernels (null: the scalar twin's arithmetic); the
// tests run every table the CPU supports.
void sparse_down_with(const Kernels* simd, const TensorView& dt, const int32_t* idx,
                      int64_t n_idx, const float* h, int64_t n_tok, float* out, ThreadPool& pool);

}  // namespace hc::ops::sparse_detail
