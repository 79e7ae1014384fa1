// The queued operations of CudaDevice: argument checks, then kernel launches on the stream
// (kernels.h); matmul and the FFN operators choose their kernels here (see cuda_device.cu).
#include <algorithm>
#include <cstdlib>
#include <string>

#include "ops/checks/device_checks.h"
#include "ops/cuda/cuda_device_impl.h"
#include "ops/cuda/kernels.h"

namespace hc::ops::cuda {

// ---- queued operations ------------------------------------------------------------------------

void CudaDevice::copy_to_device(void* dst, const void* host_src, uint64_t bytes) {
  select();
  const Status st = cuda_error(
      cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync");
  if (!st.ok()) return fail("copy_to_device", st.message());
  count_ops();
  count_h2d(bytes);
  timed("copy_to_device");
}

void CudaDevice::copy_to_host(void* host_dst, const void* src, uint64_t bytes) {
  select();
  const Status st = cuda_error(
      cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync");
  if (!st.ok()) return fail("copy_to_host", st.message());
  count_ops();
  count_d2h(bytes);
  timed("copy_to_host");
}

void CudaDevice::rmsnorm(float* out, const float* x, const float* w, int64_t n_tok, int64_t n,
                         float eps) {
  select();
  launch_rmsnorm(out, x, w, n_tok, n, eps, stream_);
  check_launch("rmsnorm");
}

void CudaDevice::argmax(const float* x, int64_t n_rows, int64_t n, int32_t* out) {
  select();
  if (n_rows <= 0) return;
  if (std::string e = device_checks::negatives({{"n", n}}); !e.empty()) return fail("argmax", e);
  if (std::string e = device_checks::nulls({{"x", x}, {"out", out}}); !e.empty())
    return fail("argmax", e);
  launch_argmax(x, n_rows, n, out, stream_);
  check_launch("argmax");
}

void CudaDevice::fire_mask(const float* x, int64_t n_tok, int64_t n, const int32_t* cols,
                           int64_t n_cols, float threshold, uint8_t* fire) {
  select();
  if (n_tok <= 0 || n_cols <= 0) return;
  if (std::string e = device_checks::fire_mask(x, n, cols, n_cols, fire); !e.empty())
    return fail("fire_mask", e);
  launch_fire_mask(x, n_tok, n, cols, n_cols, threshold, fire, stream_);
  check_launch("fire_mask");
}

void CudaDevice::rope(float* x, int64_t n_tok, int n_head, int head_dim, int n_rot, DevicePos pos,
                      float theta_scale, float freq_scale, const float* freq_factors, bool neox) {
  select();
  const int pos0 = pos.host();
  if (std::string e = device_checks::rope(n_rot, head_dim, pos0); !e.empty())
    return fail("rope", e);
  if (n_tok <= 0 || n_head <= 0) return;  // as the CPU device: nothing to rotate, no error
  if (std::string e = device_checks::nulls({{"x", x}}); !e.empty()) return fail("rope", e);
  launch_rope(x, n_tok, n_head, head_dim, n_rot, pos0, pos.dev, theta_scale, freq_scale, freq_factors, neox,
              stream_);
  check_launch("rope");
}

void CudaDevice::kv_store(const float* k, const float* v, int64_t n_tok, DevicePos pos,
                          int64_t kv_dim, int n_ctx, fp16_t* k_cache, fp16_t* v_cache_t) {
  select();
  const int pos0 = pos.host();
  if (pos0 < 0 || pos0 + n_tok > n_ctx) {
    fail("kv_store", "positions [" + std::to_string(pos0) + ", " + std::to_string(pos0 + n_tok) +
                         ") do not fit a cache of " + std::to_string(n_ctx));
    return;
  }
  launch_kv_store(k, v, n_tok, pos0, pos.dev, kv_dim, n_ctx, k_cache, v_cache_t, stream_);
  check_launch("kv_store");
}

void CudaDevice::attention(const float* q, const fp16_t* k_cache, const fp16_t* v_cache_t,
                           DevicePos pos, int64_t n_tok, const AttentionShape& shape, float scale,
                           float* out) {
  select();
  const int pos0 = pos.host();
  const int hd = shape.head_dim;
  if (shape.n_head_kv <= 0 || shape.n_head % shape.n_head_kv != 0 || hd <= 0 || hd > kMaxHeadDim ||
      pos0 < 0 || pos0 + n_tok > shape.v_stride || shape.k_stride < int64_t{shape.n_head_kv} * hd) {
    fail("attention", "unsupported shape: n_head " + std::to_string(shape.n_head) + ", n_head_kv " +
                          std::to_string(shape.n_head_kv) + ", head_dim " + std::to_string(hd) +
                          " (at most " + std::to_string(kMaxHeadDim) + "), positions up to " +
                          std::to_string(pos0 + n_tok) + ", k_stride " +
                          std::to_string(shape.k_stride) + ", v_stride " +
                          std::to_string(shape.v_stride));
    return;
  }
  if (n_tok <= 0 || shape.n_head <= 0) return;
  AttentionParams p;
  p.q = q;
  p.k_cache = k_cache;
  p.v_cache_t = v_cache_t;
  p.pos0 = pos0;
  p.pos_at = pos.dev;
  p.n_tok = n_tok;
  p.n_head = shape.n_head;
  p.n_head_kv = shape.n_head_kv;
  p.head_dim = hd;
  p.k_stride = shape.k_stride;
  p.v_stride = shape.v_stride;
  p.scale = scale;
  p.out = out;
  launch_attention(p, stream_);
  check_launch("attention");
}

void CudaDevice::glu(float* gate, const float* up, int64_t n_tok, int64_t n, GluKind kind) {
  select();
  launch_glu(gate, up, n_tok * n, static_cast<int>(kind), stream_);
  check_launch("glu");
}

void CudaDevice::add(float* y, const float* x, int64_t n) {
  select();
  launch_add(y, x, n, stream_);
  check_launch("add");
}

// The checks below are the CPU device's (cpu_device.cpp), in its order: an empty operation does
// nothing, even with null pointers; a null pointer of a non-empty one is reported here rather
// than as an illegal address, which would end the CUDA context.
void CudaDevice::add_rows(float* y, const float* b, int64_t n_tok, int64_t n) {
  if (n <= 0 || n_tok <= 0) return;
  if (std::string e = device_checks::nulls({{"y", y}, {"b", b}}); !e.empty())
    return fail("add_rows", e);
  select();
  launch_add_rows(y, b, n_tok, n, stream_);
  check_launch("add_rows");
}

void CudaDevice::moe_topk(float* x, int64_t n_tok, int n_expert, int k, const MoeGate& gate,
                          int32_t* ids, float* w) {
  if (n_tok <= 0) return;
  if (std::string e = device_checks::moe_topk(x, n_tok, n_expert, k, ids, w); !e.empty())
    return fail("moe_topk", e);
  select();
  launch_moe_topk(x, n_tok, n_expert, k, gate.kind, gate.norm_w, gate.w_scale, ids, w, stream_);
  check_launch("moe_topk");
}

void CudaDevice::matmul_id(const TensorView& w, int64_t rows, const int32_t* ids, int64_t n_ids,
                           const float* x, int64_t x_stride, float* y) {
  select();
  if (n_ids <= 0) return;
  if (std::string e = device_checks::matmul_id(w, rows, ids, n_ids, x, x_stride, y); !e.empty())
    return fail("matmul_id", e);
  if (!check_weight("matmul_id", "weight", w, -1)) return;
  // One one-token mat-vec per id on its matrix: each as a one-row matmul computes it.
  for (int64_t j = 0; j < n_ids; ++j) {
    MatvecParams p;
    p.w = static_cast<const uint8_t*>(w.data);
    p.nb1 = w.nb1;
    p.ne0 = w.ne0;
    p.n_rows = rows;
    p.x = x + j * x_stride;
    p.n_tok = 1;
    p.y = y + j * rows;
    p.ldy = rows;
    p.ids = ids;
    p.route = j;
    p.n_mat = w.ne1 / rows;
    p.id_stride = rows * w.nb1;
    launch_matvec(w.type, p, stream_);
  }
  check_launch("matmul_id", static_cast<uint64_t>(n_ids));
}

void CudaDevice::moe_combine(const float* y, const float* w, int64_t n_tok, int k, int64_t n,
                             float* out) {
  if (n_tok <= 0 || n <= 0) return;
  if (std::string e = device_checks::moe_combine(y, w, n_tok, k, n, out); !e.empty())
    return fail("moe_combine", e);
  select();
  launch_moe_combine(y, w, n_tok, k, n, out, stream_);
  check_launch("moe_combine");
}

void CudaDevice::get_rows(float* dst, const float* src, const int32_t* idx, int64_t n,
                          int64_t width) {
  if (n <= 0 || width <= 0) return;
  if (std::string e = device_checks::nulls({{"dst", dst}, {"src", src}, {"idx", idx}}); !e.empty())
    return fail("get_rows", e);
  select();
  launch_get_rows(dst, src, idx, n, width, stream_);
  check_launch("get_rows");
}

void CudaDevice::set_rows_scaled(float* dst, const float* src, const int32_t* idx,
                                 const float* scale, int64_t n, int64_t width) {
  if (n <= 0 || width <= 0) return;
  if (std::string e =
          device_checks::nulls({{"dst", dst}, {"src", src}, {"idx", idx}, {"scale", scale}});
      !e.empty())
    return fail("set_rows_scaled", e);
  select();
  launch_set_rows_scaled(dst, src, idx, scale, n, width, stream_);
  check_launch("set_rows_scaled");
}

// ---- matmul -----------------------------------------------------------------------------------

void CudaDevice::matmul(const TensorView& w, const float* x, int64_t n_tok, float* y) {
  select();
  if (!check_weight("matmul", "weight", w, -1) || n_tok <= 0 || w.ne1 == 0) return;
  if (n_tok > kGemmMinTokens && gemm(w, x, n_tok, y)) return;
  matvec(w, x, n_tok, y);
}

void CudaDevice::matmul_rows(const TensorView& w, const float* x, int64_t n_tok, float* y) {
  select();
  if (!check_weight("matmul_rows", "weight", w, -1) || n_tok <= 0 || w.ne1 == 0) return;
  matvec(w, x, n_tok, y);
}

// y [n_tok, ne1] through the mat-vec kernel, kMaxVecTokens tokens per launch.
void CudaDevice::matvec(const TensorView& w, const float* x, int64_t n_tok, float* y) {
  for (int64_t t0 = 0; t0 < n_tok; t0 += kMaxVecTokens) {
    MatvecParams p;
    p.w = static_cast<const uint8_t*>(w.data);
    p.nb1 = w.nb1;
    p.ne0 = w.ne0;
    p.n_rows = w.ne1;
    p.x = x + t0 * w.ne0;
    p.n_tok = std::min(kMaxVecTokens, n_tok - t0);
    p.y = y + t0 * w.ne1;
    p.ldy = w.ne1;
    launch_matvec(w.type, p, stream_);
  }
  check_launch("matmul", static_cast<uint64_t>((n_tok + kMaxVecTokens - 1) / kMaxVecTokens));
}

// y [n_tok, ne1] = x W^T with cuBLAS over fp32 weight rows (dequantised, kGemmScratchBytes
// at a time). False when the scratch cannot be had or the sizes overflow cuBLAS's ints: the
// caller then takes the mat-vec path.
bool CudaDevice::gemm(const TensorView& w, const float* x, int64_t n_tok, float* y) {
  constexpr int64_t kIntMax = 0x7fffffff;
  if (w.ne0 > kIntMax || w.ne1 > kIntMax || n_tok > kIntMax) return false;
  const bool in_place = w.type == GgmlType::F32;  // check_weight: 4-byte aligned rows
  int64_t chunk = w.ne1;
  if (!in_place) {
    const uint64_t want =
        std::min<uint64_t>(kGemmScratchBytes, static_cast<uint64_t>(w.ne0 * w.ne1) * 4);
    if (!ensure_scratch(&gemm_scratch_, want, "matmul dequant scratch").ok()) return false;
    chunk = static_cast<int64_t>(gemm_scratch_.bytes / (static_cast<uint64_t>(w.ne0) * 4));
    if (chunk == 0) return false;
  }
  const float one = 1, zero = 0;
  for (int64_t r0 = 0; r0 < w.ne1; r0 += chunk) {
    const int64_t nr = std::min(chunk, w.ne1 - r0);
    const float* a = reinterpret_cast<const float*>(w.row(r0));
    int64_t lda = w.nb1 / 4;
    if (!in_place) {
      a = static_cast<const float*>(gemm_scratch_.p);
      lda = w.ne0;
      launch_dequant_rows(w.type, static_cast<const uint8_t*>(w.data), w.nb1, w.ne0, r0, nr,
                          static_cast<float*>(gemm_scratch_.p), stream_);
      check_launch("matmul (dequantise)");
    }
    // Column-major view: y^T [ne1, n_tok] = W [ne0, ne1]^T x^T [ne0, n_tok].
    if (timer_) timer_->start(stream_);
    const Status st = cublas_error(
        cublas::gemm_ex(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(nr),
                     static_cast<int>(n_tok), static_cast<int>(w.ne0), &one, a, CUDA_R_32F,
                     static_cast<int>(lda), x, CUDA_R_32F, static_cast<int>(w.ne0), &zero, y + r0,
                     CUDA_R_32F, static_cast<int>(w.ne1), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        "cublasGemmEx");
    if (!st.ok()) {
      fail("matmul", st.message());
      return true;
    }
    count_ops();
    timed("matmul (cublas)");
  }
  return true;
}

// ---- FFN ----------------------------------------------------------------------------------------

bool CudaDevice::check_ffn(const char* op, const TensorView& gate, const TensorView& up,
                           const TensorView& down_t, int64_t n_tok, GluKind kind) {
  const bool ungated = kind == GluKind::kReluUngated;  // up is not read
  if (!check_weight(op, "gate", gate, -1) || (!ungated && !check_weight(op, "up", up, gate.ne0)) ||
      !check_weight(op, "down_t", down_t, gate.ne0)) {
    return false;
  }
  if ((!ungated && up.ne1 != gate.ne1) || down_t.ne1 != gate.ne1) {
    fail(op, "gate, up and down_t must hold the same neurons: " + std::to_string(gate.ne1) + ", " +
                 std::to_string(up.ne1) + ", " + std::to_string(down_t.ne1) + " rows");
    return false;
  }
  return n_tok > 0;
}

void CudaDevice::ffn_threshold(const TensorView& gate, const float* gate_bias,
                               const TensorView& up, const TensorView& down_t, const float* x,
                               int64_t n_tok, float threshold, GluKind kind, float* out) {
  select();
  if (!check_ffn("ffn_threshold", gate, up, down_t, n_tok, kind)) return;
  ffn("ffn_threshold", {&gate, gate_bias, &up, &down_t, x, n_tok, nullptr, gate.ne1, nullptr,
                        threshold, kind, out});
}

void CudaDevice::ffn_rows(const TensorView& gate, const float* gate_bias, const TensorView& up,
                          const TensorView& down_t, const float* x, int64_t n_tok,
                          const int32_t* idx, int64_t n_idx, const uint8_t* fire, GluKind kind,
                          float* out) {
  select();
  if (!check_ffn("ffn_rows", gate, up, down_t, n_tok, kind)) return;
  ffn("ffn_rows", {&gate, gate_bias, &up, &down_t, x, n_tok, idx, n_idx, fire, 0.0f, kind, out});
}

// Splits of the neuron range for the down kernel: enough blocks to fill the GPU twice, at
// least 64 neurons per split.
int CudaDevice::down_splits(int64_t n_rows, int64_t n_out) const {
  const int64_t col_blocks = (n_out + kDownColumns - 1) / kDownColumns;
  const int64_t want = (2 * n_sm_ + col_blocks - 1) / col_blocks;
  return static_cast<int>(std::clamp<int64_t>(std::min(want, n_rows / 64), 1, 65535));
}

void CudaDevice::ffn(const char* op, const FfnArgs& a) {
  const int64_t n_embd = a.gate->ne0;
  if (a.n_rows <= 0) {
    const Status st =
        cuda_error(cudaMemsetAsync(a.out, 0, static_cast<size_t>(a.n_tok * n_embd) * 4, stream_),
                   "cudaMemsetAsync");
    if (!st.ok()) fail(op, st.message());
    else count_ops();
    return;
  }
  const int n_split = down_splits(a.n_rows, n_embd);
  const uint64_t h_bytes = (static_cast<uint64_t>(kMaxVecTokens * a.n_rows) * 4 + 255) / 256 * 256;
  const Status st = ensure_scratch(&ffn_scratch_, ffn_scratch_size(a.n_rows, n_embd), "ffn scratch");
  if (!st.ok()) return fail(op, st.message());
  float* h = static_cast<float*>(ffn_scratch_.p);  // [8, n_rows]: g, then h in place
  float* part = reinterpret_cast<float*>(static_cast<uint8_t*>(ffn_scratch_.p) + h_bytes);
  for (int64_t t0 = 0; t0 < a.n_tok; t0 += kMaxVecTokens) {
    ffn_group(a, t0, std::min(kMaxVecTokens, a.n_tok - t0), h, n_split, part);
  }
  // Per group of tokens: gate and up in one launch (or gate, then up or Falcon's relu), down,
  // and the sum of the down splits.
  const uint64_t groups = static_cast<uint64_t>((a.n_tok + kMaxVecTokens - 1) / kMaxVecTokens);
  check_launch(op, groups * ((fuse_gate_up(a) ? 2 : 3) + (n_split > 1 ? 1 : 0)));
}

// h [8, n_rows] (256-byte aligned), then the down splits [n_split, 8, n_embd] when n_split > 1.
uint64_t CudaDevice::ffn_scratch_size(int64_t n_rows, int64_t n_embd) const {
  if (n_rows <= 0) return 0;
  const int n_split = down_splits(n_rows, n_embd);
  const uint64_t h_bytes = (static_cast<uint64_t>(kMaxVecTokens * n_rows) * 4 + 255) / 256 * 256;
  return h_bytes +
         (n_split > 1 ? static_cast<uint64_t>(n_split) * kMaxVecTokens * n_embd * 4 : 0);
}

// Both grow with the operation (down_splits does not decrease with n_rows), so the largest
// ones set them.
void CudaDevice::scratch_sizes(const ScratchNeeds& n, uint64_t* gemm, uint64_t* ffn) const {
  *gemm = *ffn = 0;
  if (n.max_tokens > kGemmMinTokens) {  // gemm(): dequantised rows of non-F32 weights
    for (const WeightShape& w : n.matmul)
      if (w.type != GgmlType::F32)
        *gemm = std::max(*gemm, std::min<uint64_t>(kGemmScratchBytes,
                                                   static_cast<uint64_t>(w.ne0 * w.ne1) * 4));
  }
  for (const WeightShape& w : n.ffn) *ffn = std::max(*ffn, ffn_scratch_size(w.ne1, w.ne0));
}

uint64_t CudaDevice::scratch_bytes(const ScratchNeeds& n) const {
  uint64_t gemm, ffn;
  scratch_sizes(n, &gemm, &ffn);
  return (gemm ? charge_bytes(gemm) : 0) + (ffn ? charge_bytes(ffn) : 0);
}

Status CudaDevice::reserve_scratch(const ScratchNeeds& n) {
  select();
  uint64_t gemm, ffn;
  scratch_sizes(n, &gemm, &ffn);
  if (gemm) HC_TRY(ensure_scratch(&gemm_scratch_, gemm, "matmul dequant scratch"));
  if (ffn) HC_TRY(ensure_scratch(&ffn_scratch_, ffn, "ffn scratch"));
  return Status::Ok();
}

// Whether ffn_group computes h in one launch (launch_gate_up): a gated kind whose gate and up
// share a type, unless HOTCOLD_CUDA_FFN_FUSED=0 (the two launches, same bits: A/B timing).
bool CudaDevice::fuse_gate_up(const FfnArgs& a) const {
  return ffn_fused_ && a.kind != GluKind::kReluUngated && a.up && a.up->type == a.gate->type;
}

bool ffn_fused_from_env() {
  const char* v = std::getenv("HOTCOLD_CUDA_FFN_FUSED");
  return !(v && std::string(v) == "0");
}

// Tokens [t0, t0 + nt), nt <= kMaxVecTokens: h (gate and up, fused or not), then down.
void CudaDevice::ffn_group(const FfnArgs& a, int64_t t0, int64_t nt, float* h, int n_split,
                           float* part) {
  const int64_t n_embd = a.gate->ne0;
  MatvecParams p;
  p.w = static_cast<const uint8_t*>(a.gate->data);
  p.nb1 = a.gate->nb1;
  p.ne0 = n_embd;
  p.n_rows = a.n_rows;
  p.idx = a.idx;
  p.x = a.x + t0 * n_embd;
  p.n_tok = nt;
  p.y = h;
  p.ldy = a.n_rows;
  p.mode = a.fire ? MatvecMode::kSkipUnfired : MatvecMode::kPlain;
  p.fire = a.fire ? a.fire + t0 * a.n_rows : nullptr;
  p.ld_fire = a.n_rows;
  p.threshold = a.threshold;
  p.glu_kind = static_cast<int>(a.kind);
  p.bias = a.gate_bias;
  if (fuse_gate_up(a)) {
    p.w_up = static_cast<const uint8_t*>(a.up->data);
    p.nb1_up = a.up->nb1;
    launch_gate_up(a.gate->type, p, stream_);  // h = fired ? act(g) * (up . x) : 0
  } else {
    launch_matvec(a.gate->type, p, stream_);  // h = g = gate . x (+ bias)
    p.bias = nullptr;
    if (a.kind == GluKind::kReluUngated) {  // no up (Falcon): h = fired ? relu(g) : 0
      launch_ungated_relu(h, a.n_rows, nt, p.fire, p.ld_fire, a.threshold, stream_);
    } else {
      p.w = static_cast<const uint8_t*>(a.up->data);
      p.nb1 = a.up->nb1;
      p.mode = MatvecMode::kGlu;
      p.gate = h;
      launch_matvec(a.up->type, p, stream_);  // h = fired ? act(g) * (up . x) : 0
    }
  }
  float* out = a.out + t0 * n_embd;
  DownParams d;
  d.dt = static_cast<const uint8_t*>(a.down_t->data);
  d.nb1 = a.down_t->nb1;
  d.n_out = n_embd;
  d.h = h;
  d.idx = a.idx;
  d.n_rows = a.n_rows;
  d.n_tok = nt;
  d.n_split = n_split;
  d.part = n_split > 1 ? part : out;
  launch_sparse_down(a.down_t->type, d, stream_);
  if (n_split > 1) launch_sum_partials(part, n_split, nt * n_embd, out, stream_);
}

}  // namespace hc::ops::cuda
