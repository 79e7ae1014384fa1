// Decode layout (ops/cpu/repack.h): the layout round-trips to ggml's blocks; the scalar group
// kernels are bit-identical to ggml's x86 dot product for Q4_1 / Q8_0 and agree with the
// reference matmul for Q4_0 / Q4_K; the AVX-512 kernels equal their scalar twins bit for bit over
// row tails, misaligned activations, several tokens and 1-3 threads; and matmul / gemm /
// get_row read the layout when a view carries it, with the same results as without it.
#include <gtest/gtest.h>

#include "ops_test_util.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/thread_pool.h"
#include "ops/cpu/gemm.h"
#include "ops/cpu/matmul.h"
#include "ops/cpu/ops.h"
#include "ops/cpu/repack.h"
#include "quant/quant.h"
#include "quant/ref.h"

namespace hc {
namespace {

using ops_test::randn;

const GgmlType kTypes[] = {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0, GgmlType::Q4_K,
                           GgmlType::F16};

// Weights in ggml's layout and in the decode layout, and quantised activations for n_tok
// tokens (offset by `mis` bytes: blocks only naturally aligned).
struct Fixture {
  std::vector<uint8_t> wbuf, xbuf;
  std::vector<uint8_t> packed;
  TensorView w, wp;  // plain and packed views of the same matrix
  const uint8_t* xq = nullptr;
  std::vector<float> xf;

