// PowerInfer's model layout (blk.N.ffn_down_t in place of ffn_down, predictors blk.N.fc1 /
// blk.N.fc2, powerinfer.sparse_threshold, optionally the "PWRI" magic), written by our GGUF
// writer: it loads, its dense forward equals the ffn_down model's, and the predictor-driven
// sparse FFN equals the dense one when the predictor is exact. On a ReLU model, fc1 = W_gate
// and fc2 = I is an exact predictor: logit_i = relu(gate_i) > 0 exactly when neuron i fires.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "model/llama_forward.h"
#include "model/llama_model.h"
#include "model/sparse_ffn.h"
#include "tiny_model.h"

namespace hc {
namespace {

using testing::TinyModel;
using testing::TinyModelSpec;

const std::vector<int32_t> kToks = {1, 5, 9, 3, 22, 7, 7, 30, 12, 4, 18};

std::shared_ptr<const LlamaModel> load(const std::vector<uint8_t>& bytes, std::string* err = nullptr) {
  auto f = parse_gguf(bytes);
  if (!f.ok()) {
    if (err) *err = f.message();
    return nullptr;
  }
  auto m = LlamaModel::from_gguf(std::move(f).value(), /*repack=*/true);
  if (!m.ok()) {
    if (err) *err = m.message();
    return nullptr;
  }
  return *m;
}

std::vector<float> run(const LlamaModel& m, const SparseFfn* sparse, SparseStats* stats = nullptr) {
  KvCache cache(m.hparams().n_layer, 64, int64_t{m.hparams().n_head_kv} * m.hparams().head_dim);
  ForwardScratch s;
  s.sparse = sparse;
  ThreadPool pool(2);
  std::vector<float> all, l;
  EXPECT_TRUE(llama_forward(m, cache, s, pool, std::span(kToks.data(), 3), 0, true, &l).ok());
  all = l;
  for (size_t i = 3; i < kToks.size(); ++i) {
    EXPECT_TRUE(llama_forward(m, cache, s, pool, std::span(&kToks[i], 1), static_cast<int>(i), false, &l).ok());
    all.insert(all.end(), l.begin(), l.end());
  }
  if (stats) *stats = s.sparse_scratch.stats;
  return all;
}

GgufTensorToWrite* find(GgufWriter& w, const std::string& name) {
  for (auto& t : w.tensors)
    if (t.name == name) return &t;
  return nullptr;
}

// The tiny ReLU model, and the same model in PowerInfer's layout with exact predictors.
struct Models {
  TinyModelSpec spec;
  std::vector<uint8_t> plain, pwr;
  std::vector<std::vector<uint8_t>> bufs;
  explicit Models(bool only_fc1_in_layer0 = false) {
    spec.n_ff = 96;
    spec.activation = "relu";
    TinyModel tm(spec);
    plain = tm.bytes();
    GgufWriter& w = tm.writer();
    w.set("powerinfer.sparse_threshold", GgufValue::f32(testing::kExactPredictorThreshold));
    const int64_t E = spec.n_embd, F = spec.n_ff;
    for (int il = 0; il < spec.n_layer; ++il) {
      const std::string p = "blk." + std::to_string(il) + ".";
      GgufTensorToWrite* down = find(w, p + "ffn_down.weight");  // [n_embd rows, n_ff] F32
      const auto* d = reinterpret_cast<const float*>(down->data.data());
      bufs.emplace_back(static_cast<size_t>(E * F * 4));
      auto* dt = reinterpret_cast<float*>(bufs.back().data());
      for (int64_t r = 0; r < E; ++r)
        for (int64_t i = 0; i < F; ++i) dt[i * E + r] = d[r * F + i];
      down->name = p + "ffn_down_t.weight";
      down->ne = {E, F};
      down->data = {bufs.back().data(), bufs.back().size()};
      testing::exact_fc1(w, il, E, F, bufs);
      w.add_tensor({p + "fc1.weight", {E, F}, GgmlType::F32, {bufs.back().data(), bufs.back().size()}});
      if (only_fc1_in_layer0 && il == 0) continue;
      bufs.emplace_back(static_cast<size_t>(F * F * 4), 0);
      auto* eye = reinterpret_cast<float*>(bufs.back().data());
      for (int64_t i = 0; i < F; ++i) eye[i * F + i] = 1.0f;
      w.add_tensor({p + "fc2.weight", {F, F}, GgmlType::F32, {bufs.back().data(), bufs.back().size()}});
    }
    pwr = *w.serialize();
  }
};

float max_abs(const std::vector<float>& v) {
  float m = 0;
  for (float x : v) m = std::max(m, std::fabs(x));
  return m;
}

TEST(PowerInferLayout, LoadsRunsDenseAndWithItsExactPredictorGivesTheDenseLogits) {
  Models ms;
  auto plain = load(ms.plain);
  ASSERT_TRUE(plain);
  for (bool pwri_magic : {false, true}) {
    std::vector<uint8_t> bytes = ms.pwr;
    if (pwri_magic) std::memcpy(bytes.data(), "PWRI", 4);
    std::string err;
    auto m = load(bytes, &err);
    ASSERT_TRUE(m) << err;
    const LlamaLayerWeights& L = m->weights().layers[1];
    EXPECT_TRUE(L.ffn_down.empty());
    EXPECT_EQ(L.ffn_down_t.ne0, ms.spec.n_embd);
    EXPECT_EQ(L.ffn_down_t.ne1, ms.spec.n_ff);
    EXPECT_EQ(L.fc1.ne1, ms.spec.n_ff);  // rank
    EXPECT_EQ(L.fc2.ne0, ms.spec.n_ff);
    const auto want = run(*plain, nullptr);
    const float tol = 1e-3f * (1.0f + max_abs(want));
    // Dense: the down projection sums every row of ffn_down_t.
    const auto dense = run(*m, nullptr);
    ASSERT_EQ(dense.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(dense[i], want[i], tol) << i;
    // Predictor-driven sparse FFN (always sparse, then always the dense fallback).
    for (double share : {1.0, 0.0}) {
      SparseOptions opt;
      opt.use_predictor = true;
      opt.max_union_share = share;
      auto sp = SparseFfn::build(*m, opt);
      ASSERT_TRUE(sp.ok()) << sp.message();
      EXPECT_EQ(sp.value()->built_bytes(), 0u);  // the file's ffn_down_t is used as is
      SparseStats st;
      const auto got = run(*m, sp->get(), &st);
      for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], tol) << "share " << share << " at " << i;
      EXPECT_GT(st.sparsity(), 0.2);
      EXPECT_LT(st.sparsity(), 0.8);
    }
  }
}

TEST(PowerInferLayout, PredictorThresholdsAndBadFilesAreChecked) {
  Models ms;
  auto m = load(ms.pwr);
  ASSERT_TRUE(m);
  // A threshold above every logit predicts nothing: the FFN contributes nothing.
  SparseOptions opt;
  opt.use_predictor = true;
  opt.predictor_thresholds.assign(ms.spec.n_layer, 1e9f);
  auto sp = SparseFfn::build(*m, opt);
  ASSERT_TRUE(sp.ok()) << sp.message();
  SparseStats st;
  run(*m, sp->get(), &st);
  EXPECT_EQ(st.fired, 0u);
  EXPECT_EQ(st.computed, 0u);
  opt.predictor_thresholds = {0.0f};
  auto bad = SparseFfn::build(*m, opt);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("expected 2 per-layer predictor thresholds, found 1"), std::string::npos) << bad.message();
  // The plain model has no predictors.
  auto plain = load(ms.plain);
  SparseOptions want_pred;
  want_pred.use_predictor = true;
  auto none = SparseFfn::build(*plain, want_pred);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.message().find("train them with hotcold train-predictor"), std::string::npos) << none.message();
  // fc1 without fc2 is a broken file.
  Models half(/*only_fc1_in_layer0=*/true);
  std::string err;
  EXPECT_FALSE(load(half.pwr, &err));
  EXPECT_NE(err.find("has only one of the predictor tensors"), std::string::npos) << err;
}

