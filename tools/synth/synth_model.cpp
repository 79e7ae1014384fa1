// hc-synth-model: writes a LLaMA-architecture GGUF model with random weights in the shape of a
// real model (Llama-2-7B by default), for benchmarks where weight bandwidth dominates and the
// values do not matter. The file loads in hotcold and in llama.cpp: llama.cpp's GGUF names and
// metadata keys, a synthetic SentencePiece vocabulary, every matrix in one uniform type.
// Also the fixtures of the PowerInfer reference (tests/reference/test_powerinfer_parity.py):
// `--arch bamboo` (PowerInfer's dReLU llama variant) and `--powerinfer` (its sparse "PWRI"
// layout: transposed down matrices, random or gate-exact activation predictors), which
// PowerInfer loads too. `--arch falcon`: Falcon (LayerNorm with bias, fused QKV, ungated GELU
// FFN in parallel with attention), in llama.cpp's layout or with --powerinfer in PowerInfer's.
// `--arch opt`: PowerInfer's OPT (learned positions, biases everywhere, ReLU FFN, output tied to
// token_embd), in its dense layout or with --powerinfer in its sparse one.
// `--arch qwen2` (llama plus Q/K/V biases), `--arch qwen3` (llama plus per-head Q/K RMS norms,
// any head_dim), and Mixture-of-Experts files: `--experts N --experts-used K` with `--arch
// llama` (Mixtral's layout) or `--arch qwen3moe` (Qwen3-30B-A3B's): a router ffn_gate_inp (F32)
// and 3-D expert tensors ffn_{gate,up,down}_exps, with router rows scaled so that expert
// popularity falls off with the expert's index (--expert-skew).
//
// Weights: approximately normal (an Irwin-Hall sum of four uniforms), mean 0, standard
// deviation 1/sqrt(row length) for matrices, so every matmul maps unit-RMS inputs to unit-RMS
// outputs whatever the shape; 1 for token_embd; norms are exactly 1 (or 1 + jitter * N(0, 1)
// with --norm-jitter); biases (falcon's LayerNorms, all of opt's) --norm-bias * N(0, 1); opt's
// token_embd (also its output matrix) and position_embd 1/sqrt(n_embd). Logits then have a
// standard deviation of about 1: finite and input-dependent, never degenerate.
//
// Deterministic: row r of tensor T is drawn from a generator seeded by (seed, T's name, r), so
// the bytes depend on the seed only, never on the thread count. The file is streamed tensor by
// tensor (GgufWriter::serialize_header), so memory stays at one tensor however large the model.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "app/args.h"
#include "app/common.h"
#include "core/dtype.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "format/gguf.h"
#include "quant/quant.h"

