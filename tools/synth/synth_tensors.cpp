// hc-synth-model: the synthetic vocabulary, the tensors of every architecture and the file's
// metadata (synth.h).
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
  // A twin (`twin_gate`: its low-rank gate spec) gets its exact predictor (kTwinFc1 / kTwinFc2).
  void add_sparse_ffn(const std::string& p, const std::string& pred_norm,
                      const std::string& pred_gate, std::vector<TensorSpec>* out,
                      float down_bias = -1.0f, const TensorSpec* twin_gate = nullptr) const {
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
    if (twin_gate) {
      const TensorSpec w_norm = norm(pred_norm);
      for (TensorSpec* t : {&fc1, &fc2}) {
        t->source = twin_gate->name;
        t->low_rank = twin_gate->low_rank;
        t->stddev = twin_gate->stddev;
        t->pred_block = mean_block(c.pred_type);
      }
      fc1.derived = Derived::kTwinFc1;
      fc1.aux = w_norm.name;
      fc1.aux_stddev = w_norm.stddev;
      fc1.aux_mean = w_norm.mean;
      fc2.derived = Derived::kTwinFc2;
      fc2.channel_bias = twin_gate->channel_bias;
    } else if (c.gate_predictor) {
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
  // token_embd [n_vocab, n_embd], standard deviation 1 (a twin: the constant channel first)
  out.push_back(spec("token_embd.weight", {s.n_embd, s.n_vocab}, c.wtype.type, 1.0f));
  if (c.twin) out.back().channel_value = c.twin_channel;
  for (int il = 0; il < c.n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    out.push_back(m.norm(p + "attn_norm.weight"));  // [n_embd]
    // attn_q [q_dim, n_embd], attn_k and attn_v [kv_dim, n_embd]; qwen2: each + bias [rows]
    for (auto [t, rows] : {std::pair{"attn_q", q_dim}, {"attn_k", kv_dim}, {"attn_v", kv_dim}}) {
      out.push_back(m.matrix(p + t + ".weight", s.n_embd, rows));
      if (qkv_bias) out.push_back(m.bias(p + t + ".bias", c.norm_bias, rows));
    }
    out.push_back(m.matrix(p + "attn_output.weight", q_dim, s.n_embd));  // [n_embd, q_dim]
    out.back().zero_channel_rows = c.twin != nullptr;
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
    if (c.twin) {  // each neuron's bias, on the channel (the calibration's current values)
      out.back().channel_bias = std::make_shared<const std::vector<float>>(
          (*c.twin_bias)[static_cast<size_t>(il)]);
      out.back().low_rank = c.gate_rank;
    }
    const TensorSpec gate = out.back();
    out.push_back(m.matrix(p + "ffn_up.weight", s.n_embd, s.n_ff));    // [n_ff, n_embd]
    if (c.powerinfer)
      m.add_sparse_ffn(p, p + "ffn_norm.weight", p + "ffn_gate.weight", &out, -1.0f,
                       c.twin ? &gate : nullptr);
    else
      out.push_back(m.matrix(p + "ffn_down.weight", s.n_ff, s.n_embd));  // [n_embd, n_ff]
    if (c.twin) out.back().zero_channel_rows = true;
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
  if (c.gate_rank > 0) w.set("hotcold.synth.gate_rank", u32(c.gate_rank));
  if (c.powerinfer && !c.pred_thresholds.empty()) {
    // A twin's predictors (twin.h): per-layer thresholds chosen on --calib for the target
    // recall, what they gave there, and the input they read (as train-predictor writes them).
    const uint32_t rank = static_cast<uint32_t>(c.pred_rank);
    GgufValue ranks;
    ranks.type = GgufType::ARRAY;
    ranks.elem_type = GgufType::UINT32;
    ranks.arr_u.assign(static_cast<size_t>(c.n_layer), rank);
    w.set("hotcold.predictor.thresholds", GgufValue::f32_array(c.pred_thresholds));
    w.set("hotcold.predictor.input", GgufValue::str("residual"));
    w.set("hotcold.predictor.rank", ranks);
    w.set("hotcold.predictor.recall", GgufValue::f32_array(c.pred_recall));
    w.set("hotcold.predictor.precision", GgufValue::f32_array(c.pred_precision));
  }
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

}  // namespace hc::synth
