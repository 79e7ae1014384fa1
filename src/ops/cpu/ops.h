// Element-wise and row-wise CPU ops on fp32 activations. Ops know nothing about models.
#pragma once
#include <cstdint>

#include "core/dtype.h"
#include "core/tensor_view.h"

namespace hc::ops {

// out[i] = x[i] / sqrt(mean(x^2) + eps) * w[i]; out may alias x. Rounded as ggml's rms_norm.
void rmsnorm(float* out, const float* x, const float* w, int64_t n, float eps);
// out[i] = (x[i] - mean) / sqrt(var(x) + eps) * w[i] + b[i]   (LayerNorm); out may alias x.
// Rounded as ggml_norm (sums in double) followed by ggml_mul and ggml_add; b may be null.
void layernorm(float* out, const float* x, const float* w, const float* b, int64_t n, float eps);
// In-place RoPE on one head vector [head_dim] at position pos, rotating adjacent pairs
// (x[2i], x[2i+1]) for i < n_rot/2 ("normal" mode, as ggml for the llama architecture).
// Fills cos_sin[2*i], cos_sin[2*i+1] for i < n_rot/2 exactly as ggml's rope cache does:
// theta starts at pos and is multiplied by theta_scale = base^(-2/n_rot) per pair (float
// recurrence, not pow), divided by freq_factors[i] (Llama-3, may be null) and scaled.
void rope_cache(float* cos_sin, int64_t n_rot, float theta_scale, float freq_scale,
                const float* freq_factors, int64_t pos);
// Applies a rope_cache to one head vector in place (with ggml's FMA contraction).
void rope_apply(float* x, int64_t n_rot, const float* cos_sin);
// NeoX mode (falcon): rotates the pairs (x[i], x[i + n_rot/2]) with the same cache.
void rope_apply_neox(float* x, int64_t n_rot, const float* cos_sin);
// In-place softmax over n values, rounded as ggml's soft_max (ggml_v_expf blocks, double sum).
void softmax(float* x, int64_t n);
// gate[i] = silu(gate[i]) * up[i]   (SwiGLU), rounded as ggml_vec_swiglu_f32 on one row
void swiglu(float* gate, const float* up, int64_t n);
// The same with every element computed as in a whole SIMD block (the tail padded to one):
// an element's result depends only on its own gate and up, not on its position or on n. The
// sparse FFN's sets (a batch's union, a device's share) differ in length and order from one
// call to the next, so a token's h must not depend on where a neuron falls.
void swiglu_each(float* gate, const float* up, int64_t n);
// gate[i] = relu(gate[i]) * up[i]   (ReGLU)
void reglu(float* gate, const float* up, int64_t n);
// gate[i] = relu(gate[i]) * relu(up[i])   (dReLU, PowerInfer's bamboo: ggml_relu of both, then
// ggml_mul)
void dreglu(float* gate, const float* up, int64_t n);
// x[i] = gelu(x[i]) as ggml_vec_gelu_f32 computes it: 0 below -10, x above 10, else the
// tanh approximation tabulated at x rounded to fp16 (the table holds fp16 values).
void gelu(float* x, int64_t n);
// Scalar GELU (tanh approximation, float), the table's source.
float gelu_f32(float x);
// y[i] += x[i]
void add_inplace(float* y, const float* x, int64_t n);
// The index of the largest of x[0 .. n): the first on ties, NaN never (all NaN: 0). Greedy
// decoding's choice, on the host (Sampler) and on every device (Device::argmax).
int32_t argmax_row(const float* x, int64_t n);
// Dequantises row `i` of `table` (e.g. token embeddings) into out[table.ne0].
void get_row(const TensorView& table, int64_t i, float* out);

}  // namespace hc::ops