namespace hc {
namespace {

constexpr const char* kTool = "hc-synth-model";
const std::string kSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's escaped space

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
  std::string shape = "llama2-7b";
  std::string type = "f16";
  std::string arch = "llama";
  std::string act;  // empty: the file's own (see natural_activation)
  std::string out;
  int n_embd = 0, n_ff = 0, n_head = 0, n_head_kv = 0, n_vocab = 0;  // 0: the shape's value
  int layers = 2;
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
  std::string pred_kind = "random";
  int pred_rank = 0;  // 0: 64 for random predictors, gate_rank for gate predictors
  std::string pred_type = "f16";
  float sparse_threshold = 0.0f;
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
};

TensorSpec spec(std::string name, std::vector<int64_t> ne, GgmlType type, float stddev,
                float mean = 0.0f) {
  TensorSpec t;
  t.name = std::move(name);
  t.ne = std::move(ne);
  t.type = type;
  t.stddev = stddev;
  t.mean = mean;
  return t;
}

std::string type_names() {
  std::string s;
  for (const WeightType& t : kTypes) s += (s.empty() ? "" : ", ") + std::string(t.flag);
  return s;
}

// ---- validation ----------------------------------------------------------------------------

Status apply_override(const char* flag, int value, int* field) {
  if (value < 0 || value >= (1 << 24))
    return Status::Error(std::string(flag) + ": expected a positive value below 2^24, found " +
                         std::to_string(value));
  if (value > 0) *field = value;
  return Status::Ok();
}

// The weight type's block must divide every row length the file holds: n_embd (token_embd,
// output, attn_q/k/v/output, ffn_gate/up) and n_ff (ffn_down).
// MoE files: n_ff_exp (ffn_down_exps) instead of n_ff; with a head_dim of its own, also
// n_head * head_dim (attn_output's rows).
Status check_block_size(const Config& c) {
  const WeightType& w = c.wtype;
  const int64_t block = dtype_traits(w.type).block_size;
  std::vector<std::pair<const char*, int>> lengths = {
      {"n_embd", c.shape.n_embd},
      c.n_expert > 0 ? std::pair{"n_ff_exp", c.n_ff_exp} : std::pair{"n_ff", c.shape.n_ff}};
  if (c.shape.n_head * c.head_dim != c.shape.n_embd)
    lengths.emplace_back("n_head * head_dim", c.shape.n_head * c.head_dim);
  for (auto [what, n] : lengths) {
    if (n % block != 0)
      return Status::Error("--type " + std::string(w.flag) + " needs " + what +
                           " to be a multiple of the " + dtype_name(w.type) + " block size " +
                           std::to_string(block) + ", found " + what + " " + std::to_string(n));
  }
  return Status::Ok();
}

// head_dim: a head size of its own (--head-dim or the shape's), or 0 for n_embd / n_head.
Status check_shape(const Shape& s, int head_dim_given = 0) {
  if (head_dim_given == 0 && s.n_embd % s.n_head != 0)
    return Status::Error("n_embd " + std::to_string(s.n_embd) + " is not a multiple of n_head " +
                         std::to_string(s.n_head));
  const int head_dim = head_dim_given > 0 ? head_dim_given : s.n_embd / s.n_head;
  if (head_dim % 2 != 0 || head_dim > 512)
    return Status::Error((head_dim_given > 0 ? std::string("head_dim ")
                                             : std::string("head dimension n_embd / n_head = ")) +
                         std::to_string(head_dim) + " (expected an even value up to 512)");
  if (s.n_head % s.n_head_kv != 0)
    return Status::Error("n_head " + std::to_string(s.n_head) + " is not a multiple of n_head_kv " +
                         std::to_string(s.n_head_kv));
  if (s.n_vocab < kMinVocab)
    return Status::Error("n_vocab " + std::to_string(s.n_vocab) +
                         " is too small: the vocabulary holds 3 special tokens, 256 byte tokens "
                         "and at least one piece (expected >= " +
                         std::to_string(kMinVocab) + ")");
  return Status::Ok();
}

const WeightType* find_type(const std::string& flag) {
  for (const WeightType& t : kTypes)
    if (flag == t.flag) return &t;
  return nullptr;
}

// The FFN activation a file implies without hotcold's activation key: bamboo is dReLU
// (PowerInfer: LLM_FFN_SYM + LLM_FFN_RELU), a PowerInfer file of the llama or falcon
// architecture ReLU (its sparse FFN always applies ReLU: ReGLU, or relu(up) for falcon), a
// plain llama file SwiGLU, a plain falcon file GELU (llama.cpp's falcon; src/model/
// llama_model.cpp detect_activation reads them so); OPT is ReLU, dense or sparse.
const char* natural_activation(const std::string& arch, bool powerinfer) {
  if (arch == "bamboo") return "drelu";
  if (powerinfer || arch == "opt") return "relu";
  return arch == "falcon" ? "gelu" : "silu";
}

// Architectures whose norms are LayerNorms (mean subtracted, with bias): falcon and opt.
bool layer_norm_arch(const std::string& arch) { return arch == "falcon" || arch == "opt"; }

// llama.cpp's Qwen architectures: llama's tensors, NEOX RoPE, plus Q/K/V biases (qwen2) or
// per-head Q/K RMS norms (qwen3, qwen3moe).
bool qwen_arch(const std::string& arch) {
  return arch == "qwen2" || arch == "qwen3" || arch == "qwen3moe";
}
bool qk_norm_arch(const std::string& arch) { return arch == "qwen3" || arch == "qwen3moe"; }
// Architectures that may carry routed experts (llama: Mixtral's layout; qwen3moe: always) and
// those whose head size may differ from n_embd / n_head (attention.key_length).
bool moe_arch(const std::string& arch) { return arch == "llama" || arch == "qwen3moe"; }
bool head_dim_arch(const std::string& arch) { return arch == "llama" || qwen_arch(arch); }

// The gate-exact predictor's rank: 2 n_embd for RMS norm (llama, bamboo); for LayerNorm
// (falcon, opt) two more rows for the mean, each at the start of its own block of B rows, B the
// predictor type's block size but at least 32: quantised (by hc-synth-model, or by
// PowerInfer's quantize from an F16 file) each is its block's only nonzero value, exact.
int64_t mean_block(const WeightType& pred_type) {
  return std::max<int64_t>(32, dtype_traits(pred_type.type).block_size);
}
int gate_rank(const Config& c, const WeightType& pred_type) {
  return 2 * c.shape.n_embd +
         (layer_norm_arch(c.arch) ? 2 * static_cast<int>(mean_block(pred_type)) : 0);
}

// The predictor's type must hold rows of n_embd (fc1) and of the rank (fc2).
Status check_predictor(const Flags& f, const Config& c) {
  if (f.pred_kind != "random" && f.pred_kind != "gate")
    return Status::Error("--pred-kind: expected random or gate, found '" + f.pred_kind + "'");
  const WeightType* t = find_type(f.pred_type);
  if (!t)
    return Status::Error("--pred-type: expected one of " + type_names() + ", found '" +
                         f.pred_type + "'");
  const int exact_rank = gate_rank(c, *t);
  if (f.pred_kind == "gate" && f.pred_rank != 0 && f.pred_rank != exact_rank)
    return Status::Error("--pred-kind gate: the rank is 2 n_embd" +
                         std::string(layer_norm_arch(c.arch) ? " + 2 max(32, block size)" : "") +
                         " = " + std::to_string(exact_rank) + ", found --pred-rank " +
                         std::to_string(f.pred_rank));
  const int rank = f.pred_rank != 0 ? f.pred_rank : f.pred_kind == "gate" ? exact_rank : 64;
  if (rank < 1 || rank > 65536)
    return Status::Error("--pred-rank: expected 1..65536, found " + std::to_string(rank));
  const int64_t block = dtype_traits(t->type).block_size;
  for (auto [what, n] : {std::pair{"n_embd", c.shape.n_embd}, std::pair{"the rank", rank}}) {
    if (n % block != 0)
      return Status::Error("--pred-type " + std::string(t->flag) + " needs " + what +
                           " to be a multiple of the " + dtype_name(t->type) + " block size " +
                           std::to_string(block) + ", found " + std::to_string(n));
  }
  if (!std::isfinite(f.sparse_threshold))
    return Status::Error("--sparse-threshold: expected a finite value");
  return Status::Ok();
}

std::string shape_names() {
  std::string s;
  for (const Shape& sh : kShapes) s += (s.empty() ? "" : ", ") + std::string(sh.name);
  return s;
}

// Head size: --head-dim, else the shape's, else n_embd / n_head (head_dim_arch only).
Status resolve_head_dim(const Flags& f, Config* c) {
  if (f.head_dim < 0 || f.head_dim > 512 || f.head_dim % 2 != 0)
    return Status::Error("--head-dim: expected an even value up to 512, found " +
                         std::to_string(f.head_dim));
  if (f.head_dim > 0 && !head_dim_arch(c->arch))
    return Status::Error("--head-dim needs --arch llama, qwen2, qwen3 or qwen3moe, found --arch " +
                         c->arch);
  const int given = f.head_dim > 0 ? f.head_dim : c->shape.head_dim;
  if (given > 0 && !head_dim_arch(c->arch) && given * c->shape.n_head != c->shape.n_embd)
    return Status::Error("--arch " + c->arch + " needs head_dim = n_embd / n_head; the " +
                         c->shape.name + " shape has head_dim " + std::to_string(given));
  HC_TRY(check_shape(c->shape, head_dim_arch(c->arch) ? given : 0));
  c->head_dim = given > 0 ? given : c->shape.n_embd / c->shape.n_head;
  c->head_dim_given = given > 0;
  return Status::Ok();
}

// Experts: --experts / --experts-used / --n-ff-exp / --expert-skew, else the shape's (for the
// MoE-capable architectures: llama, which is then Mixtral, and qwen3moe, which needs them).
Status resolve_experts(const Flags& f, Config* c) {
  const bool capable = moe_arch(c->arch);
  if (f.experts < -1 || f.experts > kMaxExperts || f.experts == 1)
    return Status::Error("--experts: expected 0 (dense) or 2.." + std::to_string(kMaxExperts) +
                         ", found " + std::to_string(f.experts));
  if (f.experts > 0 && !capable)
    return Status::Error("--experts needs --arch llama or qwen3moe, found --arch " + c->arch);
  c->n_expert = f.experts >= 0 ? f.experts : capable ? c->shape.n_expert : 0;
  if (c->arch == "qwen3moe" && c->n_expert == 0)
    return Status::Error("--arch qwen3moe needs experts: --experts N --experts-used K (the " +
                         std::string(c->shape.name) + " shape has none)");
  if (c->n_expert == 0) {
    if (f.experts_used != 0 || f.n_ff_exp != 0 || f.expert_skew != kUnsetFloat)
      return Status::Error(std::string(f.experts_used != 0 ? "--experts-used"
                                       : f.n_ff_exp != 0   ? "--n-ff-exp"
                                                           : "--expert-skew") +
                           " needs experts (--experts N with --arch llama or qwen3moe)");
    return Status::Ok();
  }
  if (c->powerinfer)
    return Status::Error("--powerinfer: PowerInfer's layout has no experts (found " +
                         std::to_string(c->n_expert) + " experts)");
  c->n_expert_used = f.experts_used > 0 ? f.experts_used : c->shape.n_expert_used;
  if (f.experts_used == 0 && c->n_expert_used == 0)
    return Status::Error("--experts-used K is required with --experts " +
                         std::to_string(c->n_expert) + " (expected 1.." +
                         std::to_string(c->n_expert) + ")");
  if (f.experts_used < 0 || c->n_expert_used < 1 || c->n_expert_used > c->n_expert)
    return Status::Error("--experts-used: expected 1.." + std::to_string(c->n_expert) +
                         " (experts per token, at most --experts), found " +
                         std::to_string(f.experts_used));
  if (f.n_ff_exp < 0 || f.n_ff_exp >= (1 << 24))
    return Status::Error("--n-ff-exp: expected a positive value below 2^24, found " +
                         std::to_string(f.n_ff_exp));
  c->n_ff_exp = f.n_ff_exp > 0          ? f.n_ff_exp
                : c->shape.n_ff_exp > 0 ? c->shape.n_ff_exp
                                        : c->shape.n_ff;
  if (c->arch == "llama") {
    // Mixtral's layout: feed_forward_length is the expert width.
    if (f.n_ff_exp > 0 && f.n_ff > 0 && f.n_ff != f.n_ff_exp)
      return Status::Error(
          "--arch llama with experts has one FFN width (feed_forward_length), "
          "found --n-ff " +
          std::to_string(f.n_ff) + " and --n-ff-exp " + std::to_string(f.n_ff_exp));
    c->shape.n_ff = c->n_ff_exp;
  }
  const float skew = f.expert_skew == kUnsetFloat ? kExpertSkewDefault : f.expert_skew;
  if (!std::isfinite(skew) || skew < 0.0f || skew > 4.0f)
    return Status::Error("--expert-skew: expected 0..4, found " + std::to_string(skew));
  c->expert_skew = skew;
  return Status::Ok();
}

Result<Config> validate(const Flags& f) {
  Config c;
  const Shape* shape = nullptr;
  for (const Shape& s : kShapes)
    if (f.shape == s.name) shape = &s;
  if (!shape)  // the dense llama / falcon / opt shapes first, as before the Qwen and MoE ones
    return Status::Error("--shape: expected llama2-7b, falcon-7b, opt-6.7b or tiny, found '" +
                         f.shape +
                         "' (or a Qwen / MoE shape: qwen2.5-7b, mixtral-8x7b, qwen3-30b-a3b)");
  c.shape = *shape;
  HC_TRY(apply_override("--n-embd", f.n_embd, &c.shape.n_embd));
  HC_TRY(apply_override("--n-ff", f.n_ff, &c.shape.n_ff));
  HC_TRY(apply_override("--n-head", f.n_head, &c.shape.n_head));
  HC_TRY(apply_override("--n-head-kv", f.n_head_kv, &c.shape.n_head_kv));
  HC_TRY(apply_override("--n-vocab", f.n_vocab, &c.shape.n_vocab));
  if (f.arch != "llama" && f.arch != "bamboo" && f.arch != "falcon" && f.arch != "opt" &&
      !qwen_arch(f.arch))
    return Status::Error(
        "--arch: expected llama, bamboo, falcon, opt, qwen2, qwen3 or qwen3moe, found '" + f.arch +
        "'");
  if (f.arch == "opt") {
    // OPT has one K and one V head per query head (PowerInfer reads no head_count_kv for it:
    // n_head_kv = n_head), and PowerInfer fixes its trained context at 2050 positions
    // (llm_load_hparams: n_ctx_train = 2050, the rows of position_embd).
    if (f.n_head_kv != 0 && f.n_head_kv != c.shape.n_head)
      return Status::Error("--arch opt has n_head_kv = n_head = " + std::to_string(c.shape.n_head) +
                           ", found --n-head-kv " + std::to_string(f.n_head_kv));
    c.shape.n_head_kv = c.shape.n_head;
    c.shape.n_ctx = kOptPositions;
  }
  c.arch = f.arch;
  c.powerinfer = f.powerinfer;
  HC_TRY(resolve_head_dim(f, &c));

  const WeightType* wtype = find_type(f.type);
  if (!wtype)
    return Status::Error("--type: expected one of " + type_names() + ", found '" + f.type + "'");
  c.wtype = *wtype;
  if (c.powerinfer && qwen_arch(c.arch))
    return Status::Error("--powerinfer needs --arch llama, bamboo, falcon or opt, found --arch " +
                         c.arch);
  HC_TRY(resolve_experts(f, &c));
  HC_TRY(check_block_size(c));

  const bool falcon = c.arch == "falcon";
  // Falcon's FFN has no gate: GELU (llama.cpp) or ReLU (ReluFalcon, PowerInfer); SiLU is
  // llama's SwiGLU; OPT's is ReLU, nothing else.
  if (c.arch == "opt" && !f.act.empty() && f.act != "relu")
    return Status::Error("--act: --arch opt is ReLU, found '" + f.act + "'");
  if (!f.act.empty() &&
      (falcon ? f.act != "gelu" && f.act != "relu" : f.act != "silu" && f.act != "relu"))
    return Status::Error("--act: expected relu or " + std::string(falcon ? "gelu" : "silu") +
                         (falcon ? " for --arch falcon" : "") + ", found '" + f.act + "'");
  const std::string natural = natural_activation(c.arch, c.powerinfer);
  c.act = f.act.empty() ? natural : f.act;
  c.write_act = c.act != natural;
  if (!std::isfinite(f.norm_jitter) || f.norm_jitter < 0.0f || f.norm_jitter > 1.0f)
    return Status::Error("--norm-jitter: expected 0..1, found " + std::to_string(f.norm_jitter));
  c.norm_jitter = f.norm_jitter;
  const float norm_bias = f.norm_bias != kUnsetFloat ? f.norm_bias
                          : c.arch == "qwen2"        ? kQkvBiasDefault
                                                     : kNormBiasDefault;
  if (!std::isfinite(norm_bias) || norm_bias < 0.0f || norm_bias > 1.0f)
    return Status::Error("--norm-bias: expected 0..1, found " + std::to_string(norm_bias));
  if (f.falcon_norm2 && !falcon)
    return Status::Error("--falcon-norm2 needs --arch falcon, found --arch " + c.arch);
  c.norm_bias = layer_norm_arch(c.arch) || c.arch == "qwen2" ? norm_bias : 0.0f;
  c.falcon_norm2 = f.falcon_norm2;
  if (c.powerinfer) {
    HC_TRY(check_predictor(f, c));
    c.gate_predictor = f.pred_kind == "gate";
    c.pred_type = *find_type(f.pred_type);
    c.pred_rank = f.pred_rank != 0   ? f.pred_rank
                  : c.gate_predictor ? gate_rank(c, c.pred_type)
                                     : 64;
    c.sparse_threshold = f.sparse_threshold;
  }
  if (f.layers < 1 || f.layers > 1024)
    return Status::Error("--layers: expected 1..1024, found " + std::to_string(f.layers));
  c.n_layer = f.layers;
  if (f.threads < 1 || f.threads > 512)
    return Status::Error("-t: expected 1..512 threads, found " + std::to_string(f.threads));
  c.threads = f.threads;
  if (f.out.empty()) return Status::Error("no output file given: expected -o OUT.gguf");
  c.out = f.out;
  c.seed = f.seed;
  return c;
}

// ---- vocabulary ----------------------------------------------------------------------------

struct SynthVocab {
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;  // GGUF token types: 1 normal, 2 unknown, 3 control, 6 byte
};

// Filler pieces, until `tokens` holds n: "▁", single characters, "▁" + a letter, then the
// lower-case strings of length 2, 3, ..., each length bare and then "▁"-prefixed. Every piece
// splits into two pieces listed before it, so SentencePiece's pairwise merges can build it.
void add_fillers(size_t n, std::vector<std::string>* tokens) {
  const std::string letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
  const std::string singles = letters + "0123456789.,;:!?'\"-()";
  auto push = [&](std::string piece) {
    if (tokens->size() < n) tokens->push_back(std::move(piece));
  };
  push(kSpace);
  for (char ch : singles) push(std::string(1, ch));
  for (char ch : letters) push(kSpace + ch);
  for (size_t len = 2; tokens->size() < n; ++len) {
    for (const std::string& prefix : {std::string(), kSpace}) {
      for (std::string s(len, 'a'); tokens->size() < n;) {
        push(prefix + s);
        size_t i = len;  // odometer increment over 'a'..'z'
        while (i > 0 && s[i - 1] == 'z') s[--i] = 'a';
        if (i == 0) break;
        ++s[i - 1];
      }
    }
  }
}

SynthVocab make_vocab(int n_vocab) {
  SynthVocab v;
  v.tokens = {"<unk>", "<s>", "</s>"};
  v.types = {2, 3, 3};
  for (int b = 0; b < 256; ++b) {
    char piece[8];
    std::snprintf(piece, sizeof piece, "<0x%02X>", b);
    v.tokens.push_back(piece);
    v.types.push_back(6);
  }
  v.scores.assign(v.tokens.size(), 0.0f);
  const size_t first_filler = v.tokens.size();
  add_fillers(static_cast<size_t>(n_vocab), &v.tokens);
  for (size_t i = first_filler; i < v.tokens.size(); ++i) {
    v.scores.push_back(-static_cast<float>(i - first_filler));  // earlier = more frequent
    v.types.push_back(1);
  }
  return v;
}

// ---- tensors and metadata ------------------------------------------------------------------

// The specs of one file's tensors: shapes in ggml order, shape comments in row-major order.
struct SpecMaker {
  const Config& c;

