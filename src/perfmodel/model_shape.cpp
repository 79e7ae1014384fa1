// The model shape catalog (perfmodel/model_shape.h; docs/SIMULATE.md cites each figure).
#include "perfmodel/model_shape.h"

namespace hc::perfmodel {

namespace {

ModelShape moe_shape(ModelShape s, int n_expert, int n_used, int64_t head_dim = 0,
                     bool qk_norm = false, double expert_sparsity = 0, int64_t pred_rank = 0) {
  s.n_expert = n_expert;
  s.n_expert_used = n_used;
  s.n_embd_head = head_dim;
  s.qk_norm = qk_norm;
  s.expert_sparsity = expert_sparsity;
  s.expert_predictor_rank = pred_rank;
  return s;
}

}  // namespace

const std::vector<ModelShape>& shape_catalog() {
  static const std::vector<ModelShape> kShapes = {
      {"llama2-7b", 32, 4096, 11008, 32, 32, 32000,
       "Llama 2 (Touvron et al. 2023, table 1) and meta-llama/Llama-2-7b-hf config.json"},
      {"llama2-13b", 40, 5120, 13824, 40, 40, 32000,
       "Llama 2 (Touvron et al. 2023) and meta-llama/Llama-2-13b-hf config.json"},
      {"llama-33b", 60, 6656, 17920, 52, 52, 32000,
       "LLaMA (Touvron et al. 2023, table 2: 33B dim 6656, 52 heads, 60 layers); n_ff 17920 "
       "from the 30B checkpoint's params (hidden = 256-multiple of 8/3 * 6656)"},
      {"llama2-70b", 80, 8192, 28672, 64, 8, 32000,
       "Llama 2 (Touvron et al. 2023: GQA with 8 KV heads for 70B) and "
       "meta-llama/Llama-2-70b-hf config.json"},
      moe_shape({"qwen3-30b-a3b", 48, 2048, 768, 32, 4, 151936,
                 "Qwen/Qwen3-30B-A3B config.json (moe_intermediate_size 768, head_dim 128, "
                 "q/k norms)"},
                128, 8, 128, true),
      moe_shape({"mixtral-8x7b", 32, 4096, 14336, 32, 8, 32000,
                 "Mixtral of Experts (Jiang et al. 2024) and mistralai/Mixtral-8x7B-v0.1 "
                 "config.json"},
                8, 2),
      moe_shape({"turbosparse-mixtral", 32, 4096, 14336, 32, 8, 57024,
                 "PowerInfer/TurboSparse-Mixtral config.json; dReLU experts 85% sparse (Song et "
                 "al. 2024, arXiv 2406.05955, section 6.2); predictors rank ~1k (checkpoint size)"},
                8, 2, 0, false, 0.85, 1024),
  };
  return kShapes;
}

Result<ModelShape> find_shape(const std::string& name) {
  std::string key = name;
  if (key == "7b") key = "llama2-7b";
  if (key == "13b") key = "llama2-13b";
  if (key == "33b" || key == "30b" || key == "llama2-33b") key = "llama-33b";
  if (key == "70b") key = "llama2-70b";
  if (key == "qwen3-moe" || key == "qwen3-30b") key = "qwen3-30b-a3b";
  if (key == "mixtral") key = "mixtral-8x7b";
  if (key == "turbosparse") key = "turbosparse-mixtral";
  std::string names;
  for (const ModelShape& s : shape_catalog()) {
    if (s.name == key) return s;
    names += (names.empty() ? "" : ", ") + s.name;
  }
  return Status::Error("unknown model shape '" + name + "': expected one of " + names +
                       " (or 7b, 13b, 33b, 70b, qwen3-moe, mixtral, turbosparse)");
}

}  // namespace hc::perfmodel
