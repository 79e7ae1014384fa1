// hc-synth-model: the flags checked and resolved into a Config (synth.h).
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
#include "synth.h"

namespace hc::synth {

TensorSpec spec(std::string name, std::vector<int64_t> ne, GgmlType type, float stddev,
                float mean) {
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
  if (!f.pred_kind.empty() && f.pred_kind != "random" && f.pred_kind != "gate")
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

Config plain_layout(const Config& c) {
  Config p = c;
  p.powerinfer = false;
  p.write_act = p.act != natural_activation(p.arch, false);
  return p;
}

namespace {

Result<Config> validate_flags(const Flags& f) {
  Config c;
  const Shape* shape = nullptr;
  for (const Shape& s : kShapes)
    if (f.shape == s.name) shape = &s;
  if (!shape)
    return Status::Error("--shape: expected one of " + shape_names() + ", found '" + f.shape + "'");
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
    if (f.pred_kind == "gate" && !f.twin.empty())
      return Status::Error("--pred-kind: a --twin's predictor is its own (exact for its "
                           "low-rank gate); drop --pred-kind");
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

}  // namespace

Result<Config> validate(const Flags& given) {
  Flags f = given;
  const TwinSpec* twin = nullptr;
  if (!f.twin.empty()) {
    twin = find_twin(f.twin);
    if (!twin)
      return Status::Error("--twin: expected one of " + twin_names() + ", found '" + f.twin + "'");
    // The twin decides the architecture and activation; a shape and layer count may be given
    // (smaller ones for tests), a weight type too.
    if (f.arch != "llama" || !f.act.empty() || f.experts > 0 || f.norm_jitter != 0)
      return Status::Error("--twin " + f.twin + " sets the architecture, activation and norms: "
                           "drop --arch, --act, --experts and --norm-jitter");
    if (f.powerinfer && f.gate_rank <= 0)
      return Status::Error("--twin with --powerinfer needs --gate-rank R: the twin's predictor "
                           "is exact for a gate of rank R, at rank 2 R + 32 (PowerInfer's 1024 "
                           "at R = 496)");
    if (!f.powerinfer && (f.pred_rank != 0 || !f.pred_kind.empty()))
      return Status::Error("--pred-rank / --pred-kind need --powerinfer");
    if (f.calib.empty())
      return Status::Error("--twin needs --calib TEXT.txt: the text its firing is calibrated on");
    if (f.calib_tokens < 64 || f.calib_tokens > 65536)
      return Status::Error("--calib-tokens: expected 64..65536, found " +
                           std::to_string(f.calib_tokens));
    f.arch = twin->arch;
    if (f.arch == "llama") f.act = twin->act;  // bamboo's own is dReLU
    if (f.shape.empty()) f.shape = twin->shape;
    if (f.layers < 0) f.layers = 32;
    f.experts = 0;
  } else if (!f.calib.empty()) {
    return Status::Error("--calib calibrates a --twin; none given");
  } else if (f.gate_rank != 0) {
    return Status::Error("--gate-rank shapes a --twin's gate; none given");
  }
  if (f.shape.empty()) f.shape = "llama2-7b";
  if (f.layers < 0) f.layers = 2;
  HC_ASSIGN_OR_RETURN(Config c, validate_flags(f));
  if (twin) {
    if (c.shape.n_embd < 2 * kTwinChannel)
      return Status::Error("--twin: n_embd " + std::to_string(c.shape.n_embd) +
                           " leaves no room beside the " + std::to_string(kTwinChannel) +
                           "-wide constant channel");
    const int free_cols = c.shape.n_embd - kTwinChannel;
    if (f.gate_rank < 0 || f.gate_rank > free_cols)
      return Status::Error("--gate-rank: expected 1.." + std::to_string(free_cols) +
                           " (n_embd less the channel), found " + std::to_string(f.gate_rank));
    if (!(f.target_recall > 0.5f && f.target_recall < 1.0f))
      return Status::Error("--target-recall: expected a share in (0.5, 1), found " +
                           std::to_string(f.target_recall));
    c.gate_rank = f.gate_rank;
    c.target_recall = f.target_recall;
    if (c.powerinfer) {
      const int rank = 2 * c.gate_rank + static_cast<int>(mean_block(c.pred_type));
      if (f.pred_rank != 0 && f.pred_rank != rank)
        return Status::Error("--twin with --gate-rank " + std::to_string(c.gate_rank) +
                             ": the predictor's rank is 2 R + " +
                             std::to_string(mean_block(c.pred_type)) + " = " +
                             std::to_string(rank) + ", found --pred-rank " +
                             std::to_string(f.pred_rank));
      c.pred_rank = rank;
      if (rank % dtype_traits(c.pred_type.type).block_size != 0)
        return Status::Error("--pred-type " + std::string(c.pred_type.flag) +
                             " needs the predictor's rank 2 R + " +
                             std::to_string(mean_block(c.pred_type)) + " = " +
                             std::to_string(rank) + " to be a multiple of its block size " +
                             std::to_string(dtype_traits(c.pred_type.type).block_size));
    }
    c.twin = twin;
    c.calib = f.calib;
    c.calib_tokens = f.calib_tokens;
    // Half of an embedding's energy in the channel: kTwinChannel values of c against
    // n_embd - kTwinChannel of standard deviation 1.
    c.twin_channel = std::sqrt(static_cast<float>(c.shape.n_embd - kTwinChannel) / kTwinChannel);
    c.twin_bias = std::make_shared<std::vector<std::vector<float>>>(
        static_cast<size_t>(c.n_layer), std::vector<float>(static_cast<size_t>(c.shape.n_ff), 0.0f));
  }
  return c;
}

}  // namespace hc::synth
