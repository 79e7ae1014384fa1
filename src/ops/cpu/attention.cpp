#include "ops/cpu/attention.h"

#include <cmath>
#include <vector>

#include "ops/cpu/ops.h"

namespace hc::ops {

void attention_one(const float* q, const fp16_t* k, const fp16_t* v, int64_t n_kv,
                   const AttentionShape& shape, float scale, int h_begin, int h_end, float* out,
                   float* scratch) {
  const int hd = shape.head_dim;
  const int group = shape.n_head / shape.n_head_kv;
  float qh[512];  // one head, rounded through fp16; head_dim <= 512 checked at load
  for (int h = h_begin; h < h_end; ++h) {
    const int hk = h / group;
    for (int d = 0; d < hd; ++d) qh[d] = fp16_to_fp32(fp32_to_fp16(q[h * hd + d]));
    for (int64_t j = 0; j < n_kv; ++j) {
      const fp16_t* kj = k + j * shape.kv_stride + hk * hd;
      float dot = 0.0f;
      for (int d = 0; d < hd; ++d) dot += qh[d] * fp16_to_fp32(kj[d]);
      scratch[j] = dot * scale;
    }
    softmax(scratch, n_kv);
    float* o = out + h * hd;
    for (int d = 0; d < hd; ++d) o[d] = 0.0f;
    for (int64_t j = 0; j < n_kv; ++j) {
      const float p = fp16_to_fp32(fp32_to_fp16(scratch[j]));
      const fp16_t* vj = v + j * shape.kv_stride + hk * hd;
      for (int d = 0; d < hd; ++d) o[d] += p * fp16_to_fp32(vj[d]);
    }
  }
}

}  // namespace hc::ops
