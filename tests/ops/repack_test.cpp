// Decode layout (ops/cpu/repack.h): the layout round-trips to ggml's blocks (quantised rows and
// arbitrary bytes); the scalar group kernels are bit-identical to ggml's x86 dot product for
// Q4_1 / Q8_0, agree with the reference matmul for the others, and with quant::vec_dot (the same
// integer sums, another float order) within a bound derived from the float roundings for Q4_0 /
// Q4_K / Q5_K / Q6_K; the AVX-512 kernels equal their scalar twins bit for bit over row tails,
// misaligned activations, 1-17 tokens, 1-3 threads and every bit pattern of the quants and
// scales (with several tokens the Q4_0 / K-quant kernels take up to 4 tokens per call, and their
// scalar twin is the single-token one, token by token: so every token's row is the one-token
// call's); and matmul / gemm / get_row read the layout when a view carries it, with the same
// results as without it.
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

using ops_test::is_k_quant;
using ops_test::randn;

const GgmlType kTypes[] = {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0, GgmlType::Q4_K,
                           GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::F16};

// Weights in ggml's layout and in the decode layout, and quantised activations for n_tok
// tokens (offset by `mis` bytes: blocks only naturally aligned).
struct Fixture : ops_test::RepackedWeights {  // w, wp: plain and packed views of one matrix
  std::vector<uint8_t> xbuf;
  const uint8_t* xq = nullptr;
  std::vector<float> xf;

