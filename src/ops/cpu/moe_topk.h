// Mixture-of-experts routing of one token, as llama.cpp's build_moe_ffn chooses and weighs the
// experts (model/moe_ffn.h): the gate over the router logits (softmax, or sigmoid), the k largest
// values in descending order (ggml_argsort_top_k: equal values keep the lower index first; NaN is
// never larger than anything), their weights (a softmax over the chosen logits instead, for
// kSoftmaxWeight), divided by their sum when norm_w (ggml_vec_sum_f32's double sum rounded to
// float, clamped below at 2^-14 as llama.cpp does), then times w_scale (0 or 1: left alone).
// The host's router (moe_route) and the CPU device (Device::moe_topk) both run this; Vulkan and
// CUDA follow it with their own exp.
#pragma once
#include <cstdint>

namespace hc::ops {

struct MoeGate {
  enum Kind : int32_t { kSoftmax = 0, kSigmoid = 1, kSoftmaxWeight = 2 };
  int32_t kind = kSoftmax;
  bool norm_w = false;
  float w_scale = 0.0f;
};

// p [n_expert]: the router logits, overwritten with the gate's values; ids, w [k]: the chosen
// experts and their weights; order: n_expert ints of scratch. 1 <= k <= n_expert.
void moe_topk_row(float* p, int n_expert, int k, const MoeGate& g, int32_t* ids, float* w,
                  int32_t* order);

}  // namespace hc::ops
