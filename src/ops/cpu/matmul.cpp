#include "ops/cpu/matmul.h"

#include <algorithm>

#include "core/status.h"
#include "quant/quant.h"

namespace hc::ops {

namespace {

// Quantises activation rows to the weight's dot type as ggml-cpu does at run time (its
// from_float, not the weight quantiser); F32 weights use x as is.
const uint8_t* prepare_activations(GgmlType vt, const float* x, int64_t n_tok, int64_t ne0,
                                   ThreadPool& pool, MatmulScratch& s, bool ref) {
  if (vt == GgmlType::F32) return reinterpret_cast<const uint8_t*>(x);
  const int64_t rb = row_bytes(vt, ne0);
  if (s.xq.size() < static_cast<size_t>(rb * n_tok)) s.xq.resize(rb * n_tok);
  uint8_t* xq = s.xq.data();
  auto quantize_rows = [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      if (ref) quant::quantize_activations_ref(vt, x + t * ne0, xq + t * rb, ne0);
      else quant::quantize_activations(vt, x + t * ne0, xq + t * rb, ne0);
    }
  };
  if (n_tok == 1) {
    quantize_rows(0, 1);
  } else {
    pool.run([&](int ith, int nth) {
      int64_t b, e;
      ThreadPool::split(n_tok, ith, nth, &b, &e);
      quantize_rows(b, e);
    });
  }
  return xq;
}

}  // namespace

void matmul(const TensorView& w, const float* x, int64_t n_tok, float* y, ThreadPool& pool,
            MatmulScratch& scratch) {
  const GgmlType vt = quant::vec_dot_type(w.type);
  const int64_t ne0 = w.ne0, ne1 = w.ne1;
  const uint8_t* xq = prepare_activations(vt, x, n_tok, ne0, pool, scratch, false);
  const int64_t xrb = row_bytes(vt, ne0);
  // Tiles of weight rows x tokens keep a tile of W in L1/L2 while it meets every token.
  constexpr int64_t kRowTile = 16;
  constexpr int64_t kTokTile = 32;
  pool.run([&](int ith, int nth) {
    int64_t rb, re;
    ThreadPool::split(ne1, ith, nth, &rb, &re);
    for (int64_t r0 = rb; r0 < re; r0 += kRowTile) {
      const int64_t r1 = std::min(re, r0 + kRowTile);
      for (int64_t t0 = 0; t0 < n_tok; t0 += kTokTile) {
        const int64_t t1 = std::min(n_tok, t0 + kTokTile);
        for (int64_t r = r0; r < r1; ++r) {
          const uint8_t* wr = w.row(r);
          for (int64_t t = t0; t < t1; ++t)
            y[t * ne1 + r] = quant::vec_dot(w.type, ne0, wr, xq + t * xrb);
        }
      }
    }
  });
}

void matmul_ref(const TensorView& w, const float* x, int64_t n_tok, float* y) {
  ThreadPool single(1);
  MatmulScratch s;
  const GgmlType vt = quant::vec_dot_type(w.type);
  const uint8_t* xq = prepare_activations(vt, x, n_tok, w.ne0, single, s, true);
  const int64_t xrb = row_bytes(vt, w.ne0);
  for (int64_t t = 0; t < n_tok; ++t)
    for (int64_t r = 0; r < w.ne1; ++r)
      y[t * w.ne1 + r] = quant::vec_dot_ref(w.type, w.ne0, w.row(r), xq + t * xrb);
}

}  // namespace hc::ops
