#version 450
// rmsnorm (vk_abi.h RmsnormPC; "rows" grid over n_tok): out[t] = x[t] / sqrt(mean(x[t]^2) + eps)
// * w for rows of n floats, as the host (ops::rmsnorm): scale = 1 / sqrt(mean + eps), then
// (x * scale) * w. The host sums the squares in double; here each invocation sums its
// elements' squares in fp32 and a shared-memory tree adds the 64 partial sums (the tests allow
// for the difference). out may alias x: every element is read and written by the same
// invocation (the same stride in both passes), so no invocation overwrites what another has
// yet to read.
#include "common.glsl"

layout(local_size_x = 64, local_size_y = 1, local_size_z = 1) in;

layout(push_constant) uniform PC {
  uint64_t out_, x, w;
  int n, n_tok;
  float eps;
  int pad;
} pc;

shared float red[HC_LOCAL];

void main() {
  const uint t = hc_row_index();
  if (t >= uint(pc.n_tok)) return;
  const uint lid = gl_LocalInvocationID.x;
  const int n = pc.n;
  const uint64_t xr = pc.x + off4(int64_t(t) * n);
  const uint64_t outr = pc.out_ + off4(int64_t(t) * n);

  float s = 0.0;
  for (int i = int(lid); i < n; i += HC_LOCAL) {
    const float v = FloatRef(xr).v[i];
    s += v * v;
  }
  red[lid] = s;
  barrier();
  for (uint stride = HC_LOCAL / 2; stride > 0u; stride >>= 1) {
    if (lid < stride) red[lid] += red[lid + stride];
    barrier();
  }
  const float mean = red[0] / float(n);
  const float scale = 1.0 / sqrt(mean + pc.eps);

  for (int i = int(lid); i < n; i += HC_LOCAL) {
    precise float v = (FloatRef(xr).v[i] * scale) * FloatRef(pc.w).v[i];
    FloatRef(outr).v[i] = v;
  }
}
