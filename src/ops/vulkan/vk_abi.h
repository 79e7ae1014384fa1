// The contract between VulkanDevice (vk_device.cpp) and its compute shaders (shaders/*.comp):
// one push-constant block per shader, mirrored field for field in GLSL (std430 offsets, 8-byte
// fields first), and the dispatch grid each shader expects.
//
// Memory: shaders reach every buffer through its 64-bit device address (Vulkan 1.2
// bufferDeviceAddress, GLSL GL_EXT_buffer_reference): the pointers in these blocks are the
// addresses VulkanDevice::alloc hands out as `void*`, offsets included. No descriptor sets, so
// no per-binding size limit (lavapipe's maxStorageBufferRange of 128 MiB does not apply to
// buffer references; the only cap is one allocation's maxMemoryAllocationSize, 2 GiB there,
// which VulkanDevice::alloc enforces with a clear error). An address field of 0 means "absent".
//
// Grids: "rows" shaders run one workgroup per output row r; with R rows the runtime dispatches
// (min(R, 65535), ceil(R / 65535), 1) workgroups and the shader takes
//   r = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x   (r >= R: return at once).
// "elements" shaders run kVkLocal invocations per workgroup over E elements, the same 2-D
// split over ceil(E / kVkLocal) workgroups:
//   i = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * kVkLocal + local id.
// Every shader has local_size_x = kVkLocal (64), y = z = 1, except where a specialisation
// constant sets it (matvec, down).
//
// Specialisation constants (matvec and down; every shader ignores those it does not declare):
//   0  work split: matvec rows per invocation (0: a workgroup per row, for GPUs), down columns
//      per invocation (0 or 8)
//   1  workgroup size of a split other than 0
//   2  most tokens per dispatch: 1 (the one-token pipelines, whose token loops compile to one
//      iteration) or kVkMaxVecTokens
//   3  common.glsl HC_NATIVE_HALF: unpackHalf2x16 is exact on this device (CPU implementations)
#pragma once
#include <cstdint>

