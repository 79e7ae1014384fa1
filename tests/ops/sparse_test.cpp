// Sparse FFN operators (ops/cpu/sparse.h), every weight type, odd sizes, 1-3 threads:
//   - sparse_rows gives the dense matmul's bits for the selected rows;
//   - the SIMD sparse_down is bit-identical to its scalar twin and independent of threads;
//   - property: the sparse FFN (gate/up over the firing set, down as a sum of the selected rows
//     of the transposed down matrix) equals the dense FFN with the unselected neurons zeroed;
//   - transpose_weights is exact for float types and within quantisation error otherwise.
#include <gtest/gtest.h>

#include "ops_test_util.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "core/thread_pool.h"
#include "ops/cpu/matmul.h"
#include "ops/cpu/sparse.h"
#include "ops/cpu/sparse_kernels.h"
#include "quant/quant.h"

namespace hc {
namespace {

constexpr const auto& kTypes = ops_test::kAllTypes;

using ops_test::randn;

// A random [rows, cols] matrix of type t (owning its bytes).
struct Matrix {
  std::vector<uint8_t> bytes;
  TensorView view;
  Matrix(GgmlType t, int64_t rows, int64_t cols, uint32_t seed) {
    const int64_t rb = row_bytes(t, cols);
    bytes.resize(static_cast<size_t>(rb * rows));
    const auto f = randn(static_cast<size_t>(rows * cols), seed, 0.5f);
    for (int64_t r = 0; r < rows; ++r) quant::quantize_row(t, f.data() + r * cols, bytes.data() + r * rb, cols);
    view = TensorView::make(t, bytes.data(), cols, rows);
  }
};

// Odd sizes that are still whole blocks of the type.
int64_t odd_len(GgmlType t, int64_t blocks_or_elems) {
  const int64_t bs = dtype_traits(t).block_size;
  return bs == 1 ? blocks_or_elems : blocks_or_elems * bs;
}

// A random firing set of about `share` of n neurons, in random order.
std::vector<int32_t> firing_set(int64_t n, double share, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  std::shuffle(idx.begin(), idx.end(), rng);
  idx.resize(static_cast<size_t>(std::max<int64_t>(1, static_cast<int64_t>(share * n))));
  return idx;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(Sparse, RowsGiveTheDenseMatmulBitsForTheSelectedRows) {
  for (GgmlType t : kTypes) {
    const int64_t rows = 53, cols = odd_len(t, t == GgmlType::Q4_K || t == GgmlType::Q5_K || t == GgmlType::Q6_K ? 3 : 7);
    Matrix w(t, rows, cols, 11);
    for (int64_t n_tok : {1, 3}) {
      const auto x = randn(static_cast<size_t>(n_tok * cols), 12);
      std::vector<float> dense(static_cast<size_t>(n_tok * rows));
      ThreadPool one(1);
      ops::MatmulInput din;
      ops::matmul(w.view, x.data(), n_tok, dense.data(), one, din);
      // A random set (with a repeated index, computed twice identically), a run of consecutive
      // neurons and an evenly spaced set (both take the four-row kernel where the type has one).
      std::vector<std::vector<int32_t>> sets = {firing_set(rows, 0.3, 13), {}, {}};
      sets[0].push_back(sets[0][0]);
      for (int32_t i = 5; i < 40; ++i) sets[1].push_back(i);
      for (int32_t i = 1; i < rows; i += 3) sets[2].push_back(i);
      for (const auto& idx : sets)
      for (int nth : {1, 2, 3}) {
        ThreadPool pool(nth);
        ops::MatmulInput in;
        in.reset(x.data(), n_tok, cols);
        std::vector<float> y(static_cast<size_t>(n_tok * idx.size()), NAN);
        ops::sparse_rows(w.view, in, idx.data(), static_cast<int64_t>(idx.size()), y.data(), pool);
        for (int64_t tk = 0; tk < n_tok; ++tk) {
          for (size_t j = 0; j < idx.size(); ++j) {
            const float got = y[tk * idx.size() + j], want = dense[tk * rows + idx[j]];
            ASSERT_EQ(0, std::memcmp(&got, &want, 4))
                << dtype_name(t) << " token " << tk << " neuron " << idx[j] << " threads " << nth
                << ": " << got << " vs " << want;
          }
        }
      }
    }
  }
}

// The sparse down kernels this CPU can run, by name.
std::vector<std::pair<const char*, const ops::sparse_detail::Kernels*>> down_kernel_tables() {
  std::vector<std::pair<const char*, const ops::sparse_detail::Kernels*>> t;
  const std::string isa = quant::isa_name();
  if (isa == "avx512") t.emplace_back("avx512", &ops::sparse_detail::avx512_kernels());
  if (isa == "avx512" || isa == "avx2") t.emplace_back("avx2", &ops::sparse_detail::avx2_kernels());
  return t;
}

TEST(Sparse, DownSimdBitIdenticalToScalarTwinAtAnyThreadCount) {
  if (down_kernel_tables().empty()) GTEST_SKIP() << "no SIMD kernels on this CPU";
  for (GgmlType t : kTypes) {
    const int64_t n_ff = 75;
    // Short rows, rows of one 256-output register tile plus a tail, rows of several tiles.
    const bool f = dtype_traits(t).block_size == 1;
    for (int64_t n_out : {odd_len(t, 3), odd_len(t, 9), f ? int64_t{600} : odd_len(t, 17)}) {
      if (f) n_out += 13;  // float rows: a tail under 16 lanes
      Matrix dt(t, n_ff, n_out, 21);
      for (int64_t n_tok : {1, 2, 5}) {
        const auto idx = firing_set(n_ff, 0.2, 22 + static_cast<uint32_t>(n_tok));
        const int64_t n_idx = static_cast<int64_t>(idx.size());
        const auto h = randn(static_cast<size_t>(n_tok * n_idx), 23);
        std::vector<float> ref(static_cast<size_t>(n_tok * n_out));
        ops::sparse_down_ref(dt.view, idx.data(), n_idx, h.data(), n_tok, ref.data());
        for (int nth : {1, 2, 3}) {
          ThreadPool pool(nth);
          std::vector<float> out(ref.size(), NAN);
          ops::sparse_down(dt.view, idx.data(), n_idx, h.data(), n_tok, out.data(), pool);
          ASSERT_TRUE(same_bits(out, ref)) << dtype_name(t) << " n_out " << n_out << " n_tok "
                                           << n_tok << " threads " << nth;
          // Every kernel table this CPU runs (an AVX-512 CPU runs the AVX2 kernels too).
          for (const auto& [isa, k] : down_kernel_tables()) {
            std::fill(out.begin(), out.end(), NAN);
            ops::sparse_detail::sparse_down_with(k, dt.view, idx.data(), n_idx, h.data(), n_tok,
                                                 out.data(), pool);
            ASSERT_TRUE(same_bits(out, ref)) << isa << " " << dtype_name(t) << " n_out " << n_out
                                             << " n_tok " << n_tok << " threads " << nth;
          }
        }
      }
    }
  }
}

// The property: for random weights and random firing sets, the sparse FFN equals the dense FFN
// (same weights: the dense down matrix is the transpose of the sparse one) with every
// unselected neuron's activation set to zero. Gate and up are bit-identical (sparse_rows); the
// down sums differ from the dense matmul only in summation order.
TEST(Sparse, FfnEqualsDenseFfnWithUnselectedNeuronsZeroed) {
  for (GgmlType t : kTypes) {
    const bool k_quant = t == GgmlType::Q4_K || t == GgmlType::Q5_K || t == GgmlType::Q6_K;
    const int64_t n_embd = odd_len(t, k_quant ? 1 : 5), n_ff = odd_len(t, k_quant ? 3 : 11);
    Matrix gate(t, n_ff, n_embd, 31), up(t, n_ff, n_embd, 32), down_t(t, n_ff, n_embd, 33);
    // The dense down matrix [n_embd, n_ff]: the exact transpose of down_t's values.
    std::vector<float> dt_f(static_cast<size_t>(n_ff * n_embd)), down_f(dt_f.size());
    for (int64_t i = 0; i < n_ff; ++i) quant::dequantize_row(t, down_t.view.row(i), dt_f.data() + i * n_embd, n_embd);
    for (int64_t i = 0; i < n_ff; ++i)
      for (int64_t r = 0; r < n_embd; ++r) down_f[r * n_ff + i] = dt_f[i * n_embd + r];
    const TensorView down = TensorView::make(GgmlType::F32, down_f.data(), n_ff, n_embd);
    for (double share : {0.05, 0.5, 1.0}) {
      for (int nth : {1, 2}) {
        ThreadPool pool(nth);
        const int64_t n_tok = 1;
        const auto x = randn(static_cast<size_t>(n_embd), 34);
        // Dense: every neuron, then zero the unselected ones.
        std::vector<float> g(n_ff), u(n_ff), h(n_ff, 0.0f), dense(n_embd);
        ops::MatmulInput in;
        in.reset(x.data(), n_tok, n_embd);
        ops::matmul(gate.view, in, g.data(), pool);
        ops::matmul(up.view, in, u.data(), pool);
        const auto idx = firing_set(n_ff, share, 35);
        for (int32_t i : idx) h[i] = std::max(g[i], 0.0f) * u[i];
        ops::MatmulInput din;
        ops::matmul(down, h.data(), n_tok, dense.data(), pool, din);
        // Sparse: only the selected neurons.
        const int64_t n_idx = static_cast<int64_t>(idx.size());
        std::vector<float> gs(n_idx), us(n_idx), hs(n_idx), sparse(n_embd);
        ops::sparse_rows(gate.view, in, idx.data(), n_idx, gs.data(), pool);
        ops::sparse_rows(up.view, in, idx.data(), n_idx, us.data(), pool);
        for (int64_t j = 0; j < n_idx; ++j) {
          ASSERT_EQ(gs[j], g[idx[j]]);
          ASSERT_EQ(us[j], u[idx[j]]);
          hs[j] = std::max(gs[j], 0.0f) * us[j];
        }
        ops::sparse_down(down_t.view, idx.data(), n_idx, hs.data(), n_tok, sparse.data(), pool);
        double scale = 0;
        for (int64_t j = 0; j < n_idx; ++j) scale += std::fabs(hs[j]);
        for (int64_t r = 0; r < n_embd; ++r)
          ASSERT_NEAR(sparse[r], dense[r], 1e-5 * (1.0 + scale))
              << dtype_name(t) << " share " << share << " threads " << nth << " output " << r;
      }
    }
  }
}

TEST(Sparse, TransposeIsExactForFloatTypesAndWithinQuantisationErrorOtherwise) {
  for (GgmlType t : kTypes) {
    const int64_t rows = odd_len(t, t == GgmlType::Q4_K || t == GgmlType::Q5_K || t == GgmlType::Q6_K ? 1 : 3);
    const int64_t cols = 40;  // not a multiple of the transpose's column chunk
    const GgmlType src_t = GgmlType::F32;
    Matrix w(src_t, rows, cols, 41);
    std::vector<uint8_t> dst(static_cast<size_t>(ops::transpose_bytes(t, w.view)));
    ops::transpose_weights(w.view, t, dst.data());
    const TensorView wt = TensorView::make(t, dst.data(), rows, cols);
    std::vector<float> row(static_cast<size_t>(rows));
    for (int64_t c = 0; c < cols; ++c) {
      quant::dequantize_row(t, wt.row(c), row.data(), rows);
      for (int64_t r = 0; r < rows; ++r) {
        const float want = reinterpret_cast<const float*>(w.view.row(r))[c];
        if (t == GgmlType::F32) {
          ASSERT_EQ(row[r], want);
        } else {
          const float tol = t == GgmlType::F16 ? 1e-3f : t == GgmlType::BF16 ? 8e-3f : t == GgmlType::Q8_0 ? 0.02f : 0.35f;
          ASSERT_NEAR(row[r], want, tol * (1.0f + std::fabs(want))) << dtype_name(t) << " " << r << "," << c;
        }
      }
    }
  }
}

}  // namespace
}  // namespace hc