// PowerInfer's predictor semantics (llama.cpp of d3ebd7c: llm_build_ffn_sparse gets ffn_inp,
// the residual before ffn_norm; ggml.c skips a row when its logit < threshold): the logits are
// fc2 . relu(fc1 . x) of the input given, and a neuron is predicted exactly when its logit is
// at least the threshold (a logit equal to it is predicted).
TEST(PowerInferLayout, PredictorReadsTheGivenResidualAndPredictsLogitsAtLeastTheThreshold) {
  Models ms;
  auto m = load(ms.pwr);
  ASSERT_TRUE(m);
  SparseOptions opt;
  opt.use_predictor = true;
  auto sp = SparseFfn::build(*m, opt);
  ASSERT_TRUE(sp.ok()) << sp.message();
  const int64_t E = ms.spec.n_embd, F = ms.spec.n_ff, n_tok = 3;
  std::vector<float> x(static_cast<size_t>(n_tok * E));
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.7 * double(i)) * (i % 5 == 0 ? 3 : 1);
  ThreadPool pool(2);
  SparseScratch sc;
  const int il = 1;
  predict_firing(*m, **sp, il, x.data(), n_tok, sc, pool);
  const LlamaLayerWeights& L = m->weights().layers[il];
  const auto* fc1 = static_cast<const float*>(L.fc1.data);
  const auto* fc2 = static_cast<const float*>(L.fc2.data);
  const int64_t R = L.fc1.ne1;
  int fired = 0;
  for (int64_t t = 0; t < n_tok; ++t) {
    std::vector<double> h(static_cast<size_t>(R));
    for (int64_t r = 0; r < R; ++r) {
      double s = 0;
      for (int64_t j = 0; j < E; ++j) s += double(fc1[r * E + j]) * x[t * E + j];
      h[r] = std::max(s, 0.0);
    }
    for (int64_t i = 0; i < F; ++i) {
      double s = 0;
      for (int64_t r = 0; r < R; ++r) s += double(fc2[i * R + r]) * h[r];
      const float got = sc.logit[t * F + i];
      ASSERT_NEAR(got, s, 1e-4 * (1 + std::fabs(s))) << "token " << t << " neuron " << i;
      EXPECT_EQ(sc.fire[t * F + i], got >= testing::kExactPredictorThreshold ? 1 : 0);
      fired += sc.fire[t * F + i];
    }
  }
  EXPECT_GT(fired, 0);
  EXPECT_LT(fired, n_tok * F);
  // A threshold equal to a logit predicts that neuron (>=), one just above it does not.
  const float v = sc.logit[5];
  ASSERT_GT(v, 0.0f);
  opt.predictor_thresholds.assign(ms.spec.n_layer, v);
  auto at = SparseFfn::build(*m, opt);
  ASSERT_TRUE(at.ok()) << at.message();
  predict_firing(*m, **at, il, x.data(), n_tok, sc, pool);
  EXPECT_EQ(sc.fire[5], 1);
  opt.predictor_thresholds.assign(ms.spec.n_layer, std::nextafter(v, INFINITY));
  auto above = SparseFfn::build(*m, opt);
  ASSERT_TRUE(above.ok()) << above.message();
  predict_firing(*m, **above, il, x.data(), n_tok, sc, pool);
  EXPECT_EQ(sc.fire[5], 0);
}

