// Builds a tiny random LLaMA-architecture (or falcon / opt) GGUF in memory for model/engine
// tests.
#pragma once
#include <algorithm>
#include <cmath>
#include <random>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include <memory>

#include "format/gguf.h"
#include "model/llama_forward.h"
#include "model/llama_model.h"
#include "model/sparse_ffn.h"
#include "ops/cpu/cpu_device.h"
#include "quant/quant.h"

namespace hc::testing {

struct TinyModelSpec {
  int n_vocab = 40, n_embd = 64, n_ff = 96, n_layer = 2, n_head = 4, n_head_kv = 2, n_ctx = 64;
  GgmlType wtype = GgmlType::F32;
  bool tied = false;
  std::string activation;  // "" (the architecture's own: SwiGLU, falcon GELU), "relu", "drelu"
  // "falcon": llama.cpp's falcon layout (LayerNorm with biases, fused attn_qkv, ungated
  // ffn_up / ffn_down, parallel blocks); norm2 adds Falcon-40B's attn_norm_2.
  // "opt": PowerInfer's OPT tensors (learned positions, LayerNorm, biases everywhere, ungated
  // ReLU FFN, tied output; n_head_kv is n_head) with ffn_down in the dense layout.
  std::string arch = "llama";
  bool norm2 = false;
  // "qwen2" adds Q/K/V biases, "qwen3" / "qwen3moe" per-head Q/K norms (both NeoX RoPE).
  // n_expert > 0 (llama: Mixtral's layout; required by qwen3moe): every layer's FFN is n_expert
  // experts of n_ff neurons (router ffn_gate_inp F32, ffn_{gate,up,down}_exps in wtype), of
  // which n_expert_used run per token.
  int n_expert = 0, n_expert_used = 0;
  int head_dim = 0;  // 0: n_embd / n_head; else attention.key_length / value_length
};

class TinyModel {
 public:
  explicit TinyModel(const TinyModelSpec& s, uint32_t seed = 42) : rng_(seed) {
    const bool falcon = s.arch == "falcon";
    const std::string a = s.arch + ".";
    w_.set("general.architecture", GgufValue::str(s.arch));
    w_.set(a + "context_length", GgufValue::u32(s.n_ctx));
    w_.set(a + "embedding_length", GgufValue::u32(s.n_embd));
    w_.set(a + "block_count", GgufValue::u32(s.n_layer));
    w_.set(a + "feed_forward_length", GgufValue::u32(s.n_ff));
    w_.set(a + "attention.head_count", GgufValue::u32(s.n_head));
    if (s.arch != "opt") w_.set(a + "attention.head_count_kv", GgufValue::u32(s.n_head_kv));
    w_.set(a + (falcon || s.arch == "opt" ? "attention.layer_norm_epsilon"
                                          : "attention.layer_norm_rms_epsilon"),
           GgufValue::f32(1e-5f));
    if (!s.activation.empty()) w_.set("hotcold.ffn_activation", GgufValue::str(s.activation));
    if (s.head_dim > 0) {
      w_.set(a + "attention.key_length", GgufValue::u32(s.head_dim));
      w_.set(a + "attention.value_length", GgufValue::u32(s.head_dim));
    }
    if (s.n_expert > 0) {
      w_.set(a + "expert_count", GgufValue::u32(s.n_expert));
      w_.set(a + "expert_used_count", GgufValue::u32(s.n_expert_used));
      if (s.arch == "qwen3moe") {  // feed_forward_length is the (unused) dense width there
        w_.set(a + "expert_feed_forward_length", GgufValue::u32(s.n_ff));
        w_.set(a + "feed_forward_length", GgufValue::u32(3 * s.n_ff));
      }
    }
    std::vector<std::string> toks = {"<unk>", "<s>", "</s>"};
    std::vector<float> scores = {0, 0, 0};
    std::vector<int32_t> types = {2, 3, 3};
    for (int i = 3; i < s.n_vocab; ++i) {
      toks.push_back(std::string(1, static_cast<char>('a' + (i - 3) % 26)) +
                     (i - 3 >= 26 ? std::to_string(i) : ""));
      scores.push_back(-static_cast<float>(i));
      types.push_back(1);
    }
    w_.set("tokenizer.ggml.model", GgufValue::str("llama"));
    w_.set("tokenizer.ggml.tokens", GgufValue::str_array(toks));
    w_.set("tokenizer.ggml.scores", GgufValue::f32_array(scores));
    w_.set("tokenizer.ggml.token_type", GgufValue::i32_array(types));
    w_.set("tokenizer.ggml.bos_token_id", GgufValue::u32(1));
    w_.set("tokenizer.ggml.eos_token_id", GgufValue::u32(2));
    const int hd = s.head_dim > 0 ? s.head_dim : s.n_embd / s.n_head;
    matrix("token_embd.weight", s.n_embd, s.n_vocab, s.wtype, 1.0f);
    const bool opt = s.arch == "opt";
    norm("output_norm.weight", s.n_embd);
    if (falcon || opt) bias("output_norm.bias", s.n_embd);
    if (!s.tied && !opt) matrix("output.weight", s.n_embd, s.n_vocab, s.wtype, 0.3f);
    if (opt) matrix("position_embd.weight", s.n_embd, s.n_ctx, s.wtype, 0.3f);
    for (int il = 0; il < s.n_layer; ++il) {
      const std::string p = "blk." + std::to_string(il) + ".";
      if (falcon) {
        norm(p + "attn_norm.weight", s.n_embd);
        bias(p + "attn_norm.bias", s.n_embd);
        if (s.norm2) {
          norm(p + "attn_norm_2.weight", s.n_embd);
          bias(p + "attn_norm_2.bias", s.n_embd);
        }
        // 0.1, not 0.3: with 0.3 the attention is near one-hot and this model amplified float
        // summation-order noise ~100x per layer (near-tied scores), too chaotic to compare.
        matrix(p + "attn_qkv.weight", s.n_embd, (s.n_head + 2 * s.n_head_kv) * hd, s.wtype, 0.1f);
        matrix(p + "attn_output.weight", s.n_head * hd, s.n_embd, s.wtype, 0.1f);
        matrix(p + "ffn_up.weight", s.n_embd, s.n_ff, s.wtype, 0.3f);
        matrix(p + "ffn_down.weight", s.n_ff, s.n_embd, s.wtype, 0.1f);
        continue;
      }
      if (opt) {
        norm(p + "attn_norm.weight", s.n_embd);
        bias(p + "attn_norm.bias", s.n_embd);
        for (const char* m : {"attn_q", "attn_k", "attn_v"}) {
          matrix(p + m + ".weight", s.n_embd, s.n_head * hd, s.wtype, 0.1f);
          bias(p + m + ".bias", s.n_head * hd);
        }
        matrix(p + "attn_output.weight", s.n_head * hd, s.n_embd, s.wtype, 0.1f);
        bias(p + "attn_output.bias", s.n_embd);
        norm(p + "ffn_norm.weight", s.n_embd);
        bias(p + "ffn_norm.bias", s.n_embd);
        matrix(p + "ffn_up.weight", s.n_embd, s.n_ff, s.wtype, 0.3f);
        bias(p + "ffn_up.bias", s.n_ff);
        matrix(p + "ffn_down.weight", s.n_ff, s.n_embd, s.wtype, 0.1f);
        bias(p + "ffn_down.bias", s.n_embd);
        continue;
      }
      norm(p + "attn_norm.weight", s.n_embd);
      matrix(p + "attn_q.weight", s.n_embd, s.n_head * hd, s.wtype, 0.3f);
      matrix(p + "attn_k.weight", s.n_embd, s.n_head_kv * hd, s.wtype, 0.3f);
      matrix(p + "attn_v.weight", s.n_embd, s.n_head_kv * hd, s.wtype, 0.3f);
      if (s.arch == "qwen2") {
        bias(p + "attn_q.bias", s.n_head * hd);
        bias(p + "attn_k.bias", s.n_head_kv * hd);
        bias(p + "attn_v.bias", s.n_head_kv * hd);
      }
      if (s.arch == "qwen3" || s.arch == "qwen3moe") {
        norm(p + "attn_q_norm.weight", hd);
        norm(p + "attn_k_norm.weight", hd);
      }
      matrix(p + "attn_output.weight", s.n_head * hd, s.n_embd, s.wtype, 0.1f);
      norm(p + "ffn_norm.weight", s.n_embd);
      if (s.n_expert > 0) {
        matrix(p + "ffn_gate_inp.weight", s.n_embd, s.n_expert, GgmlType::F32, 0.3f);
        matrix(p + "ffn_gate_exps.weight", s.n_embd, s.n_ff, s.wtype, 0.3f, s.n_expert);
        matrix(p + "ffn_up_exps.weight", s.n_embd, s.n_ff, s.wtype, 0.3f, s.n_expert);
        matrix(p + "ffn_down_exps.weight", s.n_ff, s.n_embd, s.wtype, 0.1f, s.n_expert);
        continue;
      }
      matrix(p + "ffn_gate.weight", s.n_embd, s.n_ff, s.wtype, 0.3f);
      matrix(p + "ffn_up.weight", s.n_embd, s.n_ff, s.wtype, 0.3f);
      matrix(p + "ffn_down.weight", s.n_ff, s.n_embd, s.wtype, 0.1f);
    }
  }
  GgufWriter& writer() { return w_; }
  std::vector<uint8_t> bytes() { return *w_.serialize(); }

