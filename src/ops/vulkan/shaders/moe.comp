#version 450
// moe (vk_abi.h MoePC): mixture-of-experts routing and the sum of the routes' outputs.
//   mode 0, moe_topk ("rows" grid over n_tok; invocation 0 of a workgroup does the row, a
//   handful of experts): ops/cpu/moe_topk.h on row t of x [n_tok, n_expert], written back:
//     the gate: softmax (m = max, e = hc_exp(x - m) in place, their sum in order as a
//     float-float, times its reciprocal 1 / (hi + lo): the host's double sum and 1 / sum), or
//     sigmoid (1 / (1 + hc_exp(-x)), exactly rounded division);
//     the k largest in descending order, equal values keeping the lower index first: pick j is
//     the largest (v, -index) below pick j - 1 in that order (finite values);
//     their weights: the values, or a softmax over them (kind 2); divided by their sum (a
//     float-float rounded, clamped below at 2^-14) when norm_w; times w_scale unless 0 or 1.
//   mode 1, moe_combine ("elements" grid over n_tok * n): out[t, i] = ((y[t k, i] * w[t k]) +
//     y[t k + 1, i] * w[t k + 1]) + ..., each product rounded before its add (precise).
#include "common.glsl"

layout(local_size_x = 64, local_size_y = 1, local_size_z = 1) in;

layout(push_constant) uniform PC {
  uint64_t x, ids, w, out_;
  int64_t n, total;
  int n_tok, n_expert, k, kind, norm_w, mode;
  float w_scale;
  int pad;
} pc;

// The float-float sum s of the n floats at p (in order), rounded to float.
float sum_ff(uint64_t p, int n) {
  float hi = 0.0, lo = 0.0;
  for (int i = 0; i < n; ++i) {
    float e;
    hc_two_sum(hi, FloatRef(p + off4(i)).v[0], hi, e);
    lo += e;
  }
  precise float s = hi + lo;
  return s;
}

// In place over the n floats at p: e_i = exp(p_i - max), then e_i * 1 / sum.
void softmax_at(uint64_t p, int n) {
  float m = uintBitsToFloat(0xff800000u);  // -inf
  for (int i = 0; i < n; ++i) m = max(m, FloatRef(p + off4(i)).v[0]);
  float hi = 0.0, lo = 0.0;
  for (int i = 0; i < n; ++i) {
    const float e = hc_exp(FloatRef(p + off4(i)).v[0] - m);
    FloatRef(p + off4(i)).v[0] = e;
    float r;
    hc_two_sum(hi, e, hi, r);
    lo += r;
  }
  hc_two_sum(hi, lo, hi, lo);
  const float inv = hc_recip_ff(hi, lo);
  for (int i = 0; i < n; ++i) {
    precise float v = FloatRef(p + off4(i)).v[0] * inv;
    FloatRef(p + off4(i)).v[0] = v;
  }
}

void topk_row(uint t) {
  const int ne = pc.n_expert, k = pc.k;
  const uint64_t p = pc.x + off4(int64_t(t) * ne);
  if (pc.kind == 0) {
    softmax_at(p, ne);
  } else if (pc.kind == 1) {
    for (int e = 0; e < ne; ++e) {
      precise float den = 1.0 + hc_exp(-FloatRef(p + off4(e)).v[0]);
      FloatRef(p + off4(e)).v[0] = hc_div_rn(1.0, den);
    }
  }
  const uint64_t ids = pc.ids + off4(int64_t(t) * k), w = pc.w + off4(int64_t(t) * k);
  float pv = 0.0;
  int pe = -1;
  for (int j = 0; j < k; ++j) {
    int best = -1;
    float bv = 0.0;
    for (int e = 0; e < ne; ++e) {
      const float v = FloatRef(p + off4(e)).v[0];
      const bool below = pe < 0 || v < pv || (v == pv && e > pe);
      if (below && (best < 0 || v > bv)) {  // ties: the first (lowest) index stays
        best = e;
        bv = v;
      }
    }
    if (best < 0) best = 0;  // fewer than k finite values: not reached for finite logits
    IntRef(ids + off4(j)).v[0] = best;
    FloatRef(w + off4(j)).v[0] = bv;
    pv = bv;
    pe = best;
  }
  if (pc.kind == 2) softmax_at(w, k);
  if (pc.norm_w != 0) {
    const float s = max(sum_ff(w, k), 6.103515625e-5);  // ggml_clamp at 2^-14
    for (int j = 0; j < k; ++j) FloatRef(w + off4(j)).v[0] = hc_div_rn(FloatRef(w + off4(j)).v[0], s);
  }
  if (pc.w_scale != 0.0 && pc.w_scale != 1.0) {
    for (int j = 0; j < k; ++j) {
      precise float v = FloatRef(w + off4(j)).v[0] * pc.w_scale;
      FloatRef(w + off4(j)).v[0] = v;
    }
  }
}

void main() {
  if (pc.mode == 0) {
    const uint t = hc_row_index();
    if (t >= uint(pc.n_tok) || gl_LocalInvocationID.x != 0u) return;
    topk_row(t);
    return;
  }
  const uint64_t e = hc_element_index();
  if (int64_t(e) >= pc.total) return;
  const int64_t t = int64_t(e) / pc.n, i = int64_t(e) % pc.n;
  const int64_t k = int64_t(pc.k);
  precise float acc = FloatRef(pc.x + off4((t * k) * pc.n + i)).v[0] *
                      FloatRef(pc.w + off4(t * k)).v[0];
  for (int64_t j = 1; j < k; ++j) {
    precise float prod = FloatRef(pc.x + off4((t * k + j) * pc.n + i)).v[0] *
                         FloatRef(pc.w + off4(t * k + j)).v[0];
    acc = acc + prod;
  }
  FloatRef(pc.out_ + off4(int64_t(e))).v[0] = acc;
}