// The bytes of a model in a temporary file (LlamaModel::load reads files), removed at the end.
struct ScratchFile {
  std::string p;
  explicit ScratchFile(const std::vector<uint8_t>& bytes) {
    p = (std::filesystem::temp_directory_path() /
         ("hc_predictor_test_" + std::to_string(::getpid()) + ".gguf"))
            .string();
    std::ofstream(p, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  ~ScratchFile() { std::remove(p.c_str()); }
  const std::string& path() const { return p; }
};

// Predictors converted at load (LoadOptions::predictor_type, --pred-type): stored in the new
// type, their logits within that type's rounding of the file's, and a type whose block does
// not divide the rows is an error naming it.
TEST(PowerInferLayout, PredictorsConvertedAtLoadKeepTheirLogits) {
  Models ms;  // n_embd 64, rank = n_ff 96: Q8_0 / Q4_0 blocks of 32 divide both
  auto ref = LlamaModel::from_gguf(*parse_gguf(ms.pwr));
  ASSERT_TRUE(ref.ok()) << ref.message();
  ScratchFile file(ms.pwr);
  const int64_t E = ms.spec.n_embd, F = ms.spec.n_ff, n_tok = 2;
  std::vector<float> x(static_cast<size_t>(n_tok * E));
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::cos(0.3 * double(i));
  ThreadPool pool(2);
  SparseOptions so;
  so.use_predictor = true;
  auto sref = SparseFfn::build(**ref, so);
  ASSERT_TRUE(sref.ok()) << sref.message();
  SparseScratch a;
  predict_firing(**ref, **sref, 0, x.data(), n_tok, a, pool);
  const std::vector<float> want(a.logit.begin(), a.logit.begin() + n_tok * F);
  float scale = 0;
  for (float v : want) scale = std::max(scale, std::fabs(v));
  for (auto [t, rel] : {std::pair{GgmlType::Q8_0, 0.02f}, std::pair{GgmlType::Q4_0, 0.25f}}) {
    LlamaModel::LoadOptions lo;
    lo.predictor_type = t;
    auto m = LlamaModel::load(file.path(), lo);
    ASSERT_TRUE(m.ok()) << m.message();
    EXPECT_EQ((*m)->weights().layers[0].fc1.type, t);
    EXPECT_EQ((*m)->weights().layers[1].fc2.type, t);
    auto sp = SparseFfn::build(**m, so);
    ASSERT_TRUE(sp.ok()) << sp.message();
    SparseScratch b;
    predict_firing(**m, **sp, 0, x.data(), n_tok, b, pool);
    float diff = 0;
    for (int64_t i = 0; i < n_tok * F; ++i) diff = std::max(diff, std::fabs(b.logit[i] - want[i]));
    EXPECT_GT(diff, 0.0f) << dtype_name(t);  // converted: not the same bits
    EXPECT_LT(diff, rel * scale) << dtype_name(t);
  }
  LlamaModel::LoadOptions bad;
  bad.predictor_type = GgmlType::Q4_K;  // blocks of 256 do not divide rows of 64
  auto m = LlamaModel::load(file.path(), bad);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.message().find("not a multiple of its block size 256"), std::string::npos)
      << m.message();
}

// Predictors hotcold trained before they read the residual are refused, naming the fix; files
// that say what they read load.
TEST(PowerInferLayout, PredictorsTrainedOnTheNormedInputAreRefused) {
  for (const char* input : {"", "residual", "normed"}) {
    Models ms;
    std::vector<std::vector<uint8_t>> bufs;
    auto bytes = testing::model_with_predictor(ms.spec, bufs);
    auto f = parse_gguf(bytes);
    ASSERT_TRUE(f.ok());
    // Rewrite with hotcold's keys: per-layer thresholds and (maybe) the input key.
    GgufWriter w;
    for (const auto& [key, value] : f->kv) w.set(key, value);
    w.set("hotcold.predictor.thresholds",
          GgufValue::f32_array(std::vector<float>(ms.spec.n_layer, 0.5f)));
    if (*input) w.set("hotcold.predictor.input", GgufValue::str(input));
    for (const auto& t : f->tensors)
      w.add_tensor({t.name, t.ne, t.type, {t.data, static_cast<size_t>(t.nbytes)}});
    auto out = w.serialize();
    ASSERT_TRUE(out.ok()) << out.message();
    std::string err;
    auto m = load(*out, &err);
    if (std::string(input) == "normed") {
      ASSERT_FALSE(m);
      EXPECT_NE(err.find("expected 'residual', found 'normed'"), std::string::npos) << err;
      continue;
    }
    ASSERT_TRUE(m) << err;
    SparseOptions opt;
    opt.use_predictor = true;
    auto sp = SparseFfn::build(*m, opt);
    if (*input) {
      EXPECT_TRUE(sp.ok()) << sp.message();
    } else {
      ASSERT_FALSE(sp.ok());
      EXPECT_NE(sp.message().find("train them again with hotcold train-predictor"),
                std::string::npos) << sp.message();
    }
  }
}

}  // namespace
}  // namespace hc
