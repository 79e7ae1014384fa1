// Byte sizes of every layer as the engine stores them: from a catalog shape and a weight type,
// or (the app) from a real GGUF. What every mode of the projection reads and places.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "perfmodel/model_shape.h"

namespace hc::perfmodel {

struct LayerBytes {
  uint64_t attn = 0;       // attn_norm + wq + wk + wv + wo as stored
  uint64_t ffn_dense = 0;  // ffn_norm + gate + up + down as stored (what a dense FFN reads)
  uint64_t gate_row = 0;   // one neuron's gate row
  uint64_t up_row = 0;     // one neuron's up row
  uint64_t down_t_row = 0; // one neuron's row of the transposed down matrix (sparse layout)
  // MoE: the rows above are one expert's, and ffn_dense is the FFN as stored: ffn_norm + router
  // + every expert.
  uint64_t router = 0;            // ffn_gate_inp, F32 [n_expert, n_embd]
  uint64_t expert = 0;            // one expert's gate + up + down as stored (a dense read of it)
  uint64_t expert_predictor = 0;  // one expert's neuron predictor, fc1 + fc2 (F16); 0: none
  uint64_t neuron() const { return gate_row + up_row + down_t_row; }
};

struct ModelBytes {
  std::string name;  // shape name or file
  std::string type;  // weight type name ("q4_0", or "file" for a real model's mix)
  int64_t n_embd = 0, n_ff = 0, n_vocab = 0;  // MoE: n_ff is one expert's width
  int n_expert = 0, n_expert_used = 0;        // MoE (0: dense FFN)
  std::vector<LayerBytes> layers;
  uint64_t kv_bytes_per_pos = 0;  // K and V of one layer for one position (fp16)
  uint64_t output = 0;            // output norm + output matrix
  int n_layer() const { return static_cast<int>(layers.size()); }
  bool moe() const { return n_expert > 0; }
  // The planner's placement units per layer: neurons, or experts for MoE.
  int64_t n_units() const { return moe() ? n_expert : n_ff; }
  // What one token reads of layer l's FFN when run dense: all of it, or (MoE) the norm, the
  // router and n_expert_used whole experts.
  uint64_t ffn_read(int l) const;
  // Weights (no KV, no predictors): every layer's attention and stored FFN plus the output.
  uint64_t weight_bytes() const;
};

// The sparse FFN's transposed down matrix type for a down matrix of type t: F32 / F16 / BF16
// keep theirs, block types become Q8_0 (mirrors ops::down_t_type; hc_sparse cannot link ops).
GgmlType down_t_type_of(GgmlType t);
// Bytes per weight of a type (block bytes / block size): f16 2, q8_0 1.0625, q4_0 0.5625, ...
double bytes_per_weight(GgmlType t);
// A shape's bytes with every matrix (output and experts included) of type t, norms and the MoE
// router F32, expert predictors F16. Errors when t has no known block size or a row length is
// not a multiple of it.
Result<ModelBytes> model_bytes(const ModelShape& shape, GgmlType t);

}  // namespace hc::perfmodel
