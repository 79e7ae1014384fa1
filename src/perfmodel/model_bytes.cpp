// Byte sizes of a shape's layers as the engine stores them (perfmodel/model_bytes.h).
#include "perfmodel/model_bytes.h"

#include <cmath>

#include "perfmodel/detail.h"

namespace hc::perfmodel {

using detail::fmt;
using detail::lower;

uint64_t ModelBytes::ffn_read(int l) const {
  const LayerBytes& b = layers[static_cast<size_t>(l)];
  if (!moe()) return b.ffn_dense;
  return b.ffn_dense - static_cast<uint64_t>(n_expert - n_expert_used) * b.expert;
}

uint64_t ModelBytes::weight_bytes() const {
  uint64_t total = output;
  for (const LayerBytes& l : layers) total += l.attn + l.ffn_dense;
  return total;
}

GgmlType down_t_type_of(GgmlType t) {
  switch (t) {
    case GgmlType::F32: case GgmlType::F16: case GgmlType::BF16: return t;
    default: return GgmlType::Q8_0;
  }
}

double bytes_per_weight(GgmlType t) {
  const DTypeTraits tr = dtype_traits(t);
  return tr.block_size > 0 ? static_cast<double>(tr.type_size) / tr.block_size : 0.0;
}

namespace {

Status check_shape(const ModelShape& s) {
  const bool heads_ok = s.n_embd_head > 0 || (s.n_head > 0 && s.n_embd % s.n_head == 0);
  const bool moe_ok = s.n_expert == 0 || (s.n_expert_used > 0 && s.n_expert_used < s.n_expert);
  if (s.n_layer < 1 || s.n_embd < 1 || s.n_ff < 1 || s.n_head < 1 || s.n_head_kv < 1 ||
      s.n_vocab < 1 || !heads_ok || s.n_expert < 0 || !moe_ok || s.expert_predictor_rank < 0 ||
      !(s.expert_sparsity >= 0 && s.expert_sparsity < 1))
    return Status::Error(
        "model shape '" + s.name +
        "': expected positive sizes, n_embd a multiple of n_head (or a head size), 0 < experts "
        "used < experts and an expert sparsity in [0, 1), found n_layer " +
        std::to_string(s.n_layer) + ", n_embd " + std::to_string(s.n_embd) + ", n_ff " +
        std::to_string(s.n_ff) + ", heads " + std::to_string(s.n_head) + "/" +
        std::to_string(s.n_head_kv) + ", experts " + std::to_string(s.n_expert_used) + " of " +
        std::to_string(s.n_expert) + ", expert sparsity " + fmt(s.expert_sparsity));
  return Status::Ok();
}

uint64_t rows_of(GgmlType t, int64_t row_len, int64_t n_rows) {
  return static_cast<uint64_t>(row_bytes(t, row_len)) * static_cast<uint64_t>(n_rows);
}

}  // namespace

Result<ModelBytes> model_bytes(const ModelShape& s, GgmlType t) {
  const DTypeTraits tr = dtype_traits(t);
  if (tr.name == nullptr || tr.block_size <= 0 || tr.type_size <= 0)
    return Status::Error("weight type id " + std::to_string(static_cast<uint32_t>(t)) +
                         " has no known block size");
  HC_TRY(check_shape(s));
  const GgmlType dt = down_t_type_of(t);
  const int64_t q_dim = s.n_head * s.head_dim(), kv_dim = s.n_head_kv * s.head_dim();
  for (auto [n, ty] :
       {std::pair{s.n_embd, t}, std::pair{s.n_ff, t}, std::pair{s.n_embd, dt}, std::pair{q_dim, t}})
    if (n % dtype_traits(ty).block_size != 0)
      return Status::Error("model shape '" + s.name + "': a row of " + std::to_string(n) +
                           " weights is not a multiple of " + dtype_name(ty) + "'s block of " +
                           std::to_string(dtype_traits(ty).block_size));
  ModelBytes m;
  m.name = s.name;
  m.type = lower(dtype_name(t));
  m.n_embd = s.n_embd;
  m.n_ff = s.n_ff;
  m.n_vocab = s.n_vocab;
  m.n_expert = s.n_expert;
  m.n_expert_used = s.n_expert_used;
  const uint64_t row = static_cast<uint64_t>(row_bytes(t, s.n_embd));  // one row of n_embd
  const uint64_t norm = static_cast<uint64_t>(s.n_embd) * 4;
  LayerBytes l;
  // wq: q_dim rows, wk and wv: kv_dim rows (GQA shrinks them), wo: n_embd rows of q_dim.
  l.attn = norm + row * static_cast<uint64_t>(q_dim + 2 * kv_dim) + rows_of(t, q_dim, s.n_embd) +
           (s.qk_norm ? 2 * static_cast<uint64_t>(s.head_dim()) * 4 : 0);
  l.gate_row = row;
  l.up_row = row;
  l.down_t_row = static_cast<uint64_t>(row_bytes(dt, s.n_embd));
  // gate and up: n_ff rows of n_embd; down: n_embd rows of n_ff. MoE: one expert's.
  const uint64_t ffn = 2 * row * static_cast<uint64_t>(s.n_ff) + rows_of(t, s.n_ff, s.n_embd);
  if (s.moe()) {
    l.router = static_cast<uint64_t>(s.n_expert) * static_cast<uint64_t>(s.n_embd) * 4;
    l.expert = ffn;
    // fc1 [rank, n_embd], fc2 [n_ff, rank], F16 (PowerInfer's predictor layout).
    const int64_t r = s.expert_predictor_rank;
    l.expert_predictor =
        r > 0 ? rows_of(GgmlType::F16, s.n_embd, r) + rows_of(GgmlType::F16, r, s.n_ff) : 0;
    l.ffn_dense = norm + l.router + static_cast<uint64_t>(s.n_expert) * ffn;
  } else {
    l.ffn_dense = norm + ffn;
  }
  m.layers.assign(static_cast<size_t>(s.n_layer), l);
  m.kv_bytes_per_pos = 2 * static_cast<uint64_t>(kv_dim) * 2;  // K and V, fp16
  m.output = norm + row * static_cast<uint64_t>(s.n_vocab);
  return m;
}

}  // namespace hc::perfmodel
