// LLaMA-family model (Llama 2/3, Mistral, SmolLM2, ReluLLaMA, ProSparse, Bamboo): hyper-
// parameters from GGUF metadata, weights bound by their GGUF names (zero-copy views into the
// mmapped file). A LlamaModel is immutable after load and can be shared by many sessions.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/mmap.h"
#include "core/status.h"
#include "core/tensor_view.h"
#include "format/gguf.h"
#include "tokenizer/tokenizer.h"

namespace hc {

enum class FfnActivation { kSilu, kRelu };

struct LlamaHParams {
  std::string arch;      // general.architecture
  int n_vocab = 0;
  int n_ctx_train = 0;
  int n_embd = 0;
  int n_layer = 0;
  int n_head = 0;
  int n_head_kv = 0;
  int n_ff = 0;
  int head_dim = 0;      // n_embd / n_head unless attention.key_length says otherwise
  int n_rot = 0;         // rotated dimensions per head
  float rms_eps = 1e-5f;
  float rope_freq_base = 10000.0f;
  float rope_freq_scale = 1.0f;
  FfnActivation ffn_act = FfnActivation::kSilu;

  static Result<LlamaHParams> from_gguf(const GgufFile& f);
};

struct LlamaLayerWeights {
  TensorView attn_norm;    // [n_embd] f32
  TensorView wq;           // [n_head*head_dim rows, n_embd]
  TensorView wk;           // [n_head_kv*head_dim rows, n_embd]
  TensorView wv;           // [n_head_kv*head_dim rows, n_embd]
  TensorView wo;           // [n_embd rows, n_head*head_dim]
  TensorView ffn_norm;     // [n_embd] f32
  TensorView ffn_gate;     // [n_ff rows, n_embd], one row per neuron
  TensorView ffn_up;       // [n_ff rows, n_embd], one row per neuron
  TensorView ffn_down;     // [n_embd rows, n_ff]
};

struct LlamaWeights {
  TensorView token_embd;   // [n_vocab rows, n_embd]
  TensorView output_norm;  // [n_embd] f32
  TensorView output;       // [n_vocab rows, n_embd]; token_embd when tied
  TensorView rope_freqs;   // [n_rot/2] f32 (Llama-3 frequency factors) or empty
  std::vector<LlamaLayerWeights> layers;
};

class LlamaModel {
 public:
  struct LoadOptions {
    // Copy Q4_0 / Q4_1 / Q8_0 / Q4_K matrices into the decode layout (ops/cpu/repack.h) when
    // this CPU runs its kernels, and drop the mmapped pages of the originals, so resident
    // memory stays ~ the file size. false: every weight stays a zero-copy view of the file.
    bool repack = true;
  };
  // Maps the file, parses GGUF, reads hyperparameters, tokenizer and binds all weights.
  static Result<std::shared_ptr<const LlamaModel>> load(const std::string& path,
                                                        const LoadOptions& opt);
  static Result<std::shared_ptr<const LlamaModel>> load(const std::string& path) {
    return load(path, LoadOptions{});
  }
  // Same from an already-parsed file whose bytes outlive the model (tests, converters).
  // repack: as LoadOptions::repack, but the file's bytes are left alone (not an mmap).
  static Result<std::shared_ptr<const LlamaModel>> from_gguf(GgufFile file, bool repack = false);

  const LlamaHParams& hparams() const { return hp_; }
  const LlamaWeights& weights() const { return w_; }
  const Tokenizer& tokenizer() const { return *tok_; }
  // Metadata and tensor table. After load(), the tokenizer.ggml.* arrays are empty (their
  // contents live in tokenizer()).
  const GgufFile& gguf() const { return file_; }
  // RoPE theta_scale = freq_base^(-2/n_rot), as ggml computes it.
  float rope_theta_scale() const;
  // Bytes of weights read to decode one token (every matrix once, embeddings one row).
  uint64_t weight_bytes_per_token() const;
  uint64_t file_bytes() const { return mapped_.bytes().size(); }
  // Bytes of weights held in the decode layout (0 without repacking).
  uint64_t repacked_bytes() const { return repacked_bytes_; }

 private:
  struct Unmap {
    size_t bytes;
    void operator()(uint8_t* p) const;
  };
  LlamaModel() = default;
  Status bind_weights();
  // Repacks every eligible matrix; drop_pages: release the mmapped originals' pages.
  void repack_weights(bool drop_pages);

  MappedFile mapped_;
  GgufFile file_;
  LlamaHParams hp_;
  LlamaWeights w_;
  std::optional<Tokenizer> tok_;  // always set after load
  std::vector<std::unique_ptr<uint8_t, Unmap>> packed_;  // anonymous memory, one per matrix
  uint64_t repacked_bytes_ = 0;
};

}  // namespace hc
