#version 450
// add (vk_abi.h AddPC; "elements" grid over n): y[i] += x[i], one element per invocation; with
// n_row > 0 (add_rows) x is one row of n_row floats added to every row of y: y[i] += x[i % n_row].
#include "common.glsl"

layout(local_size_x = 64, local_size_y = 1, local_size_z = 1) in;

layout(push_constant) uniform PC {
  uint64_t y, x;
  int64_t n, n_row;
} pc;

void main() {
  const uint64_t i = hc_element_index();
  if (int64_t(i) >= pc.n) return;
  const uint64_t xi = pc.n_row > 0 ? i % uint64_t(pc.n_row) : i;
  const uint64_t yp = pc.y + i * 4ul;
  FloatRef(yp).v[0] = FloatRef(yp).v[0] + FloatRef(pc.x + xi * 4ul).v[0];
}
