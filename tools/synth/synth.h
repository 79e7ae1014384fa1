// hc-synth-model's parts (one concept per file):
//   synth.h            shapes, weight types, flags, the validated Config, tensor specs
//   synth_config.cpp   flags -> Config (validate), the architectures' traits
//   synth_tensors.cpp  the synthetic vocabulary, every architecture's tensor list, the metadata
//   synth_write.cpp    deterministic random values, derived tensors, the streamed file
//   synth_model.cpp    the command line
// (synth_model.cpp's header comment says what the tool writes.)
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <memory>

#include "core/dtype.h"
#include "core/status.h"
#include "format/gguf.h"
#include "twin.h"

namespace hc::synth {

inline constexpr const char* kTool = "hc-synth-model";
inline const std::string kSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's escaped space

// Hyperparameters of a real model.
struct Shape {
  const char* name;
  int n_embd, n_ff, n_head, n_head_kv, n_vocab, n_ctx;
  float norm_eps;          // RMS norm's (llama, bamboo) or LayerNorm's (falcon; opt writes none)
  float rope_base = 1e4f;  // rope.freq_base
  int head_dim = 0;        // 0: n_embd / n_head (Qwen3's is 128 whatever n_embd / n_head)
  int n_expert = 0;        // 0: dense; else the experts of a MoE shape (--arch llama, qwen3moe)
  int n_expert_used = 0;   // experts per token
  int n_ff_exp = 0;        // an expert's FFN width; 0: n_ff (Mixtral)
};
constexpr Shape kShapes[] = {
    {"llama2-7b", 4096, 11008, 32, 32, 32000, 4096, 1e-5f},
    // Mistral-7B (v0.1, Bamboo-7B's base): GQA with 8 KV heads.
    {"mistral-7b", 4096, 14336, 32, 8, 32000, 32768, 1e-5f, 1e4f},
    // Falcon-7B (multi-query: one K/V head) and OPT-6.7B, for --arch falcon / opt benchmarks.
    {"falcon-7b", 4544, 18176, 71, 1, 65024, 2048, 1e-5f},
    {"opt-6.7b", 4096, 16384, 32, 32, 50272, 2050, 1e-5f},
    // Hugging Face config.json values. Qwen2.5-7B(-Instruct): context 32768 (the base model's
    // file says 131072). Mixtral-8x7B: every layer 8 experts of width n_ff, 2 per token.
    // Qwen3-30B-A3B: n_ff is its (unused) dense intermediate_size, written as
    // feed_forward_length as llama.cpp's converter does; experts 128 of width 768, 8 per token.
    {"qwen2.5-7b", 3584, 18944, 28, 4, 152064, 32768, 1e-6f, 1e6f},
    {"mixtral-8x7b", 4096, 14336, 32, 8, 32000, 32768, 1e-5f, 1e6f, 0, 8, 2, 0},
    {"qwen3-30b-a3b", 2048, 6144, 32, 4, 151936, 40960, 1e-6f, 1e6f, 128, 128, 8, 768},
    // Small enough for tests to generate and run in well under a second; GQA (2 KV heads)
    // and n_ff = 3 * 256 so every type, K-quants included, accepts it.
    {"tiny", 256, 768, 4, 2, 512, 2048, 1e-5f},
};

// A uniform weight type and its llama_ftype (general.file_type; K-quants as the _S variants,
// the ftypes llama.cpp names for "all matrices of this type").
struct WeightType {
  const char* flag;
  GgmlType type;
  uint32_t ftype;
};
constexpr WeightType kTypes[] = {
    {"f32", GgmlType::F32, 0},    {"f16", GgmlType::F16, 1},    {"bf16", GgmlType::BF16, 32},
    {"q8_0", GgmlType::Q8_0, 7},  {"q4_0", GgmlType::Q4_0, 2},  {"q4_1", GgmlType::Q4_1, 3},
    {"q4_k", GgmlType::Q4_K, 14}, {"q5_k", GgmlType::Q5_K, 16}, {"q6_k", GgmlType::Q6_K, 18},
};
constexpr uint32_t kQuantizationVersion = 2;  // ggml's GGML_QNT_VERSION

// PowerInfer's OPT context (llm_load_hparams hard-codes n_ctx_train = 2050; its converter writes
// context_length 2050): the rows of position_embd. HF OPT's 2048 positions plus its offset 2.
constexpr int kOptPositions = 2050;

// Fewest tokens the vocabulary can hold: <unk> <s> </s>, 256 byte tokens and "▁".
constexpr int kMinVocab = 3 + 256 + 1;

// A float flag left at this value was not given (its default depends on other flags).
constexpr float kUnsetFloat = -1e30f;
// Default biases: falcon's LayerNorms and opt's; qwen2's Q/K/V biases, large enough that they
// matter (README: dropping them moves the logits by far more than any test tolerance).
constexpr float kNormBiasDefault = 0.05f;
constexpr float kQkvBiasDefault = 0.5f;
// Default --expert-skew: router row e scaled by (1 + e)^-0.5 (README: measured popularity).
constexpr float kExpertSkewDefault = 0.5f;
// llama.cpp's LLAMA_MAX_EXPERTS.
constexpr int kMaxExperts = 1024;

struct Flags {
  std::string shape;  // empty: the twin's, else llama2-7b
  std::string type = "f16";
  std::string arch = "llama";
  std::string act;  // empty: the file's own (see natural_activation)
  std::string out;
  int n_embd = 0, n_ff = 0, n_head = 0, n_head_kv = 0, n_vocab = 0;  // 0: the shape's value
  int layers = -1;  // not given: 32 for a twin (the real depth), else 2
  int threads = 2;
  uint64_t seed = 1;
  float norm_jitter = 0.0f;
  float norm_bias = kUnsetFloat;  // the architecture's default (kNormBiasDefault, kQkvBiasDefault)
  int head_dim = 0;               // 0: the shape's
  int experts = -1;               // -1: the shape's (MoE-capable architectures); 0: dense
  int experts_used = 0;           // 0: the shape's
  int n_ff_exp = 0;               // 0: the shape's, else n_ff
  float expert_skew = kUnsetFloat;
  bool falcon_norm2 = false;
  bool powerinfer = false;
  std::string pred_kind;  // empty: random (a twin's: its own exact low-rank predictor)
  int pred_rank = 0;  // 0: 64 for random predictors, gate_rank for gate predictors
  std::string pred_type = "f16";
  float sparse_threshold = 0.0f;
  std::string twin;   // --twin: a statistical twin (twin.h)
  std::string calib;  // --calib: the text it is calibrated on
  int calib_tokens = 512;
  int gate_rank = 0;             // --gate-rank: a twin's gate of rank R beside the channel
  float target_recall = 0.995f;  // --target-recall: a twin's predictor thresholds
};

// Validated flags.
struct Config {
  Shape shape;
  int n_layer = 0;
  WeightType wtype{};
  std::string arch;  // general.architecture: llama, bamboo, falcon, opt, qwen2, qwen3, qwen3moe
  std::string act;   // the FFN activation hotcold will run: silu, relu, drelu or gelu
  bool write_act = false;  // act is not the file's own: declare it (hotcold's key)
  float norm_jitter = 0.0f;
  float norm_bias = 0.0f;       // falcon: LayerNorm biases' standard deviation; opt: all biases';
                                // qwen2: the Q/K/V biases'
  int head_dim = 0;             // attention head size (n_embd / n_head unless given)
  bool head_dim_given = false;  // head_dim from --head-dim or the shape: key_length when it differs
  int n_expert = 0;             // 0: dense FFN; else experts per layer
  int n_expert_used = 0;
  int n_ff_exp = 0;             // an expert's width (llama: also shape.n_ff)
  float expert_skew = 0.0f;     // router row e scaled by (1 + e)^-expert_skew
  bool falcon_norm2 = false;    // falcon: attn_norm_2 for attention (Falcon-40B)
  bool powerinfer = false;      // PowerInfer's sparse layout ("PWRI")
  bool gate_predictor = false;  // predictors that reproduce the gate's sign (see tensor_specs)
  int pred_rank = 0;
  WeightType pred_type{};
  float sparse_threshold = 0.0f;
  uint64_t seed = 0;
  int threads = 0;
  std::string out;
  // A statistical twin (twin.h): its targets, calibration text, the channel's value in the
  // embeddings and every gate row's bias (filled by the calibration passes).
  const TwinSpec* twin = nullptr;
  std::string calib;
  int calib_tokens = 0;
  float twin_channel = 0.0f;
  std::shared_ptr<std::vector<std::vector<float>>> twin_bias;
  // --gate-rank R: every gate row is U_i V beside the channel (V [R, n_embd], twin.h), so that a
  // predictor of rank 2 R + mean_block is exact up to rounding; 0: full-rank random gates.
  int gate_rank = 0;
  float target_recall = 0.0f;
  // A twin in PowerInfer's layout: each layer's predictor threshold (chosen on --calib for
  // target_recall) and what it gave there (hotcold.predictor.*); empty until calibrated.
  std::vector<float> pred_thresholds, pred_recall, pred_precision;
};

// Tensors whose values are derived from another tensor's (`source`, drawn as it would be).
enum class Derived {
  kNone,
  kTranspose,  // source {ne[1], ne[0]} transposed (ffn_down_t holds exactly ffn_down's values)
  kPredFc1,    // [2 n_embd, n_embd]: rows diag(w) then -diag(w), w the source norm's weights
  kPredFc2,    // [n_ff, 2 n_embd]: row i is (g_i, -g_i), g_i row i of the source gate as
               // stored (quantised and dequantised in source_type)
  // Falcon's gate-exact predictor (LayerNorm: the mean is subtracted too), B = pred_block
  // (mean_block):
  kPredFc1Ln,  // [2 n_embd + 2 B, n_embd]: diag(w), -diag(w), then 1/n_embd in every column of
               // row 2 n_embd and -1/n_embd in row 2 n_embd + B (other rows zero)
  kPredFc2Ln,  // [n_ff, 2 n_embd + 2 B]: row i is (u_i, -u_i, -s_i, 0.., s_i, 0..) with u_i row
               // i of the source up as stored and s_i = u_i . w (w: the `aux` norm's weights)
  // A twin's predictor for its low-rank gate (`source`, low_rank R; B = pred_block):
  kTwinFc1,  // [2 R + B, n_embd]: V diag(w), -V diag(w), then w on the channel columns (row 2 R)
  kTwinFc2,  // [n_ff, 2 R + B]: row i is (U_i, -U_i, a_i, 0..), a_i the gate row's channel bias
};

// One tensor to write: name, ggml shape, type, and how its values are drawn.
struct TensorSpec {
  std::string name;
  std::vector<int64_t> ne;  // ggml order: ne[0] is the row length
  GgmlType type = GgmlType::F32;
  float stddev = 0.0f;  // 0: every value is `mean` (norm weights without jitter)
  float mean = 0.0f;    // norms: 1
  Derived derived = Derived::kNone;
  std::string source;  // derived (or a copy): the source tensor, drawn with stddev / mean
  GgmlType source_type = GgmlType::F32;
  std::string aux;  // kPredFc2Ln: the norm whose weights w are folded in, drawn with:
  float aux_stddev = 0.0f, aux_mean = 0.0f;
  int64_t pred_block = 0;  // kPredFc*Ln: B (mean_block: the predictor type's block, >= 32)
  float row_decay = 0.0f;  // row r scaled by (1 + r)^-row_decay (the router: --expert-skew)
  // Statistical twins (twin.h), on the first kTwinChannel values of a row: channel_value
  // (token_embd's constant channel) or channel_bias[r] (a gate row's bias); zero_channel_rows:
  // rows [0, kTwinChannel) all zero (outputs that must not write the channel).
  float channel_value = 0.0f;
  std::shared_ptr<const std::vector<float>> channel_bias;
  bool zero_channel_rows = false;
  // A twin's low-rank gate (--gate-rank): row i = U_i V over the non-channel columns (the
  // channel holds channel_bias[i]); kTwinFc1 / kTwinFc2: the rank of their source gate.
  int64_t low_rank = 0;
};

TensorSpec spec(std::string name, std::vector<int64_t> ne, GgmlType type, float stddev,
                float mean = 0.0f);
std::string type_names();
std::string shape_names();
// Flags checked and resolved into a Config (an error names the flag and what it expects).
Result<Config> validate(const Flags& f);
// Architecture traits.
bool layer_norm_arch(const std::string& arch);
bool qwen_arch(const std::string& arch);
bool qk_norm_arch(const std::string& arch);
bool moe_arch(const std::string& arch);
bool head_dim_arch(const std::string& arch);
int64_t mean_block(const WeightType& pred_type);
// The same model in llama.cpp's layout (c without --powerinfer): what a twin is calibrated on.
Config plain_layout(const Config& c);
// Every tensor of the file c describes, in file order, and its metadata.
std::vector<TensorSpec> tensor_specs(const Config& c);
GgufWriter make_writer(const Config& c, const std::vector<TensorSpec>& specs);
// Writes the file (header, then each tensor generated and written in turn).
Status write_model(const Config& c, const std::string& path);
// A twin's calibration (twin.h), in twin.cpp: kTwinPasses times the file is written with the
// current biases (beside c.out), run on c.calib, and every gate bias set from what it saw.
Status calibrate_twin_biases(Config& c);
// A twin in PowerInfer's layout (twin.h): the file written once more with the final biases, run
// on c.calib, each layer's predictor threshold chosen for c.target_recall (c.pred_*).
Status calibrate_twin_predictors(Config& c);
// The twin's low-rank gate factors (TensorSpec::low_rank): V [R, n] (row-major; the channel
// columns zero) with the gate's standard deviation, and U_i [R] of row i (1 / sqrt(R)), so that
// every gate value has the variance of a full-rank one.
std::vector<float> twin_gate_v(const std::string& gate, uint64_t seed, int64_t rank, int64_t n,
                               float stddev);
void twin_gate_u(const std::string& gate, uint64_t seed, int64_t rank, int64_t row, float* u);
// The rows [row0, row1) of tensor t (row-major, in t.type), as the file holds them.
void generate_rows(const TensorSpec& t, uint64_t seed, int threads, int64_t row0, int64_t row1,
                   std::vector<uint8_t>* buf);
std::string size_string(uint64_t bytes);

}  // namespace hc::synth
