#version 450
// fire_mask (vk_abi.h FireMaskPC; "elements" grid over n_tok * n_cols): a predictor's decision
// per neuron, one byte per invocation: fire[t * n_cols + j] = x[t * n + c(j)] >= threshold,
// c(j) = cols[j] when cols is present, else j. The comparison is the host's (false for NaN).
// The column indices are trusted (ops/device.h: the device's own hot list).
#include "common.glsl"

layout(local_size_x = 64, local_size_y = 1, local_size_z = 1) in;

layout(push_constant) uniform PC {
  uint64_t x, cols, fire;
  int64_t n, n_cols, total;
  float threshold;
  int pad;
} pc;

void main() {
  const uint64_t e = hc_element_index();
  if (pc.n_cols <= 0 || int64_t(e) >= pc.total) return;
  const uint64_t nc = uint64_t(pc.n_cols);
  const uint64_t t = e / nc, j = e % nc;
  const int64_t c = pc.cols != 0ul ? int64_t(IntRef(pc.cols + j * 4ul).v[0]) : int64_t(j);
  const float v = FloatRef(pc.x + off4(int64_t(t) * pc.n + c)).v[0];
  U8Ref(pc.fire + e).v[0] = uint8_t(v >= pc.threshold ? 1u : 0u);
}
