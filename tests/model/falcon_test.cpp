// Falcon (llama.cpp's falcon layout; ReluFalcon with hotcold's ReLU key): how it is bound, the
// exact sparse FFN against the dense one, and what is refused with a clear error. Its logits
// against llama.cpp are tests/reference/test_falcon.py's, PowerInfer's PWRI falcon against
// PowerInfer's goldens test_powerinfer_parity.py's, the hot/cold split hybrid_test's.
#include <gtest/gtest.h>

#include <algorithm>
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

TinyModelSpec falcon_spec(const char* activation, bool norm2 = false) {
  TinyModelSpec spec;
  spec.arch = "falcon";
  spec.activation = activation;
  spec.norm2 = norm2;
  spec.n_embd = 128;
  spec.n_ff = 256;
  spec.n_layer = 2;
  return spec;
}

const std::vector<int32_t> kToks = {1, 5, 9, 3, 22, 7, 7, 30, 12, 4};

std::vector<float> logits(const LlamaModel& m, const SparseFfn* sparse) {
  return testing::prompt_logits(m, sparse, kToks, 32);
}

std::string load_error(std::vector<uint8_t>& bytes) {
  auto f = parse_gguf(bytes);
  if (!f.ok()) return f.message();
  auto m = LlamaModel::from_gguf(std::move(f).value(), false);
  return m.ok() ? "" : m.message();
}

TEST(Falcon, BindsLayerNormParallelNeoxUngatedAndFusedQkv) {
  for (bool norm2 : {false, true}) {
    TinyModel tm(falcon_spec("", norm2));
    auto bytes = tm.bytes();
    auto m = testing::load_tiny(bytes, false);
    ASSERT_TRUE(m);
    const LlamaHParams& hp = m->hparams();
    EXPECT_EQ(hp.norm, NormKind::kLayer);
    EXPECT_TRUE(hp.parallel_block);
    EXPECT_TRUE(hp.rope_neox);
    EXPECT_FALSE(hp.ffn_gated);
    EXPECT_EQ(hp.ffn_act, FfnActivation::kGelu);  // llama.cpp's falcon
    EXPECT_FALSE(device_blocks_supported(hp));
    const LlamaLayerWeights& L = m->weights().layers[1];
    // Q, K, V: consecutive row ranges of attn_qkv.
    const int64_t q_dim = int64_t{hp.n_head} * hp.head_dim, kv_dim = int64_t{hp.n_head_kv} * hp.head_dim;
    EXPECT_EQ(L.wq.ne1, q_dim);
    EXPECT_EQ(L.wk.ne1, kv_dim);
    EXPECT_EQ(L.wv.ne1, kv_dim);
    EXPECT_EQ(L.wk.data, static_cast<const void*>(L.wq.row(q_dim)));
    EXPECT_EQ(L.wv.data, static_cast<const void*>(L.wk.row(kv_dim)));
    // The ungated FFN: ffn_up in the gate's place, no up.
    EXPECT_TRUE(L.ffn_up.empty());
    EXPECT_EQ(L.ffn_gate.ne1, hp.n_ff);
    EXPECT_FALSE(L.ffn_norm_b.empty());
    EXPECT_FALSE(m->weights().output_norm_b.empty());
    // Attention reads attn_norm_2 where there is one, the FFN attn_norm.
    EXPECT_EQ(L.attn_norm.data == L.ffn_norm.data, !norm2);
  }
  TinyModel relu(falcon_spec("relu"));
  auto bytes = relu.bytes();
  auto m = testing::load_tiny(bytes, false);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->hparams().ffn_act, FfnActivation::kRelu);
}

TEST(Falcon, ExactSparseFfnEqualsDense) {
  for (GgmlType t : {GgmlType::F32, GgmlType::F16}) {
    TinyModelSpec spec = falcon_spec("relu");
    spec.wtype = t;
    TinyModel tm(spec);
    auto bytes = tm.bytes();
    auto m = testing::load_tiny(bytes, true);
    ASSERT_TRUE(m);
    SparseOptions so;
    so.max_union_share = 1.0;  // always the sparse operators
    auto sparse = SparseFfn::build(*m, so);
    ASSERT_TRUE(sparse.ok()) << sparse.message();
    const std::vector<float> dense = logits(*m, nullptr), sp = logits(*m, sparse->get());
    ASSERT_EQ(dense.size(), sp.size());
    // F32: summation order only; F16: the sparse path rounds h to fp16 per value as the dense
    // matmul rounds its input.
    const float tol = (t == GgmlType::F32 ? 1e-4f : 2e-3f) * (1.0f + testing::max_abs(dense));
    EXPECT_LE(testing::max_abs_diff(dense, sp), tol) << dtype_name(t);
  }
}

