// Packed GEMM: the SIMD kernels equal their scalar twins bit for bit, and both agree with the
// per-row reference matmul (same quantised activations; only float summation order differs),
// over every weight type, row tails (ne1 % 16), token tails (n_tok % tile), misaligned weight
// and activation buffers, and 1-3 threads. Panels packed straight from the decode layout (SIMD and
// scalar) are byte-identical to the row-by-row path, for quantised weights and random bytes.
#include <gtest/gtest.h>

#include "ops_test_util.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/thread_pool.h"
#include "ops/cpu/gemm.h"
#include "ops/cpu/gemm_kernels.h"
#include "ops/cpu/matmul.h"
#include "ops/cpu/repack.h"
#include "quant/quant.h"

namespace hc {
namespace {

using ops_test::is_k_quant;
using ops_test::randn;

constexpr const auto& kTypes = ops_test::kAllTypes;

struct Case {
  GgmlType t;
  int64_t rows, cols, n_tok;
};

// Weights (offset by `mis` bytes from an allocation, so only natural alignment holds) and the
// quantised activation rows matmul would use.
struct Fixture {
  std::vector<uint8_t> wbuf, xbuf;
  TensorView w;
  const uint8_t* xq = nullptr;
  std::vector<float> xf;

  Fixture(const Case& c, int mis, uint32_t seed) {
    const int64_t rb = row_bytes(c.t, c.cols);
    wbuf.resize(rb * c.rows + 64);
    // Misaligned, but by whole floats for F32 / Q8_K (they need 4-byte alignment, quant.h).
    const auto shift = [&](GgmlType t) { return mis && (t == GgmlType::F32 || t == GgmlType::Q8_K) ? 4 : mis; };
    uint8_t* wd = wbuf.data() + shift(c.t);
    auto wf = randn(c.rows * c.cols, seed);
    // Some rows much larger than others, and one all-zero row: scales differ per lane.
    for (int64_t r = 0; r < c.rows; ++r)
      for (int64_t k = 0; k < c.cols; ++k) wf[r * c.cols + k] *= (r % 5 == 3) ? 8.0f : (r == 1 ? 0.0f : 1.0f);
    for (int64_t r = 0; r < c.rows; ++r) quant::quantize_row(c.t, wf.data() + r * c.cols, wd + r * rb, c.cols);
    w = TensorView::make(c.t, wd, c.cols, c.rows);
    xf = randn(c.n_tok * c.cols, seed + 1);
    const GgmlType vt = quant::vec_dot_type(c.t);
    const int64_t xrb = row_bytes(vt, c.cols);
    xbuf.resize(xrb * c.n_tok + 64);
    uint8_t* xd = xbuf.data() + (vt == GgmlType::F32 ? 0 : shift(vt));
    for (int64_t t = 0; t < c.n_tok; ++t)
      quant::quantize_activations(vt, xf.data() + t * c.cols, xd + t * xrb, c.cols);
    xq = vt == GgmlType::F32 ? reinterpret_cast<const uint8_t*>(xf.data()) : xd;
  }
};

std::vector<Case> cases() {
  std::vector<Case> out;
  for (GgmlType t : kTypes)
    for (int64_t rows : {1, 16, 21, 70})
      for (int64_t n_tok : {1, 8, 12, 13, 29})
        out.push_back({t, rows, t == GgmlType::F32 ? 1056 : 768, n_tok});  // 1056: two float chunks + tail
  return out;
}

// |y - ref| bound: the summation-order error of a dot of length n with terms |w x|.
float tol(const TensorView& w, const std::vector<float>& y_ref, int64_t i) {
  return 1e-4f * std::sqrt(static_cast<float>(w.ne0)) * (1.0f + std::fabs(y_ref[i]));
}

TEST(Gemm, ScalarTwinAgreesWithPerRowReference) {
  for (const Case& c : cases()) {
    Fixture f(c, 2, 11);
    std::vector<float> y(c.n_tok * c.rows), yr(c.n_tok * c.rows);
    ops::gemm_ref(f.w, f.xq, c.n_tok, y.data());
    ops::matmul_ref(f.w, f.xf.data(), c.n_tok, yr.data());
    for (int64_t i = 0; i < c.n_tok * c.rows; ++i)
      ASSERT_NEAR(y[i], yr[i], tol(f.w, yr, i))
          << dtype_name(c.t) << " rows " << c.rows << " n_tok " << c.n_tok << " at " << i;
  }
}

TEST(Gemm, SimdKernelsBitIdenticalToScalarTwin) {
  if (!ops::gemm_available(GgmlType::Q8_0)) GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
  for (const Case& c : cases()) {
    for (int mis : {0, 2}) {
      Fixture f(c, mis, 21);
      std::vector<float> yr(c.n_tok * c.rows);
      ops::gemm_ref(f.w, f.xq, c.n_tok, yr.data());
      for (int nth : {1, 2, 3}) {
        ThreadPool pool(nth);
        std::vector<float> y(c.n_tok * c.rows, NAN);
        ops::gemm(f.w, f.xq, c.n_tok, y.data(), pool);
        ASSERT_EQ(0, std::memcmp(y.data(), yr.data(), y.size() * sizeof(float)))
            << dtype_name(c.t) << " rows " << c.rows << " n_tok " << c.n_tok << " threads " << nth
            << " misaligned " << mis;
      }
    }
  }
}

TEST(Gemm, F32ActSimdBitIdenticalToScalarTwin) {
  // The attention's float GEMM (fp32 activations, explicit strides): the AVX-512 or AVX2 kernel
  // (HOTCOLD_ISA=avx2 picks the latter on an AVX-512 CPU: the avx2.* tests) against the scalar
  // twin, over row tails, token tails past each kernel's tile (6 and 12), chunks of k and
  // masked row strides.
  if (!ops::gemm_f32_act_simd_available()) GTEST_SKIP() << "no AVX2 or AVX-512 on this CPU";
  for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16}) {
    for (int64_t rows : {1, 7, 16, 21, 40}) {
      for (int64_t k : {int64_t{64}, int64_t{1056}}) {
        for (int64_t n_tok : {1, 5, 6, 7, 12, 13, 29}) {
          const int64_t ldw = k + 8, ldx = k + 3, ldy = rows + 5;
          const auto wf = randn(rows * ldw, 31 + static_cast<uint32_t>(rows + k));
          std::vector<uint8_t> wbuf(row_bytes(t, ldw) * rows);
          for (int64_t r = 0; r < rows; ++r)
            quant::quantize_row(t, wf.data() + r * ldw, wbuf.data() + r * row_bytes(t, ldw), ldw);
          const TensorView w{t, wbuf.data(), k, rows, row_bytes(t, ldw)};
          const auto x = randn(n_tok * ldx, 7 + static_cast<uint32_t>(n_tok));
          std::vector<float> y(n_tok * ldy, -3.0f), yr(y);
          ops::gemm_f32_act(w, x.data(), ldx, n_tok, y.data(), ldy, /*simd=*/true);
          ops::gemm_f32_act(w, x.data(), ldx, n_tok, yr.data(), ldy, /*simd=*/false);
          ASSERT_EQ(0, std::memcmp(y.data(), yr.data(), y.size() * sizeof(float)))
              << dtype_name(t) << " rows " << rows << " k " << k << " n_tok " << n_tok;
        }
      }
    }
  }
}