 private:
  // ne2 > 0: a 3-D tensor {ne0, ne1, ne2} (the experts'), ne1 * ne2 rows.
  void matrix(const std::string& name, int64_t ne0, int64_t ne1, GgmlType t, float scale,
              int64_t ne2 = 0) {
    std::normal_distribution<float> d(0.0f, scale);
    const int64_t rows = ne1 * std::max<int64_t>(ne2, 1);
    std::vector<float> f(ne0 * rows);
    for (float& x : f) x = d(rng_);
    const int64_t rb = row_bytes(t, ne0);
    bufs_.emplace_back(rb * rows);
    for (int64_t r = 0; r < rows; ++r)
      quant::quantize_row_ref(t, f.data() + r * ne0, bufs_.back().data() + r * rb, ne0);
    std::vector<int64_t> ne = {ne0, ne1};
    if (ne2 > 0) ne.push_back(ne2);
    w_.add_tensor({name, ne, t, {bufs_.back().data(), bufs_.back().size()}});
  }
  void norm(const std::string& name, int64_t n) {
    std::uniform_real_distribution<float> d(0.8f, 1.2f);
    bufs_.emplace_back(n * 4);
    float* p = reinterpret_cast<float*>(bufs_.back().data());
    for (int64_t i = 0; i < n; ++i) p[i] = d(rng_);
    w_.add_tensor({name, {n}, GgmlType::F32, {bufs_.back().data(), bufs_.back().size()}});
  }
  void bias(const std::string& name, int64_t n) {
    std::uniform_real_distribution<float> d(-0.1f, 0.1f);
    bufs_.emplace_back(n * 4);
    float* p = reinterpret_cast<float*>(bufs_.back().data());
    for (int64_t i = 0; i < n; ++i) p[i] = d(rng_);
    w_.add_tensor({name, {n}, GgmlType::F32, {bufs_.back().data(), bufs_.back().size()}});
  }
  std::mt19937 rng_;
  GgufWriter w_;
  std::vector<std::vector<uint8_t>> bufs_;  // std::vector<vector> keeps element buffers stable
};

// Loads a model from GGUF bytes (which must outlive it); a failure is a test failure and null.
// block_sums: LoadOptions::block_sums (with repack).
inline std::shared_ptr<const LlamaModel> load_tiny(std::vector<uint8_t>& bytes, bool repack,
                                                   bool block_sums = false) {
  auto f = parse_gguf(bytes);
  EXPECT_TRUE(f.ok()) << f.message();
  if (!f.ok()) return nullptr;
  auto m = LlamaModel::from_gguf(std::move(f).value(), repack, block_sums);
  EXPECT_TRUE(m.ok()) << m.message();
  return m.ok() ? *m : nullptr;
}

// Logits of every position of `toks`, one prompt batch from position 0 on a fresh KV cache of
// n_ctx positions (host only; sparse may be null for the dense FFN).
inline std::vector<float> prompt_logits(const LlamaModel& m, const SparseFfn* sparse,
                                        std::span<const int32_t> toks, int n_ctx) {
  const LlamaHParams& hp = m.hparams();
  KvCache cache(hp.n_layer, n_ctx, int64_t{hp.n_head_kv} * hp.head_dim);
  ForwardScratch s;
  s.sparse = sparse;
  ThreadPool pool(2);
  std::vector<float> l;
  const Status st = llama_forward(m, cache, s, pool, toks, 0, true, &l);
  EXPECT_TRUE(st.ok()) << st.message();
  return l;
}

// Scalar double causal attention of token t (the tests' reference models): q[t] [n_head * hd]
// against k[j], v[j] [n_head_kv * hd] for j <= t, query head h reading K/V head
// h / (n_head / n_head_kv); scale 1/sqrt(hd). f16_probs: the probabilities rounded to fp16
// before they meet V, as ggml's F16-cache product does.
inline std::vector<double> ref_attention(const std::vector<std::vector<double>>& q,
                                         const std::vector<std::vector<double>>& k,
                                         const std::vector<std::vector<double>>& v, int64_t t,
                                         int n_head, int n_head_kv, int64_t hd, bool f16_probs) {
  std::vector<double> att(static_cast<size_t>(n_head * hd), 0.0);
  const int group = n_head / n_head_kv;
  for (int h = 0; h < n_head; ++h) {
    const int kvh = h / group;
    std::vector<double> s(static_cast<size_t>(t + 1));
    double mx = -1e300;
    for (int64_t j = 0; j <= t; ++j) {
      double d = 0;
      for (int64_t c = 0; c < hd; ++c) d += q[t][h * hd + c] * k[j][kvh * hd + c];
      s[j] = d / std::sqrt(static_cast<double>(hd));
      mx = std::max(mx, s[j]);
    }
    double sum = 0;
    for (double& z : s) sum += (z = std::exp(z - mx));
    for (int64_t j = 0; j <= t; ++j) {
      const double p = f16_probs ? fp16_to_fp32(fp32_to_fp16(static_cast<float>(s[j] / sum)))
                                 : s[j] / sum;
      for (int64_t c = 0; c < hd; ++c) att[h * hd + c] += p * v[j][kvh * hd + c];
    }
  }
  return att;
}

// Largest |a[i] - b[i]| (sizes must match) and largest |v[i]|: logits comparisons.
inline float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float m = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}
inline float max_abs(const std::vector<float>& v) {
  float m = 0;
  for (float x : v) m = std::max(m, std::fabs(x));
  return m;
}

