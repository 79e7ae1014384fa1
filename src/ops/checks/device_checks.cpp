#include "ops/checks/device_checks.h"

#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "quant/quant.h"

namespace hc::ops::device_checks {

namespace {
std::string str(int64_t v) { return std::to_string(v); }
}  // namespace

bool device_weight_type(GgmlType t) {
  switch (t) {
    case GgmlType::F32: case GgmlType::F16: case GgmlType::BF16:
    case GgmlType::Q4_0: case GgmlType::Q4_1: case GgmlType::Q8_0:
    case GgmlType::Q4_K: case GgmlType::Q5_K: case GgmlType::Q6_K:
      return true;
    default:  // Q5_0 / Q5_1 compute on the host only
      return false;
  }
}

// The message is built only on failure: every queued matmul runs this, and the queue
// allocates nothing in steady-state decode.
std::string weight(const char* name, const TensorView& w, int64_t ne0) {
  const auto what = [&] {
    return std::string(name) + " (" + dtype_name(w.type) + " [" + str(w.ne1) + ", " + str(w.ne0) +
           "])";
  };
  if (!device_weight_type(w.type))
    return what() + ": weight type " + dtype_name(w.type) +
           " is not supported (F32 F16 BF16 Q4_0 Q4_1 Q8_0 Q4_K Q5_K Q6_K are)";
  const int64_t bs = dtype_traits(w.type).block_size;
  const uint64_t align = w.type == GgmlType::F32 ? 4 : 2;
  if (ne0 >= 0 && w.ne0 != ne0) return what() + ": expected " + str(ne0) + " inputs per row";
  if (w.ne0 <= 0 || w.ne1 < 0 || w.ne0 % bs != 0)
    return what() + ": rows must be whole blocks of " + str(bs);
  if (!w.data || w.nb1 < row_bytes(w.type, w.ne0) || w.nb1 % align != 0 ||
      reinterpret_cast<uintptr_t>(w.data) % align != 0)
    return what() + ": no data, or rows overlap or are misaligned (nb1 " + str(w.nb1) + ")";
  return "";
}

std::string ffn(const TensorView& gate, const TensorView& up, const TensorView& down_t,
                GluKind kind) {
  const bool ungated = kind == GluKind::kReluUngated;
  std::string e = weight("gate", gate, -1);
  if (e.empty() && !ungated) e = weight("up", up, gate.ne0);
  if (e.empty()) e = weight("down_t", down_t, gate.ne0);
  if (e.empty() && ((!ungated && up.ne1 != gate.ne1) || down_t.ne1 != gate.ne1))
    e = "gate, up and down_t must hold the same neurons: " + str(gate.ne1) + ", " + str(up.ne1) +
        ", " + str(down_t.ne1) + " rows";
  return e;
}

std::string ffn_indices(const int32_t* idx, int64_t n_idx, int64_t n_rows) {
  for (int64_t j = 0; j < n_idx; ++j)
    if (idx[j] < 0 || idx[j] >= n_rows)
      return "idx[" + str(j) + "] = " + str(idx[j]) + " is not a neuron of the " + str(n_rows) +
             " held";
  return "";
}

std::string rope(int n_rot, int head_dim, int pos0) {
  if (n_rot < 0 || n_rot > head_dim || pos0 < 0)
    return "n_rot " + str(n_rot) + " must be in [0, head_dim " + str(head_dim) + "] and pos0 " +
           str(pos0) + " >= 0";
  return "";
}

std::string kv_store(int64_t n_tok, int pos0, int64_t kv_dim, int n_ctx) {
  if (pos0 < 0 || pos0 + n_tok > n_ctx)
    return "positions [" + str(pos0) + ", " + str(pos0 + n_tok) + ") do not fit a cache of " +
           str(n_ctx);
  return negatives({{"n_tok", n_tok}, {"kv_dim", kv_dim}});
}

std::string attention(const AttentionShape& shape, int pos0, int64_t n_tok) {
  const int hd = shape.head_dim;
  if (shape.n_head_kv <= 0 || shape.n_head % shape.n_head_kv != 0 || hd <= 0 || hd > kMaxHeadDim ||
      pos0 < 0 || pos0 + n_tok > shape.v_stride || shape.k_stride < int64_t{shape.n_head_kv} * hd)
    return "unsupported shape: n_head " + str(shape.n_head) + ", n_head_kv " +
           str(shape.n_head_kv) + ", head_dim " + str(hd) + " (at most " + str(kMaxHeadDim) +
           "), positions up to " + str(pos0 + n_tok) + ", k_stride " + str(shape.k_stride) +
           ", v_stride " + str(shape.v_stride);
  return "";
}

std::string update_rows(const TensorView& w, const TensorView& host, const int32_t* src_rows,
                        const int32_t* slots, int64_t n) {
  if (host.type != w.type || host.ne0 != w.ne0)
    return "host rows and device matrix differ in type or row length";
  std::string e = weight("device matrix", w, -1);
  if (e.empty()) e = weight("host matrix", host, w.ne0);
  if (e.empty()) e = nulls({{"src_rows", src_rows}, {"slots", slots}});
  if (!e.empty()) return e;
  for (int64_t j = 0; j < n; ++j)
    if (slots[j] < 0 || slots[j] >= w.ne1 || src_rows[j] < 0 || src_rows[j] >= host.ne1)
      return "row " + str(src_rows[j]) + " -> slot " + str(slots[j]) + " is out of range";
  return "";
}

std::string nulls(std::initializer_list<std::pair<const char*, const void*>> ptrs) {
  for (const auto& [name, p] : ptrs)
    if (!p) return std::string(name) + " is null";
  return "";
}

std::string negatives(std::initializer_list<std::pair<const char*, int64_t>> sizes) {
  for (const auto& [name, v] : sizes)
    if (v < 0) return std::string(name) + " " + str(v) + " must be >= 0";
  return "";
}

std::string fire_mask(const float* x, int64_t n, const int32_t* cols, int64_t n_cols,
                      const uint8_t* fire) {
  if (std::string e = negatives({{"n", n}, {"n_cols", n_cols}}); !e.empty()) return e;
  if (std::string e = nulls({{"x", x}, {"fire", fire}}); !e.empty()) return e;
  if (!cols && n_cols > n) return "n_cols " + str(n_cols) + " > n " + str(n) + " without cols";
  return "";
}

std::string moe_topk(const float* x, int64_t n_tok, int n_expert, int k, const int32_t* ids,
                     const float* w) {
  if (std::string e = negatives({{"n_tok", n_tok}}); !e.empty()) return e;
  if (n_expert < 1 || k < 1 || k > n_expert)
    return "k " + str(k) + " of " + str(n_expert) + " experts: expected 1 <= k <= n_expert";
  return nulls({{"x", x}, {"ids", ids}, {"w", w}});
}

std::string matmul_id(const TensorView& w, int64_t rows, const int32_t* ids, int64_t n_ids,
                      const float* x, int64_t x_stride, const float* y) {
  if (std::string e = weight("weight", w, -1); !e.empty()) return e;
  if (rows < 1 || w.ne1 % rows != 0)
    return "rows " + str(rows) + " per matrix do not divide the weight's " + str(w.ne1) + " rows";
  if (std::string e = negatives({{"n_ids", n_ids}, {"x_stride", x_stride}}); !e.empty()) return e;
  if (x_stride != 0 && x_stride != w.ne0)
    return "x_stride " + str(x_stride) + ": expected 0 (one input) or a row of x (" +
           str(w.ne0) + ")";
  return nulls({{"ids", ids}, {"x", x}, {"y", y}});
}

std::string moe_combine(const float* y, const float* w, int64_t n_tok, int k, int64_t n,
                        const float* out) {
  if (std::string e = negatives({{"n_tok", n_tok}, {"n", n}}); !e.empty()) return e;
  if (k < 1) return "k " + str(k) + " must be >= 1";
  return nulls({{"y", y}, {"w", w}, {"out", out}});
}

}  // namespace hc::ops::device_checks
