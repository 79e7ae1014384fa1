// Tiny mixture-of-experts and qwen models for the model and engine tests (moe_test.cpp,
// tests/engine/moe_session_test.cpp).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "tiny_model.h"

namespace hc::testing {

// arch: qwen2, qwen3, qwen3moe (16 experts, 4 used) or mixtral (llama with 8 experts, 2 used).
inline TinyModelSpec moe_spec(const std::string& arch, GgmlType t = GgmlType::F32) {
  TinyModelSpec s;
  s.arch = arch == "mixtral" ? "llama" : arch;
  s.n_vocab = 48;
  s.n_embd = 64;
  s.n_ff = 64;
  s.n_head = 4;
  s.n_head_kv = 2;
  s.n_ctx = 64;
  s.wtype = t;
  if (dtype_traits(t).block_size == 256) s.n_embd = s.n_ff = 256;  // K-quants' rows
  if (arch == "qwen3" || arch == "qwen3moe")  // != n_embd / n_head, as Qwen3's
    s.head_dim = s.n_embd == 256 ? 128 : 32;
  if (arch == "mixtral") s.n_expert = 8, s.n_expert_used = 2;
  if (arch == "qwen3moe") s.n_expert = 16, s.n_expert_used = 4;
  return s;
}

inline const std::vector<int32_t> kMoeToks = {1, 5, 9, 3, 22, 7, 7, 30, 12, 4, 41, 17};

inline std::shared_ptr<const LlamaModel> load_spec(const TinyModelSpec& spec, std::vector<uint8_t>& bytes,
                                            bool repack) {
  TinyModel tm(spec);
  bytes = tm.bytes();
  return testing::load_tiny(bytes, repack);
}

}  // namespace hc::testing