// An exact predictor's fc1 for layer il of an F32 tiny model, in bufs.back(): W_gate with each
// column j scaled by ffn_norm's weight j. Predictors read the FFN input before ffn_norm (x), so
// fc1 . x = rms(x) * (W_gate . ffn_norm(x)): with fc2 = I the logit is relu(gate) times a
// positive factor, positive exactly when the neuron fires. (A threshold of 0 would also
// predict the zeros: PowerInfer's rule is logit >= threshold; see kExactPredictorThreshold.)
inline void exact_fc1(GgufWriter& w, int il, int64_t E, int64_t F,
                      std::vector<std::vector<uint8_t>>& bufs) {
  const std::string p = "blk." + std::to_string(il) + ".";
  const float* norm = nullptr;
  for (auto& t : w.tensors)
    if (t.name == p + "ffn_norm.weight") norm = reinterpret_cast<const float*>(t.data.data());
  for (auto& t : w.tensors)
    if (t.name == p + "ffn_gate.weight") bufs.emplace_back(t.data.begin(), t.data.end());
  auto* g = reinterpret_cast<float*>(bufs.back().data());
  for (int64_t i = 0; i < F; ++i)
    for (int64_t j = 0; j < E; ++j) g[i * E + j] *= norm[j];
}
// The smallest positive normal float: logits relu(.) > 0 are predicted, zeros are not.
inline constexpr float kExactPredictorThreshold = 1.17549435e-38f;

