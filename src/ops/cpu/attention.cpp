#include "ops/cpu/attention.h"

#include <cmath>

#include "ops/cpu/vec.h"

namespace hc::ops {

AttentionKernels attention_kernels(int64_t n_tokens, int head_dim, int64_t n_kv_pad) {
  // llamafile_sgemm (AVX-512 F16 x F16) takes a matmul with >= 2 columns when the inner size is
  // a multiple of 16 and the rows a multiple of 4; otherwise ggml falls back to vec_dot_f16.
  AttentionKernels k;
  if (n_tokens >= 2) {
    if (head_dim % 16 == 0 && n_kv_pad % 4 == 0) k.kq = F16Matmul::kTinyBlas;
    if (n_kv_pad % 16 == 0 && head_dim % 4 == 0) k.kqv = F16Matmul::kTinyBlas;
  }
  return k;
}

int64_t attention_kv_pad(int64_t n_kv) {
  // llama_kv_cache::get_n_kv: min(size, max(256, GGML_PAD(used, 256))), where the cache size is
  // itself padded to 256 (llama_context pads n_ctx), so the min never bites.
  const int64_t padded = (n_kv + 255) / 256 * 256;
  return padded > 256 ? padded : 256;
}

void attention_one(const float* q, const fp16_t* k, const fp16_t* v_t, int64_t n_kv,
                   int64_t n_kv_pad, const AttentionShape& shape, float scale,
                   AttentionKernels kernels, int h_begin, int h_end, float* out, float* scratch) {
  const vec::Kernels& K = vec::kernels();
  const auto dot_kq = kernels.kq == F16Matmul::kTinyBlas ? K.dot_f16_tinyblas : K.dot_f16;
  const auto dot_kqv = kernels.kqv == F16Matmul::kTinyBlas ? K.dot_f16_tinyblas : K.dot_f16;
  const int hd = shape.head_dim;
  const int group = shape.n_head / shape.n_head_kv;
  float* w = scratch;                                           // [n_kv_pad] scores, then weights
  fp16_t* p16 = reinterpret_cast<fp16_t*>(scratch + n_kv_pad);  // [n_kv_pad] fp16 weights
  fp16_t qh[512];  // one head of q as fp16 (ggml converts src1 to vec_dot_type); hd <= 512
  for (int h = h_begin; h < h_end; ++h) {
    const int hk = h / group;
    for (int d = 0; d < hd; ++d) qh[d] = fp32_to_fp16(q[h * hd + d]);
    // kq row, scaled (soft_max_ext: x * scale + mask; the mask adds 0 here, -inf beyond n_kv).
    float mx = -INFINITY;
    for (int64_t j = 0; j < n_kv; ++j) {
      w[j] = dot_kq(k + j * shape.k_stride + hk * hd, qh, hd, hd) * scale;
      mx = w[j] > mx ? w[j] : mx;
    }
    const double sum = K.soft_max(w, w, n_kv, n_kv_pad, mx);
    const float inv = static_cast<float>(1.0 / sum);
    for (int64_t j = 0; j < n_kv; ++j) p16[j] = fp32_to_fp16(w[j] * inv);
    const fp16_t* vh = v_t + static_cast<int64_t>(hk) * hd * shape.v_stride;
    for (int d = 0; d < hd; ++d)
      out[h * hd + d] = dot_kqv(vh + d * shape.v_stride, p16, n_kv, n_kv_pad);
  }
}

}  // namespace hc::ops