// matmul() takes the GEMM from kGemmMinTokens on: its output for a batch equals gemm()'s, and a
// 7-token batch (per-row path) still matches the reference.
TEST(Gemm, MatmulRoutesBatchesThroughGemm) {
  if (!ops::gemm_available(GgmlType::Q4_0)) GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
  ThreadPool pool(2);
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::F16}) {
    for (int64_t n_tok : {ops::kGemmMinTokens - 1, ops::kGemmMinTokens, int64_t{40}}) {
      Fixture f({t, 33, 512, n_tok}, 0, 5);
      std::vector<float> a(n_tok * 33), b(n_tok * 33), r(n_tok * 33);
      ops::MatmulInput in;
      ops::matmul(f.w, f.xf.data(), n_tok, a.data(), pool, in);
      ops::matmul_ref(f.w, f.xf.data(), n_tok, r.data());
      for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], r[i], tol(f.w, r, i));
      if (n_tok >= ops::kGemmMinTokens) {
        ops::gemm(f.w, f.xq, n_tok, b.data(), pool);
        EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
      }
    }
  }
}

// ---- Packing from the decode layout.

const GgmlType kIntTypes[] = {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1,
                              GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K};

// A [rows, cols] weight of type t in ggml's layout (w) and in the decode layout (wp, 64-byte
// aligned as the model's), with activations for n_tok tokens; raw weights have block scales of
// either sign.
struct RepackedFixture : ops_test::RepackedWeights {
  std::vector<uint8_t> xbuf;
  const uint8_t* xq = nullptr;

  RepackedFixture(GgmlType t, int64_t rows, int64_t cols, int64_t n_tok, bool raw, uint32_t seed)
      : RepackedWeights(t, rows, cols, seed, raw, /*signed_scales=*/true) {
    const GgmlType vt = quant::vec_dot_type(t);
    const int64_t xrb = row_bytes(vt, cols);
    xbuf.resize(xrb * n_tok);
    const auto xf = randn(n_tok * cols, seed + 1);
    for (int64_t i = 0; i < n_tok; ++i)
      quant::quantize_activations(vt, xf.data() + i * cols, xbuf.data() + i * xrb, cols);
    xq = xbuf.data();
  }
};

