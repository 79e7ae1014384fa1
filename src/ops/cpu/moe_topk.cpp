#include "ops/cpu/moe_topk.h"

#include <algorithm>
#include <cmath>

#include "ops/cpu/ops.h"

namespace hc::ops {

void moe_topk_row(float* p, int n_expert, int k, const MoeGate& g, int32_t* ids, float* w,
                  int32_t* order) {
  if (g.kind == MoeGate::kSoftmax) softmax(p, n_expert);
  else if (g.kind == MoeGate::kSigmoid)
    for (int e = 0; e < n_expert; ++e) p[e] = 1.0f / (1.0f + std::exp(-p[e]));
  for (int e = 0; e < n_expert; ++e) order[e] = e;
  // ggml_argsort_top_k: descending; equal values keep the lower index first.
  std::partial_sort(order, order + k, order + n_expert, [p](int32_t a, int32_t b) {
    return p[a] > p[b] || (!(p[b] > p[a]) && a < b);
  });
  for (int j = 0; j < k; ++j) {
    ids[j] = order[j];
    w[j] = p[order[j]];
  }
  if (g.kind == MoeGate::kSoftmaxWeight) softmax(w, k);
  if (g.norm_w) {
    double sum = 0.0;  // ggml_vec_sum_f32: a double sum rounded to float
    for (int j = 0; j < k; ++j) sum += static_cast<double>(w[j]);
    const float s = std::max(static_cast<float>(sum), 6.103515625e-5f);  // ggml_clamp
    for (int j = 0; j < k; ++j) w[j] /= s;
  }
  if (g.w_scale != 0.0f && g.w_scale != 1.0f)
    for (int j = 0; j < k; ++j) w[j] *= g.w_scale;
}

}  // namespace hc::ops
