// LLaMA-family model (Llama 2/3, Mistral, SmolLM2, ReluLLaMA, ProSparse, Bamboo) and Falcon
// (ReluFalcon): hyperparameters from GGUF metadata, weights bound by their GGUF names (zero-copy
// views into the mmapped file). A LlamaModel is immutable after load and can be shared by many
// sessions.
//
// Falcon differs from llama in four ways, all expressed here so the forward passes stay one:
//   - LayerNorm with a bias (NormKind::kLayer) instead of RMSNorm;
//   - parallel blocks: attention and FFN both read the layer input x, x += ffn + attn
//     (LlamaHParams::parallel_block); the FFN's norm is the layer's attn_norm, bound as
//     ffn_norm, and attention reads attn_norm_2 where the file has one (Falcon-40B);
//   - NeoX RoPE (pairs i, i + n_rot/2), fused Q/K/V (bound as three row ranges of attn_qkv);
//   - an ungated FFN h = act(up . x): the file's ffn_up is bound as ffn_gate (the matrix whose
//     activation decides firing) and ffn_up stays empty (LlamaHParams::ffn_gated = false).
// OPT (PowerInfer's PWRI OPT, as PowerInfer computes it) is sequential like llama, with
// LayerNorm, learned position embeddings added to the token embedding (row = position + 2, HF
// OPT's offset, which PowerInfer applies too; no RoPE), biases on Q, K, V, the attention output, ffn_up (bound as
// ffn_gate_b: h = relu(up . x + b)) and the down projection (ffn_down_b, added once to the FFN's
// output), and the output tied to token_embd.
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

// The FFN's gated activation h = f(gate . x, up . x):
//   kSilu   SwiGLU  silu(g) * u        (llama.cpp's llama)
//   kRelu   ReGLU   relu(g) * u        (ReluLLaMA, ProSparse; PowerInfer's sparse llama)
//   kDRelu  dReLU   relu(g) * relu(u)  (Bamboo, TurboSparse: PowerInfer's bamboo, LLM_FFN_SYM)
// The ReLU family fires neuron i for a token when relu(g) > 0 (exactly sparse); dReLU's h is
// also zero where u <= 0.
// Ungated FFNs (Falcon) have h = f(gate . x) with no up: kRelu is then ReLU, kGelu GELU
// (llama.cpp's falcon, ggml's fp16-table tanh approximation).
enum class FfnActivation { kSilu, kRelu, kDRelu, kGelu };
inline bool relu_family(FfnActivation a) {
  return a == FfnActivation::kRelu || a == FfnActivation::kDRelu;
}
const char* activation_name(FfnActivation a);

enum class NormKind { kRms, kLayer };

// How a mixture-of-experts router turns its logits into expert weights (llama.cpp's
// llama_expert_gating_func_type): softmax over all experts, then the top n_expert_used
// (kSoftmax, Mixtral and Qwen3-MoE); sigmoid of each logit (kSigmoid); or the top n_expert_used
// logits first, then a softmax over those (kSoftmaxWeight).
enum class MoeGating { kSoftmax, kSigmoid, kSoftmaxWeight };