  TensorSpec matrix(std::string name, int64_t n_in, int64_t n_out) const {
    return spec(std::move(name), {n_in, n_out}, c.wtype.type,
                1.0f / std::sqrt(static_cast<float>(n_in)));
  }
  TensorSpec norm(std::string name) const {  // RMS norm or LayerNorm weights
    return spec(std::move(name), {c.shape.n_embd}, GgmlType::F32, c.norm_jitter, 1.0f);
  }
  TensorSpec bias(std::string name, float stddev, int64_t n = 0) const {  // n: n_embd if 0
    return spec(std::move(name), {n > 0 ? n : c.shape.n_embd}, GgmlType::F32, stddev);
  }
  // n_expert matrices [n_out, n_in] in one 3-D tensor: row r = e * n_out + j is expert e's
  // row j, drawn as a matrix's.
  TensorSpec experts(std::string name, int64_t n_in, int64_t n_out) const {
    TensorSpec t = matrix(std::move(name), n_in, n_out);
    t.ne.push_back(c.n_expert);
    return t;
  }

  // A MoE layer's FFN (llama.cpp's build_moe_ffn): the router ffn_gate_inp, F32 whatever the
  // weight type (llama.cpp's converter and llama-quantize keep it F32), row e scaled by
  // (1 + e)^-skew so that low-index experts win the top-k more often; then the experts.
  void add_moe_ffn(const std::string& p, std::vector<TensorSpec>* out) const {
    const int64_t n_embd = c.shape.n_embd, n_ff = c.n_ff_exp;
    TensorSpec router = spec(p + "ffn_gate_inp.weight", {n_embd, c.n_expert},  // [n_expert, n_embd]
                             GgmlType::F32, 1.0f / std::sqrt(static_cast<float>(n_embd)));
    router.row_decay = c.expert_skew;
    out->push_back(router);
    out->push_back(experts(p + "ffn_gate_exps.weight", n_embd, n_ff));  // [n_expert, n_ff, n_embd]
    out->push_back(experts(p + "ffn_up_exps.weight", n_embd, n_ff));    // [n_expert, n_ff, n_embd]
    out->push_back(experts(p + "ffn_down_exps.weight", n_ff, n_embd));  // [n_expert, n_embd, n_ff]
  }

