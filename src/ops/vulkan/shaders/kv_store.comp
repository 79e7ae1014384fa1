#version 450
// kv_store (vk_abi.h KvStorePC; "elements" grid over n_tok * kv_dim): invocation i = t * kv_dim
// + d stores element d of token t's k and v into one layer's fp16 cache:
//   k_cache[(pos0 + t) * kv_dim + d] = fp16(k[i]), v_cache_t[d * n_ctx + pos0 + t] = fp16(v[i]),
// (pos0 read at pos_at when set; rows at or past n_ctx not stored), rounded to nearest even exactly as the host (hc_float_to_half = hc::fp32_to_fp16, subnormal
// halves included).
#include "common.glsl"

layout(local_size_x = 64, local_size_y = 1, local_size_z = 1) in;

layout(push_constant) uniform PC {
  uint64_t k, v, k_cache, v_cache_t, pos_at;
  int kv_dim, n_tok, pos0, n_ctx;
} pc;

void main() {
  const uint64_t i = hc_element_index();
  if (pc.kv_dim <= 0 || i >= uint64_t(pc.n_tok) * uint64_t(pc.kv_dim)) return;
  const int64_t t = int64_t(i / uint64_t(pc.kv_dim));
  const int64_t d = int64_t(i % uint64_t(pc.kv_dim));
  const int64_t pos = int64_t(hc_pos(pc.pos_at, pc.pos0)) + t;
  if (pos >= int64_t(pc.n_ctx)) return;  // a device position past the cache
  const float kv = FloatRef(pc.k + off4(int64_t(i))).v[0];
  const float vv = FloatRef(pc.v + off4(int64_t(i))).v[0];
  U16Ref(pc.k_cache + uint64_t(pos * pc.kv_dim + d) * 2ul).v[0] = uint16_t(hc_float_to_half(kv));
  U16Ref(pc.v_cache_t + uint64_t(d * pc.n_ctx + pos) * 2ul).v[0] =
      uint16_t(hc_float_to_half(vv));
}
