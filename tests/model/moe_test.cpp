// Mixture-of-experts (llama with experts: Mixtral's layout; qwen3moe) and the qwen2 / qwen3
// attention: the forward pass against a scalar double-precision model written here from
// llama.cpp's graphs (qwen2.cpp, qwen3.cpp, qwen3moe.cpp, llama.cpp and build_moe_ffn), the
// router's semantics, batch invariance and the refusals (the hybrid executor, migration and
// profiling: tests/engine/moe_session_test.cpp).
// tests/reference/test_moe_qwen.py holds the same files against llama.cpp itself.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "model/act_stats.h"
#include "model/device_model.h"
#include "model/dynamic_sparsity.h"
#include "model/llama_forward.h"
#include "model/llama_model.h"
#include "model/moe_ffn.h"
#include "model/sparse_ffn.h"
#include "moe_fixture.h"
#include "tiny_model.h"

namespace hc {
namespace {

using testing::TinyModel;
using testing::TinyModelSpec;
using testing::load_spec;
using testing::moe_spec;
const std::vector<int32_t>& kToks = testing::kMoeToks;

// ---- the scalar reference (F32 weights read as they are stored) ----

double f16(double v) { return fp16_to_fp32(fp32_to_fp16(static_cast<float>(v))); }

const float* fp(const TensorView& t) { return static_cast<const float*>(t.data); }

std::vector<double> rms(const std::vector<double>& x, const float* w, double eps) {
  double ss = 0;
  for (double v : x) ss += v * v;
  const double scale = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + eps);
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * scale * w[i];
  return y;
}

// W [rows, n] . x + b (b may be empty); rows [r0, r0 + n_rows) of W (all when n_rows < 0).
std::vector<double> affine(const TensorView& w, const TensorView& b, const std::vector<double>& x,
                           int64_t r0 = 0, int64_t n_rows = -1) {
  const int64_t n = n_rows < 0 ? w.ne1 : n_rows;
  std::vector<double> y(static_cast<size_t>(n), 0.0);
  for (int64_t r = 0; r < n; ++r) {
    const auto* row = reinterpret_cast<const float*>(w.row(r0 + r));
    double acc = 0;
    for (int64_t c = 0; c < w.ne0; ++c) acc += row[c] * x[static_cast<size_t>(c)];
    y[static_cast<size_t>(r)] = acc + (b.empty() ? 0.0 : fp(b)[r]);
  }
  return y;
}

// RoPE of one head at position pos: adjacent pairs, or NeoX's (i, i + n_rot / 2).
void rope(double* v, int n_rot, double base, int pos, bool neox) {
  for (int i = 0; i < n_rot / 2; ++i) {
    const double th = pos * std::pow(base, -2.0 * i / n_rot);
    const int a = neox ? i : 2 * i, b = neox ? i + n_rot / 2 : 2 * i + 1;
    const double x0 = v[a], x1 = v[b];
    v[a] = x0 * std::cos(th) - x1 * std::sin(th);
    v[b] = x0 * std::sin(th) + x1 * std::cos(th);
  }
}

// The FFN of one token: SwiGLU, or build_moe_ffn (softmax over every expert, the top k by
// descending probability, their weights normalised to sum 1, the weighted sum in that order).
std::vector<double> ffn(const LlamaHParams& hp, const LlamaLayerWeights& L,
                        const std::vector<double>& f) {
  auto swiglu_down = [&](const TensorView& g, const TensorView& u, const TensorView& d) {
    auto h = affine(g, TensorView{}, f);
    const auto up = affine(u, TensorView{}, f);
    for (size_t i = 0; i < h.size(); ++i) h[i] = h[i] / (1.0 + std::exp(-h[i])) * up[i];
    return affine(d, TensorView{}, h);
  };
  if (!hp.is_moe()) return swiglu_down(L.ffn_gate, L.ffn_up, L.ffn_down);
  auto p = affine(L.ffn_gate_inp, TensorView{}, f);
  const double mx = *std::max_element(p.begin(), p.end());
  double sum = 0;
  for (double& z : p) sum += (z = std::exp(z - mx));
  for (double& z : p) z /= sum;
  std::vector<int> order(p.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return p[a] > p[b]; });
  double wsum = 0;
  for (int j = 0; j < hp.n_expert_used; ++j) wsum += p[order[j]];
  std::vector<double> out(static_cast<size_t>(hp.n_embd), 0.0);
  for (int j = 0; j < hp.n_expert_used; ++j) {
    const LlamaLayerWeights::Expert& E = L.experts[static_cast<size_t>(order[j])];
    const auto y = swiglu_down(E.gate, E.up, E.down);
    for (size_t i = 0; i < out.size(); ++i) out[i] += p[order[j]] / wsum * y[i];
  }
  return out;
}

