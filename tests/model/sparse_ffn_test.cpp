// The activation-sparse FFN in the forward pass (model/sparse_ffn.h): exact ReLU gives the
// dense logits (decode and prompt batches, sparse and dense-fallback paths, several weight
// types); thresholds on a SwiGLU model skip the neurons below them; bad options are refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "model/llama_forward.h"
#include "model/llama_model.h"
#include "model/sparse_ffn.h"
#include "tiny_model.h"

namespace hc {
namespace {

using testing::TinyModel;
using testing::TinyModelSpec;

std::shared_ptr<const LlamaModel> load(std::vector<uint8_t>& bytes) {
  return testing::load_tiny(bytes, /*repack=*/true);
}

const std::vector<int32_t> kToks = {1, 5, 9, 3, 22, 7, 7, 30, 12, 4, 18};

// Logits of every position: a prompt batch of `batch` tokens, then one token at a time.
std::vector<float> run(const LlamaModel& m, const SparseFfn* sparse, int batch, int nt,
                       SparseStats* stats = nullptr) {
  KvCache cache(m.hparams().n_layer, 64, int64_t{m.hparams().n_head_kv} * m.hparams().head_dim);
  ForwardScratch s;
  s.sparse = sparse;
  ThreadPool pool(nt);
  std::vector<float> all, l;
  EXPECT_TRUE(llama_forward(m, cache, s, pool, std::span(kToks.data(), batch), 0, true, &l).ok());
  all = l;
  for (size_t i = batch; i < kToks.size(); ++i) {
    EXPECT_TRUE(llama_forward(m, cache, s, pool, std::span(&kToks[i], 1), static_cast<int>(i), false, &l).ok());
    all.insert(all.end(), l.begin(), l.end());
  }
  if (stats) *stats = s.sparse_scratch.stats;
  return all;
}

float max_abs(const std::vector<float>& v) {
  float m = 0;
  for (float x : v) m = std::max(m, std::fabs(x));
  return m;
}

// Weight type x activation: ReGLU (relu(g) * u) or dReLU (relu(g) * relu(u), Bamboo).
class SparseFfnTypes : public ::testing::TestWithParam<std::tuple<GgmlType, const char*>> {
 protected:
  GgmlType type() const { return std::get<0>(GetParam()); }
  bool drelu() const { return std::string(std::get<1>(GetParam())) == "drelu"; }
};

TEST_P(SparseFfnTypes, ExactReluGivesTheDenseLogits) {
  TinyModelSpec spec;
  spec.wtype = type();
  spec.n_embd = 256;
  spec.n_ff = 512;
  spec.activation = std::get<1>(GetParam());
  TinyModel tm(spec);
  auto bytes = tm.bytes();
  auto m = load(bytes);
  ASSERT_TRUE(m);
  for (int batch : {1, 5}) {
    const auto dense = run(*m, nullptr, batch, 2);
    // Float types transpose down exactly; block types re-quantise the transposed rows to Q8_0
    // (a small second rounding of the down weights). The dense side has its own rounding: it
    // quantises h before the down matmul (Q8_0 / Q8_1 per 32 values; Q8_K per 256 for Q4_K,
    // the coarsest), where the sparse sum takes h in float; this 2-layer random model amplifies
    // either rounding to ~1% of its largest logit.
    const GgmlType t = type();
    // dReLU measures 1.1-2.5x ReLU's difference (largest of logits: Q4_K 5.2% vs 2.0%, Q4_0
    // 4.1% vs 3.0%, F16 0.15% vs 0.07%; F32 0 for both, so the function is the same): a
    // skipped row adds exactly +0.0 on either side, what differs is the same two roundings
    // of h and down on the dense and sparse sides.
    const float rel = t == GgmlType::F32 || t == GgmlType::F16 ? 2e-3f : drelu() ? 7e-2f : 3e-2f;
    const float tol = rel * (1.0f + max_abs(dense));
    for (double share : {1.0, 0.0}) {  // always sparse / always the dense fallback
      SparseOptions opt;
      opt.max_union_share = share;
      auto sp = SparseFfn::build(*m, opt);
      ASSERT_TRUE(sp.ok()) << sp.message();
      for (int nt : {1, 2}) {
        SparseStats st;
        const auto got = run(*m, sp->get(), batch, nt, &st);
        ASSERT_EQ(got.size(), dense.size());
        if (share == 0.0 && type() != GgmlType::F16 && type() != GgmlType::F32) {
          // The fallback runs the dense FFN itself: the same bits.
          ASSERT_EQ(0, std::memcmp(got.data(), dense.data(), got.size() * sizeof(float)));
        }
        for (size_t i = 0; i < got.size(); ++i)
          ASSERT_NEAR(got[i], dense[i], tol) << dtype_name(type()) << " batch " << batch << " at " << i;
        // Random ReLU weights fire about half their neurons; the counters see it.
        EXPECT_GT(st.sparsity(), 0.2);
        EXPECT_LT(st.sparsity(), 0.8);
        EXPECT_EQ(st.neurons, uint64_t(spec.n_layer) * spec.n_ff * kToks.size());
        if (share == 0.0) EXPECT_EQ(st.computed, st.neurons);
        else EXPECT_LT(st.computed, st.neurons);
        // Weight bytes read: the whole gate on every layer call, then the whole up and down
        // (fallback) or the fired rows of up and down_t (one row each per fired neuron when
        // every call has one token).
        const LlamaLayerWeights& L0 = m->weights().layers[0];
        const TensorView& down = L0.ffn_down.empty() ? L0.ffn_down_t : L0.ffn_down;
        const uint64_t calls = uint64_t(spec.n_layer) * (1 + kToks.size() - batch);
        const uint64_t gate_all = rows_bytes(L0.ffn_gate, L0.ffn_gate.ne1);
        if (share == 0.0) {
          EXPECT_EQ(st.bytes, calls * (gate_all + rows_bytes(L0.ffn_up, L0.ffn_up.ne1) +
                                       rows_bytes(down, down.ne1)));
        } else if (batch == 1) {
          const uint64_t down_rows = st.active;  // the rows of non-zero h
          EXPECT_EQ(st.bytes, calls * gate_all + st.computed * uint64_t(L0.ffn_up.nb1) +
                                  down_rows * uint64_t((*sp)->down_t(0).nb1));
        }
        EXPECT_EQ(st.device_bytes, 0u);
        if (drelu() && share == 1.0) {
          // dReLU: up <= 0 zeroes about half the fired neurons' h again, and the down
          // projection skips them (the byte count above).
          EXPECT_GT(st.active, 0u);
          EXPECT_LT(st.active, st.fired * 3 / 4);
          EXPECT_GT(st.active_sparsity(), st.sparsity() + 0.1);
        } else if (drelu()) {  // the dense fallback counts the same zeros
          EXPECT_LT(st.active, st.fired * 3 / 4);
          EXPECT_GT(st.active, 0u);
        } else {
          // ReGLU with thresholds: every fired neuron has h = relu(gate) * up != 0, on the
          // sparse path and in the dense fallback alike.
          EXPECT_EQ(st.active, st.fired);
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Types, SparseFfnTypes,
    ::testing::Combine(::testing::Values(GgmlType::F32, GgmlType::F16, GgmlType::Q8_0,
                                         GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q4_K),
                       ::testing::Values("relu", "drelu")),
    [](const auto& info) {
      return std::string(dtype_name(std::get<0>(info.param))) + "_" + std::get<1>(info.param);
    });

TEST(SparseFfn, ThresholdsOnSwigluSkipTheSmallActivations) {
  TinyModelSpec spec;
  spec.n_ff = 128;
  TinyModel tm(spec);
  auto bytes = tm.bytes();
  auto m = load(bytes);
  ASSERT_TRUE(m);
  const auto dense = run(*m, nullptr, 3, 2);
  double prev_sparsity = -1;
  for (float tau : {0.0f, 0.05f, 0.2f, 1e9f}) {
    SparseOptions opt;
    opt.thresholds.assign(m->hparams().n_layer, tau);
    opt.max_union_share = 1.0;
    auto sp = SparseFfn::build(*m, opt);
    ASSERT_TRUE(sp.ok()) << sp.message();
    SparseStats st;
    const auto got = run(*m, sp->get(), 3, 2, &st);
    if (tau == 0.0f) {  // SiLU is non-zero almost everywhere: every neuron fires
      EXPECT_LT(st.sparsity(), 0.01);
      for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], dense[i], 2e-3f * (1 + max_abs(dense)));
    }
    EXPECT_GT(st.sparsity(), prev_sparsity);  // a higher threshold skips more
    prev_sparsity = st.sparsity();
    if (tau == 1e9f) {
      EXPECT_EQ(st.fired, 0u);
      EXPECT_EQ(st.computed, 0u);
    }
  }
}

TEST(SparseFfn, RefusesExactReluOnSwigluAndWrongThresholdCounts) {
  TinyModelSpec spec;
  TinyModel tm(spec);
  auto bytes = tm.bytes();
  auto m = load(bytes);
  ASSERT_TRUE(m);
  auto a = SparseFfn::build(*m, SparseOptions{});
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.message().find("ReLU"), std::string::npos) << a.message();
  SparseOptions opt;
  opt.thresholds = {0.1f};
  auto b = SparseFfn::build(*m, opt);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.message().find("expected 2 per-layer thresholds, found 1"), std::string::npos) << b.message();
}

}  // namespace
}  // namespace hc
