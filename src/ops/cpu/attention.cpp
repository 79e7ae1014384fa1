#include "ops/cpu/attention.h"

#include <algorithm>
#include <cmath>

#include "ops/cpu/gemm.h"
#include "ops/cpu/vec.h"
#include "quant/quant.h"

namespace hc::ops {

AttentionKernels attention_kernels(int64_t n_tokens, int head_dim, int64_t n_kv_pad) {
  // llamafile_sgemm (F16 x F16) takes a matmul with >= 2 columns when the inner size is a
  // multiple of its vector (16 lanes in ggml's AVX-512 build, 8 in its AVX2 one) and the rows
  // a multiple of 4; otherwise ggml falls back to vec_dot_f16.
  AttentionKernels k;
  const int kn = vec::flavour() == vec::Flavour::kAvx512 ? 16 : 8;
  if (n_tokens >= 2) {
    if (head_dim % kn == 0 && n_kv_pad % 4 == 0) k.kq = F16Matmul::kTinyBlas;
    if (n_kv_pad % kn == 0 && head_dim % 4 == 0) k.kqv = F16Matmul::kTinyBlas;
  }
  return k;
}

int64_t attention_kv_pad(int64_t n_kv) {
  // llama_kv_cache::get_n_kv: min(size, max(256, GGML_PAD(used, 256))), where the cache size is
  // itself padded to 256 (llama_context pads n_ctx), so the min never bites.
  const int64_t padded = (n_kv + 255) / 256 * 256;
  return padded > 256 ? padded : 256;
}

void attention_prefetch(const fp16_t* k, const fp16_t* v_t, int64_t n_kv,
                        const AttentionShape& shape, int hk_begin, int hk_end) {
  const int64_t hd = shape.head_dim;
  const int64_t rows = (hk_end - hk_begin) * hd;  // V^T rows; also the K elements per position
  const int64_t n = std::min(n_kv, kAttentionPrefetchBytes / (2 * rows * int64_t{sizeof(fp16_t)}));
  // K: positions [0, n), the heads' part of each; V^T: the heads' rows over [0, n).
  const int64_t k_bytes = rows * int64_t{sizeof(fp16_t)};
  const char* kp = reinterpret_cast<const char*>(k + hk_begin * hd);
  for (int64_t j = 0; j < n; ++j) {
    const char* r = kp + j * shape.k_stride * int64_t{sizeof(fp16_t)};
    for (int64_t b = 0; b < k_bytes; b += 64) __builtin_prefetch(r + b, 0, 3);
  }
  const int64_t v_bytes = n * int64_t{sizeof(fp16_t)};
  const char* vp = reinterpret_cast<const char*>(v_t + hk_begin * hd * shape.v_stride);
  for (int64_t d = 0; d < rows; ++d) {
    const char* r = vp + d * shape.v_stride * int64_t{sizeof(fp16_t)};
    for (int64_t b = 0; b < v_bytes; b += 64) __builtin_prefetch(r + b, 0, 3);
  }
}

void attention_one(const float* q, const fp16_t* k, const fp16_t* v_t, int64_t n_kv,
                   int64_t n_kv_pad, const AttentionShape& shape, float scale,
                   AttentionKernels kernels, int h_begin, int h_end, float* out, float* scratch) {
  const vec::Kernels& K = vec::kernels();
  const auto dot_kq = kernels.kq == F16Matmul::kTinyBlas ? K.dot_f16_tinyblas_rows : K.dot_f16_rows;
  const auto dot_kqv =
      kernels.kqv == F16Matmul::kTinyBlas ? K.dot_f16_tinyblas_rows : K.dot_f16_rows;
  const int hd = shape.head_dim;
  const int group = shape.n_head / shape.n_head_kv;
  float* w = scratch;                                           // [n_kv_pad] scores, then weights
  fp16_t* p16 = reinterpret_cast<fp16_t*>(scratch + n_kv_pad);  // [n_kv_pad] fp16 weights
  fp16_t qh[512];  // one head of q as fp16 (ggml converts src1 to vec_dot_type); hd <= 512
  for (int h = h_begin; h < h_end; ++h) {
    const int hk = h / group;
    // The F16 row conversion rounds to nearest even like fp32_to_fp16, with F16C where present.
    quant::quantize_row(GgmlType::F16, q + h * hd, qh, hd);
    // kq row, scaled (soft_max_ext: x * scale + mask; the mask adds 0 here, -inf beyond n_kv).
    dot_kq(k + hk * hd, shape.k_stride, n_kv, qh, hd, hd, w);
    float mx = -INFINITY;
    for (int64_t j = 0; j < n_kv; ++j) {
      w[j] *= scale;
      mx = w[j] > mx ? w[j] : mx;
    }
    const double sum = K.soft_max(w, w, n_kv, n_kv_pad, mx);
    const float inv = static_cast<float>(1.0 / sum);
    for (int64_t j = 0; j < n_kv; ++j) w[j] *= inv;
    quant::quantize_row(GgmlType::F16, w, p16, n_kv);
    // kqv: row d of this kv head's V^T (over positions) against the weights.
    const fp16_t* vh = v_t + static_cast<int64_t>(hk) * hd * shape.v_stride;
    dot_kqv(vh, shape.v_stride, hd, p16, n_kv, n_kv_pad, out + h * hd);
  }
}

namespace {
// x rounded to the nearest fp16 (ties to even), as fp32; tmp holds n fp16 values.
void round_fp16(const float* x, float* y, int64_t n, fp16_t* tmp) {
  quant::quantize_row(GgmlType::F16, x, tmp, n);
  quant::dequantize_row(GgmlType::F16, tmp, y, n);
}
}  // namespace

bool attention_batch_available() { return gemm_f32_act_simd_available(); }

void attention_batch(const float* q, const fp16_t* k, const fp16_t* v_t, int64_t pos0,
                     int64_t n_tok, const AttentionShape& shape, float scale, float* out,
                     ThreadPool& pool, std::vector<float>& scratch) {
  const vec::Kernels& K = vec::kernels();
  const int hd = shape.head_dim;
  const int group = shape.n_head / shape.n_head_kv;
  const int64_t q_dim = int64_t{shape.n_head} * hd;
  const int64_t n_blocks = (n_tok + kAttentionBlock - 1) / kAttentionBlock;
  const int64_t n_items = n_blocks * shape.n_head;
  // scores [block][keys], q rows [block][hd], then fp16 staging for max(keys, hd) values
  const int64_t per_thread = kAttentionBlock * (pos0 + n_tok + 16 + hd) + (pos0 + n_tok + hd);
  if (scratch.size() < static_cast<size_t>(per_thread * pool.size()))
    scratch.resize(static_cast<size_t>(per_thread * pool.size()));
  const bool simd = attention_batch_available();
  pool.run([&](int ith, int nth) {
    int64_t b, e;
    ThreadPool::split(n_items, ith, nth, &b, &e);
    float* p = scratch.data() + ith * per_thread;
    fp16_t* r16 = reinterpret_cast<fp16_t*>(p + kAttentionBlock * (pos0 + n_tok + 16 + hd));
    for (int64_t it = b; it < e; ++it) {
      // Item it = (query block it / n_head, head it % n_head).
      const int h = static_cast<int>(it % shape.n_head);
      const int64_t t0 = (it / shape.n_head) * kAttentionBlock;
      const int64_t nt = std::min(kAttentionBlock, n_tok - t0);
      const int64_t n_keys = pos0 + t0 + nt;  // keys the block's last token sees
      const int hk = h / group;
      // scores[t][j] = sum_d q[t0 + t][h][d] * k[j][hk][d]
      const TensorView kv = {GgmlType::F16, k + hk * hd, hd, n_keys,
                             static_cast<int64_t>(shape.k_stride * sizeof(fp16_t))};
      // ggml rounds q to fp16 (the f16 matmul's vec_dot_type) and so do we.
      float* qr = p + kAttentionBlock * n_keys;
      for (int64_t t = 0; t < nt; ++t) round_fp16(q + (t0 + t) * q_dim + h * hd, qr + t * hd, hd, r16);
      gemm_f32_act(kv, qr, hd, nt, p, n_keys, simd);
      for (int64_t t = 0; t < nt; ++t) {
        float* w = p + t * n_keys;
        const int64_t n_valid = pos0 + t0 + t + 1;
        float mx = -INFINITY;
        for (int64_t j = 0; j < n_valid; ++j) {
          w[j] *= scale;
          mx = w[j] > mx ? w[j] : mx;
        }
        const float inv = static_cast<float>(1.0 / K.soft_max(w, w, n_valid, n_valid, mx));
        for (int64_t j = 0; j < n_valid; ++j) w[j] *= inv;
        round_fp16(w, w, n_valid, r16);  // as ggml's kqv product takes fp16 weights
        for (int64_t j = n_valid; j < n_keys; ++j) w[j] = 0.0f;
      }
      // out[t0 + t][h][d] = sum_j p[t][j] * v_t[hk * hd + d][j]
      const TensorView vt = {GgmlType::F16, v_t + static_cast<int64_t>(hk) * hd * shape.v_stride,
                             n_keys, hd, static_cast<int64_t>(shape.v_stride * sizeof(fp16_t))};
      gemm_f32_act(vt, p, n_keys, nt, out + t0 * q_dim + h * hd, q_dim, simd);
    }
  });
}

}  // namespace hc::ops
