#version 450
// rope (vk_abi.h RopePC; "elements" grid over n_tok * n_head * (n_rot / 2) pairs): in place on
// x [n_tok, n_head * head_dim]. Invocation i owns pair p = i % (n_rot/2) of head h of token t
// (i / (n_rot/2) = t * n_head + h) and rotates elements 2p, 2p + 1 of that head (ggml's normal
// mode, ops::rope_apply) or p, p + n_rot/2 (neox: NeoX mode, ops::rope_apply_neox); elements
// past n_rot are left alone. Both modes take the same angle for pair p.
//
// The angle is the host's (ops::rope_cache) float for float: theta = float(pos0 + t), multiplied
// by theta_scale p times in sequence (ggml's recurrence, not pow), then
// freq_scale * (theta / freq_factors[p]) (freq_factors absent: / 1), so the angle is the host's
// bit for bit where the device's float division is exactly rounded (lavapipe; Vulkan allows
// 2.5 ulp). sin and cos in fp32 to about 1 ulp (hc_sincos; the host uses sincosf). The rotation
// is the host's x0' = fma(x0, c, -(x1 * s)), x1' = fma(x0, s, x1 * c) (fused where the device
// fuses fma(); lavapipe rounds the product first).
#include "common.glsl"

layout(local_size_x = 64, local_size_y = 1, local_size_z = 1) in;

layout(push_constant) uniform PC {
  uint64_t x, freq_factors, pos_at;
  int n_tok, n_head, head_dim, n_rot, pos0;
  float theta_scale, freq_scale;
  int neox;
} pc;

void main() {
  const int n_pair = pc.n_rot / 2;
  if (n_pair <= 0) return;
  const uint64_t i = hc_element_index();
  const uint64_t n = uint64_t(pc.n_tok) * uint64_t(pc.n_head) * uint64_t(n_pair);
  if (i >= n) return;
  const int pair = int(i % uint64_t(n_pair));
  const uint64_t th = i / uint64_t(n_pair);  // token * n_head + head
  const int t = int(th / uint64_t(pc.n_head));

  precise float theta = float(hc_pos(pc.pos_at, pc.pos0) + t);
  for (int k = 0; k < pair; ++k) theta *= pc.theta_scale;
  const float ff = pc.freq_factors != 0ul ? FloatRef(pc.freq_factors).v[pair] : 1.0;
  precise float ang = pc.freq_scale * (theta / ff);
  float s, c;
  hc_sincos(ang, s, c);

  // The pair's two elements: adjacent, or half the rotated dimensions apart (NeoX).
  const int i0 = pc.neox != 0 ? pair : 2 * pair;
  const int gap = pc.neox != 0 ? n_pair : 1;
  const uint64_t p = pc.x + off4(int64_t(th) * pc.head_dim + i0);
  const float x0 = FloatRef(p).v[0], x1 = FloatRef(p).v[gap];
  precise float y0 = fma(x0, c, -(x1 * s));
  precise float y1 = fma(x0, s, x1 * c);
  FloatRef(p).v[0] = y0;
  FloatRef(p).v[gap] = y1;
}