  // raw: weights of random bytes (random_block_bytes) instead of quantised random floats.
  Fixture(GgmlType t, int64_t rows, int64_t cols, int64_t n_tok, int mis, uint32_t seed,
          bool raw = false)
      : RepackedWeights(t, rows, cols, seed, raw) {
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

int64_t cols_for(GgmlType t) { return is_k_quant(t) ? 768 : 352; }  // 352: 11 blocks

TEST(Repack, LayoutRoundTripsToGgmlBlocks) {
  for (GgmlType t : kTypes) {
    for (bool raw : {false, true}) {
      for (int64_t rows : {1, 16, 21, 70}) {
        Fixture f(t, rows, cols_for(t), 1, 0, 3, raw);
        std::vector<uint8_t> row(row_bytes(t, f.w.ne0));
        for (int64_t r = 0; r < rows; ++r) {
          ops::repack_unpack_row(f.wp, r, row.data());
          ASSERT_EQ(0, std::memcmp(row.data(), f.w.row(r), row.size()))
              << dtype_name(t) << " rows " << rows << " row " << r << " raw " << raw;
        }
      }
    }
  }
}

// Q4_0 / Q4_K / Q5_K / Q6_K sum in their own order: per block (super-block for the K-quants) the
// integer sums of ggml's vec_dot, exactly, scaled once: acc = fma(float(isum), f16(d_w) * d_x,
// acc) (Q4_K / Q5_K add a second FMA for the mins). ggml's vec_dot rounds the same products
// into 8 float lanes (plus a scalar for the mins) reduced at the end. Both are sums of n terms
// with per-term errors of a few u (convert, scale product): by the recursive-summation bound
// each is within (n + 2) u A of the exact value, n = the terms it adds (blocks, twice for the
// mins; ggml: + 8 for its lane reduction), A = sum over elements of |d sc q x| + |dmin m x|
// (both paths' partial sums are bounded by it). Their distance is therefore at most
// (2 n_terms + 12) u A with n_terms = 2 nb; a single wrong element moves the result by ~A / ne0.
TEST(Repack, OwnOrderAgreesWithVecDotWithinRoundingBound) {
  constexpr float kU = 0x1p-24f;
  // Q4_1 / Q8_0: their block sums (TensorView::block_sums); the others' only order.
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K,
                     GgmlType::Q4_1, GgmlType::Q8_0}) {
    for (bool raw : {false, true}) {
      const int64_t rows = 21, n_tok = 3, cols = is_k_quant(t) ? 2048 : 1056;
      Fixture f(t, rows, cols, n_tok, 0, 41, raw);
      TensorView wp = f.wp;
      wp.block_sums = true;
      std::vector<float> y(n_tok * rows);
      ops::repack_matmul_ref(wp, f.xq, n_tok, y.data());
      const int64_t nb = cols / (is_k_quant(t) ? 256 : 32);
      const GgmlType vt = quant::vec_dot_type(t);
      const int64_t xrb = row_bytes(vt, cols), rb = row_bytes(t, cols), bs = rb / nb;
      // d at bytes 0-1, the min's scale (dmin / m) at 2-3 of every block.
      const bool has_min = t == GgmlType::Q4_K || t == GgmlType::Q5_K || t == GgmlType::Q4_1;
      std::vector<float> x(cols), wd(cols), wm(cols);
      std::vector<uint8_t> part(rb);
      for (int64_t i = 0; i < n_tok; ++i) {
        const uint8_t* xq = f.xq + i * xrb;
        quant::dequantize_row(vt, xq, x.data(), cols);
        for (int64_t r = 0; r < rows; ++r) {
          // |d sc q| and |dmin m| per element: the row dequantised with dmin = 0, then d = 0.
          std::memcpy(part.data(), f.w.row(r), rb);
          for (int64_t b = 0; b < nb && has_min; ++b) std::memset(part.data() + b * bs + 2, 0, 2);
          quant::dequantize_row(t, part.data(), wd.data(), cols);
          std::fill(wm.begin(), wm.end(), 0.0f);
          if (has_min) {
            std::memcpy(part.data(), f.w.row(r), rb);
            for (int64_t b = 0; b < nb; ++b) std::memset(part.data() + b * bs, 0, 2);
            quant::dequantize_row(t, part.data(), wm.data(), cols);
          }
          double a = 0;
          for (int64_t k = 0; k < cols; ++k)
            a += (std::fabs(double(wd[k])) + std::fabs(double(wm[k]))) * std::fabs(double(x[k]));
          const float want = quant::vec_dot(t, cols, f.w.row(r), xq);
          const float got = y[i * rows + r];
          const double bound = (2.0 * 2 * nb + 12) * kU * a * (1 + 4 * kU) + 1e-30;
          ASSERT_LE(std::fabs(double(got) - double(want)), bound)
              << dtype_name(t) << " raw " << raw << " token " << i << " row " << r << ": " << got
              << " vs " << want;
        }
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
      // 16, 17: a whole tile of tokens and one past it (repack.cpp's kTokenTile).
      for (int64_t n_tok : {1, 2, 3, 7, 16, 17}) {
        for (int mis : {0, 2}) {
          const bool raw = n_tok % 2 == 0;  // every bit pattern of quants and scales
          Fixture f(t, rows, is_k_quant(t) ? 1024 : 1056, n_tok, mis, 17, raw);
          for (bool bs : {false, true}) {  // block sums: Q4_1 / Q8_0 only, the rest ignore it
            TensorView wp = f.wp;
            wp.block_sums = bs;
            std::vector<float> yr(n_tok * rows);
            ops::repack_matmul_ref(wp, f.xq, n_tok, yr.data());
            for (int nth : {1, 2, 3}) {
              ThreadPool pool(nth);
              std::vector<float> y(n_tok * rows, NAN);
              ops::repack_matmul(wp, f.xq, n_tok, y.data(), pool);
              ASSERT_EQ(0, std::memcmp(y.data(), yr.data(), y.size() * sizeof(float)))
                  << dtype_name(t) << " rows " << rows << " n_tok " << n_tok << " threads "
                  << nth << " misaligned " << mis << " raw " << raw << " block sums " << bs;
            }
          }
        }
      }
    }
  }
}

// Block sums (Q4_1 / Q8_0): 4 tokens per call share each unpacked block, yet every token's
// row equals a call with that token alone, bit for bit, in the SIMD kernels and the scalar twin,
// through matmul in both modes; and the order is really another one than ggml's (some results
// differ from the default kernels', which the serve tests rely on being switchable).
TEST(Repack, BlockSumsAreBatchInvariant) {
  for (GgmlType t : {GgmlType::Q4_1, GgmlType::Q8_0}) {
    const int64_t rows = 37, n_tok = 11;  // 11 = two passes of 4 tokens and one of 3
    Fixture f(t, rows, 1056, n_tok, 0, 23);
    TensorView wp = f.wp;
    wp.block_sums = true;
    const int64_t xrb = row_bytes(quant::vec_dot_type(t), f.w.ne0);
    const bool simd = ops::repack_available(t);
    ThreadPool pool(2);
    std::vector<float> all(n_tok * rows), all_ref(n_tok * rows), exact(n_tok * rows);
    ops::repack_matmul_ref(wp, f.xq, n_tok, all_ref.data());
    ops::repack_matmul_ref(f.wp, f.xq, n_tok, exact.data());
    if (simd) ops::repack_matmul(wp, f.xq, n_tok, all.data(), pool);
    int differ = 0;
    for (int64_t i = 0; i < n_tok; ++i) {
      std::vector<float> one(rows);
      ops::repack_matmul_ref(wp, f.xq + i * xrb, 1, one.data());
      ASSERT_EQ(0, std::memcmp(one.data(), all_ref.data() + i * rows, rows * sizeof(float)))
          << dtype_name(t) << " scalar twin, token " << i;
      if (simd) {
        ops::repack_matmul(wp, f.xq + i * xrb, 1, one.data(), pool);
        ASSERT_EQ(0, std::memcmp(one.data(), all.data() + i * rows, rows * sizeof(float)))
            << dtype_name(t) << " SIMD, token " << i;
      }
      for (int64_t r = 0; r < rows; ++r) differ += all_ref[i * rows + r] != exact[i * rows + r];
    }
    EXPECT_GT(differ, 0) << dtype_name(t) << ": block sums gave ggml's order's bits everywhere";
    if (!simd) continue;
    // matmul: kPerToken rows and kAuto batches below kGemmMinTokens run these kernels.
    for (ops::MatmulMode mode : {ops::MatmulMode::kPerToken, ops::MatmulMode::kAuto}) {
      const int64_t n = mode == ops::MatmulMode::kAuto ? ops::kGemmMinTokens - 1 : n_tok;
      ops::MatmulInput in;
      in.set_mode(mode);
      in.reset(f.xf.data(), n, f.w.ne0);
      std::vector<float> y(n * rows);
      ops::matmul(wp, in, y.data(), pool);
      ASSERT_EQ(0, std::memcmp(y.data(), all.data(), y.size() * sizeof(float))) << dtype_name(t);
    }
  }
}

// A view carrying the layout: matmul's small batches (below kGemmMinTokens; up to
// repack_batch_max for the K-quants) run the decode kernels, its large batches pack the GEMM
// panels from the layout (same panels, so the same bits as the plain view), and get_row
// dequantises the same row.
TEST(Repack, MatmulGemmAndGetRowReadTheLayout) {
  if (!ops::repack_available(GgmlType::Q4_0)) GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
  ThreadPool pool(2);
  for (GgmlType t : kTypes) {
    for (int64_t n_tok : {int64_t{1}, int64_t{5}, ops::kGemmMinTokens, int64_t{20},
                          ops::kRepackKQuantMaxTokens, ops::kRepackKQuantMaxTokens + 1}) {
      Fixture f(t, 37, 512, n_tok, 0, 29);
      std::vector<float> a(n_tok * 37), b(n_tok * 37, NAN);
      ops::MatmulInput in;
      ops::matmul(f.wp, f.xf.data(), n_tok, a.data(), pool, in);
      const bool gemm = n_tok >= ops::kGemmMinTokens &&
                        n_tok > ops::repack_batch_max(t);
      if (gemm) {
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