  // PowerInfer's sparse FFN of layer prefix p: ffn_down_t, fc1, fc2. `pred_norm` and
  // `pred_gate` are the tensors the gate-exact predictor is built from (llama: ffn_norm and
  // ffn_gate; falcon: attn_norm and ffn_up; opt: ffn_norm and ffn_up). `down_bias` >= 0 (opt):
  // also ffn_down_t.bias with that standard deviation, after the weight.
  void add_sparse_ffn(const std::string& p, const std::string& pred_norm,
                      const std::string& pred_gate, std::vector<TensorSpec>* out,
                      float down_bias = -1.0f) const {
    const Shape& s = c.shape;
    TensorSpec down_t = matrix(p + "ffn_down_t.weight", s.n_embd, s.n_ff);  // [n_ff, n_embd]
    down_t.stddev = 1.0f / std::sqrt(static_cast<float>(s.n_ff));           // ffn_down's values
    down_t.derived = Derived::kTranspose;
    down_t.source = p + "ffn_down.weight";
    out->push_back(down_t);
    if (down_bias >= 0.0f) {  // [n_embd]: the values of a dense file's ffn_down.bias
      TensorSpec b = bias(p + "ffn_down_t.bias", down_bias);
      b.source = p + "ffn_down.bias";
      out->push_back(b);
    }
    const GgmlType pt = c.pred_type.type;
    TensorSpec fc1 = spec(p + "fc1.weight", {s.n_embd, c.pred_rank}, pt,  // [rank, n_embd]
                          1.0f / std::sqrt(static_cast<float>(s.n_embd)));
    TensorSpec fc2 = spec(p + "fc2.weight", {c.pred_rank, s.n_ff}, pt,  // [n_ff, rank]
                          1.0f / std::sqrt(static_cast<float>(c.pred_rank)));
    if (c.gate_predictor) {
      const bool ln = layer_norm_arch(c.arch);
      const TensorSpec w_norm = norm(pred_norm);
      fc1.derived = ln ? Derived::kPredFc1Ln : Derived::kPredFc1;
      fc1.source = w_norm.name;
      fc1.stddev = w_norm.stddev;
      fc1.mean = w_norm.mean;
      const TensorSpec gate = matrix(pred_gate, s.n_embd, s.n_ff);
      fc2.derived = ln ? Derived::kPredFc2Ln : Derived::kPredFc2;
      fc2.source = gate.name;
      fc2.stddev = gate.stddev;
      fc2.source_type = gate.type;
      if (ln) {
        fc2.aux = w_norm.name;
        fc2.aux_stddev = w_norm.stddev;
        fc2.aux_mean = w_norm.mean;
        fc1.pred_block = fc2.pred_block = mean_block(c.pred_type);
      }
    }
    out->push_back(fc1);
    out->push_back(fc2);
  }
};

// llama.cpp's names and shapes (src/model/llama_model.cpp binds the same), in the order of
// llama.cpp's HF converter: token_embd, the blocks, output_norm, output.
// PowerInfer's layout (convert-hf-to-powerinfer-gguf.py, llm_load_sparse_model_tensors) replaces
// each ffn_down by ffn_down_t, its transpose ([n_ff, n_embd]: row i is neuron i's output
// column; the weight type, as PowerInfer's quantize gives it), and adds the predictor
// logit = fc2 . relu(fc1 . x): fc1 [rank, n_embd], fc2 [n_ff, rank] in --pred-type, random
// (firing decisions unrelated to the activations), or with --pred-kind gate built from the
// layer's weights: fc1 = (diag(w); -diag(w)), fc2 = (G, -G) with w the ffn_norm weights and G
// ffn_gate, so relu(w x) - relu(-w x) = w x and logit = G (w x) = rms(x) gate(x) for x the
// un-normed FFN input PowerInfer feeds its predictors: a neuron is predicted exactly when its
// gate is positive (up to the rounding of the predictor's F16 / quantised products), as by a
// perfect predictor of a ReLU model. Fed the normed input instead, the logit is G (w^2 x) / rms:
// with norm weights other than 1 (--norm-jitter) its sign differs for many neurons.
//
// qwen2 adds F32 biases attn_q.bias [q_dim], attn_k.bias and attn_v.bias [kv_dim] (--norm-bias
// x N(0, 1)); qwen3 / qwen3moe add the per-head RMS norms attn_q_norm and attn_k_norm
// [head_dim] (drawn as norms), applied to Q and K before RoPE. A MoE layer (llama with
// experts, qwen3moe) has ffn_gate_inp and ffn_{gate,up,down}_exps instead of the dense FFN.
std::vector<TensorSpec> llama_tensor_specs(const Config& c) {
  const Shape& s = c.shape;
  const int64_t head_dim = c.head_dim;
  const int64_t q_dim = s.n_head * head_dim;
  const int64_t kv_dim = s.n_head_kv * head_dim;
  const bool qkv_bias = c.arch == "qwen2", qk_norm = qk_norm_arch(c.arch);
  const SpecMaker m{c};
  std::vector<TensorSpec> out;
  // token_embd [n_vocab, n_embd], standard deviation 1
  out.push_back(spec("token_embd.weight", {s.n_embd, s.n_vocab}, c.wtype.type, 1.0f));
  for (int il = 0; il < c.n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    out.push_back(m.norm(p + "attn_norm.weight"));  // [n_embd]
    // attn_q [q_dim, n_embd], attn_k and attn_v [kv_dim, n_embd]; qwen2: each + bias [rows]
    for (auto [t, rows] : {std::pair{"attn_q", q_dim}, {"attn_k", kv_dim}, {"attn_v", kv_dim}}) {
      out.push_back(m.matrix(p + t + ".weight", s.n_embd, rows));
      if (qkv_bias) out.push_back(m.bias(p + t + ".bias", c.norm_bias, rows));
    }
    out.push_back(m.matrix(p + "attn_output.weight", q_dim, s.n_embd));  // [n_embd, q_dim]
    if (qk_norm) {
      for (const char* t : {"attn_q_norm.weight", "attn_k_norm.weight"}) {
        TensorSpec w = m.norm(p + t);  // [head_dim], shared by every head
        w.ne = {head_dim};
        out.push_back(w);
      }
    }
    out.push_back(m.norm(p + "ffn_norm.weight"));  // [n_embd]
    if (c.n_expert > 0) {
      m.add_moe_ffn(p, &out);
      continue;
    }
    out.push_back(m.matrix(p + "ffn_gate.weight", s.n_embd, s.n_ff));  // [n_ff, n_embd]
    out.push_back(m.matrix(p + "ffn_up.weight", s.n_embd, s.n_ff));    // [n_ff, n_embd]
    if (c.powerinfer)
      m.add_sparse_ffn(p, p + "ffn_norm.weight", p + "ffn_gate.weight", &out);
    else
      out.push_back(m.matrix(p + "ffn_down.weight", s.n_ff, s.n_embd));  // [n_embd, n_ff]
  }
  out.push_back(m.norm("output_norm.weight"));                    // [n_embd]
  out.push_back(m.matrix("output.weight", s.n_embd, s.n_vocab));  // [n_vocab, n_embd]
  return out;
}

// Falcon (llama.cpp's llm_build_falcon, PowerInfer's build_falcon): per layer
//   a = attn_norm(x) (LayerNorm with weight and bias), h = attention(attn_norm_2(x) if present
//   (Falcon-40B), else a) through the fused attn_qkv ([n_embd + 2 kv_dim, n_embd]: n_embd Q
//   rows, then kv_dim K rows, then kv_dim V rows, head-major) and attn_output,
//   x' = x + h + ffn_down(act(ffn_up(a))),
// no ffn_norm, no ffn_gate, no biases on matrices; output_norm is a LayerNorm too.
// --pred-kind gate: attn_norm's bias is zero (so that the predictor can be exact: PowerInfer
// feeds it the layer input x, not a) and fc1 / fc2 are kPredFc1Ln / kPredFc2Ln: with U
// ffn_up as stored, w the attn_norm weights, m = mean(x) and C x = x - m,
//   fc2 . relu(fc1 . x) = U (w x) - (U w) m = U diag(w) C x = std(x) * (U . a),
// whose sign is the neuron's (ReLU) firing: U . a = U diag(w) C x / std(x) when the bias is 0.
std::vector<TensorSpec> falcon_tensor_specs(const Config& c) {
  const Shape& s = c.shape;
  const int64_t kv_dim = s.n_head_kv * (s.n_embd / s.n_head);
  const SpecMaker m{c};
  std::vector<TensorSpec> out;
  // token_embd [n_vocab, n_embd], standard deviation 1
  out.push_back(spec("token_embd.weight", {s.n_embd, s.n_vocab}, c.wtype.type, 1.0f));
  for (int il = 0; il < c.n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    out.push_back(m.norm(p + "attn_norm.weight"));  // [n_embd]
    out.push_back(m.bias(p + "attn_norm.bias",      // [n_embd]
                         c.gate_predictor ? 0.0f : c.norm_bias));
    if (c.falcon_norm2) {
      out.push_back(m.norm(p + "attn_norm_2.weight"));             // [n_embd]
      out.push_back(m.bias(p + "attn_norm_2.bias", c.norm_bias));  // [n_embd]
    }
    out.push_back(m.matrix(p + "attn_qkv.weight", s.n_embd,  // [n_embd + 2 kv_dim, n_embd]
                           s.n_embd + 2 * kv_dim));
    out.push_back(m.matrix(p + "attn_output.weight", s.n_embd, s.n_embd));  // [n_embd, n_embd]
    out.push_back(m.matrix(p + "ffn_up.weight", s.n_embd, s.n_ff));         // [n_ff, n_embd]
    if (c.powerinfer)
      m.add_sparse_ffn(p, p + "attn_norm.weight", p + "ffn_up.weight", &out);
    else
      out.push_back(m.matrix(p + "ffn_down.weight", s.n_ff, s.n_embd));  // [n_embd, n_ff]
  }
  out.push_back(m.norm("output_norm.weight"));                    // [n_embd]
  out.push_back(m.bias("output_norm.bias", c.norm_bias));         // [n_embd]
  out.push_back(m.matrix("output.weight", s.n_embd, s.n_vocab));  // [n_vocab, n_embd]
  return out;
}

// OPT (PowerInfer's build_opt, HF OPTForCausalLM with do_layer_norm_before): the input is
// x = token_embd[t] + position_embd[pos + 2] (PowerInfer adds HF's offset 2 to every position,
// llama_build_graph's inp_pos); per layer, with LayerNorms that have weight and bias,
//   h = x + attn_output(attention(attn_q/k/v(attn_norm(x)))), no RoPE, q/k/v/output with biases,
//   x' = h + ffn_down(relu(ffn_up(ffn_norm(h)))), up and down with biases;
// logits = token_embd . output_norm(x) (no output.weight: tied, as PowerInfer's loader expects).
// token_embd (the output matrix too) and position_embd have standard deviation 1/sqrt(n_embd),
// so the logits have a standard deviation of about 1; every bias --norm-bias * N(0, 1).
// --powerinfer: ffn_down_t (+ its bias, the dense ffn_down.bias) and fc1 / fc2, which
// PowerInfer feeds h (ffn_inp), not ffn_norm(h). --pred-kind gate writes zero ffn_norm and
// ffn_up biases and builds fc1 / fc2 as for falcon from ffn_norm's weights and ffn_up:
// logit = std(h) * (ffn_up . ffn_norm(h)), exact.
std::vector<TensorSpec> opt_tensor_specs(const Config& c) {
  const Shape& s = c.shape;  // n_head_kv = n_head: every K and V matrix is [n_embd, n_embd]
  const SpecMaker m{c};
  const float b = c.norm_bias;
  const float ffn_b = c.gate_predictor ? 0.0f : b;  // ffn_norm and ffn_up biases
  std::vector<TensorSpec> out;
  out.push_back(m.matrix("token_embd.weight", s.n_embd, s.n_vocab));   // [n_vocab, n_embd]
  out.push_back(m.matrix("position_embd.weight", s.n_embd, s.n_ctx));  // [2050, n_embd]
  for (int il = 0; il < c.n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    out.push_back(m.norm(p + "attn_norm.weight"));   // [n_embd]
    out.push_back(m.bias(p + "attn_norm.bias", b));  // [n_embd]
    for (const char* t : {"attn_q", "attn_k", "attn_v", "attn_output"}) {
      out.push_back(m.matrix(p + t + ".weight", s.n_embd, s.n_embd));  // [n_embd, n_embd]
      out.push_back(m.bias(p + t + ".bias", b));                       // [n_embd]
    }
    out.push_back(m.norm(p + "ffn_norm.weight"));                    // [n_embd]
    out.push_back(m.bias(p + "ffn_norm.bias", ffn_b));               // [n_embd]
    out.push_back(m.matrix(p + "ffn_up.weight", s.n_embd, s.n_ff));  // [n_ff, n_embd]
    out.push_back(m.bias(p + "ffn_up.bias", ffn_b, s.n_ff));         // [n_ff]
    if (c.powerinfer) {
      m.add_sparse_ffn(p, p + "ffn_norm.weight", p + "ffn_up.weight", &out, b);
    } else {
      out.push_back(m.matrix(p + "ffn_down.weight", s.n_ff, s.n_embd));  // [n_embd, n_ff]
      out.push_back(m.bias(p + "ffn_down.bias", b));                     // [n_embd]
    }
  }
  out.push_back(m.norm("output_norm.weight"));   // [n_embd]
  out.push_back(m.bias("output_norm.bias", b));  // [n_embd]
  return out;
}

std::vector<TensorSpec> tensor_specs(const Config& c) {
  if (c.arch == "opt") return opt_tensor_specs(c);
  return c.arch == "falcon" ? falcon_tensor_specs(c) : llama_tensor_specs(c);
}

// Metadata and tensor infos (no data: the file is streamed).
GgufWriter make_writer(const Config& c, const std::vector<TensorSpec>& specs) {
  const Shape& s = c.shape;
  const uint32_t head_dim = static_cast<uint32_t>(c.head_dim);
  auto u32 = [](int v) { return GgufValue::u32(static_cast<uint32_t>(v)); };
  const std::string a = c.arch + ".";
  GgufWriter w;
  w.set("general.architecture", GgufValue::str(c.arch));
  w.set("general.name", GgufValue::str(std::string("synth-") + s.name));
  w.set("general.file_type", GgufValue::u32(c.wtype.ftype));
  w.set("general.quantization_version", GgufValue::u32(kQuantizationVersion));
  w.set("hotcold.synth.seed", GgufValue::u64(c.seed));
  const bool falcon = c.arch == "falcon";
  const bool opt = c.arch == "opt";
  // Falcon's converters (llama.cpp's and PowerInfer's) write neither vocab_size nor
  // rope.dimension_count (head_dim, the only value llama.cpp and PowerInfer accept), but the
  // layout of attn_qkv: "jploski" (Q heads, then K heads, then V heads).
  // OPT: what PowerInfer's converter (OptModel) writes: context_length (2050),
  // embedding_length, block_count, feed_forward_length and head_count; no head_count_kv
  // (n_head_kv = n_head), no RoPE, and no LayerNorm epsilon: PowerInfer reads none for OPT, so
  // its LayerNorms run with eps 0 (llama_hparams zero-initialised), which a file without the
  // key tells hotcold too.
  // Qwen (llama.cpp's Qwen2Model / Qwen3Model / Qwen3MoeModel converters: TextModel's keys)
  // writes neither vocab_size nor rope.dimension_count; Qwen3's config has head_dim, which
  // becomes attention.key_length / value_length: written for qwen3 / qwen3moe always, for
  // llama / qwen2 when the head size is the file's own (--head-dim or the shape's).
  const bool qwen = qwen_arch(c.arch);
  if (!falcon && !opt && !qwen) w.set(a + "vocab_size", u32(s.n_vocab));
  w.set(a + "context_length", u32(s.n_ctx));
  w.set(a + "embedding_length", u32(s.n_embd));
  w.set(a + "block_count", u32(c.n_layer));
  w.set(a + "feed_forward_length", u32(s.n_ff));  // llama with experts: the expert width
  if (!falcon && !opt && !qwen) w.set(a + "rope.dimension_count", GgufValue::u32(head_dim));
  w.set(a + "attention.head_count", u32(s.n_head));
  if (!opt) {
    w.set(a + "attention.head_count_kv", u32(s.n_head_kv));
    // RMS norm or LayerNorm (1e-5; Qwen's 1e-6).
    w.set(a + (falcon ? "attention.layer_norm_epsilon" : "attention.layer_norm_rms_epsilon"),
          GgufValue::f32(s.norm_eps));
    w.set(a + "rope.freq_base", GgufValue::f32(s.rope_base));
  }
  if (c.head_dim_given || qk_norm_arch(c.arch)) {
    w.set(a + "attention.key_length", u32(c.head_dim));
    w.set(a + "attention.value_length", u32(c.head_dim));
  }
  if (c.n_expert > 0) {
    w.set(a + "expert_count", u32(c.n_expert));
    w.set(a + "expert_used_count", u32(c.n_expert_used));
    if (c.arch == "qwen3moe") w.set(a + "expert_feed_forward_length", u32(c.n_ff_exp));
    w.set("hotcold.synth.expert_skew", GgufValue::f32(c.expert_skew));
  }
  if (falcon) w.set(a + "tensor_data_layout", GgufValue::str("jploski"));
  // hotcold's key (model/llama_model.cpp), only where the activation is not the file's own;
  // llama.cpp and PowerInfer ignore it (SiLU for llama, GELU for falcon, ReLU for PWRI llama
  // and falcon and for opt, dReLU for bamboo).
  if (c.write_act) w.set(a + "feed_forward_activation", GgufValue::str(c.act));
  // PowerInfer's predictor threshold: a neuron is computed when its logit >= this.
  if (c.powerinfer) w.set("powerinfer.sparse_threshold", GgufValue::f32(c.sparse_threshold));
  const SynthVocab v = make_vocab(s.n_vocab);
  w.set("tokenizer.ggml.model", GgufValue::str("llama"));
  w.set("tokenizer.ggml.tokens", GgufValue::str_array(v.tokens));
  w.set("tokenizer.ggml.scores", GgufValue::f32_array(v.scores));
  w.set("tokenizer.ggml.token_type", GgufValue::i32_array(v.types));
  w.set("tokenizer.ggml.unknown_token_id", GgufValue::u32(0));
  w.set("tokenizer.ggml.bos_token_id", GgufValue::u32(1));
  w.set("tokenizer.ggml.eos_token_id", GgufValue::u32(2));
  w.set("tokenizer.ggml.add_bos_token", GgufValue::boolean(true));
  w.set("tokenizer.ggml.add_eos_token", GgufValue::boolean(false));
  for (const TensorSpec& t : specs) w.add_tensor({t.name, t.ne, t.type, {}});
  return w;
}

// ---- random values -------------------------------------------------------------------------

// splitmix64's finaliser: a bijective 64-bit mix.
uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char ch : s) h = (h ^ ch) * 0x100000001B3ull;
  return h;
}

