#include "ops/cpu/sparse.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/status.h"
#include "ops/cpu/repack.h"
#include "ops/cpu/sparse_kernels.h"
#include "quant/quant.h"

namespace hc::ops {

using namespace sparse_detail;

const Kernels* sparse_detail::simd_kernels() {
  static const Kernels* k = std::strcmp(quant::isa_name(), "avx512") == 0 ? &avx512_kernels()
                            : std::strcmp(quant::isa_name(), "avx2") == 0 ? &avx2_kernels()
                                                                          : nullptr;
  return k;
}

namespace {

int64_t block_size(GgmlType t) { return dtype_traits(t).block_size; }

// Output columns are split between threads in units of whole blocks, at least 64 columns.
int64_t split_unit(GgmlType t) { return std::max<int64_t>(64, block_size(t)); }

// Columns [c0, c1) of the output for every token, on one thread. ref: reference dequantisation
// and scalar fma (the twin); otherwise the SIMD kernels. Both run per output column the
// sequence acc = fma(h_j, w, acc), j = 0 .. n_idx - 1, from acc = 0.
void down_slice(const TensorView& dt, const int32_t* idx, int64_t n_idx, const float* h,
                int64_t n_tok, float* out, int64_t c0, int64_t c1, const Kernels* simd,
                std::vector<float>& tmp) {
  const int64_t n = c1 - c0, n_out = dt.ne0;
  const int64_t off = row_bytes(dt.type, c0);  // c0 is a block boundary
  for (int64_t t = 0; t < n_tok; ++t) std::fill(out + t * n_out + c0, out + t * n_out + c1, 0.0f);
  const AxpyFn axpy = simd ? simd->axpy[static_cast<uint32_t>(dt.type)] : nullptr;
  const TileFn tile = simd ? simd->tile[static_cast<uint32_t>(dt.type)] : nullptr;
  if (n_tok == 1 && axpy) {  // decode: dequantise and accumulate in one pass
    int64_t c = c0;
    if (tile) {  // whole tiles of outputs in registers over every neuron
      const auto* base = static_cast<const uint8_t*>(dt.data);
      for (; c + kTile <= c1; c += kTile)
        tile(base, dt.nb1, row_bytes(dt.type, c), idx, n_idx, h, out + c);
    }
    if (c < c1) {
      const int64_t o = row_bytes(dt.type, c);
      const int64_t nbytes = row_bytes(dt.type, c1 - c);
      for (int64_t j = 0; j < n_idx; ++j) {
        if (j + 4 < n_idx) {
          const auto* pf = reinterpret_cast<const char*>(dt.row(idx[j + 4]) + o);
          for (int64_t b = 0; b < nbytes; b += 64) __builtin_prefetch(pf + b, 0, 2);  // into L2
        }
        axpy(dt.row(idx[j]) + o, h[j], out + c, c1 - c);
      }
    }
    return;
  }
  if (static_cast<int64_t>(tmp.size()) < n) tmp.resize(n);
  for (int64_t j = 0; j < n_idx; ++j) {
    const uint8_t* src = dt.row(idx[j]) + off;
    if (simd) quant::dequantize_row(dt.type, src, tmp.data(), n);  // same bytes as _ref
    else quant::dequantize_row_ref(dt.type, src, tmp.data(), n);
    for (int64_t t = 0; t < n_tok; ++t) {
      const float hj = h[t * n_idx + j];
      float* o = out + t * n_out + c0;
      if (simd) {
        simd->fma_row(tmp.data(), hj, o, n);
      } else {
        for (int64_t i = 0; i < n; ++i) o[i] = std::fma(hj, tmp[i], o[i]);
      }
    }
  }
}

void check_down(const TensorView& dt, const int32_t* idx, int64_t n_idx) {
  HC_CHECK(quant::is_supported_weight_type(dt.type));
  for (int64_t j = 0; j < n_idx; ++j) HC_CHECK(idx[j] >= 0 && idx[j] < dt.ne1);
}

}  // namespace

void sparse_rows(const TensorView& w, MatmulInput& in, const int32_t* idx, int64_t n_idx,
                 float* y, ThreadPool& pool) {
  HC_CHECK(in.ne0() == w.ne0 && quant::is_supported_weight_type(w.type));
  const GgmlType vt = quant::vec_dot_type(w.type);
  const uint8_t* xq = in.quantized(vt, pool);
  const quant::VecDotFn dot = quant::vec_dot_fn(w.type);
  const quant::VecDot4RowsFn dot4 = w.packed ? nullptr : quant::vec_dot4_rows_fn(w.type);
  const int64_t ne0 = w.ne0, n_tok = in.n_tok(), xrb = row_bytes(vt, ne0);
  const int64_t rb = row_bytes(w.type, ne0);
  for (int64_t j = 0; j < n_idx; ++j) HC_CHECK(idx[j] >= 0 && idx[j] < w.ne1);
  pool.run([&](int ith, int nth) {
    thread_local std::vector<uint8_t> unpacked;  // a row of a repacked weight, rebuilt
    int64_t b, e;
    ThreadPool::split(n_idx, ith, nth, &b, &e);
    for (int64_t j = b; j < e;) {
      // Rows 4 to 7 neurons ahead are requested into L2 now: a firing set's rows are
      // scattered, so the hardware prefetchers only catch up within each row (hc-ffn-bench,
      // 90% sparsity: into L2 beat L1 and L3).
      if (!w.packed) {
        for (int64_t k = j + 4; k < std::min(e, j + 8); ++k) {
          const auto* next = reinterpret_cast<const char*>(w.row(idx[k]));
          for (int64_t o = 0; o < rb; o += 64) __builtin_prefetch(next + o, 0, 2);
        }
      }
      if (dot4 && j + 4 <= e) {  // four rows per call: ggml's four-row kernel, same bits
        const void* rows[4] = {w.row(idx[j]), w.row(idx[j + 1]), w.row(idx[j + 2]), w.row(idx[j + 3])};
        for (int64_t t = 0; t < n_tok; ++t) {
          float o[4];
          dot4(ne0, rows, xq + t * xrb, o);
          for (int k = 0; k < 4; ++k) y[t * n_idx + j + k] = o[k];
        }
        j += 4;
        continue;
      }
      const uint8_t* row = w.row(idx[j]);
      if (w.packed) {  // the file's pages are dropped: read the decode layout
        unpacked.resize(static_cast<size_t>(rb));
        repack_unpack_row(w, idx[j], unpacked.data());
        row = unpacked.data();
      }
      for (int64_t t = 0; t < n_tok; ++t) y[t * n_idx + j] = dot(ne0, row, xq + t * xrb);
      ++j;
    }
  });
}

bool round_h_by_value(GgmlType dt, float* h, int64_t n) {
  const GgmlType vt = quant::vec_dot_type(dt);
  if (vt == GgmlType::F16) {
    for (int64_t i = 0; i < n; ++i) h[i] = fp16_to_fp32(fp32_to_fp16(h[i]));
    return true;
  }
  if (vt == GgmlType::BF16) {
    for (int64_t i = 0; i < n; ++i) h[i] = bf16_to_fp32(fp32_to_bf16(h[i]));
    return true;
  }
  return false;
}

void sparse_down(const TensorView& dt, const int32_t* idx, int64_t n_idx, const float* h,
                 int64_t n_tok, float* out, ThreadPool& pool) {
  sparse_down_with(simd_kernels(), dt, idx, n_idx, h, n_tok, out, pool);
}

void sparse_detail::sparse_down_with(const Kernels* simd, const TensorView& dt, const int32_t* idx,
                                     int64_t n_idx, const float* h, int64_t n_tok, float* out,
                                     ThreadPool& pool) {
  check_down(dt, idx, n_idx);
  HC_CHECK(dt.packed == nullptr);
  const int64_t unit = split_unit(dt.type);
  const int64_t n_units = (dt.ne0 + unit - 1) / unit;
  pool.run([&](int ith, int nth) {
    thread_local std::vector<float> tmp;
    int64_t b, e;
    ThreadPool::split(n_units, ith, nth, &b, &e);
    if (b < e)
      down_slice(dt, idx, n_idx, h, n_tok, out, b * unit, std::min(dt.ne0, e * unit), simd, tmp);
  });
}

void sparse_down_ref(const TensorView& dt, const int32_t* idx, int64_t n_idx, const float* h,
                     int64_t n_tok, float* out) {
  check_down(dt, idx, n_idx);
  std::vector<float> tmp;
  down_slice(dt, idx, n_idx, h, n_tok, out, 0, dt.ne0, nullptr, tmp);
}

GgmlType down_t_type(GgmlType down_type) {
  switch (down_type) {
    case GgmlType::F32: case GgmlType::F16: case GgmlType::BF16: return down_type;
    default: return GgmlType::Q8_0;
  }
}

int64_t transpose_bytes(GgmlType t, const TensorView& w) { return row_bytes(t, w.ne1) * w.ne0; }

void transpose_weights(const TensorView& w, GgmlType t, uint8_t* dst) {
  HC_CHECK(quant::is_supported_weight_type(w.type) && quant::is_supported_weight_type(t));
  HC_CHECK(w.ne1 % block_size(t) == 0 && w.packed == nullptr);
  constexpr int64_t kChunk = 256;  // a multiple of every block size
  const int64_t rb = row_bytes(t, w.ne1);
  std::vector<float> tmp(static_cast<size_t>(w.ne1 * kChunk)), col(static_cast<size_t>(w.ne1));
  for (int64_t c0 = 0; c0 < w.ne0; c0 += kChunk) {
    const int64_t nc = std::min(kChunk, w.ne0 - c0);
    for (int64_t r = 0; r < w.ne1; ++r)
      quant::dequantize_row(w.type, w.row(r) + row_bytes(w.type, c0), tmp.data() + r * kChunk, nc);
    for (int64_t c = 0; c < nc; ++c) {
      for (int64_t r = 0; r < w.ne1; ++r) col[r] = tmp[r * kChunk + c];
      quant::quantize_row(t, col.data(), dst + (c0 + c) * rb, w.ne1);
    }
  }
}

}  // namespace hc::ops