// With a predictor, the neurons it chose whose gate is not positive (its false positives) have
// h = 0: the down projection does not read their rows (PowerInfer's axpy skips h == 0 too).
TEST(Falcon, PredictorFalsePositivesAreNotReadByTheDownProjection) {
  TinyModelSpec spec = falcon_spec("relu");
  std::vector<std::vector<uint8_t>> bufs;
  auto bytes = testing::model_with_predictor(spec, bufs);  // random predictors, threshold 0
  auto m = testing::load_tiny(bytes, true);
  ASSERT_TRUE(m);
  SparseOptions so;
  so.use_predictor = true;
  so.max_union_share = 1.0;
  auto sparse = SparseFfn::build(*m, so);
  ASSERT_TRUE(sparse.ok()) << sparse.message();
  const LlamaHParams& hp = m->hparams();
  KvCache cache(hp.n_layer, 32, int64_t{hp.n_head_kv} * hp.head_dim);
  ForwardScratch s;
  s.sparse = sparse->get();
  ThreadPool pool(2);
  std::vector<float> l;
  const std::vector<int32_t> toks = {1, 5, 9, 3, 22, 7};
  for (size_t i = 0; i < toks.size(); ++i)  // one token per call: per-token sets
    ASSERT_TRUE(llama_forward(*m, cache, s, pool, std::span(&toks[i], 1), static_cast<int>(i),
                              false, &l).ok());
  const SparseStats& st = s.sparse_scratch.stats;
  ASSERT_GT(st.computed, 0u);
  // Random predictors: about half the chosen neurons have a negative gate.
  EXPECT_LT(st.active, st.computed * 3 / 4);
  EXPECT_GT(st.active, st.computed / 4);
  const LlamaLayerWeights& L = m->weights().layers[0];
  const uint64_t calls = static_cast<uint64_t>(hp.n_layer) * toks.size();
  const uint64_t pred = rows_bytes(L.fc1, L.fc1.ne1) + rows_bytes(L.fc2, L.fc2.ne1);
  EXPECT_EQ(st.bytes, calls * pred + st.computed * uint64_t(L.ffn_gate.nb1) +
                          st.active * uint64_t((*sparse)->down_t(0).nb1));
}

TEST(Falcon, UnbuiltCombinationsAreClearErrors) {
  {  // GELU is not exactly sparse.
    TinyModel tm(falcon_spec(""));
    auto bytes = tm.bytes();
    auto m = testing::load_tiny(bytes, false);
    ASSERT_TRUE(m);
    auto sparse = SparseFfn::build(*m, SparseOptions{});
    ASSERT_FALSE(sparse.ok());
    EXPECT_NE(sparse.message().find("GELU"), std::string::npos) << sparse.message();
    // Hot neurons of a GELU FFN on a device: refused, naming the activation.
    SparseOptions so;
    so.thresholds.assign(2, 0.1f);
    auto thr = SparseFfn::build(*m, so);
    ASSERT_TRUE(thr.ok()) << thr.message();
    DevicePlacement p;
    p.hot.assign(2, {0, 1, 2});
    auto dm = DeviceModel::build(*m, thr->get(), testing::cpu_device(), p);
    ASSERT_FALSE(dm.ok());
    EXPECT_NE(dm.message().find("gelu"), std::string::npos) << dm.message();
  }
  {  // Attention / -ngl on a device: not built for falcon.
    TinyModel tm(falcon_spec("relu"));
    auto bytes = tm.bytes();
    auto m = testing::load_tiny(bytes, false);
    ASSERT_TRUE(m);
    for (int how = 0; how < 2; ++how) {
      DevicePlacement p;
      if (how == 0) p.n_gpu_layers = 99;
      else p.attn = {1, 0};
      auto dm = DeviceModel::build(*m, nullptr, testing::cpu_device(), p);
      ASSERT_FALSE(dm.ok());
      EXPECT_NE(dm.message().find("falcon's attention"), std::string::npos) << dm.message();
    }
  }
  {  // A gate in a falcon file, a missing LayerNorm bias, a gated activation key.
    TinyModel tm(falcon_spec("relu"));
    std::vector<float> g(128 * 256, 0.0f);
    tm.writer().add_tensor({"blk.0.ffn_gate.weight", {128, 256}, GgmlType::F32,
                            {reinterpret_cast<const uint8_t*>(g.data()), g.size() * 4}});
    auto bytes = tm.bytes();
    EXPECT_NE(load_error(bytes).find("'blk.0.ffn_gate.weight' in a falcon file"), std::string::npos)
        << load_error(bytes);
  }
  {
    TinyModel tm(falcon_spec("relu"));
    auto& ts = tm.writer().tensors;
    ts.erase(std::remove_if(ts.begin(), ts.end(),
                            [](const auto& t) { return t.name == "blk.1.attn_norm.bias"; }),
             ts.end());
    auto bytes = tm.bytes();
    EXPECT_NE(load_error(bytes).find("missing tensor 'blk.1.attn_norm.bias'"), std::string::npos)
        << load_error(bytes);
  }
  {
    TinyModel tm(falcon_spec("drelu"));
    auto bytes = tm.bytes();
    EXPECT_NE(load_error(bytes).find("expected 'relu' or 'gelu'"), std::string::npos)
        << load_error(bytes);
  }
}

}  // namespace
}  // namespace hc