std::vector<double> reference_logits(const LlamaModel& m) {
  const LlamaHParams& hp = m.hparams();
  const LlamaWeights& W = m.weights();
  const int64_t E = hp.n_embd, T = static_cast<int64_t>(kToks.size()), hd = hp.head_dim;
  std::vector<std::vector<double>> x(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) {
    const auto* e = reinterpret_cast<const float*>(W.token_embd.row(kToks[t]));
    x[t].assign(e, e + E);
  }
  for (int il = 0; il < hp.n_layer; ++il) {
    const LlamaLayerWeights& L = W.layers[static_cast<size_t>(il)];
    std::vector<std::vector<double>> q(T), k(T), v(T);
    for (int64_t t = 0; t < T; ++t) {
      const auto a = rms(x[t], fp(L.attn_norm), hp.rms_eps);
      q[t] = affine(L.wq, L.bq, a);
      k[t] = affine(L.wk, L.bk, a);
      v[t] = affine(L.wv, L.bv, a);
      for (int h = 0; h < hp.n_head; ++h) {
        if (hp.qk_norm) {
          std::vector<double> head(q[t].begin() + h * hd, q[t].begin() + (h + 1) * hd);
          head = rms(head, fp(L.attn_q_norm), hp.rms_eps);
          std::copy(head.begin(), head.end(), q[t].begin() + h * hd);
        }
        rope(q[t].data() + h * hd, hp.n_rot, hp.rope_freq_base, static_cast<int>(t), hp.rope_neox);
      }
      for (int h = 0; h < hp.n_head_kv; ++h) {
        if (hp.qk_norm) {
          std::vector<double> head(k[t].begin() + h * hd, k[t].begin() + (h + 1) * hd);
          head = rms(head, fp(L.attn_k_norm), hp.rms_eps);
          std::copy(head.begin(), head.end(), k[t].begin() + h * hd);
        }
        rope(k[t].data() + h * hd, hp.n_rot, hp.rope_freq_base, static_cast<int>(t), hp.rope_neox);
      }
      // The fp16 KV cache, and ggml's f16 products: q rounded to fp16 against K, the
      // probabilities rounded to fp16 against V.
      for (double& z : k[t]) z = f16(z);
      for (double& z : v[t]) z = f16(z);
      for (double& z : q[t]) z = f16(z);
    }
    for (int64_t t = 0; t < T; ++t) {  // causal attention
      const auto att =
          testing::ref_attention(q, k, v, t, hp.n_head, hp.n_head_kv, hd, /*f16_probs=*/true);
      const auto o = affine(L.wo, L.bo, att);
      for (int64_t i = 0; i < E; ++i) x[t][i] += o[i];
    }
    for (int64_t t = 0; t < T; ++t) {
      const auto d = ffn(hp, L, rms(x[t], fp(L.ffn_norm), hp.rms_eps));
      for (int64_t i = 0; i < E; ++i) x[t][i] += d[i];
    }
  }
  std::vector<double> out;
  for (int64_t t = 0; t < T; ++t) {
    const auto y = affine(W.output, TensorView{}, rms(x[t], fp(W.output_norm), hp.rms_eps));
    out.insert(out.end(), y.begin(), y.end());
  }
  return out;
}

class Families : public ::testing::TestWithParam<const char*> {};

