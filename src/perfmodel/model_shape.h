// Model shapes the performance model projects (docs/SIMULATE.md "Model shapes" cites each):
// LLaMA-family dense shapes and the MoE shapes, by name.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace hc::perfmodel {

struct ModelShape {
  std::string name;
  int n_layer = 0;
  int64_t n_embd = 0, n_ff = 0;  // MoE: n_ff is one expert's FFN width
  int n_head = 0, n_head_kv = 0;
  int64_t n_vocab = 0;
  std::string source;  // where the figures come from
  int64_t n_embd_head = 0;     // head size when not n_embd / n_head (Qwen3: 128, not 2048 / 32)
  bool qk_norm = false;        // per-head RMS norms of q and k (Qwen3): 2 x head_dim F32 per layer
  int n_expert = 0;            // MoE: experts per layer (0: a dense FFN)
  int n_expert_used = 0;       // MoE: experts the router picks per token
  double expert_sparsity = 0;  // share of a routed expert's neurons not firing (0: dense)
  int64_t expert_predictor_rank = 0;  // each expert's low-rank neuron predictor (F16), 0: none
  int64_t head_dim() const {
    return n_embd_head > 0 ? n_embd_head : (n_head > 0 ? n_embd / n_head : 0);
  }
  bool moe() const { return n_expert > 0; }
};

// llama2-7b, llama2-13b, llama-33b, llama2-70b, and the MoE shapes qwen3-30b-a3b, mixtral-8x7b,
// turbosparse-mixtral (docs/SIMULATE.md cites each).
const std::vector<ModelShape>& shape_catalog();
// By name; "7b", "13b", "33b", "70b", "qwen3-moe", "mixtral", "turbosparse" are accepted too.
// Errors name the accepted names.
Result<ModelShape> find_shape(const std::string& name);

}  // namespace hc::perfmodel