// A ReLU model with an exact predictor (exact_fc1, fc2 = I: logit_i > 0 exactly when neuron i
// fires).
inline std::vector<uint8_t> model_with_predictor(const TinyModelSpec& spec,
                                          std::vector<std::vector<uint8_t>>& bufs) {
  TinyModel tm(spec);
  GgufWriter& w = tm.writer();
  w.set("powerinfer.sparse_threshold", GgufValue::f32(kExactPredictorThreshold));
  const int64_t E = spec.n_embd, F = spec.n_ff;
  if (spec.arch != "llama") {
    // Random rank-32 predictors at threshold 0 (about half the neurons predicted, unrelated to
    // their activations): what a hybrid test needs is the same decisions on both sides.
    w.set("powerinfer.sparse_threshold", GgufValue::f32(0.0f));
    std::mt19937 rng(7);
    std::normal_distribution<float> d(0.0f, 0.3f);
    const int64_t R = 32;
    for (int il = 0; il < spec.n_layer; ++il) {
      const std::string p = "blk." + std::to_string(il) + ".";
      for (auto [name, ne0, ne1] : {std::tuple{"fc1.weight", E, R}, {"fc2.weight", R, F}}) {
        bufs.emplace_back(static_cast<size_t>(ne0 * ne1 * 4));
        auto* f = reinterpret_cast<float*>(bufs.back().data());
        for (int64_t i = 0; i < ne0 * ne1; ++i) f[i] = d(rng);
        w.add_tensor({p + name, {ne0, ne1}, GgmlType::F32, {bufs.back().data(), bufs.back().size()}});
      }
    }
    return *w.serialize();
  }
  for (int il = 0; il < spec.n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    exact_fc1(w, il, E, F, bufs);
    w.add_tensor({p + "fc1.weight", {E, F}, GgmlType::F32, {bufs.back().data(), bufs.back().size()}});
    bufs.emplace_back(static_cast<size_t>(F * F * 4), 0);
    auto* eye = reinterpret_cast<float*>(bufs.back().data());
    for (int64_t i = 0; i < F; ++i) eye[i * F + i] = 1.0f;
    w.add_tensor({p + "fc2.weight", {F, F}, GgmlType::F32, {bufs.back().data(), bufs.back().size()}});
  }
  return *w.serialize();
}

// A CPU device (ops/cpu/cpu_device.h) with its bandwidth configured (no probe in unit tests);
// budget 0 = unlimited. Null (and a test failure) when it cannot open.
inline std::shared_ptr<ops::Device> cpu_device(uint64_t budget = 0, double emulate_gbps = 0,
                                               int threads = 1) {
  ops::DeviceOptions o;
  o.budget_bytes = budget;
  o.n_threads = threads;
  o.mem_gbps = 10;
  o.emulate_gbps = emulate_gbps;
  auto d = ops::open_cpu_device(o);
  EXPECT_TRUE(d.ok()) << d.message();
  return d.ok() ? std::shared_ptr<ops::Device>(std::move(*d)) : nullptr;
}

}  // namespace hc::testing