TEST_P(Families, LogitsMatchAScalarDoubleModel) {
  std::vector<uint8_t> bytes;
  auto m = load_spec(moe_spec(GetParam()), bytes, false);
  ASSERT_TRUE(m);
  const std::vector<float> got = testing::prompt_logits(*m, nullptr, kToks, 64);
  const std::vector<double> want = reference_logits(*m);
  ASSERT_EQ(got.size(), want.size());
  double mx = 0, diff = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    mx = std::max(mx, std::fabs(want[i]));
    diff = std::max(diff, std::fabs(got[i] - want[i]));
  }
  ASSERT_GT(mx, 0.3);
  // fp32 sums and float RoPE angles against double, the fp16 roundings modelled: measured
  // <= 1.5e-6 of max|logit| at most positions, <= 1.4e-4 where a value sits on an fp16 rounding
  // boundary. Without modelling the fp16 roundings of q and the probabilities: 1.4e-3. NeoX
  // pairs taken as adjacent ones, a Q/K norm or a bias left out, or the top-k weights not
  // normalised move logits by 1e-2..1 of it.
  EXPECT_LE(diff, 1e-3 * mx) << GetParam() << ": max |logit| " << mx;
}

INSTANTIATE_TEST_SUITE_P(Moe, Families,
                         ::testing::Values("qwen2", "qwen3", "qwen3moe", "mixtral"));

TEST(Moe, BindsTheFamilies) {
  std::vector<uint8_t> bytes;
  auto q = load_spec(moe_spec("qwen3moe"), bytes, false);
  ASSERT_TRUE(q);
  const LlamaHParams& hp = q->hparams();
  EXPECT_TRUE(hp.rope_neox);
  EXPECT_TRUE(hp.qk_norm);
  EXPECT_EQ(hp.head_dim, 32);
  EXPECT_EQ(hp.n_expert, 16);
  EXPECT_EQ(hp.n_expert_used, 4);
  EXPECT_EQ(hp.n_ff, 64);  // expert_feed_forward_length, not feed_forward_length
  EXPECT_TRUE(hp.moe_norm_w);
  ASSERT_EQ(q->weights().layers[1].experts.size(), 16u);
  EXPECT_TRUE(q->weights().layers[1].ffn_gate.empty());
  // Expert e's rows are rows [e * n_ff, (e + 1) * n_ff) of the 3-D tensor.
  const auto& L = q->weights().layers[1];
  EXPECT_EQ(L.experts[3].gate.data, L.experts[0].gate.row(3 * 64));
  EXPECT_EQ(L.experts[5].down.ne0, 64);
  EXPECT_EQ(L.experts[5].down.ne1, 64);
  std::vector<uint8_t> b2;
  auto q2 = load_spec(moe_spec("qwen2"), b2, false);
  ASSERT_TRUE(q2);
  EXPECT_TRUE(q2->hparams().rope_neox);
  EXPECT_FALSE(q2->hparams().qk_norm);
  EXPECT_FALSE(q2->weights().layers[0].bq.empty());
  EXPECT_TRUE(device_blocks_supported(q2->hparams()));
}

// ---- the router ----

LlamaHParams router_hp(int n_expert, int k) {
  LlamaHParams hp;
  hp.n_expert = n_expert;
  hp.n_expert_used = k;
  hp.moe_norm_w = true;
  return hp;
}

TEST(MoeRoute, TopKBySoftmaxNormalisedAndGroupedByExpert) {
  const int n_expert = 16, k = 4, n_tok = 50;
  std::mt19937 rng(3);
  std::normal_distribution<float> d(0.0f, 2.0f);
  std::vector<float> logits(n_tok * n_expert);
  for (float& v : logits) v = d(rng);
  const std::vector<float> orig = logits;
  MoeRouting r;
  moe_route(router_hp(n_expert, k), logits.data(), n_tok, &r);
  ASSERT_EQ(r.expert.size(), static_cast<size_t>(n_tok * k));
  for (int t = 0; t < n_tok; ++t) {
    const float* l = orig.data() + t * n_expert;
    std::vector<int> order(n_expert);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return l[a] > l[b]; });
    double wsum = 0;
    for (int j = 0; j < k; ++j) {
      EXPECT_EQ(r.expert[t * k + j], order[j]) << "token " << t << " rank " << j;
      wsum += r.weight[t * k + j];
      if (j > 0) {
        EXPECT_GE(r.weight[t * k + j - 1], r.weight[t * k + j]);
      }
    }
    EXPECT_NEAR(wsum, 1.0, 1e-6);
    // The weights are softmax probabilities renormalised over the chosen: their ratios are
    // exp(logit differences).
    EXPECT_NEAR(r.weight[t * k + 1] / r.weight[t * k],
                std::exp(static_cast<double>(l[order[1]]) - l[order[0]]), 1e-5);
  }
  // Grouped routes: every route once, in its expert's range, tokens ascending.
  std::vector<int> seen(n_tok * k, 0);
  for (int e = 0; e < n_expert; ++e)
    for (int32_t j = r.offset[e]; j < r.offset[e + 1]; ++j) {
      const int32_t route = r.route[j];
      EXPECT_EQ(r.expert[route], e);
      if (j > r.offset[e]) {
        EXPECT_LT(r.route[j - 1], route);
      }
      ++seen[route];
    }
  EXPECT_EQ(r.offset[n_expert], n_tok * k);
  for (int c : seen) EXPECT_EQ(c, 1);
}

