#version 450
// argmax (vk_abi.h ArgmaxPC; "rows" grid over n_rows): out[r] = the index of the largest of
// x[r * n .. r * n + n), the first one on ties, NaN never, 0 when every element is NaN: the
// host's ops::argmax_row. Each invocation scans a stride of the row keeping its first largest
// element; a shared-memory tree then keeps, of two candidates, the larger value or, on equal
// values, the smaller index. Comparisons with NaN are false, so a NaN is never taken.
#include "common.glsl"

layout(local_size_x = 64, local_size_y = 1, local_size_z = 1) in;

layout(push_constant) uniform PC {
  uint64_t x, out_;
  int64_t n;
  int n_rows, pad;
} pc;

shared float best_v[HC_LOCAL];
shared int64_t best_i[HC_LOCAL];

void main() {
  const uint r = hc_row_index();
  if (r >= uint(pc.n_rows)) return;
  const uint lid = gl_LocalInvocationID.x;
  const int64_t n = pc.n;
  const uint64_t xr = pc.x + off4(int64_t(r) * n);
  float bv = -1.0 / 0.0;  // -inf
  int64_t bi = n;         // none yet
  for (int64_t i = int64_t(lid); i < n; i += HC_LOCAL) {
    const float v = FloatRef(xr + uint64_t(i) * 4ul).v[0];
    if (v > bv || (v == bv && i < bi)) {
      bv = v;
      bi = i;
    }
  }
  best_v[lid] = bv;
  best_i[lid] = bi;
  barrier();
  for (uint stride = HC_LOCAL / 2; stride > 0u; stride >>= 1) {
    if (lid < stride) {
      const float v = best_v[lid + stride];
      const int64_t i = best_i[lid + stride];
      if (v > best_v[lid] || (v == best_v[lid] && i < best_i[lid])) {
        best_v[lid] = v;
        best_i[lid] = i;
      }
    }
    barrier();
  }
  if (lid == 0u) IntRef(pc.out_ + uint64_t(r) * 4ul).v[0] = best_i[0] < n ? int(best_i[0]) : 0;
}
