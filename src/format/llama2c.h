// llama2.c checkpoint (legacy "v0" export) + tokenizer.bin -> GGUF, producing the same
// metadata, tensor names, shapes and order as llama.cpp's convert-llama2c-to-ggml, so the
// result loads in llama.cpp as arch "llama".
//
// Pure functions over byte spans: every size comes from the 28-byte header and is checked
// against the span before anything is read, and bad input returns a Status naming what was
// expected and what was found.
//
// No Q/K permutation is needed: llama2.c rotates adjacent pairs (x[2i], x[2i+1]) within each
// head, which is exactly llama.cpp's "normal" RoPE mode used for arch llama; llama.cpp's own
// converter also copies wq/wk verbatim. (Only HF checkpoints, which use rotate_half, need the
// permutation.) llama2.c matrices are row-major [n_out][n_in], i.e. ggml ne = {n_in, n_out},
// so every tensor is a flat copy.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "format/gguf.h"

namespace hc {

// The 7 int32 header fields of a llama2.c checkpoint.
struct Llama2cConfig {
  int32_t dim = 0;         // n_embd
  int32_t hidden_dim = 0;  // n_ff
  int32_t n_layers = 0;    // n_layer
  int32_t n_heads = 0;     // n_head
  int32_t n_kv_heads = 0;  // n_head_kv
  int32_t vocab_size = 0;  // n_vocab (absolute value of the header field)
  int32_t seq_len = 0;     // n_ctx_train
  // Header vocab_size > 0 means the classifier shares the token embedding; < 0 means an
  // explicit wcls follows the RoPE tables.
  bool shared_classifier = true;

  int64_t head_dim() const { return dim / n_heads; }
  int64_t kv_dim() const { return head_dim() * n_kv_heads; }
};

// Reads and validates the header (positive sizes, sane limits, dim % n_heads == 0,
// n_heads % n_kv_heads == 0, even head_dim). Does not look at the weights.
Result<Llama2cConfig> parse_llama2c_config(std::span<const uint8_t> model_bin);

// Vocabulary as llama.cpp's converter rewrites it: ids 0/1/2 become "<unk>"/"<s>"/"</s>",
// spaces become U+2581, and each token gets a llama_token_type.
struct Llama2cVocab {
  int32_t max_token_length = 0;
  std::vector<std::string> tokens;   // [n_vocab]
  std::vector<float> scores;         // [n_vocab]
  std::vector<int32_t> token_types;  // [n_vocab], values of Llama2cTokenType
};

// llama.cpp's llama_token_type values (as stored in tokenizer.ggml.token_type).
enum Llama2cTokenType : int32_t {
  kTokenNormal = 1,
  kTokenUnknown = 2,
  kTokenControl = 3,
  kTokenByte = 6,
};

inline constexpr int32_t kLlama2cUnkId = 0;
inline constexpr int32_t kLlama2cBosId = 1;
inline constexpr int32_t kLlama2cEosId = 2;

// tokenizer.bin: int32 max_token_length, then per token {float score, int32 len, len bytes}.
// Exactly n_vocab tokens must be present and nothing may follow them.
Result<Llama2cVocab> parse_llama2c_tokenizer(std::span<const uint8_t> tokenizer_bin,
                                             int32_t n_vocab);

// One output tensor: a slice of ConvertedModel::weights.
struct ConvertedTensor {
  std::string name;         // GGUF name, e.g. "blk.0.attn_q.weight"
  std::vector<int64_t> ne;  // ggml order, ne[0] contiguous
  size_t offset = 0;        // in floats, into ConvertedModel::weights
  size_t n_floats = 0;
};

// A converted model that owns its weights. Tensors refer to `weights` by offset, so the
// object can be moved and copied freely; a GgufWriter made from it borrows its memory.
struct ConvertedModel {
  Llama2cConfig config;
  Llama2cVocab vocab;
  std::string name = "llama";  // general.name (llama.cpp's converter writes "llama")
  // The checkpoint payload after the header, verbatim: [token_embd, rms_att, wq, wk, wv, wo,
  // rms_ffn, w1, w2, w3, rms_final, freq_cis_real, freq_cis_imag, (wcls)]. The RoPE tables
  // are kept but not exported.
  std::vector<float> weights;
  // In llama.cpp converter order: token_embd, output_norm, output, then per layer
  // attn_q, attn_k, attn_v, attn_output, attn_norm, ffn_gate, ffn_down, ffn_up, ffn_norm.
  // output.weight is always present; with a shared classifier it points at the embedding
  // (written to the file as a second copy, as llama.cpp's converter does).
  std::vector<ConvertedTensor> tensors;

  const ConvertedTensor* find_tensor(const std::string& tensor_name) const;
  std::span<const float> tensor_data(const ConvertedTensor& t) const {
    return std::span<const float>(weights).subspan(t.offset, t.n_floats);
  }

  // Metadata and tensors ready to serialize. The tensor spans point into `weights`: keep
  // this ConvertedModel alive (and unmodified) while the writer is used.
  GgufWriter make_writer() const;
  Status write_gguf(const std::string& path) const;
};

Result<ConvertedModel> convert_llama2c(std::span<const uint8_t> model_bin,
                                       std::span<const uint8_t> tokenizer_bin);

}  // namespace hc