TEST(MoeRoute, TiesKeepTheLowerExpertAndVariantsFollowTheFormat) {
  std::vector<float> l = {1.0f, 3.0f, 3.0f, 0.0f};  // experts 1 and 2 tie
  MoeRouting r;
  moe_route(router_hp(4, 2), l.data(), 1, &r);
  EXPECT_EQ(r.expert[0], 1);
  EXPECT_EQ(r.expert[1], 2);
  EXPECT_FLOAT_EQ(r.weight[0], 0.5f);
  // Without normalisation the weights are the softmax probabilities over all four.
  LlamaHParams hp = router_hp(4, 2);
  hp.moe_norm_w = false;
  l = {1.0f, 3.0f, 2.0f, 0.0f};
  moe_route(hp, l.data(), 1, &r);
  const double z = std::exp(1.0) + std::exp(3.0) + std::exp(2.0) + 1.0;
  EXPECT_NEAR(r.weight[0], std::exp(3.0) / z, 1e-6);
  EXPECT_NEAR(r.weight[1], std::exp(2.0) / z, 1e-6);
  // Softmax over the chosen logits only (llama.cpp's SOFTMAX_WEIGHT).
  hp.moe_gating = MoeGating::kSoftmaxWeight;
  l = {1.0f, 3.0f, 2.0f, 0.0f};
  moe_route(hp, l.data(), 1, &r);
  EXPECT_NEAR(r.weight[0], std::exp(1.0) / (std::exp(1.0) + 1.0), 1e-6);
  // A weight scale.
  hp = router_hp(4, 2);
  hp.moe_w_scale = 2.5f;
  l = {1.0f, 3.0f, 2.0f, 0.0f};
  moe_route(hp, l.data(), 1, &r);
  EXPECT_NEAR(r.weight[0] + r.weight[1], 2.5, 1e-6);
}

// ---- batches, sessions and the device ----

// One decode step at a time: each step's logits (prompt position by position).
std::vector<float> one_by_one(const LlamaModel& m, std::span<const int32_t> toks) {
  const LlamaHParams& hp = m.hparams();
  KvCache cache(hp.n_layer, 64, int64_t{hp.n_head_kv} * hp.head_dim);
  ForwardScratch s;
  ThreadPool pool(2);
  std::vector<float> all, l;
  for (size_t t = 0; t < toks.size(); ++t) {
    EXPECT_TRUE(llama_forward(m, cache, s, pool, toks.subspan(t, 1), static_cast<int>(t), false,
                              &l)
                    .ok());
    all.insert(all.end(), l.begin(), l.end());
  }
  return all;
}