// n values of mean 0 and standard deviation `stddev` from the generator state `state`: each
// is the sum of four 16-bit uniforms of one splitmix64 draw, centred and scaled (Irwin-Hall,
// close to normal, bounded by 2*sqrt(3) standard deviations).
void fill_row(uint64_t state, float stddev, float* out, int64_t n) {
  const float scale = stddev * std::sqrt(3.0f) / 65536.0f;
  for (int64_t i = 0; i < n; ++i) {
    state += 0x9E3779B97F4A7C15ull;
    const uint64_t r = mix64(state);
    const uint32_t sum = static_cast<uint32_t>((r & 0xFFFF) + ((r >> 16) & 0xFFFF) +
                                               ((r >> 32) & 0xFFFF) + (r >> 48));
    // sum + 2 is four (u + 0.5) uniforms on [0, 65536): mean 131072.
    out[i] = (static_cast<float>(sum) + 2.0f - 131072.0f) * scale;
  }
}

uint64_t tensor_seed(const std::string& name, uint64_t seed) {
  return mix64(seed ^ mix64(fnv1a(name)));
}

// Row r of a tensor seeded `seed` (tensor_seed): mean + the random values, or `mean` alone.
void draw_row(uint64_t seed, int64_t r, float stddev, float mean, float* out, int64_t n) {
  if (stddev <= 0) {
    std::fill(out, out + n, mean);
    return;
  }
  fill_row(mix64(seed + static_cast<uint64_t>(r)), stddev, out, n);
  if (mean != 0.0f)
    for (int64_t i = 0; i < n; ++i) out[i] += mean;
}