namespace hc::ops::vk {

constexpr uint32_t kVkLocal = 64;
constexpr int64_t kVkMaxVecTokens = 8;  // tokens per matvec / down dispatch (as CUDA's)
constexpr int kVkMaxHeadDim = 512;

// Weight types, as the WTYPE specialisation each per-type shader is compiled with
// (glslc -DWTYPE=<n>): matvec_<name>.spv, down_<name>.spv.
enum class VkWType : int32_t {
  kF32 = 0, kF16 = 1, kBF16 = 2, kQ4_0 = 3, kQ4_1 = 4, kQ8_0 = 5, kQ4_K = 6, kQ5_K = 7, kQ6_K = 8
};
constexpr int kVkWTypes = 9;

// Activation types (the host's quant::vec_dot_type of each weight type), as QuantizePC::vtype.
enum class VkXType : int32_t { kF32 = 0, kF16 = 1, kBF16 = 2, kQ8_0 = 3, kQ8_1 = 4, kQ8_K = 5 };

// quantize ("elements" grid over n_tok * units): rows x[t] (ne0 floats) to rows q[t] (nbq bytes
// apart) of type vtype, byte for byte quant::quantize_activations: F16 / BF16 one element per
// unit, Q8_0 / Q8_1 blocks of 32 (ggml's x86 from_float: id = 127 / amax, round half to even),
// Q8_K blocks of 256 (quantize_row_q8_K_ref). ne0 is a multiple of the unit.
struct QuantizePC {
  uint64_t x, q;
  int64_t nbq;
  int32_t ne0, n_tok, vtype, pad;
};
static_assert(sizeof(QuantizePC) == 40);

// matvec_<type>. For output row j < n_rows and token t < n_tok (<= 8):
//   dot = W[row(j)] . xq[t], row(j) = idx ? idx[j] : j; W rows of ne0 elements, nb1 bytes
//   apart, in ggml's block layout; xq[t] at x + t * nbx: token t's activations quantised to
//   vec_dot_type(W) by quantize (F32 weights: the fp32 activations themselves). The dot product
//   is the host's vec_dot block arithmetic (shaders/vecdot.glsl): exact integer sums per block
//   times the block scales, summed in fp32.
//   fired(t, j) = fire ? fire[t * ld_fire + j] != 0 : |act(gate[t * ldy + j])| > threshold
//   mode 0 (plain):        y[t * ldy + j] = dot
//   mode 1 (skip unfired): rows no token fires are not read and get y = 0; others y = dot
//   mode 2 (glu):          rows no token fires are not read, y = 0; else
//                          y = fired(t, j) ? act(gate[t * ldy + j]) * dot : 0 (gate may alias y)
//   mode 3 (gate + up):    an FFN's mode 0 / 1 gate pass and mode 2 up pass in one dispatch, the
//                          gate g held in registers (W_up = w_up, nb1_up, of W's type): the bits
//                          the two passes leave in y
//   mode 4 (by id):        mode 0 on matrix e = ids[route] of a stack of n_mat matrices nb1_up
//                          bytes apart (matmul_id): W row j at w + e * nb1_up + j * nb1, idx =
//                          the ids (int32), ld_fire = route, glu_kind = n_mat (e clamped into
//                          [0, n_mat)); one token
//   act: glu_kind 0 SiLU x / (1 + e^-x), 1 ReLU max(x, 0) (the host's float operations, e^x to
//   ~1 ulp: common.glsl hc_act).
// Grid, by specialisation constant 0 (rows per lane, R):
//   R = 0 (GPUs): "rows" grid over n_rows, one workgroup per row;
//   R in [1, kVkMaxRowsPerLane] (CPU implementations such as lavapipe): "rows" grid over
//   ceil(n_rows / (kVkLocal * R)) workgroups, each invocation computing R whole rows.
constexpr int kVkMaxRowsPerLane = 4;
struct MatvecPC {
  uint64_t w, idx, x, y, fire, gate;
  int64_t nb1, nbx;
  int32_t ne0, n_rows, n_tok, ldy, ld_fire, mode, glu_kind;
  float threshold;
  uint64_t bias;  // modes 0 / 1 / 3: g = dot + bias[row(j)] (an FFN gate's bias; 0 = none)
  uint64_t w_up;  // mode 3 (gate and up in one dispatch): the up matrix, of w's type
  int64_t nb1_up;
};
static_assert(sizeof(MatvecPC) == 120);  // within the 128 bytes every device pushes

// down_<type>: the transposed down projection Dt [rows, n_out], row(j) = idx ? idx[j] : j:
//   out[t * n_out + c] = sum over j < n_rows, in order, of h[t * n_rows + j] * Dt[row(j)][c]
// for t < n_tok (<= 8), skipping j whose h is 0 for every token (their rows are not read).
// out is overwritten. Per output acc = fma(h_j, w, acc) from 0 (the host's sparse_down; h stays
// fp32), w dequantised exactly as quant::dequantize_row_ref.
// Grid, by specialisation constant 0: 0 (GPUs) "elements" over n_out columns; 8 (CPU
// implementations) "rows" over ceil(n_out / 8 / L) workgroups of L = constant 1 invocations,
// invocation i of workgroup g owning columns 8 (g L + i) .. + 7.
struct DownPC {
  uint64_t dt, h, idx, out;
  int64_t nb1;
  int32_t n_out, n_rows, n_tok, pad;
};
static_assert(sizeof(DownPC) == 56);

// rmsnorm ("rows" grid over n_tok): out[t] = x[t] / sqrt(mean(x[t]^2) + eps) * w, n per row
// (out may alias x).
struct RmsnormPC {
  uint64_t out, x, w;
  int32_t n, n_tok;
  float eps;
  int32_t pad;
};
static_assert(sizeof(RmsnormPC) == 40);

// rope ("elements" grid over n_tok * n_head * (n_rot / 2) pairs): in place on
// x [n_tok, n_head * head_dim]; pair i of head h of token t rotates elements 2i, 2i+1 (neox 0:
// ggml's normal mode) or i, i + n_rot/2 (neox 1: NeoX mode) by angle
// (pos0 + t) * theta_scale^i * freq_scale / (freq_factors ? freq_factors[i] : 1).
// pos_at (rope, kv_store, attention): 0, or the address of an int32 in device memory read as
// pos0 instead (ops::DevicePos::dev; a negative one is taken as 0).
struct RopePC {
  uint64_t x, freq_factors, pos_at;
  int32_t n_tok, n_head, head_dim, n_rot, pos0;
  float theta_scale, freq_scale;
  int32_t neox;
};
static_assert(sizeof(RopePC) == 56);

// kv_store ("elements" grid over n_tok * kv_dim): k_cache[(pos0 + t) * kv_dim + i] =
// fp16(k[t * kv_dim + i]); v_cache_t[i * n_ctx + pos0 + t] = fp16(v[t * kv_dim + i]); rows at
// positions >= n_ctx are not stored (a device position past the cache).
struct KvStorePC {
  uint64_t k, v, k_cache, v_cache_t, pos_at;
  int32_t kv_dim, n_tok, pos0, n_ctx;
};
static_assert(sizeof(KvStorePC) == 56);

// glu ("elements" grid over n): gate[i] = act(gate[i]) * up[i] (glu_kind as matvec).
// add ("elements" grid over n): y[i] += x[n_row > 0 ? i % n_row : i] (n_row > 0: add_rows, a
// row of n_row floats added to every row of y).
struct GluPC {
  uint64_t gate, up;
  int64_t n;
  int32_t glu_kind, pad;
};
static_assert(sizeof(GluPC) == 32);
struct AddPC {
  uint64_t y, x;
  int64_t n, n_row;
};
static_assert(sizeof(AddPC) == 32);

// rows ("elements" grid over n * width): row copies for a mixture-of-experts layer, rows of
// width floats:
//   dst[drow(j) * width + i] = src[srow(j) * width + i] (* scale[j] when scale != 0)
// for j < n, with srow(j) = src_idx ? src_idx[j] : j and drow(j) = dst_idx ? dst_idx[j] : j.
// get_rows: src_idx, no scale (a plain copy, bit for bit); set_rows_scaled: dst_idx and scale
// (one fp32 product per element).
struct RowsPC {
  uint64_t dst, src, src_idx, dst_idx, scale;
  int64_t n, width;
};
static_assert(sizeof(RowsPC) == 56);

// attention (grid (n_head, n_tok, 1), one workgroup per query head h and token t): causal
// grouped-query attention of ops/device.h with the host's arithmetic (ops/cpu/attention.cpp):
// query head h reads KV head h / (n_head / n_head_kv); token t sees cache positions
// [0, min(pos0 + t, v_stride - 1)]. q rounded to fp16, scores fp32 dot products with the fp16 keys times scale,
// weights e^(s - max) / sum rounded to fp16 (the sum in the host's order, kept exactly), out =
// fp32 sum of weight * v.
//   q, out: [n_tok, n_head * head_dim]; k_cache [n_ctx, k_stride] fp16 (KV head hk at offset
//   hk * head_dim); v_cache_t [n_head_kv * head_dim, v_stride] fp16 (row hk * head_dim + d).
struct AttentionPC {
  uint64_t q, k_cache, v_cache_t, out, pos_at;
  int64_t k_stride, v_stride;
  int32_t pos0, n_tok, n_head, n_head_kv, head_dim;
  float scale;
};
static_assert(sizeof(AttentionPC) == 80);

// argmax ("rows" grid over n_rows, a workgroup per row): out[r] (int32) = the index of the
// largest of x[r * n .. r * n + n), the first on ties, NaN never (all NaN: 0), as
// ops::argmax_row.
struct ArgmaxPC {
  uint64_t x, out;
  int64_t n;
  int32_t n_rows, pad;
};
static_assert(sizeof(ArgmaxPC) == 32);

// moe (shaders/moe.comp): mode 0 moe_topk ("rows" grid over n_tok): x [n_tok, n_expert] the
// router logits (overwritten with the gate's values), ids / w [n_tok, k] the chosen experts
// and weights, kind / norm_w / w_scale as ops::MoeGate; mode 1 moe_combine ("elements" grid
// over total = n_tok * n): x the routes' outputs y [n_tok * k, n], w their weights, out_
// [n_tok, n].
struct MoePC {
  uint64_t x, ids, w, out;
  int64_t n, total;
  int32_t n_tok, n_expert, k, kind, norm_w, mode;
  float w_scale;
  int32_t pad;
};
static_assert(sizeof(MoePC) == 80);

// fire_mask ("elements" grid over total = n_tok * n_cols): fire[t * n_cols + j] (uint8) = 1 when
// x[t * n + c(j)] >= threshold, else 0; c(j) = cols[j] (int32) when cols != 0, else j.
struct FireMaskPC {
  uint64_t x, cols, fire;
  int64_t n, n_cols, total;
  float threshold;
  int32_t pad;
};
static_assert(sizeof(FireMaskPC) == 56);

// read_probe ("elements" grid over n_words 16-byte words): reads every word of src; writes
// one word to sink only when the sum of all of them is a value that cannot occur (never),
// so the reads are not optimised away. For the device profile's bandwidth.
struct ReadProbePC {
  uint64_t src, sink;
  int64_t n_words;
};
static_assert(sizeof(ReadProbePC) == 24);

}  // namespace hc::ops::vk