// OPT's learned position table starts 2 rows in (HF OPTLearnedPositionalEmbedding's offset;
// PowerInfer adds it to OPT's inp_pos): position p reads row p + 2.
inline constexpr int kOptPosOffset = 2;

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
  int n_rot = 0;         // rotated dimensions per head (0: no RoPE; opt's learned positions)
  float rms_eps = 1e-5f;  // the norms' epsilon (RMSNorm, or LayerNorm: layer_norm_epsilon)
  NormKind norm = NormKind::kRms;
  bool parallel_block = false;  // falcon: x += ffn(norm(x)) + attn(norm(x))
  bool rope_neox = false;       // falcon: RoPE rotates (i, i + n_rot/2) pairs
  bool ffn_gated = true;        // false: h = act(gate . x), no up (falcon; see above)
  bool learned_pos = false;     // opt: x = token_embd[t] + position_embd[pos + kOptPosOffset]
  bool qk_norm = false;         // qwen3: RMSNorm of every Q and K head (attn_q_norm /
                                // attn_k_norm, [head_dim]) before RoPE
  // Mixture of experts (llama with expert_count: Mixtral; qwen3moe): each layer's FFN is
  // n_expert gated experts of n_ff neurons each (n_ff is then the expert width), of which a
  // router (ffn_gate_inp) picks n_expert_used per token; the FFN's output is the weighted sum
  // of theirs. n_expert = 0: one dense FFN.
  int n_expert = 0;
  int n_expert_used = 0;
  MoeGating moe_gating = MoeGating::kSoftmax;
  bool moe_norm_w = false;    // the chosen weights are divided by their sum
  float moe_w_scale = 0.0f;   // then multiplied by this (0 or 1: left alone)
  bool is_moe() const { return n_expert > 0; }
  float rope_freq_base = 10000.0f;
  float rope_freq_scale = 1.0f;
  FfnActivation ffn_act = FfnActivation::kSilu;
  // PowerInfer's predictor threshold (powerinfer.sparse_threshold): a neuron is predicted to
  // fire when its predictor logit is at least this. 0 when the key is absent.
  float sparse_threshold = 0.0f;
  // Per-layer predictor thresholds (hotcold.predictor.thresholds, written by train-predictor;
  // empty when absent: sparse_threshold applies to every layer).
  std::vector<float> predictor_thresholds;
  // hotcold predictors trained on the normed FFN input (hotcold.predictor.thresholds without
  // hotcold.predictor.input = "residual", from before predictors read PowerInfer's input):
  // refused by the sparse FFN, which names the fix (train again).
  bool predictor_normed_input = false;

  static Result<LlamaHParams> from_gguf(const GgufFile& f);
};

// Whether the devices (ops::Device) can run this model's attention block, dense FFN and output
// layer: RMSNorm, sequential blocks, gated FFN, RoPE of either kind, Q/K/V/output biases and
// Q/K norms (llama, mistral, bamboo, qwen2, qwen3, qwen3moe). Where not (falcon, opt: LayerNorm,
// parallel blocks, learned positions), a device holds hot neurons only (and not those of an FFN
// with biases: opt).
inline bool device_blocks_supported(const LlamaHParams& hp) {
  return hp.norm == NormKind::kRms && !hp.parallel_block && hp.ffn_gated && !hp.learned_pos;
}

struct LlamaLayerWeights {
  TensorView attn_norm;    // [n_embd] f32 (falcon: attn_norm_2 where the file has it)
  TensorView attn_norm_b;  // [n_embd] f32 LayerNorm bias (NormKind::kLayer), else empty
  TensorView wq;           // [n_head*head_dim rows, n_embd]
  TensorView wk;           // [n_head_kv*head_dim rows, n_embd]
  TensorView wv;           // [n_head_kv*head_dim rows, n_embd]
  TensorView wo;           // [n_embd rows, n_head*head_dim]
  TensorView bq, bk, bv, bo;  // [rows] f32 biases of wq, wk, wv, wo (opt, qwen2), else empty
  TensorView attn_q_norm;  // [head_dim] f32 RMSNorm of each Q head (qwen3), else empty
  TensorView attn_k_norm;  // [head_dim] f32 RMSNorm of each K head (qwen3), else empty
  TensorView ffn_norm;     // [n_embd] f32 (falcon: the file's attn_norm)
  TensorView ffn_norm_b;   // [n_embd] f32 LayerNorm bias, else empty
  TensorView ffn_gate;     // [n_ff rows, n_embd], one row per neuron (falcon: the file's ffn_up)
  TensorView ffn_up;       // [n_ff rows, n_embd], one row per neuron; empty when ungated
  TensorView ffn_gate_b;   // [n_ff] f32 bias of ffn_gate's output before the activation (opt's
                           // ffn_up.bias), else empty
  TensorView ffn_down_b;   // [n_embd] f32 bias added to the FFN's output (opt), else empty
  TensorView ffn_down;     // [n_embd rows, n_ff]; empty in PowerInfer files, which store
                           // only its transpose
  // PowerInfer's layout (optional): the transposed down matrix and the activation predictor
  // fc2 . relu(fc1 . x) (its rank may differ per layer).
  TensorView ffn_down_t;   // [n_ff rows, n_embd] (blk.N.ffn_down_t.weight)
  TensorView fc1;          // [rank rows, n_embd] (blk.N.fc1.weight)
  TensorView fc2;          // [n_ff rows, rank]   (blk.N.fc2.weight)
  // Mixture of experts (hp.is_moe(); then ffn_gate / ffn_up / ffn_down are empty): the router
  // and each expert's matrices, row views of the file's 3-D tensors ffn_{gate,up,down}_exps.
  TensorView ffn_gate_inp;  // [n_expert rows, n_embd] the router (F32 in llama.cpp's files)
  struct Expert {
    TensorView gate;  // [n_ff rows, n_embd]
    TensorView up;    // [n_ff rows, n_embd]
    TensorView down;  // [n_embd rows, n_ff]
  };
  std::vector<Expert> experts;  // [n_expert]
};