TEST(MoeForward, PromptBatchesAgreeWithDecodeAndMultiSequenceStepsAreExact) {
  for (GgmlType t : {GgmlType::F32, GgmlType::Q4_0}) {
    std::vector<uint8_t> bytes;
    auto m = load_spec(moe_spec("qwen3moe", t), bytes, /*repack=*/true);
    ASSERT_TRUE(m);
    const std::vector<float> batch = testing::prompt_logits(*m, nullptr, kToks, 64);
    const std::vector<float> steps = one_by_one(*m, kToks);
    // A prompt batch groups each expert's tokens into one matmul (the packed GEMM past 8 rows):
    // other summation orders, the same function.
    EXPECT_LE(testing::max_abs_diff(batch, steps), 2e-3f * testing::max_abs(steps))
        << dtype_name(t);
    // Several sequences' decode steps in one pass: each bit-identical to its own step.
    const LlamaHParams& hp = m->hparams();
    const int64_t kv = int64_t{hp.n_head_kv} * hp.head_dim;
    std::vector<KvCache> caches;
    for (int i = 0; i < 3; ++i) caches.emplace_back(hp.n_layer, 64, kv);
    ForwardScratch s;
    ThreadPool pool(2);
    std::vector<float> l;
    for (int i = 0; i < 3; ++i)  // different prompts
      ASSERT_TRUE(llama_forward(*m, caches[i], s, pool, std::span(kToks).subspan(i, 4), 0, false, &l)
                      .ok());
    const std::vector<SeqStep> multi = {{&caches[0], 4, 11}, {&caches[1], 4, 23}, {&caches[2], 4, 5}};
    std::vector<float> together;
    ASSERT_TRUE(llama_forward_multi(*m, multi, s, pool, &together).ok());
    for (int i = 0; i < 3; ++i) {
      KvCache alone(hp.n_layer, 64, kv);
      ForwardScratch s1;
      ASSERT_TRUE(
          llama_forward(*m, alone, s1, pool, std::span(kToks).subspan(i, 4), 0, false, &l).ok());
      const std::vector<int32_t> tok = {multi[i].token};
      ASSERT_TRUE(llama_forward(*m, alone, s1, pool, tok, 4, false, &l).ok());
      EXPECT_TRUE(std::equal(l.begin(), l.end(), together.begin() + i * hp.n_vocab))
          << "sequence " << i << " " << dtype_name(t);
    }
  }
}

// Counts the distinct experts each layer call routes to.
struct DistinctExperts : FfnObserver {
  uint64_t distinct = 0;
  void on_ffn_activation(int, const float*, int64_t, int64_t) override {}
  void on_moe_routing(int, const int32_t* experts, int64_t n_tok, int k) override {
    std::vector<int32_t> e(experts, experts + n_tok * k);
    std::sort(e.begin(), e.end());
    distinct += static_cast<uint64_t>(std::unique(e.begin(), e.end()) - e.begin());
  }
};

TEST(MoeForward, EachRoutedExpertIsReadOncePerBatch) {
  std::vector<uint8_t> bytes;
  auto m = load_spec(moe_spec("qwen3moe", GgmlType::Q4_0), bytes, true);
  ASSERT_TRUE(m);
  const LlamaHParams& hp = m->hparams();
  const int64_t kv = int64_t{hp.n_head_kv} * hp.head_dim;
  ThreadPool pool(2);
  std::vector<float> l;
  {  // a prompt batch: one expert call (its gate, up and down read once) per expert routed
    KvCache cache(hp.n_layer, 64, kv);
    ForwardScratch s;
    DistinctExperts seen;
    s.observer = &seen;
    ASSERT_TRUE(llama_forward(*m, cache, s, pool, kToks, 0, false, &l).ok());
    EXPECT_EQ(s.moe.stats.routes, kToks.size() * hp.n_expert_used * hp.n_layer);
    EXPECT_EQ(s.moe.stats.expert_calls, seen.distinct);
    EXPECT_LT(seen.distinct, s.moe.stats.routes);  // experts shared by several tokens
  }
  // Batched decode of several sequences (the server's step): the same.
  std::vector<KvCache> caches;
  for (int i = 0; i < 4; ++i) caches.emplace_back(hp.n_layer, 64, kv);
  ForwardScratch s;
  for (int i = 0; i < 4; ++i)
    ASSERT_TRUE(llama_forward(*m, caches[i], s, pool, std::span(kToks).subspan(i, 3), 0, false, &l)
                    .ok());
  std::vector<SeqStep> steps;
  for (int i = 0; i < 4; ++i) steps.push_back({&caches[i], 3, kToks[i + 5]});
  DistinctExperts seen;
  s.observer = &seen;
  const MoeStats before = s.moe.stats;
  ASSERT_TRUE(llama_forward_multi(*m, steps, s, pool, &l).ok());
  EXPECT_EQ(s.moe.stats.expert_calls - before.expert_calls, seen.distinct);
  EXPECT_EQ(s.moe.stats.routes - before.routes, 4u * hp.n_expert_used * hp.n_layer);
}

