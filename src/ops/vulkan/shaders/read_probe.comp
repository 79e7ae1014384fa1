#version 450
// read_probe (vk_abi.h ReadProbePC; "elements" grid over n_words 16-byte words): invocation i
// reads word i of src (neighbouring invocations, neighbouring words: a streaming read for the
// device profile's bandwidth). The word is written to sink only if it equals one fixed 128-bit
// pattern (in practice never), so the compiler cannot drop the loads.
#include "common.glsl"

layout(local_size_x = 64, local_size_y = 1, local_size_z = 1) in;

layout(push_constant) uniform PC {
  uint64_t src, sink;
  int64_t n_words;
} pc;

void main() {
  const uint64_t i = hc_element_index();
  if (int64_t(i) >= pc.n_words) return;
  const uvec4 v = UVec4Ref(pc.src + i * 16ul).v[0];
  if (v.x == 0x9e3779b9u && v.y == 0x7f4a7c15u && v.z == 0x85ebca6bu && v.w == 0xc2b2ae35u) {
    UVec4Ref(pc.sink).v[0] = v;
  }
}