struct LlamaWeights {
  TensorView token_embd;   // [n_vocab rows, n_embd]
  TensorView output_norm;  // [n_embd] f32
  TensorView output_norm_b;  // [n_embd] f32 LayerNorm bias, else empty
  TensorView output;       // [n_vocab rows, n_embd]; token_embd when tied
  TensorView rope_freqs;   // [n_rot/2] f32 (Llama-3 frequency factors) or empty
  TensorView pos_embd;     // [n_ctx_train rows, n_embd] learned positions (opt) or empty
  std::vector<LlamaLayerWeights> layers;
};

class LlamaModel {
 public:
  struct LoadOptions {
    // Copy Q4_0 / Q4_1 / Q8_0 / Q4_K matrices into the decode layout (ops/cpu/repack.h) when
    // this CPU runs its kernels, and drop the mmapped pages of the originals, so resident
    // memory stays ~ the file size. false: every weight stays a zero-copy view of the file.
    bool repack = true;
    // Repacked Q4_1 / Q8_0 matrices compute in block sums (TensorView::block_sums, repack.h):
    // faster, and several tokens share each unpacked block, but not llama.cpp's bits at batch
    // 1 (`--decode-kernels fast`; serve's default). false: ggml's order.
    bool block_sums = false;
    // A sparse FFN will run (model/sparse_ffn.h): ffn_up and ffn_down keep the file's row
    // layout (the sparse operators read single rows; the transposed down is built from it).
    bool sparse_ffn = false;
    // Predictor-driven sparse FFN: ffn_gate keeps the row layout too.
    bool sparse_gate = false;
    // Store the activation predictors (fc1 / fc2) in this type, converted at load (none: as the
    // file has them). Fewer bytes per token at some cost in their logits' precision.
    std::optional<GgmlType> predictor_type;
  };
  // Maps the file, parses GGUF, reads hyperparameters, tokenizer and binds all weights.
  static Result<std::shared_ptr<const LlamaModel>> load(const std::string& path,
                                                        const LoadOptions& opt);
  static Result<std::shared_ptr<const LlamaModel>> load(const std::string& path) {
    return load(path, LoadOptions{});
  }
  // Same from an already-parsed file whose bytes outlive the model (tests, converters).
  // repack: as LoadOptions::repack, but the file's bytes are left alone (not an mmap).
  // block_sums: as LoadOptions::block_sums.
  static Result<std::shared_ptr<const LlamaModel>> from_gguf(GgufFile file, bool repack = false,
                                                             bool block_sums = false);

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
  Status bind_experts(int il);  // layer il's router and experts (hp_.is_moe())
  // Repacks every eligible matrix; drop_pages: release the mmapped originals' pages.
  void repack_weights(bool drop_pages);
  // Repacks matrices of one type and shape into one mapping; false when it cannot be mapped.
  bool repack_group(const std::vector<TensorView*>& mats, bool drop_pages);
  // Copies the F32 vectors (norms, rope factors) into vectors_ and points the weights there;
  // `file`: the mapping to release after each vector (empty: keep its pages).
  void copy_vectors(std::span<const uint8_t> file);
  // Converts every predictor matrix to type t (anonymous memory in packed_).
  Status convert_predictors(GgmlType t);

  MappedFile mapped_;
  GgufFile file_;
  LlamaHParams hp_;
  LlamaWeights w_;
  std::optional<Tokenizer> tok_;  // always set after load
  std::vector<std::unique_ptr<uint8_t, Unmap>> packed_;  // anonymous memory, one per matrix
  std::vector<float> vectors_;  // copies of the F32 vectors when the matrices are repacked
  uint64_t repacked_bytes_ = 0;
  bool keep_ffn_rows_ = false;  // LoadOptions::sparse_ffn
  bool keep_gate_rows_ = false;  // LoadOptions::sparse_gate
  bool block_sums_ = false;      // LoadOptions::block_sums
};

}  // namespace hc