// ---- writing -------------------------------------------------------------------------------

using FilePtr = std::unique_ptr<std::FILE, int (*)(std::FILE*)>;

Status write_bytes(std::FILE* f, const void* data, size_t n, const std::string& path) {
  if (n > 0 && std::fwrite(data, 1, n, f) != n)
    return Status::Error("write to '" + path + "' failed: " + std::strerror(errno));
  return Status::Ok();
}

// The transpose of tensor t.source ({ne[1], ne[0]}, drawn row by row as generate_tensor
// would), converted to t.type: rows of t are columns of the source, so the whole source is
// drawn first ([ne[0], ne[1]] floats: 180 MiB for a 7B ffn_down).
void generate_transposed(const TensorSpec& t, uint64_t seed, ThreadPool* pool,
                         std::vector<uint8_t>* buf) {
  const int64_t ne0 = t.ne[0], rows = t.ne[1];  // source: ne0 rows of `rows` values
  const int64_t rb = row_bytes(t.type, ne0);
  buf->resize(static_cast<size_t>(rb * rows));
  const uint64_t src_seed = tensor_seed(t.source, seed);
  std::vector<float> src(static_cast<size_t>(ne0 * rows));  // [ne0, rows] row-major
  pool->run([&](int ith, int nth) {
    int64_t r0 = 0, r1 = 0;
    ThreadPool::split(ne0, ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1; ++r)
      draw_row(src_seed, r, t.stddev, t.mean, src.data() + r * rows, rows);
  });
  pool->run([&](int ith, int nth) {
    std::vector<float> row(static_cast<size_t>(ne0));  // [ne0]: column r of the source
    int64_t r0 = 0, r1 = 0;
    ThreadPool::split(rows, ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t j = 0; j < ne0; ++j) row[j] = src[j * rows + r];
      quant::quantize_row(t.type, row.data(), buf->data() + r * rb, ne0);
    }
  });
}

// Row r of a gate predictor's fc1 or fc2 (Derived::kPredFc1 / kPredFc2 / kPredFc1Ln /
// kPredFc2Ln), t.ne[0] values; norm_w: the n_embd weights of the norm folded in.
void predictor_row(const TensorSpec& t, uint64_t src_seed, int64_t r, const float* norm_w,
                   float* row, std::vector<float>& g, std::vector<uint8_t>& q) {
  const int64_t len = t.ne[0];
  std::fill(row, row + len, 0.0f);
  if (t.derived == Derived::kPredFc1 || t.derived == Derived::kPredFc1Ln) {
    const int64_t n = len;  // n_embd values per row: e_r w_r, then -e_r w_r (then the mean rows)
    if (r < 2 * n)
      row[r % n] = r < n ? norm_w[r] : -norm_w[r - n];
    else if (r == 2 * n || r == 2 * n + t.pred_block)
      std::fill(row, row + n, (r == 2 * n ? 1.0f : -1.0f) / static_cast<float>(n));
    return;
  }
  const int64_t n = (len - 2 * t.pred_block) / 2;  // n_embd (pred_block is 0 for kPredFc2)
  g.resize(static_cast<size_t>(n));  // the gate's (falcon: up's) row r as the file stores it
  q.resize(static_cast<size_t>(row_bytes(t.source_type, n)));
  draw_row(src_seed, r, t.stddev, t.mean, g.data(), n);
  quant::quantize_row(t.source_type, g.data(), q.data(), n);
  quant::dequantize_row(t.source_type, q.data(), g.data(), n);
  for (int64_t j = 0; j < n; ++j) {
    row[j] = g[j];
    row[n + j] = -g[j];
  }
  if (t.derived == Derived::kPredFc2Ln) {  // -s against relu(mean), +s against relu(-mean)
    double s = 0.0;
    for (int64_t j = 0; j < n; ++j) s += static_cast<double>(g[j]) * norm_w[j];
    row[2 * n] = static_cast<float>(-s);
    row[2 * n + t.pred_block] = static_cast<float>(s);
  }
}