std::vector<int64_t> pack_cols(GgmlType t) {
  if (is_k_quant(t)) return {256, 768, 4096};
  return {32, 352, 768, 4096};
}

// Every panel of the matrix, packed by pack_group (scalar twin and, where it runs, AVX-512)
// from the decode layout, equals the row-by-row path's bytes (from the layout and from ggml's
// rows), tail group included; panels not starting on a group (not made by gemm) fall back.
TEST(GemmPack, DecodeLayoutPanelsByteIdenticalToRowByRow) {
  using namespace ops::gemm_detail;
  std::vector<std::pair<const char*, const Kernels*>> packers = {{"scalar", &scalar_kernels()}};
  if (ops::gemm_available(GgmlType::Q8_0)) packers.push_back({"avx512", &avx512_kernels()});
  for (GgmlType t : kIntTypes) {
    for (int64_t cols : pack_cols(t)) {
      const int64_t pb = int_panel_bytes(t, cols);
      std::vector<uint8_t> ref(pb), plain(pb), got(pb + 4);
      for (int64_t rows : {1, 16, 21, 70}) {
        for (bool raw : {false, true}) {
          RepackedFixture f(t, rows, cols, 1, raw, static_cast<uint32_t>(7 * rows + cols + raw));
          for (int64_t r0 = 0; r0 < rows; r0 += kLanes) {
            const int nrows = static_cast<int>(std::min<int64_t>(kLanes, rows - r0));
            std::memset(ref.data(), 0xAA, pb);
            std::memset(plain.data(), 0x55, pb);
            pack_int_panel_rows(f.wp, r0, nrows, ref.data());
            pack_int_panel_rows(f.w, r0, nrows, plain.data());
            ASSERT_EQ(0, std::memcmp(ref.data(), plain.data(), pb)) << dtype_name(t);
            for (const auto& [name, kern] : packers) {
              for (int mis : {0, 4}) {  // panels are 64-byte multiples apart in an unaligned buffer
                std::memset(got.data(), 0xAA + mis, got.size());
                pack_int_panel(f.wp, r0, nrows, got.data() + mis, *kern);
                ASSERT_EQ(0, std::memcmp(ref.data(), got.data() + mis, pb))
                    << name << " " << dtype_name(t) << " cols " << cols << " rows " << rows
                    << " group " << r0 / kLanes << " raw " << raw << " misaligned " << mis;
              }
            }
          }
          if (rows > 5) {  // a panel starting mid-group: the row-by-row path
            const int nrows = static_cast<int>(std::min<int64_t>(kLanes, rows - 5));
            std::memset(ref.data(), 0xAA, pb);
            std::memset(got.data(), 0x55, got.size());
            pack_int_panel_rows(f.wp, 5, nrows, ref.data());
            pack_int_panel(f.wp, 5, nrows, got.data(), *packers.back().second);
            ASSERT_EQ(0, std::memcmp(ref.data(), got.data(), pb)) << dtype_name(t);
          }
        }
      }
    }
  }
}

// gemm() and gemm_ref() on the repacked view (panels from the decode layout) give the same bits
// as on the plain view (panels from ggml's rows).
TEST(GemmPack, RepackedViewBitIdenticalToPlainView) {
  for (GgmlType t : kIntTypes) {
    const int64_t cols = is_k_quant(t) ? 512 : 352;
    for (int64_t rows : {1, 16, 21, 70}) {
      for (bool raw : {false, true}) {
        const int64_t n_tok = 13;
        RepackedFixture f(t, rows, cols, n_tok, raw, static_cast<uint32_t>(3 * rows + raw));
        std::vector<float> a(n_tok * rows, NAN), b(n_tok * rows, NAN);
        ops::gemm_ref(f.w, f.xq, n_tok, a.data());
        ops::gemm_ref(f.wp, f.xq, n_tok, b.data());
        ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)))
            << "gemm_ref " << dtype_name(t) << " rows " << rows << " raw " << raw;
        if (!ops::gemm_available(t)) continue;
        for (int nth : {1, 2, 3}) {
          ThreadPool pool(nth);
          std::vector<float> c(n_tok * rows, NAN), d(n_tok * rows, NAN);
          ops::gemm(f.w, f.xq, n_tok, c.data(), pool);
          ops::gemm(f.wp, f.xq, n_tok, d.data(), pool);
          ASSERT_EQ(0, std::memcmp(c.data(), d.data(), c.size() * sizeof(float)))
              << "gemm " << dtype_name(t) << " rows " << rows << " raw " << raw << " threads "
              << nth;
          ASSERT_EQ(0, std::memcmp(a.data(), d.data(), a.size() * sizeof(float)))
              << "gemm vs gemm_ref " << dtype_name(t) << " rows " << rows << " raw " << raw;
        }
      }
    }
  }
}

}  // namespace
}  // namespace hc
