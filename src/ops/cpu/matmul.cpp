#include "ops/cpu/matmul.h"

#include <algorithm>

#include "core/status.h"
#include "ops/cpu/gemm.h"
#include "ops/cpu/repack.h"
#include "quant/quant.h"

namespace hc::ops {

namespace {

// Quantises activation rows to a dot type as ggml-cpu does at run time (its from_float, not the
// weight quantiser), splitting tokens across threads for a batch.
void quantize_rows(GgmlType vt, const float* x, int64_t n_tok, int64_t ne0, uint8_t* xq,
                   ThreadPool& pool, bool ref) {
  const int64_t rb = row_bytes(vt, ne0);
  auto rows = [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      if (ref) quant::quantize_activations_ref(vt, x + t * ne0, xq + t * rb, ne0);
      else quant::quantize_activations(vt, x + t * ne0, xq + t * rb, ne0);
    }
  };
  if (n_tok == 1) {
    rows(0, 1);
    return;
  }
  pool.run([&](int ith, int nth) {
    int64_t b, e;
    ThreadPool::split(n_tok, ith, nth, &b, &e);
    rows(b, e);
  });
}

}  // namespace

void MatmulInput::reset(const float* x, int64_t n_tok, int64_t ne0) {
  x_ = x;
  n_tok_ = n_tok;
  ne0_ = ne0;
  for (Slot& s : slots_) s.valid = false;
}

const uint8_t* MatmulInput::quantized(GgmlType vt, ThreadPool& pool) {
  if (vt == GgmlType::F32) return reinterpret_cast<const uint8_t*>(x_);
  Slot* slot = nullptr;
  for (Slot& s : slots_) {
    if (s.vt == vt) slot = &s;
  }
  if (!slot) {
    slots_.push_back({vt, false, {}});
    slot = &slots_.back();
  }
  if (!slot->valid) {
    const size_t bytes = static_cast<size_t>(row_bytes(vt, ne0_) * n_tok_);
    if (slot->rows.size() < bytes) slot->rows.resize(bytes);
    quantize_rows(vt, x_, n_tok_, ne0_, slot->rows.data(), pool, /*ref=*/false);
    slot->valid = true;
  }
  return slot->rows.data();
}

int64_t repack_batch_max(GgmlType t) {
  const bool k_quant = t == GgmlType::Q4_K || t == GgmlType::Q5_K || t == GgmlType::Q6_K;
  return k_quant ? kRepackKQuantMaxTokens : 0;
}

namespace {

// y = x W^T for n_tok quantised rows xq, as one kAuto batch (batch_rules) or per token.
void matmul_rows(const TensorView& w, const uint8_t* xq, int64_t n_tok, float* y,
                 ThreadPool& pool, bool batch_rules) {
  const GgmlType vt = quant::vec_dot_type(w.type);
  if (batch_rules && n_tok >= kGemmMinTokens && gemm_available(w.type) &&
      !(w.packed && repack_available(w.type) && n_tok <= repack_batch_max(w.type))) {
    gemm(w, xq, n_tok, y, pool);  // prompt batches: packed GEMM
    return;
  }
  if (w.packed && repack_available(w.type)) {
    repack_matmul(w, xq, n_tok, y, pool);  // decode: 16 rows per SIMD pass
    return;
  }
  // Per-row dot products: which kernel a row uses (dot4 or dot) depends on the thread's row
  // range, never on n_tok, so every token row gets a one-token call's bits (kPerToken).
  const quant::VecDotFn dot = quant::vec_dot_fn(w.type);  // resolved once, not per row
  const quant::VecDot4Fn dot4 = quant::vec_dot4_fn(w.type);
  const int64_t ne0 = w.ne0, ne1 = w.ne1;
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
        int64_t r = r0;
        if (dot4) {  // four rows per call: independent chains, activations loaded once
          for (; r + 4 <= r1; r += 4) {
            for (int64_t t = t0; t < t1; ++t) {
              float o[4];
              dot4(ne0, w.row(r), w.nb1, xq + t * xrb, o);
              for (int j = 0; j < 4; ++j) y[t * ne1 + r + j] = o[j];
            }
          }
        }
        for (; r < r1; ++r) {
          const uint8_t* wr = w.row(r);
          for (int64_t t = t0; t < t1; ++t) y[t * ne1 + r] = dot(ne0, wr, xq + t * xrb);
        }
      }
    }
  });
}

}  // namespace

void matmul(const TensorView& w, MatmulInput& in, float* y, ThreadPool& pool) {
  HC_CHECK(in.ne0() == w.ne0);
  const GgmlType vt = quant::vec_dot_type(w.type);
  const uint8_t* xq = in.quantized(vt, pool);
  const int64_t n_tok = in.n_tok();
  const int64_t n_auto =
      in.mode() == MatmulMode::kAuto ? std::min(n_tok, std::max<int64_t>(in.auto_rows(), 0)) : 0;
  if (n_auto > 0) matmul_rows(w, xq, n_auto, y, pool, /*batch_rules=*/true);
  // The rest one token at a time; the weights the first part just read are still in cache
  // when the matrix fits it (a 135M model's largest, 1 MiB).
  if (n_tok > n_auto)
    matmul_rows(w, xq + n_auto * row_bytes(vt, w.ne0), n_tok - n_auto, y + n_auto * w.ne1, pool,
                /*batch_rules=*/false);
}

void matmul(const TensorView& w, const float* x, int64_t n_tok, float* y, ThreadPool& pool,
            MatmulInput& scratch) {
  scratch.reset(x, n_tok, w.ne0);
  matmul(w, scratch, y, pool);
}

void matmul_ref(const TensorView& w, const float* x, int64_t n_tok, float* y) {
  ThreadPool single(1);
  const GgmlType vt = quant::vec_dot_type(w.type);
  std::vector<uint8_t> rows;
  const uint8_t* xq = reinterpret_cast<const uint8_t*>(x);
  if (vt != GgmlType::F32) {
    rows.resize(static_cast<size_t>(row_bytes(vt, w.ne0) * n_tok));
    quantize_rows(vt, x, n_tok, w.ne0, rows.data(), single, /*ref=*/true);
    xq = rows.data();
  }
  const int64_t xrb = row_bytes(vt, w.ne0);
  for (int64_t t = 0; t < n_tok; ++t)
    for (int64_t r = 0; r < w.ne1; ++r)
      y[t * w.ne1 + r] = quant::vec_dot_ref(w.type, w.ne0, w.row(r), xq + t * xrb);
}

}  // namespace hc::ops