// Rows of a tensor: the product of ne[1..] (a 3-D expert tensor: n_expert x ne[1]).
int64_t n_rows(const TensorSpec& t) {
  int64_t rows = 1;
  for (size_t d = 1; d < t.ne.size(); ++d) rows *= t.ne[d];
  return rows;
}

// Rows [row0, row1) of `t` drawn and converted to t.type in parallel (each thread owns a range
// of rows), into *buf: [row1 - row0, row_bytes] row-major. Derived tensors are generated whole.
void generate_tensor(const TensorSpec& t, uint64_t seed, ThreadPool* pool, int64_t row0,
                     int64_t row1, std::vector<uint8_t>* buf) {
  if (t.derived == Derived::kTranspose) return generate_transposed(t, seed, pool, buf);
  const int64_t ne0 = t.ne[0];
  const int64_t rows = row1 - row0;
  const int64_t rb = row_bytes(t.type, ne0);
  buf->resize(static_cast<size_t>(rb * rows));
  const bool pred = t.derived != Derived::kNone;
  // A tensor with a source holds the source's values (predictors: derived from them; opt's
  // ffn_down_t.bias: a dense file's ffn_down.bias as it is).
  const uint64_t seed_t = tensor_seed(t.source.empty() ? t.name : t.source, seed);
  std::vector<float> norm_w;  // kPredFc1*: the source norm's n_embd weights; kPredFc2Ln: aux's
  if (t.derived == Derived::kPredFc1 || t.derived == Derived::kPredFc1Ln) {
    norm_w.resize(static_cast<size_t>(ne0));
    draw_row(seed_t, 0, t.stddev, t.mean, norm_w.data(), ne0);
  } else if (t.derived == Derived::kPredFc2Ln) {
    const int64_t n_embd = (ne0 - 2 * t.pred_block) / 2;
    norm_w.resize(static_cast<size_t>(n_embd));
    draw_row(tensor_seed(t.aux, seed), 0, t.aux_stddev, t.aux_mean, norm_w.data(), n_embd);
  }
  pool->run([&](int ith, int nth) {
    std::vector<float> row(static_cast<size_t>(ne0));  // [ne0], one row in f32
    std::vector<float> g;
    std::vector<uint8_t> q;
    int64_t r0 = 0, r1 = 0;
    ThreadPool::split(rows, ith, nth, &r0, &r1);
    for (int64_t i = r0; i < r1; ++i) {
      const int64_t r = row0 + i;
      if (pred) {
        predictor_row(t, seed_t, r, norm_w.data(), row.data(), g, q);
      } else {
        draw_row(seed_t, r, t.stddev, t.mean, row.data(), ne0);
        if (t.row_decay != 0.0f) {
          const float scale = static_cast<float>(
              std::pow(1.0 + static_cast<double>(r), -static_cast<double>(t.row_decay)));
          for (float& v : row) v *= scale;
        }
      }
      quant::quantize_row(t.type, row.data(), buf->data() + i * rb, ne0);
    }
  });
}

// "4.0 KiB", "70.3 MiB", "3.59 GiB".
std::string size_string(uint64_t bytes) {
  const double b = static_cast<double>(bytes);
  char s[32];
  if (b < 1048576.0)
    std::snprintf(s, sizeof s, "%.1f KiB", b / 1024.0);
  else if (b < 1073741824.0)
    std::snprintf(s, sizeof s, "%.1f MiB", b / 1048576.0);
  else
    std::snprintf(s, sizeof s, "%.2f GiB", b / 1073741824.0);
  return s;
}

uint64_t tensor_bytes(const TensorSpec& t) {
  return static_cast<uint64_t>(row_bytes(t.type, t.ne[0]) * n_rows(t));
}

void announce(const Config& c, uint64_t file_bytes) {
  const Shape& s = c.shape;
  auto num = [](float v) {
    char b[32];
    std::snprintf(b, sizeof b, "%g", static_cast<double>(v));
    return std::string(b);
  };
  std::string extra;
  if (c.arch != "llama") extra += ", arch " + c.arch;
  if (c.norm_jitter > 0) extra += ", norm jitter " + num(c.norm_jitter);
  if (layer_norm_arch(c.arch))
    extra += ", " + std::string(c.arch == "opt" ? "" : "norm ") + "bias " + num(c.norm_bias);
  if (c.arch == "qwen2") extra += ", qkv bias " + num(c.norm_bias);
  if (c.head_dim_given) extra += ", head_dim " + std::to_string(c.head_dim);
  if (c.n_expert > 0)
    extra += ", " + std::to_string(c.n_expert_used) + " of " + std::to_string(c.n_expert) +
             " experts of n_ff " + std::to_string(c.n_ff_exp) + ", skew " + num(c.expert_skew);
  if (c.falcon_norm2) extra += ", attn_norm_2";
  if (c.powerinfer)
    extra += ", PowerInfer layout (" + std::string(c.gate_predictor ? "gate" : "random") +
             " predictor, rank " + std::to_string(c.pred_rank) + " " +
             dtype_name(c.pred_type.type) + ", threshold " + num(c.sparse_threshold) + ")";
  std::fprintf(stderr,
               "%s: %s shape, %d layers, n_embd %d, n_ff %d, heads %d/%d, vocab %d, %s, %s%s, "
               "seed %llu, %d threads -> %s (%s)\n",
               kTool, s.name, c.n_layer, s.n_embd, s.n_ff, s.n_head, s.n_head_kv, s.n_vocab,
               dtype_name(c.wtype.type), c.act.c_str(), extra.c_str(),
               static_cast<unsigned long long>(c.seed), c.threads, c.out.c_str(),
               size_string(file_bytes).c_str());
}

// Header, then each tensor generated, written and padded in turn.
Status write_model(const Config& c, const std::string& path) {
  const std::vector<TensorSpec> specs = tensor_specs(c);
  const GgufWriter w = make_writer(c, specs);
  HC_ASSIGN_OR_RETURN(std::vector<uint8_t> header, w.serialize_header());
  // PowerInfer tells its sparse files by the magic alone (ggml.c gguf_init_from_file:
  // "PWRI" -> GGML_SPARSE_INFERENCE); the rest is GGUF v3, as its converter writes it.
  if (c.powerinfer) std::memcpy(header.data(), "PWRI", 4);
  uint64_t total = header.size();
  for (const TensorSpec& t : specs) total += tensor_bytes(t) + w.padding(tensor_bytes(t));
  FilePtr f(std::fopen(path.c_str(), "wb"), &std::fclose);
  if (!f) return Status::Error("cannot open '" + path + "' for writing: " + std::strerror(errno));
  announce(c, total);

  HC_TRY(write_bytes(f.get(), header.data(), header.size(), path));
  ThreadPool pool(c.threads);
  std::vector<uint8_t> buf;
  const std::vector<uint8_t> zeros(w.alignment, 0);
  uint64_t written = header.size();
  const double t0 = now_seconds();
  for (size_t i = 0; i < specs.size(); ++i) {
    const TensorSpec& t = specs[i];
    // A 3-D expert tensor is generated and written one expert at a time (memory: one expert
    // matrix, not all of them: Mixtral's F16 ffn_up_exps is 940 MiB).
    const int64_t rows = n_rows(t);
    const int64_t chunk = t.ne.size() > 2 && t.derived == Derived::kNone ? t.ne[1] : rows;
    for (int64_t r = 0; r < rows; r += chunk) {
      generate_tensor(t, c.seed, &pool, r, std::min(rows, r + chunk), &buf);
      HC_TRY(write_bytes(f.get(), buf.data(), buf.size(), path));
    }
    const uint64_t nbytes = tensor_bytes(t);
    HC_TRY(write_bytes(f.get(), zeros.data(), w.padding(nbytes), path));
    written += nbytes + w.padding(nbytes);
    std::fprintf(stderr, "[%3zu/%zu] %-24s %-16s %-4s %10s  %5.1f%%  %6.1f s\n", i + 1,
                 specs.size(), t.name.c_str(), shape_string(t.ne).c_str(), dtype_name(t.type),
                 size_string(nbytes).c_str(), 100.0 * static_cast<double>(written) / total,
                 now_seconds() - t0);
  }
  if (std::fclose(f.release()) != 0)
    return Status::Error("write to '" + path + "' failed: " + std::strerror(errno));
  if (written != total)
    return Status::Error("internal: wrote " + std::to_string(written) + " bytes, expected " +
                         std::to_string(total));
  std::fprintf(stderr, "%s: wrote %s (%s) in %.1f s\n", kTool, c.out.c_str(),
               size_string(total).c_str(), now_seconds() - t0);
  return Status::Ok();
}

