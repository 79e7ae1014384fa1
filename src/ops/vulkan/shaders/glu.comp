#version 450
// glu (vk_abi.h GluPC; "elements" grid over n): gate[i] = act(gate[i]) * up[i], ggml's swiglu
// (glu_kind 0: gate / (1 + e^-gate) * up), reglu (1: gate > 0 ? gate * up : 0) or dReLU (2:
// relu(gate) * relu(up)) or ungated ReLU (3: relu(gate), up not read); one element per
// invocation.
#include "common.glsl"

layout(local_size_x = 64, local_size_y = 1, local_size_z = 1) in;

layout(push_constant) uniform PC {
  uint64_t gate, up;
  int64_t n;
  int glu_kind, pad;
} pc;

void main() {
  const uint64_t i = hc_element_index();
  if (int64_t(i) >= pc.n) return;
  const uint64_t gp = pc.gate + i * 4ul;
  const float u = pc.glu_kind == 3 ? 0.0 : FloatRef(pc.up + i * 4ul).v[0];
  FloatRef(gp).v[0] = hc_glu(FloatRef(gp).v[0], u, pc.glu_kind);
}
