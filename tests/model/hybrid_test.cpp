// Hybrid and offloaded inference on the CPU device (model/device_model.h, ops/cpu/cpu_device.h):
// the executor, the placement and the merge of host and device halves, tested without a GPU.
//   - -ngl (dense layer offload): every N gives logits bit-identical to host-only inference
//     (the CPU device runs the host's kernels), prompt batches and decode, several weight types.
//   - hybrid sparse FFN (hot neurons on the device, cold on the host, concurrently): the same
//     logits as host-only sparse inference up to float summation order, and the same greedy
//     tokens; with exact ReLU also the dense logits; with a predictor too; with a slow device
//     (the host half finishes first) as with a fast one.
//   - budgets: a placement that does not fit fails naming what, nothing stays charged.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "model/device_model.h"
#include "model/llama_forward.h"
#include "model/llama_model.h"
#include "model/sparse_ffn.h"
#include "ops/cpu/cpu_device.h"
#include "batched_steps.h"
#include "tiny_model.h"

namespace hc {
namespace {

using testing::TinyModel;
using testing::TinyModelSpec;
using testing::cpu_device;
using testing::max_abs;
using testing::max_abs_diff;
using testing::model_with_predictor;

const std::vector<int32_t> kToks = {1, 5, 9, 3, 22, 7, 7, 30, 12, 4, 18, 2, 8, 16, 25};
// A prompt batch (>= 8 tokens: the packed GEMM, except on repacked K-quants, ops/cpu/matmul.h,
// and the batched attention), then decode steps.
// Host / CPU-device parity of the packed GEMM and blocked attention: device_cli_test's
// perplexity with -ngl (128-token batches, the same PPL).
constexpr int kPrompt = 9;

// Logits of every position: a prompt batch, then one token at a time; device session if dm.
std::vector<float> run(const LlamaModel& m, const SparseFfn* sparse, const DeviceModel* dm,
                       SparseStats* stats = nullptr) {
  const LlamaHParams& hp = m.hparams();
  KvCache cache(hp.n_layer, 64, int64_t{hp.n_head_kv} * hp.head_dim);
  ForwardScratch s;
  s.sparse = sparse;
  std::unique_ptr<DeviceSession> ds;
  if (dm) {
    auto r = DeviceSession::create(*dm, cache.n_ctx, kForwardUbatch);
    EXPECT_TRUE(r.ok()) << r.message();
    if (!r.ok()) return {};
    ds = std::move(*r);
    s.device = ds.get();
  }
  ThreadPool pool(2);
  std::vector<float> all, l;
  Status st = llama_forward(m, cache, s, pool, std::span(kToks.data(), kPrompt), 0, true, &l);
  EXPECT_TRUE(st.ok()) << st.message();
  all = l;
  for (size_t i = kPrompt; i < kToks.size(); ++i) {
    st = llama_forward(m, cache, s, pool, std::span(&kToks[i], 1), static_cast<int>(i), false, &l);
    EXPECT_TRUE(st.ok()) << st.message();
    all.insert(all.end(), l.begin(), l.end());
  }
  if (stats) *stats = s.sparse_scratch.stats;
  return all;
}

std::vector<int> argmax_rows(const std::vector<float>& v, int n_vocab) {
  std::vector<int> out;
  for (size_t r = 0; r + n_vocab <= v.size(); r += n_vocab)
    out.push_back(static_cast<int>(std::max_element(v.begin() + r, v.begin() + r + n_vocab) -
                                   (v.begin() + r)));
  return out;
}


// The model both parameterised suites run: 3 layers, wide enough for the decode layouts.
// activation "falcon": a ReLU falcon (LayerNorm, parallel blocks, ungated FFN).
TinyModelSpec three_layers(GgmlType t, const char* activation) {
  TinyModelSpec spec;
  spec.wtype = t;
  spec.n_embd = 256;
  spec.n_ff = 512;
  spec.n_layer = 3;
  spec.activation = activation;
  if (spec.activation == "falcon" || spec.activation == "opt") {
    spec.arch = spec.activation;
    spec.activation = "relu";
  }
  return spec;
}

class OffloadTypes : public ::testing::TestWithParam<GgmlType> {};

TEST_P(OffloadTypes, EveryNglGivesTheHostLogitsBitForBit) {
  const TinyModelSpec spec = three_layers(GetParam(), "");
  TinyModel tm(spec);
  auto bytes = tm.bytes();
  auto m = testing::load_tiny(bytes, /*repack=*/true);
  ASSERT_TRUE(m);
  const std::vector<float> host = run(*m, nullptr, nullptr);
  ASSERT_FALSE(host.empty());
  for (int ngl : {0, 1, 2, 3, 4, 99}) {
    auto dev = cpu_device();
    DevicePlacement p;
    p.n_gpu_layers = ngl;
    auto dm = DeviceModel::build(*m, nullptr, dev, p);
    ASSERT_TRUE(dm.ok()) << dm.message();
    EXPECT_EQ((*dm)->n_attn_layers(), std::min(ngl, spec.n_layer));
    EXPECT_EQ((*dm)->output_on_device(), ngl > spec.n_layer);
    const std::vector<float> got = run(*m, nullptr, dm->get());
    ASSERT_EQ(got.size(), host.size());
    EXPECT_EQ(max_abs_diff(got, host), 0.0f) << "ngl " << ngl;
    // Weights (with their decode layouts) stay charged while the DeviceModel lives.
    EXPECT_EQ(dev->charged_bytes(), (*dm)->weight_bytes());
    if (ngl == 0) {
      EXPECT_EQ(dev->charged_bytes(), 0u);
    } else {
      EXPECT_GT(dev->charged_bytes(), 0u);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, OffloadTypes,
                         ::testing::Values(GgmlType::F32, GgmlType::F16, GgmlType::Q8_0,
                                           GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q4_K),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// Hot sets: none, the even neurons, a contiguous block, everything.
std::vector<std::vector<int32_t>> hot_sets(int n_layer, int n_ff, int kind) {
  std::vector<std::vector<int32_t>> hot(static_cast<size_t>(n_layer));
  for (int il = 0; il < n_layer; ++il)
    for (int32_t i = 0; i < n_ff; ++i) {
      const bool on = kind == 0 ? false
                      : kind == 1 ? i % 2 == 0
                      : kind == 2 ? (i >= 40 + il * 8 && i < 200)
                                  : true;
      if (on) hot[static_cast<size_t>(il)].push_back(i);
    }
  return hot;
}

// Weight type x activation: ReGLU, dReLU (Bamboo's relu(gate) * relu(up)), falcon's ungated
// ReLU or OPT's (with its up bias on the device; the attention of both stays on the host: the
// devices do not run it).
class HybridTypes : public ::testing::TestWithParam<std::tuple<GgmlType, const char*>> {};

TEST_P(HybridTypes, HotOnDeviceColdOnHostMatchesHostOnlySparse) {
  const TinyModelSpec spec = three_layers(std::get<0>(GetParam()), std::get<1>(GetParam()));
  TinyModel tm(spec);
  auto bytes = tm.bytes();
  auto m = testing::load_tiny(bytes, /*repack=*/true);
  ASSERT_TRUE(m);
  // Never the dense fallback (which rounds h to the down matmul's Q8 input): hybrid layers
  // always run sparse, so host-only must too for a like-for-like comparison.
  SparseOptions so;
  so.max_union_share = 1.0;
  auto sparse = SparseFfn::build(*m, so);
  ASSERT_TRUE(sparse.ok()) << sparse.message();
  SparseStats host_stats;
  const std::vector<float> host = run(*m, sparse->get(), nullptr, &host_stats);
  const std::vector<float> dense = run(*m, nullptr, nullptr);
  // Tolerances: the two halves are summed apart and then added (float order: ~1e-5 of the
  // largest logit after 3 random layers); for F16 and the block types the host's cold gate is
  // also read by row (sparse_rows, ggml's vec_dot) where host-only runs the decode layout, and a
  // neuron near 0 may then fire on one side only. Float models also match the dense FFN (exact
  // ReLU); for block types the sparse FFN's own rounding against dense is sparse_ffn_test's.
  const GgmlType t = std::get<0>(GetParam());
  const float scale = 1.0f + max_abs(host);
  // Block types: a neuron whose gate (dReLU: or up) is near 0 may fire on one side only; such
  // flips in these 3 random layers moved the logits by up to 1.5% of the largest (Q4_K dReLU,
  // the prompt's host-only products on the decode kernels).
  const float tol_sparse = (t == GgmlType::F32 ? 1e-4f : 2e-2f) * scale;
  // dReLU against dense: about twice ReLU's difference (the dense side rounds h to F16 for
  // F16 weights; sparse_ffn_test measures the same ratio).
  const bool drelu = std::string(std::get<1>(GetParam())) == "drelu";
  const float tol_dense = (drelu ? 4e-3f : 2e-3f) * scale;
  for (int kind = 0; kind < 4; ++kind) {
    for (int attn = 0; attn < (spec.arch == "llama" ? 2 : 1); ++attn) {
      auto dev = cpu_device();
      DevicePlacement p;
      p.hot = hot_sets(spec.n_layer, spec.n_ff, kind);
      p.attn.assign(static_cast<size_t>(spec.n_layer), 0);
      if (attn) p.attn[1] = 1;  // one layer's attention on the device
      auto dm = DeviceModel::build(*m, sparse->get(), dev, p);
      ASSERT_TRUE(dm.ok()) << dm.message();
      SparseStats st;
      const std::vector<float> got = run(*m, sparse->get(), dm->get(), &st);
      ASSERT_EQ(got.size(), host.size());
      // Host and device halves are summed separately, then added: float order only.
      EXPECT_LE(max_abs_diff(got, host), tol_sparse) << "hot kind " << kind << " attn " << attn;
      if (t == GgmlType::F32 || t == GgmlType::F16) {  // block types: sparse_ffn_test's bounds
        EXPECT_LE(max_abs_diff(got, dense), tol_dense) << "exact ReLU / dReLU = dense";
      }
      EXPECT_EQ(argmax_rows(got, spec.n_vocab), argmax_rows(host, spec.n_vocab));
      if (kind == 0) {  // nothing hot: the host's own sparse FFN, bit for bit
        EXPECT_EQ(max_abs_diff(got, host), 0.0f);
      }
      // Every hot neuron ran on the device (thresholds: the whole hot set), cold ones on the host.
      int64_t n_hot = 0;
      for (auto& h : p.hot) n_hot += static_cast<int64_t>(h.size());
      EXPECT_EQ(st.device_computed, static_cast<uint64_t>(n_hot) * kToks.size());
      EXPECT_EQ(st.neurons, host_stats.neurons);
      if (kind == 3) {
      EXPECT_EQ(st.computed, 0u);
    }
      if (kind == 0) {
        EXPECT_EQ(st.device_computed, 0u);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Types, HybridTypes,
    ::testing::Combine(::testing::Values(GgmlType::F32, GgmlType::F16, GgmlType::Q8_0,
                                         GgmlType::Q4_0, GgmlType::Q4_K),
                       ::testing::Values("relu", "drelu", "falcon", "opt")),
    [](const auto& info) {
      return std::string(dtype_name(std::get<0>(info.param))) + "_" + std::get<1>(info.param);
    });

TEST(Hybrid, SlowDeviceGivesTheSameResultAsAFastOne) {
  // The device is paced to 0.05 GB/s, so the host's cold half always finishes first: the merge
  // must wait for the device and add in the same fixed order.
  TinyModelSpec spec;
  spec.n_embd = 128;
  spec.n_ff = 256;
  spec.activation = "relu";
  TinyModel tm(spec);
  auto bytes = tm.bytes();
  auto m = testing::load_tiny(bytes, true);
  ASSERT_TRUE(m);
  auto sparse = SparseFfn::build(*m, SparseOptions{});
  ASSERT_TRUE(sparse.ok());
  DevicePlacement p;
  p.hot = hot_sets(spec.n_layer, spec.n_ff, 2);
  p.attn = {1, 0};
  std::vector<float> fast, slow;
  {
    auto dm = DeviceModel::build(*m, sparse->get(), cpu_device(0, 0, 2), p);
    ASSERT_TRUE(dm.ok());
    fast = run(*m, sparse->get(), dm->get());
  }
  {
    auto dm = DeviceModel::build(*m, sparse->get(), cpu_device(0, 0.05, 1), p);
    ASSERT_TRUE(dm.ok());
    slow = run(*m, sparse->get(), dm->get());
  }
  ASSERT_FALSE(fast.empty());
  EXPECT_EQ(max_abs_diff(fast, slow), 0.0f);
}

// ReGLU and dReLU (PowerInfer's PWRI llama and bamboo).
class PredictorHybrid : public ::testing::TestWithParam<const char*> {};

TEST_P(PredictorHybrid, PredictorDrivenHybridMatchesHostOnly) {
  TinyModelSpec spec;
  spec.n_embd = 128;
  spec.n_ff = 192;
  spec.n_layer = 2;
  spec.activation = GetParam();
  if (spec.activation == "falcon" || spec.activation == "opt") {
    spec.arch = spec.activation;
    spec.activation = "relu";
  }
  std::vector<std::vector<uint8_t>> bufs;
  auto bytes = model_with_predictor(spec, bufs);
  auto m = testing::load_tiny(bytes, true);
  ASSERT_TRUE(m);
  SparseOptions so;
  so.use_predictor = true;
  so.max_union_share = 1.0;  // host-only never falls back to the dense FFN: counts comparable
  auto sparse = SparseFfn::build(*m, so);
  ASSERT_TRUE(sparse.ok()) << sparse.message();
  SparseStats hs;
  const std::vector<float> host = run(*m, sparse->get(), nullptr, &hs);
  const float scale = 1.0f + max_abs(host);
  for (int kind : {1, 2, 3}) {
    DevicePlacement p;
    p.hot = hot_sets(spec.n_layer, spec.n_ff, kind);
    p.attn = {0, static_cast<uint8_t>(spec.arch == "llama" ? 1 : 0)};
    auto dm = DeviceModel::build(*m, sparse->get(), cpu_device(), p);
    ASSERT_TRUE(dm.ok()) << dm.message();
    SparseStats st;
    const std::vector<float> got = run(*m, sparse->get(), dm->get(), &st);
    EXPECT_LE(max_abs_diff(got, host), 1e-4f * scale) << "kind " << kind;  // F32: order only
    EXPECT_EQ(argmax_rows(got, spec.n_vocab), argmax_rows(host, spec.n_vocab));
    // The predicted set is split, not duplicated or lost: per batch, the device computes the
    // union's hot part and the host its cold part, which add up to host-only's union.
    EXPECT_GT(st.device_computed, 0u);
    EXPECT_EQ(st.device_computed + st.computed, hs.computed) << "kind " << kind;
    EXPECT_EQ(st.fired, hs.fired);
    EXPECT_EQ(st.neurons, hs.neurons);
    if (kind == 3) {
      EXPECT_EQ(st.computed, 0u);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Activations, PredictorHybrid,
                         ::testing::Values("relu", "drelu", "falcon", "opt"),
                         [](const auto& info) { return std::string(info.param); });

TEST(Hybrid, BudgetIsRespectedAndFreedAndNamedWhenExceeded) {
  TinyModelSpec spec;
  spec.n_embd = 256;
  spec.n_ff = 512;
  spec.n_layer = 2;
  spec.wtype = GgmlType::Q8_0;
  TinyModel tm(spec);
  auto bytes = tm.bytes();
  auto m = testing::load_tiny(bytes, true);
  ASSERT_TRUE(m);
  // What a full offload needs, measured on an unlimited device.
  uint64_t need = 0;
  {
    auto dev = cpu_device();
    DevicePlacement p;
    p.n_gpu_layers = 3;
    auto dm = DeviceModel::build(*m, nullptr, dev, p);
    ASSERT_TRUE(dm.ok());
    need = dev->charged_bytes();
    auto ds = DeviceSession::create(**dm, 64, kForwardUbatch);
    ASSERT_TRUE(ds.ok());
    EXPECT_GT(dev->charged_bytes(), need);  // KV cache and buffers are charged too
    ds->reset();
    EXPECT_EQ(dev->charged_bytes(), need);
  }
  auto dev = cpu_device(need - 1);
  {
    DevicePlacement p;
    p.n_gpu_layers = 3;
    auto dm = DeviceModel::build(*m, nullptr, dev, p);
    ASSERT_FALSE(dm.ok());
    EXPECT_NE(dm.message().find("budget"), std::string::npos) << dm.message();
    EXPECT_NE(dm.message().find("output"), std::string::npos) << dm.message();
  }
  EXPECT_EQ(dev->charged_bytes(), 0u);  // a failed build leaves nothing behind
  DevicePlacement p;
  p.n_gpu_layers = 1;
  auto dm = DeviceModel::build(*m, nullptr, dev, p);
  ASSERT_TRUE(dm.ok());
  EXPECT_LE(dev->charged_bytes(), dev->budget_bytes());
}

// The server's prompt store with attention layers on the device: a session's device KV copied
// into a host cache, restored into a fresh session with that host cache, lets the fresh one go
// on decoding with exactly the first one's logits; without the restore it would not.
TEST(Hybrid, DeviceKvRoundTripsThroughAHostCache) {
  TinyModel tm(three_layers(GgmlType::Q8_0, "silu"));
  auto bytes = tm.bytes();
  auto m = testing::load_tiny(bytes, true);
  ASSERT_TRUE(m);
  const LlamaHParams& hp = m->hparams();
  auto dev = cpu_device();
  DevicePlacement p;
  p.n_gpu_layers = 2;  // layers 1 and 2: attention and KV on the device
  auto dm = DeviceModel::build(*m, nullptr, dev, p);
  ASSERT_TRUE(dm.ok()) << dm.message();
  ASSERT_EQ((*dm)->n_attn_layers(), 2);
  constexpr int kCtx = 64;
  const int64_t kv_dim = int64_t{hp.n_head_kv} * hp.head_dim;
  ThreadPool pool(2);
  auto session = [&](ForwardScratch& s) {
    auto ds = DeviceSession::create(**dm, kCtx, kForwardUbatch);
    EXPECT_TRUE(ds.ok()) << ds.message();
    s.device = ds->get();
    return std::move(*ds);
  };
  KvCache ca(hp.n_layer, kCtx, kv_dim);
  ForwardScratch sa;
  auto da = session(sa);
  std::vector<float> la, lb;
  ASSERT_TRUE(llama_forward(*m, ca, sa, pool, std::span(kToks.data(), kPrompt), 0, false, &la).ok());
  ASSERT_TRUE(da->kv_to_host(ca, kPrompt).ok());
  for (bool restore : {true, false}) {
    KvCache cb = ca;  // what the store keeps and restores: every layer's KV of the prefix
    ForwardScratch sb;
    auto db = session(sb);
    if (restore) {
      ASSERT_TRUE(db->kv_from_host(cb, kPrompt).ok());
    }
    KvCache ca2 = ca;  // session a goes on from its own state each round
    for (size_t i = kPrompt; i < kToks.size(); ++i) {
      ASSERT_TRUE(llama_forward(*m, cb, sb, pool, std::span(&kToks[i], 1), static_cast<int>(i),
                                false, &lb).ok());
      if (restore) {
        ASSERT_TRUE(llama_forward(*m, ca2, sa, pool, std::span(&kToks[i], 1),
                                  static_cast<int>(i), false, &la).ok());
        ASSERT_EQ(0, std::memcmp(la.data(), lb.data(), la.size() * sizeof(float))) << "pos " << i;
      }
    }
    if (restore) continue;
    // Not restored: b's device layers attend to zeros; its last logits differ from a's.
    EXPECT_NE(0, std::memcmp(la.data(), lb.data(), la.size() * sizeof(float)));
  }
  // A host cache of another shape is refused, naming both.
  KvCache wrong(hp.n_layer, kCtx / 2, kv_dim);
  const Status st = da->kv_to_host(wrong, kPrompt);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("expected"), std::string::npos) << st.message();
  EXPECT_FALSE(da->kv_from_host(ca, kCtx + 1).ok());
}

TEST(Hybrid, BadPlacementsAndUnsupportedUsesAreErrors) {
  TinyModelSpec spec;
  spec.activation = "relu";
  TinyModel tm(spec);
  auto bytes = tm.bytes();
  auto m = testing::load_tiny(bytes, true);
  ASSERT_TRUE(m);
  auto sparse = SparseFfn::build(*m, SparseOptions{});
  ASSERT_TRUE(sparse.ok());
  DevicePlacement p;
  p.hot = {{3, 2}, {}};  // not ascending
  EXPECT_FALSE(DeviceModel::build(*m, sparse->get(), cpu_device(), p).ok());
  p.hot = {{1, 2, 999}, {}};  // out of range
  EXPECT_FALSE(DeviceModel::build(*m, sparse->get(), cpu_device(), p).ok());
  p.hot = {{1}};  // wrong layer count
  EXPECT_FALSE(DeviceModel::build(*m, sparse->get(), cpu_device(), p).ok());
  p.hot = {{1, 2}, {3}};
  EXPECT_FALSE(DeviceModel::build(*m, nullptr, cpu_device(), p).ok());  // hot needs sparse
  p.n_gpu_layers = -1;
  EXPECT_FALSE(DeviceModel::build(*m, sparse->get(), cpu_device(), p).ok());
  // Decode steps over a device: each brings its own session of the pass's placement.
  p = DevicePlacement{};
  p.n_gpu_layers = 1;
  auto dm = DeviceModel::build(*m, nullptr, cpu_device(), p);
  ASSERT_TRUE(dm.ok());
  auto ds = DeviceSession::create(**dm, 64, kForwardUbatch);
  ASSERT_TRUE(ds.ok());
  auto small = DeviceSession::create(**dm, 32, kForwardUbatch);
  ASSERT_TRUE(small.ok());
  auto other_dm = DeviceModel::build(*m, nullptr, cpu_device(), p);
  ASSERT_TRUE(other_dm.ok());
  auto other = DeviceSession::create(**other_dm, 64, kForwardUbatch);
  ASSERT_TRUE(other.ok());
  const LlamaHParams& hp = m->hparams();
  KvCache c(hp.n_layer, 64, int64_t{hp.n_head_kv} * hp.head_dim);
  KvCache c2 = c;
  ForwardScratch s;
  s.device = ds->get();
  ThreadPool pool(1);
  std::vector<float> logits;
  const auto refused = [&](std::vector<SeqStep> steps, const char* what) {
    const Status st = llama_forward_multi(*m, steps, s, pool, &logits);
    EXPECT_FALSE(st.ok()) << what;
    EXPECT_NE(st.message().find(what), std::string::npos) << st.message();
  };
  refused({{&c, 0, 1}}, "no device session");
  refused({{&c, 0, 1, small->get()}}, "32 positions for a cache of 64");
  refused({{&c, 0, 1, other->get()}}, "another device placement");
  refused({{&c, 0, 1, ds->get()}, {&c2, 0, 1, ds->get()}}, "share one device session");
  s.device = nullptr;
  refused({{&c, 0, 1, ds->get()}}, "no device in this pass");
}

// The server's batched hybrid decode: one llama_forward_multi pass over the device placement,
// each step with its own session, gives every sequence's logits, host KV and device KV bit for
// bit as decoding it alone does, over several rounds, for 3 and 9 sequences (9: past the 8
// rows where a batch would take the GEMM). Placements: -ngl with the dense FFN and the output
// on the device; hot neurons with thresholds, in one layer, the other layers' host sparse FFN
// at the default max_union_share (so tokens of one batch take the dense fallback and others
// not: each as alone); the predictor's hot neurons; experts on the device.
struct StepsCase {
  const char* name;
  GgmlType type;
  // 0: -ngl 2, 1: -ngl 99, 2: hot (ReLU), 3: hot (predictor), 4: experts, 5: hot (SwiGLU with
  // thresholds: the sets of a batch differ in length, and so would a SIMD tail's rounding)
  int kind;
};

class HybridSteps : public ::testing::TestWithParam<StepsCase> {};

TEST_P(HybridSteps, BatchedDecodeStepsEqualEachSequenceAlone) {
  const StepsCase c = GetParam();
  TinyModelSpec spec = three_layers(c.type, c.kind >= 2 && c.kind <= 4 ? "relu" : "");
  std::vector<std::vector<uint8_t>> bufs;
  std::vector<uint8_t> bytes;
  if (c.kind == 3) {
    spec.n_layer = 2;
    bytes = model_with_predictor(spec, bufs);
  } else {
    if (c.kind == 4) {
      spec.n_expert = 4;
      spec.n_expert_used = 2;
    }
    TinyModel tm(spec);
    bytes = tm.bytes();
  }
  auto m = testing::load_tiny(bytes, /*repack=*/true);
  ASSERT_TRUE(m);
  const LlamaHParams& hp = m->hparams();
  std::unique_ptr<const SparseFfn> sparse;
  DevicePlacement p;
  if (c.kind == 0) p.n_gpu_layers = 2;
  if (c.kind == 1) p.n_gpu_layers = 99;
  if (c.kind == 2 || c.kind == 3 || c.kind == 5) {
    SparseOptions so;  // the default max_union_share: the dense fallback is in play
    so.use_predictor = c.kind == 3;
    // SwiGLU: about half of the neurons fire (the random layers' |silu(gate)| is ~0.1).
    if (c.kind == 5) so.thresholds.assign(static_cast<size_t>(hp.n_layer), 0.1f);
    auto sp = SparseFfn::build(*m, so);
    ASSERT_TRUE(sp.ok()) << sp.message();
    sparse = std::move(*sp);
    p.hot = hot_sets(hp.n_layer, hp.n_ff, 2);
    for (size_t il = 1; il < p.hot.size(); ++il) p.hot[il].clear();  // host sparse there
    p.attn.assign(static_cast<size_t>(hp.n_layer), 0);
    p.attn[1] = 1;
  }
  if (c.kind == 4) {
    p.experts.assign(static_cast<size_t>(hp.n_layer), {});
    p.experts[1] = {0, 2};
    p.attn.assign(static_cast<size_t>(hp.n_layer), 0);
    p.attn[0] = 1;
  }
  auto dm = DeviceModel::build(*m, sparse.get(), cpu_device(), p);
  ASSERT_TRUE(dm.ok()) << dm.message();
  for (int n_seq : {3, 9}) {
    const SparseStats st =
        testing::expect_batched_steps_equal_alone(*m, **dm, sparse.get(), n_seq, 3, c.name);
    if (c.kind == 2 || c.kind == 5) {  // the per-row device FFN really ran: the hot layer's
      EXPECT_GT(st.device_computed, 0u);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Placements, HybridSteps,
    ::testing::Values(StepsCase{"ngl2_Q4_K", GgmlType::Q4_K, 0},
                      StepsCase{"ngl99_Q8_0", GgmlType::Q8_0, 1},
                      StepsCase{"ngl99_F16", GgmlType::F16, 1},
                      StepsCase{"hot_Q4_0", GgmlType::Q4_0, 2},
                      StepsCase{"hot_Q4_K", GgmlType::Q4_K, 2},
                      StepsCase{"predictor_F32", GgmlType::F32, 3},
                      StepsCase{"experts_Q4_K", GgmlType::Q4_K, 4},
                      StepsCase{"hot_swiglu_Q4_K", GgmlType::Q4_K, 5},
                      StepsCase{"hot_swiglu_F32", GgmlType::F32, 5}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace hc