// ---- command line --------------------------------------------------------------------------

// ArgParser names every command "hotcold <command>"; this tool is its own binary.
std::string tool_text(std::string s) {
  const std::string from = std::string("hotcold ") + kTool;
  for (size_t pos; (pos = s.find(from)) != std::string::npos;) s.replace(pos, from.size(), kTool);
  return s;
}

int error(const std::string& message, int exit_code) {
  std::fprintf(stderr, "%s: error: %s\n", kTool, tool_text(message).c_str());
  return exit_code;
}

int run(const std::vector<std::string>& args) {
  Flags f;
  ArgParser p(kTool,
              "Writes a LLaMA (or Falcon, OPT, Qwen, Mixtral-style MoE) GGUF model with random\n"
              "weights of a real model's shape, loadable by hotcold and llama.cpp (with --arch\n"
              "bamboo or opt or --powerinfer: by hotcold and PowerInfer), for benchmarks and\n"
              "reference tests. Shapes (opt: n_head_kv = n_head, context 2050):\n"
              "  llama2-7b      n_embd 4096, n_ff 11008, 32/32 heads, vocab 32000, context 4096\n"
              "  falcon-7b      n_embd 4544, n_ff 18176, 71/1 heads, vocab 65024, context 2048\n"
              "  opt-6.7b       n_embd 4096, n_ff 16384, 32/32 heads, vocab 50272, context 2050\n"
              "  qwen2.5-7b     n_embd 3584, n_ff 18944, 28/4 heads, vocab 152064, context 32768,\n"
              "                 rope base 1e6, rms eps 1e-6\n"
              "  mixtral-8x7b   n_embd 4096, 32/8 heads, 8 experts of n_ff 14336, 2 used, vocab\n"
              "                 32000, context 32768, rope base 1e6\n"
              "  qwen3-30b-a3b  n_embd 2048, n_ff 6144 (dense, unused), 32/4 heads of 128, 128\n"
              "                 experts of n_ff 768, 8 used, vocab 151936, context 40960, rope\n"
              "                 base 1e6, rms eps 1e-6\n"
              "  tiny           n_embd 256, n_ff 768, 4/2 heads, vocab 512, context 2048");
  p.add_string("--shape", &f.shape, "model shape: " + shape_names());
  p.add_int("--n-embd", &f.n_embd, "override the shape's n_embd; 0 = keep");
  p.add_int("--n-ff", &f.n_ff, "override the shape's n_ff; 0 = keep");
  p.add_int("--n-head", &f.n_head, "override the shape's n_head; 0 = keep");
  p.add_int("--n-head-kv", &f.n_head_kv, "override the shape's n_head_kv; 0 = keep");
  p.add_int("--n-vocab", &f.n_vocab, "override the shape's n_vocab; 0 = keep");
  p.add_int("--layers", &f.layers, "number of layers");
  p.add_string("--type", &f.type, "weight type: " + type_names());
  p.add_string("--arch", &f.arch,
               "general.architecture: llama (with --experts: Mixtral), bamboo (PowerInfer's "
               "relu(gate) * relu(up)), falcon (LayerNorm, fused QKV, ungated FFN parallel to "
               "attention), opt (PowerInfer's: learned positions, biases, ReLU FFN, output tied "
               "to token_embd), qwen2 (llama + Q/K/V biases, NEOX RoPE), qwen3 (llama + per-head "
               "Q/K RMS norms, NEOX RoPE) or qwen3moe (qwen3 with routed experts)");
  p.add_int("--head-dim", &f.head_dim,
            "attention head size (llama, qwen2, qwen3, qwen3moe); 0 = the shape's, else "
            "n_embd / n_head");
  p.add_int("--experts", &f.experts,
            "routed experts per layer (--arch llama: Mixtral's layout; qwen3moe: required); "
            "-1 = the shape's, 0 = dense");
  p.add_int("--experts-used", &f.experts_used, "experts per token; 0 = the shape's");
  p.add_int("--n-ff-exp", &f.n_ff_exp,
            "an expert's FFN width; 0 = the shape's, else n_ff (--arch llama: n_ff is the "
            "expert width)");
  p.add_float("--expert-skew", &f.expert_skew,
              "router row e scaled by (1 + e)^-S: low-index experts are chosen more often "
              "(0..4; 0 = uniform popularity) (default: 0.5)");
  p.add_string("--act", &f.act,
               "FFN activation: silu or relu (falcon: gelu or relu; opt: relu), written as "
               "hotcold's key (hotcold only) where it is not the file's own; empty = the file's "
               "own (llama silu, falcon gelu, PowerInfer llama / falcon relu, opt relu, bamboo "
               "drelu)");
  p.add_float("--norm-jitter", &f.norm_jitter,
              "norm weights 1 + J * N(0, 1) instead of exactly 1 (0..1)");
  p.add_float("--norm-bias", &f.norm_bias,
              "falcon: LayerNorm biases B * N(0, 1) (0..1, default 0.05; attn_norm's are 0 with "
              "--pred-kind gate); opt: every bias (ffn_norm's and ffn_up's are 0 with "
              "--pred-kind gate); qwen2: the Q/K/V biases (default 0.5)");
  p.add_flag("--falcon-norm2", &f.falcon_norm2,
             "falcon: a second LayerNorm per layer, attn_norm_2, for attention (Falcon-40B); "
             "the FFN reads attn_norm");
  p.add_flag("--powerinfer", &f.powerinfer,
             "PowerInfer's sparse layout: magic PWRI, ffn_down_t instead of ffn_down, "
             "predictors fc1 / fc2 (--pred-*), powerinfer.sparse_threshold");
  p.add_string("--pred-kind", &f.pred_kind,
               "predictors (--powerinfer): random, or gate: exact, built from the layer's "
               "ffn_norm and ffn_gate so the logit is rms(x) * gate (rank 2 n_embd; falcon: "
               "from attn_norm and ffn_up, logit std(x) * up, rank 2 n_embd + 2 blocks; opt: "
               "the same from ffn_norm and ffn_up)");
  p.add_int("--pred-rank", &f.pred_rank,
            "predictor rank (fc1 rows; --powerinfer); 0 = 64 for random, the exact rank for "
            "gate");
  p.add_string("--pred-type", &f.pred_type,
               "predictor weight type (--powerinfer; f16 as PowerInfer's converter writes)");
  p.add_float("--sparse-threshold", &f.sparse_threshold,
              "powerinfer.sparse_threshold (--powerinfer): a neuron is computed when its "
              "predictor logit is >= this");
  p.add_u64("--seed", &f.seed, "random seed");
  p.add_int("-t,--threads", &f.threads, "threads");
  p.add_string("-o,--output", &f.out, "output GGUF file (required)");
  const Status st = p.parse(args);
  if (p.help_requested()) {
    std::fputs(tool_text(p.usage()).c_str(), stdout);
    return 0;
  }
  if (!st.ok()) return error(st.message(), 2);
  Result<Config> c = validate(f);
  if (!c.ok()) return error(c.message(), 2);
  const Status written = write_then_rename(
      c->out, [&](const std::string& tmp_path) { return write_model(*c, tmp_path); });
  return written.ok() ? 0 : error(written.message(), 1);
}

}  // namespace
}  // namespace hc

int main(int argc, char** argv) {
  try {
    return hc::run(std::vector<std::string>(argv + (argc > 0 ? 1 : 0), argv + argc));
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "%s: error: out of memory\n", hc::kTool);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: internal error: %s\n", hc::kTool, e.what());
  }
  return 1;
}
