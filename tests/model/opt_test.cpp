// OPT as PowerInfer computes it (its PWRI OPT; tests/reference/test_powerinfer_parity.py holds
// hotcold against PowerInfer's own numbers): against a scalar double-precision OPT written here
// from PowerInfer's build_opt, the exact sparse FFN against the dense one, and the refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "model/device_model.h"
#include "model/llama_forward.h"
#include "model/llama_model.h"
#include "model/sparse_ffn.h"
#include "tiny_model.h"

namespace hc {
namespace {

using testing::TinyModel;
using testing::TinyModelSpec;

TinyModelSpec opt_spec() {
  TinyModelSpec spec;
  spec.arch = "opt";
  spec.n_embd = 128;
  spec.n_ff = 256;
  spec.n_layer = 2;
  spec.n_head = 4;
  spec.n_head_kv = 4;
  spec.n_ctx = 16;  // 16 position rows: positions 0..13 (HF's offset of 2)
  return spec;
}

const std::vector<int32_t> kToks = {1, 5, 9, 3, 22, 7, 7, 30, 12, 4};

std::vector<float> logits(const LlamaModel& m, const SparseFfn* sparse) {
  return testing::prompt_logits(m, sparse, kToks, 16);
}

// ---- the scalar reference (F32 weights read as they are stored) ----

double f16(double v) { return fp16_to_fp32(fp32_to_fp16(static_cast<float>(v))); }

std::vector<double> layernorm(const std::vector<double>& x, const TensorView& w, const TensorView& b,
                              double eps) {
  const size_t n = x.size();
  double mean = 0, var = 0;
  for (double v : x) mean += v;
  mean /= static_cast<double>(n);
  for (double v : x) var += (v - mean) * (v - mean);
  var /= static_cast<double>(n);
  const auto* wf = static_cast<const float*>(w.data);
  const auto* bf = static_cast<const float*>(b.data);
  std::vector<double> y(n);
  for (size_t i = 0; i < n; ++i) y[i] = (x[i] - mean) / std::sqrt(var + eps) * wf[i] + bf[i];
  return y;
}

// W [rows, n] . x + b (b may be empty).
std::vector<double> affine(const TensorView& w, const TensorView& b, const std::vector<double>& x) {
  std::vector<double> y(static_cast<size_t>(w.ne1), 0.0);
  for (int64_t r = 0; r < w.ne1; ++r) {
    const auto* row = reinterpret_cast<const float*>(w.row(r));
    double acc = 0;
    for (int64_t c = 0; c < w.ne0; ++c) acc += row[c] * x[static_cast<size_t>(c)];
    y[static_cast<size_t>(r)] = acc + (b.empty() ? 0.0 : static_cast<const float*>(b.data)[r]);
  }
  return y;
}

std::vector<double> reference_logits(const LlamaModel& m) {
  const LlamaHParams& hp = m.hparams();
  const LlamaWeights& W = m.weights();
  const int64_t E = hp.n_embd, T = static_cast<int64_t>(kToks.size()), hd = hp.head_dim;
  std::vector<std::vector<double>> x(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) {
    const auto* e = reinterpret_cast<const float*>(W.token_embd.row(kToks[t]));
    const auto* p = reinterpret_cast<const float*>(W.pos_embd.row(t + 2));  // HF's offset
    x[t].resize(static_cast<size_t>(E));
    for (int64_t i = 0; i < E; ++i) x[t][i] = static_cast<double>(e[i]) + p[i];
  }
  for (int il = 0; il < hp.n_layer; ++il) {
    const LlamaLayerWeights& L = W.layers[static_cast<size_t>(il)];
    std::vector<std::vector<double>> q(T), k(T), v(T);
    for (int64_t t = 0; t < T; ++t) {
      const auto a = layernorm(x[t], L.attn_norm, L.attn_norm_b, hp.rms_eps);
      q[t] = affine(L.wq, L.bq, a);
      k[t] = affine(L.wk, L.bk, a);
      v[t] = affine(L.wv, L.bv, a);
      for (double& z : k[t]) z = f16(z);  // the fp16 KV cache
      for (double& z : v[t]) z = f16(z);
    }
    for (int64_t t = 0; t < T; ++t) {  // causal attention, no RoPE
      const auto att =
          testing::ref_attention(q, k, v, t, hp.n_head, hp.n_head_kv, hd, /*f16_probs=*/false);
      const auto o = affine(L.wo, L.bo, att);
      for (int64_t i = 0; i < E; ++i) x[t][i] += o[i];
    }
    for (int64_t t = 0; t < T; ++t) {
      const auto f = layernorm(x[t], L.ffn_norm, L.ffn_norm_b, hp.rms_eps);
      auto h = affine(L.ffn_gate, L.ffn_gate_b, f);  // the file's ffn_up and its bias
      for (double& z : h) z = std::max(z, 0.0);
      const auto d = affine(L.ffn_down, L.ffn_down_b, h);
      for (int64_t i = 0; i < E; ++i) x[t][i] += d[i];
    }
  }
  std::vector<double> out;
  for (int64_t t = 0; t < T; ++t) {
    const auto y = affine(W.output, TensorView{}, layernorm(x[t], W.output_norm, W.output_norm_b,
                                                           hp.rms_eps));
    out.insert(out.end(), y.begin(), y.end());
  }
  return out;
}

TEST(Opt, BindsLearnedPositionsBiasesAndTiedOutput) {
  TinyModel tm(opt_spec());
  auto bytes = tm.bytes();
  auto m = testing::load_tiny(bytes, false);
  ASSERT_TRUE(m);
  const LlamaHParams& hp = m->hparams();
  EXPECT_EQ(hp.norm, NormKind::kLayer);
  EXPECT_FALSE(hp.parallel_block);
  EXPECT_EQ(hp.n_rot, 0);  // no RoPE
  EXPECT_TRUE(hp.learned_pos);
  EXPECT_FALSE(hp.ffn_gated);
  EXPECT_EQ(hp.ffn_act, FfnActivation::kRelu);
  EXPECT_EQ(hp.n_head_kv, hp.n_head);
  EXPECT_FLOAT_EQ(hp.rms_eps, 1e-5f);  // the file's key (PowerInfer: 0 without it)
  const LlamaWeights& W = m->weights();
  EXPECT_EQ(W.output.data, W.token_embd.data);  // tied
  EXPECT_EQ(W.pos_embd.ne1, hp.n_ctx_train);
  for (const TensorView* b : {&W.layers[1].bq, &W.layers[1].bk, &W.layers[1].bv, &W.layers[1].bo,
                              &W.layers[1].ffn_gate_b, &W.layers[1].ffn_down_b})
    EXPECT_FALSE(b->empty());
  EXPECT_TRUE(W.layers[1].ffn_up.empty());
}

TEST(Opt, LogitsMatchAScalarOpt) {
  TinyModel tm(opt_spec());
  auto bytes = tm.bytes();
  auto m = testing::load_tiny(bytes, false);
  ASSERT_TRUE(m);
  const std::vector<float> got = logits(*m, nullptr);
  const std::vector<double> want = reference_logits(*m);
  ASSERT_EQ(got.size(), want.size());
  double mx = 0, diff = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    mx = std::max(mx, std::fabs(want[i]));
    diff = std::max(diff, std::fabs(got[i] - want[i]));
  }
  ASSERT_GT(mx, 0.3);
  // fp32 sums and the attention's fp16 rounding of q and of the probabilities (ggml's f16
  // kernels) against double: measured ~1e-4 of max|logit|. A missing bias or a position off
  // by one moves logits by 1e-2..1e-1 of it.
  EXPECT_LE(diff, 1e-3 * mx) << "max |logit| " << mx;
}

TEST(Opt, ExactSparseFfnEqualsDenseAndBiasesCount) {
  TinyModel tm(opt_spec());
  auto bytes = tm.bytes();
  auto m = testing::load_tiny(bytes, true);
  ASSERT_TRUE(m);
  SparseOptions so;
  so.max_union_share = 1.0;
  auto sparse = SparseFfn::build(*m, so);
  ASSERT_TRUE(sparse.ok()) << sparse.message();
  const std::vector<float> dense = logits(*m, nullptr), sp = logits(*m, sparse->get());
  EXPECT_LE(testing::max_abs_diff(dense, sp), 1e-4f * (1.0f + testing::max_abs(dense)));
}

TEST(Opt, PositionsPastTheTableAndDeviceAttentionAreErrors) {
  TinyModel tm(opt_spec());
  auto bytes = tm.bytes();
  auto m = testing::load_tiny(bytes, false);
  ASSERT_TRUE(m);
  const LlamaHParams& hp = m->hparams();
  KvCache cache(hp.n_layer, 32, int64_t{hp.n_head_kv} * hp.head_dim);  // longer than 16 rows
  ForwardScratch s;
  ThreadPool pool(1);
  std::vector<float> l;
  const std::vector<int32_t> one = {3};
  // 16 rows from row 2: positions 0..13.
  EXPECT_TRUE(llama_forward(*m, cache, s, pool, one, 13, false, &l).ok());
  const Status st = llama_forward(*m, cache, s, pool, one, 14, false, &l);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("past the 14 learned positions"), std::string::npos)
      << st.message();
  // Attention on a device: not built for opt (LayerNorm, biases, learned positions).
  DevicePlacement p;
  p.n_gpu_layers = 1;
  auto dm = DeviceModel::build(*m, nullptr, testing::cpu_device(), p);
  ASSERT_FALSE(dm.ok());
  EXPECT_NE(dm.message().find("opt's attention"), std::string::npos) << dm.message();
}

}  // namespace
}  // namespace hc