// ---- refusals ----

std::string load_error(TinyModel& tm) {
  std::vector<uint8_t> bytes = tm.bytes();
  auto f = parse_gguf(bytes);
  if (!f.ok()) return f.message();
  auto m = LlamaModel::from_gguf(std::move(f).value(), false);
  return m.ok() ? std::string() : m.message();
}

void drop_tensor(GgufWriter& w, const std::string& name) {
  w.tensors.erase(std::remove_if(w.tensors.begin(), w.tensors.end(),
                                 [&](const GgufTensorToWrite& t) { return t.name == name; }),
                  w.tensors.end());
}

TEST(MoeErrors, BadFilesNameWhatWasExpected) {
  {
    TinyModel tm(moe_spec("qwen3moe"));
    drop_tensor(tm.writer(), "blk.1.ffn_gate_inp.weight");
    const std::string e = load_error(tm);
    EXPECT_NE(e.find("blk.1.ffn_gate_inp.weight"), std::string::npos) << e;
    EXPECT_NE(e.find("router"), std::string::npos) << e;
  }
  {
    TinyModel tm(moe_spec("mixtral"));
    tm.writer().set("llama.expert_count", GgufValue::u32(4));  // the tensors hold 8
    const std::string e = load_error(tm);
    EXPECT_NE(e.find("ffn_gate_inp.weight': expected shape [64, 4], found [64, 8]"),
              std::string::npos)
        << e;
  }
  {
    TinyModelSpec spec = moe_spec("qwen3moe");
    TinyModel tm(spec);
    tm.writer().set("qwen3moe.expert_used_count", GgufValue::u32(17));
    const std::string e = load_error(tm);
    EXPECT_NE(e.find("expert_used_count' = 17: expected 1..16"), std::string::npos) << e;
  }
  {
    TinyModel tm(moe_spec("qwen3moe"));
    GgufWriter& w = tm.writer();
    w.kv.erase(std::remove_if(w.kv.begin(), w.kv.end(),
                              [](const auto& kv) { return kv.first == "qwen3moe.expert_count"; }),
               w.kv.end());
    const std::string e = load_error(tm);
    EXPECT_NE(e.find("qwen3moe.expert_count"), std::string::npos) << e;
  }
  {
    TinyModel tm(moe_spec("qwen3"));
    drop_tensor(tm.writer(), "blk.0.attn_k_norm.weight");
    EXPECT_NE(load_error(tm).find("blk.0.attn_k_norm.weight"), std::string::npos);
  }
  std::vector<uint8_t> bytes;
  auto m = load_spec(moe_spec("mixtral"), bytes, false);
  ASSERT_TRUE(m);
  auto sparse = SparseFfn::build(*m, SparseOptions{});
  ASSERT_FALSE(sparse.ok());
  EXPECT_NE(sparse.message().find("experts"), std::string::npos) << sparse.message();
  DevicePlacement bad;
  bad.experts = {{1, 1}, {}};
  auto dm = DeviceModel::build(*m, nullptr, testing::cpu_device(), bad);
  ASSERT_FALSE(dm.ok());
  EXPECT_NE(dm.message().find("ascending, unique"), std::string::npos) << dm.message();
  DevicePlacement budget;  // a budget too small for the experts: named
  budget.experts = {{0, 1, 2, 3, 4, 5, 6, 7}, {}};
  auto small = DeviceModel::build(*m, nullptr, testing::cpu_device(64 << 10), budget);
  ASSERT_FALSE(small.ok());
  // All of a layer's experts go up as one matrix per kind: the message names it.
  EXPECT_NE(small.message().find("blk.0.ffn_gate_exps"), std::string::npos) << small.message();
  budget.experts = {{0, 1, 2}, {}};  // some of them: each expert by name
  auto some = DeviceModel::build(*m, nullptr, testing::cpu_device(16 << 10), budget);
  ASSERT_FALSE(some.ok());
  EXPECT_NE(some.message().find("_exps (expert "), std::string::npos) << some.message();
}

}  // namespace
}  // namespace hc