  Fixture(GgmlType t, int64_t rows, int64_t cols, int64_t n_tok, int mis, uint32_t seed) {
    const int64_t rb = row_bytes(t, cols);
    wbuf.resize(rb * rows);
    auto wf = randn(rows * cols, seed);
    // Lanes with very different scales, one all-zero row, one row of large values.
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t k = 0; k < cols; ++k) wf[r * cols + k] *= (r % 5 == 3) ? 8.0f : (r == 1 ? 0.0f : 1.0f);
    for (int64_t r = 0; r < rows; ++r) quant::quantize_row(t, wf.data() + r * cols, wbuf.data() + r * rb, cols);
    w = TensorView::make(t, wbuf.data(), cols, rows);
    packed.resize(ops::repack_bytes(t, cols, rows) + 64);
    uint8_t* base = packed.data() + (64 - reinterpret_cast<uintptr_t>(packed.data()) % 64) % 64;
    ops::repack_groups(w, 0, (rows + ops::kRepackRows - 1) / ops::kRepackRows, base);
    wp = w;
    wp.packed = base;
    xf = randn(n_tok * cols, seed + 1);
    const GgmlType vt = quant::vec_dot_type(t);
    const int64_t xrb = row_bytes(vt, cols);
    xbuf.resize(xrb * n_tok + 64);
    // Misaligned, but by whole floats for Q8_K (it needs 4-byte alignment, quant.h).
    uint8_t* xd = xbuf.data() + (mis && vt == GgmlType::Q8_K ? 4 : mis);
    for (int64_t i = 0; i < n_tok; ++i)
      quant::quantize_activations(vt, xf.data() + i * cols, xd + i * xrb, cols);
    xq = xd;
  }
};

int64_t cols_for(GgmlType t) { return t == GgmlType::Q4_K ? 768 : 352; }  // 352: 11 blocks

TEST(Repack, LayoutRoundTripsToGgmlBlocks) {
  for (GgmlType t : kTypes) {
    for (int64_t rows : {1, 16, 21, 70}) {
      Fixture f(t, rows, cols_for(t), 1, 0, 3);
      std::vector<uint8_t> row(row_bytes(t, f.w.ne0));
      for (int64_t r = 0; r < rows; ++r) {
        ops::repack_unpack_row(f.wp, r, row.data());
        ASSERT_EQ(0, std::memcmp(row.data(), f.w.row(r), row.size()))
            << dtype_name(t) << " rows " << rows << " row " << r;
      }
    }
  }
}

TEST(Repack, ScalarKernelsMatchGgmlOrderAndReference) {
  for (GgmlType t : kTypes) {
    for (int64_t rows : {16, 21}) {
      const int64_t n_tok = 3;
      Fixture f(t, rows, cols_for(t), n_tok, 2, 7);
      std::vector<float> y(n_tok * rows), yr(n_tok * rows);
      ops::repack_matmul_ref(f.wp, f.xq, n_tok, y.data());
      ops::matmul_ref(f.w, f.xf.data(), n_tok, yr.data());
      const int64_t xrb = row_bytes(quant::vec_dot_type(t), f.w.ne0);
      for (int64_t i = 0; i < n_tok; ++i) {
        for (int64_t r = 0; r < rows; ++r) {
          const float got = y[i * rows + r];
          const void* a = f.xq + i * xrb;
          // The 32-element types keep ggml-cpu's x86 order exactly (what llama.cpp runs).
          float want = NAN;
          if (t == GgmlType::Q4_1) want = quant::ref::x86::vec_dot_q4_1_q8_1(f.w.ne0, f.w.row(r), a);
          if (t == GgmlType::Q8_0) want = quant::ref::x86::vec_dot_q8_0_q8_0(f.w.ne0, f.w.row(r), a);
          if (t == GgmlType::Q4_1 || t == GgmlType::Q8_0) {
            uint32_t gb, wb;
            std::memcpy(&gb, &got, 4);
            std::memcpy(&wb, &want, 4);
            ASSERT_EQ(gb, wb) << dtype_name(t) << " token " << i << " row " << r << ": " << got << " vs " << want;
          }
          const float ref = yr[i * rows + r];
          ASSERT_NEAR(got, ref, 1e-4f * std::sqrt(float(f.w.ne0)) * (1.0f + std::fabs(ref)))
              << dtype_name(t) << " token " << i << " row " << r;
        }
      }
    }
  }
}

TEST(Repack, SimdKernelsBitIdenticalToScalarTwin) {
  if (!ops::repack_available(GgmlType::Q4_0)) GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
  for (GgmlType t : kTypes) {
    for (int64_t rows : {16, 21, 70}) {
      for (int64_t n_tok : {1, 3, 7}) {
        for (int mis : {0, 2}) {
          Fixture f(t, rows, t == GgmlType::Q4_K ? 1024 : 1056, n_tok, mis, 17);
          std::vector<float> yr(n_tok * rows);
          ops::repack_matmul_ref(f.wp, f.xq, n_tok, yr.data());
          for (int nth : {1, 2, 3}) {
            ThreadPool pool(nth);
            std::vector<float> y(n_tok * rows, NAN);
            ops::repack_matmul(f.wp, f.xq, n_tok, y.data(), pool);
            ASSERT_EQ(0, std::memcmp(y.data(), yr.data(), y.size() * sizeof(float)))
                << dtype_name(t) << " rows " << rows << " n_tok " << n_tok << " threads " << nth
                << " misaligned " << mis;
          }
        }
      }
    }
  }
}

// A view carrying the layout: matmul's small batches run the decode kernels, its large batches
// pack the GEMM panels from the layout (same panels, so the same bits as the plain view), and
// get_row dequantises the same row.
TEST(Repack, MatmulGemmAndGetRowReadTheLayout) {
  if (!ops::repack_available(GgmlType::Q4_0)) GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
  ThreadPool pool(2);
  for (GgmlType t : kTypes) {
    for (int64_t n_tok : {int64_t{1}, int64_t{5}, ops::kGemmMinTokens, int64_t{20}}) {
      Fixture f(t, 37, 512, n_tok, 0, 29);
      std::vector<float> a(n_tok * 37), b(n_tok * 37, NAN);
      ops::MatmulInput in;
      ops::matmul(f.wp, f.xf.data(), n_tok, a.data(), pool, in);
      if (n_tok >= ops::kGemmMinTokens) {
        ops::matmul(f.w, f.xf.data(), n_tok, b.data(), pool, in);
      } else {
        ops::repack_matmul_ref(f.wp, f.xq, n_tok, b.data());
      }
      ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)))
          << dtype_name(t) << " n_tok " << n_tok;
    }
    Fixture f(t, 37, 512, 1, 0, 31);
    std::vector<float> r1(512), r2(512);
    for (int64_t r : {0, 15, 16, 36}) {
      ops::get_row(f.w, r, r1.data());
      ops::get_row(f.wp, r, r2.data());
      ASSERT_EQ(0, std::memcmp(r1.data(), r2.data(), r1.size() * sizeof(float))) << dtype_name(t);
    }
  }
}

}  // namespace
}  // namespace hc
