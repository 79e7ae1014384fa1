#version 450
// rows (vk_abi.h RowsPC; "elements" grid over n * width): the row gather and scaled scatter of a
// mixture-of-experts layer, one element per invocation: element i of row j is
//   dst[drow(j) * width + i] = src[srow(j) * width + i], times scale[j] when scale is present,
// srow(j) = src_idx ? src_idx[j] : j, drow(j) = dst_idx ? dst_idx[j] : j. Without scale the
// 32-bit word is copied (get_rows is bit for bit, NaN payloads included); with it, one
// exactly rounded fp32 product, as the host's x * w. The indices are trusted (ops/device.h: the
// caller's rows); dst rows must be distinct, so no two invocations write one element.
#include "common.glsl"

layout(local_size_x = 64, local_size_y = 1, local_size_z = 1) in;

layout(push_constant) uniform PC {
  uint64_t dst, src, src_idx, dst_idx, scale;
  int64_t n, width;
} pc;

void main() {
  const uint64_t e = hc_element_index();
  if (pc.width <= 0 || int64_t(e) >= pc.n * pc.width) return;
  const uint64_t w = uint64_t(pc.width);
  const uint64_t j = e / w, i = e % w;
  const int64_t srow = pc.src_idx != 0ul ? int64_t(IntRef(pc.src_idx + j * 4ul).v[0]) : int64_t(j);
  const int64_t drow = pc.dst_idx != 0ul ? int64_t(IntRef(pc.dst_idx + j * 4ul).v[0]) : int64_t(j);
  const uint64_t sp = pc.src + off4(srow * pc.width) + i * 4ul;
  const uint64_t dp = pc.dst + off4(drow * pc.width) + i * 4ul;
  if (pc.scale != 0ul) {
    precise float y = FloatRef(sp).v[0] * FloatRef(pc.scale + j * 4ul).v[0];
    FloatRef(dp).v[0] = y;
  } else {
    UintRef(dp).v[0] = UintRef(sp).v[0];  // the bits, not a float: nothing can alter them
  }
}
