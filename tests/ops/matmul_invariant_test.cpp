// Batch invariance of matmul (ops/cpu/matmul.h): in MatmulMode::kPerToken every token row of a
// batch equals, bit for bit, a one-token call on that row, for every weight type, with and
// without the decode layout (repack.h), across the GEMM threshold, the repack kernels' chunks of
// groups and tiles of tokens, and thread counts. The default mode still sends large batches to
// the packed GEMM.
#include <gtest/gtest.h>

#include "ops_test_util.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/thread_pool.h"
#include "ops/cpu/gemm.h"
#include "ops/cpu/matmul.h"
#include "ops/cpu/repack.h"
#include "quant/quant.h"

namespace hc {
namespace {

using ops_test::randn;

constexpr const auto& kTypes = ops_test::kAllTypes;

// A [rows, cols] weight in ggml's layout, plus its decode layout when the type has one.
struct Weights {
  std::vector<uint8_t> buf, packed;
  TensorView w, wp;  // plain view; view carrying the layout (== w without one)

  Weights(GgmlType t, int64_t rows, int64_t cols, uint32_t seed) {
    const int64_t rb = row_bytes(t, cols);
    buf.resize(rb * rows);
    const auto wf = randn(rows * cols, seed);
    for (int64_t r = 0; r < rows; ++r)
      quant::quantize_row(t, wf.data() + r * cols, buf.data() + r * rb, cols);
    w = TensorView::make(t, buf.data(), cols, rows);
    wp = w;
    if (!ops::repack_supports(t)) return;
    packed.resize(ops::repack_bytes(t, cols, rows) + 64);
    uint8_t* base = packed.data() + (64 - reinterpret_cast<uintptr_t>(packed.data()) % 64) % 64;
    ops::repack_groups(w, 0, (rows + ops::kRepackRows - 1) / ops::kRepackRows, base);
    wp.packed = base;
  }
};

// Shapes: a row tail with small groups, and wide rows whose groups (F16: 128 KiB each) make the
// decode kernels run several chunks of groups per thread.
struct Shape {
  int64_t rows, cols;
};
const Shape kShapes[] = {{37, 512}, {100, 4096}};

TEST(MatmulInvariant, PerTokenModeEqualsOneTokenCalls) {
  for (GgmlType t : kTypes) {
    for (const Shape& sh : kShapes) {
      const Weights wt(t, sh.rows, sh.cols, 11);
      for (bool repacked : {false, true}) {
        if (repacked && !wt.wp.packed) continue;
        const TensorView& w = repacked ? wt.wp : wt.w;
        for (int nth : {1, 2, 3}) {
          ThreadPool pool(nth);
          for (int64_t n_tok : {1, 2, 7, 8, 9, 33}) {
            const auto x = randn(n_tok * sh.cols, 100 + static_cast<uint32_t>(n_tok));
            std::vector<float> y(n_tok * sh.rows, NAN), y1(sh.rows, NAN);
            ops::MatmulInput batch, one;
            batch.set_mode(ops::MatmulMode::kPerToken);
            ops::matmul(w, x.data(), n_tok, y.data(), pool, batch);
            ASSERT_EQ(batch.mode(), ops::MatmulMode::kPerToken);  // survives reset()
            for (int64_t i = 0; i < n_tok; ++i) {
              ops::matmul(w, x.data() + i * sh.cols, 1, y1.data(), pool, one);
              const float* row = y.data() + i * sh.rows;
              ASSERT_EQ(0, std::memcmp(row, y1.data(), y1.size() * sizeof(float)))
                  << dtype_name(t) << " " << sh.rows << "x" << sh.cols << " repacked " << repacked
                  << " threads " << nth << " n_tok " << n_tok << " token " << i;
            }
          }
        }
      }
    }
  }
}

// The mode is the object's: MatmulInput::reset (the one-off overload above) keeps it, and
// kAuto, the default, still runs batches of kGemmMinTokens or more through the packed GEMM.
TEST(MatmulInvariant, DefaultModeStillUsesTheGemm) {
  ThreadPool pool(2);
  for (GgmlType t : kTypes) {
    if (!ops::gemm_available(t)) continue;  // no AVX-512 VNNI, or HOTCOLD_ISA below it
    const Weights wt(t, 37, 512, 13);
    const int64_t n_tok = ops::kGemmMinTokens + 1;
    const auto x = randn(n_tok * 512, 7);
    ops::MatmulInput in;
    EXPECT_EQ(in.mode(), ops::MatmulMode::kAuto);
    std::vector<float> a(n_tok * 37), b(n_tok * 37);
    ops::matmul(wt.w, x.data(), n_tok, a.data(), pool, in);
    in.reset(x.data(), n_tok, 512);
    const uint8_t* xq = in.quantized(quant::vec_dot_type(t), pool);
    ops::gemm(wt.w, xq, n_tok, b.data(), pool);
    ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << dtype_name(t);
  }
}

}  // namespace
}  // namespace hc
