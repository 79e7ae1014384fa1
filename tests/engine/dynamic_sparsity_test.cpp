// Dynamic sparsity in the forward pass (model/dynamic_sparsity.h, DeviceModel::migrate) on the
// CPU device:
//   - migration keeps the hybrid output equal to host-only sparse inference (the device's rows
//     and the host's index lists switch together), device memory does not change, and a bad
//     swap is refused with nothing changed;
//   - the threshold controller steers a real forward pass's recall of activation mass to its
//     target from a badly calibrated start;
//   - migration moves the device's hot set toward what fires: after a change of input the share
//     of firing mass on the device recovers, where the static placement's does not;
//   - audits of a hybrid layer see the same firing decisions as the host-only pass.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "engine/session.h"
#include "model/device_model.h"
#include "model/dynamic_sparsity.h"
#include "model/llama_forward.h"
#include "model/sparse_ffn.h"
#include "ops/cpu/cpu_device.h"
#include "../model/tiny_model.h"

namespace hc {
namespace {

using testing::TinyModel;
using testing::TinyModelSpec;
using testing::cpu_device;
using testing::max_abs;
using testing::max_abs_diff;

TinyModelSpec spec_of(GgmlType t, const char* act, int n_ctx = 64) {
  TinyModelSpec s;
  s.wtype = t;
  s.n_embd = 256;
  s.n_ff = 512;
  s.n_layer = 2;
  s.n_ctx = n_ctx;
  s.activation = act;
  return s;
}

// Logits of every token of `toks` fed one at a time after a prompt of 9 (a session).
std::vector<float> run_session(std::shared_ptr<const LlamaModel> m,
                               std::shared_ptr<const SparseFfn> sparse,
                               std::shared_ptr<const DeviceModel> dm,
                               std::shared_ptr<DynamicSparsity> dyn,
                               const std::vector<int32_t>& toks) {
  SessionParams sp;
  sp.n_ctx = static_cast<int>(toks.size()) + 8;
  sp.n_threads = 2;
  Session s(m, sp);
  s.set_sparse(sparse);
  if (dm) {
    EXPECT_TRUE(s.set_device(dm).ok());
  }
  s.set_dynamic(dyn);
  std::vector<float> all;
  const size_t n_prompt = std::min<size_t>(9, toks.size());
  Status st = s.eval(std::span(toks.data(), n_prompt), true);
  EXPECT_TRUE(st.ok()) << st.message();
  all = s.logits();
  for (size_t i = n_prompt; i < toks.size(); ++i) {
    st = s.eval(std::span(&toks[i], 1));
    EXPECT_TRUE(st.ok()) << st.message();
    all.insert(all.end(), s.logits().begin(), s.logits().end());
  }
  return all;
}


std::vector<int32_t> stream(int n, int n_vocab, uint32_t seed, int lo = 3, int hi = -1) {
  std::mt19937 rng(seed);
  if (hi < 0) hi = n_vocab;
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = lo + static_cast<int32_t>(rng() % static_cast<uint32_t>(hi - lo));
  return t;
}

struct Fixture {
  std::vector<uint8_t> bytes;
  std::shared_ptr<const LlamaModel> m;
  std::shared_ptr<const SparseFfn> sparse;
  Fixture(const TinyModelSpec& spec, SparseOptions so = {}) {
    TinyModel tm(spec);
    bytes = tm.bytes();
    m = testing::load_tiny(bytes, /*repack=*/true);
    so.max_union_share = 1.0;  // always sparse: hybrid layers never take the dense fallback
    auto s = SparseFfn::build(*m, so);
    EXPECT_TRUE(s.ok()) << s.message();
    if (s.ok()) sparse = std::shared_ptr<const SparseFfn>(std::move(*s));
  }
};

std::vector<std::vector<int32_t>> even_neurons(int n_layer, int n_ff) {
  std::vector<std::vector<int32_t>> hot(static_cast<size_t>(n_layer));
  for (auto& h : hot)
    for (int32_t i = 0; i < n_ff; i += 2) h.push_back(i);
  return hot;
}

class MigrateTypes : public ::testing::TestWithParam<GgmlType> {};

TEST_P(MigrateTypes, MigratedPlacementStillMatchesHostOnlySparse) {
  const TinyModelSpec spec = spec_of(GetParam(), "relu");
  Fixture fx(spec);
  ASSERT_TRUE(fx.m && fx.sparse);
  const std::vector<int32_t> toks = stream(24, spec.n_vocab, 3);
  const std::vector<float> host = run_session(fx.m, fx.sparse, nullptr, nullptr, toks);
  auto dev = cpu_device();
  DevicePlacement p;
  p.hot = even_neurons(spec.n_layer, spec.n_ff);
  auto built = DeviceModel::build(*fx.m, fx.sparse.get(), dev, p);
  ASSERT_TRUE(built.ok()) << built.message();
  std::shared_ptr<DeviceModel> dm(std::move(*built));
  const uint64_t charged = dev->charged_bytes();
  // Layer 0: slots 0..39 (neurons 0, 2, ..., 78) take odd neurons 1, 3, ..., 79 (every 16-row
  // group of the decode layout touched); layer 1: slot 100 takes neuron 511.
  std::vector<sparse::Swap> s0;
  for (int32_t j = 0; j < 40; ++j) s0.push_back({j, 2 * j, 2 * j + 1});
  ASSERT_TRUE(dm->migrate(0, s0).ok());
  ASSERT_TRUE(dm->migrate(1, {{100, 200, 511}}).ok());
  EXPECT_EQ(dm->migrated_neurons(), 41u);
  EXPECT_EQ(dev->charged_bytes(), charged) << "migration never allocates";
  // The host's lists agree with the slots.
  for (int il = 0; il < spec.n_layer; ++il) {
    const DeviceLayer& d = dm->layer(il);
    EXPECT_EQ(d.hot.size() + d.cold.size(), static_cast<size_t>(spec.n_ff));
    EXPECT_TRUE(std::is_sorted(d.cold.begin(), d.cold.end()));
    for (size_t j = 0; j < d.hot.size(); ++j) EXPECT_EQ(d.local[d.hot[j]], static_cast<int>(j));
    for (int32_t c : d.cold) EXPECT_EQ(d.local[c], -1);
  }
  EXPECT_EQ(dm->layer(0).hot[5], 11);
  EXPECT_EQ(dm->layer(1).hot[100], 511);
  const std::vector<float> got = run_session(fx.m, fx.sparse, dm, nullptr, toks);
  const float tol = (GetParam() == GgmlType::F32 ? 1e-4f : 1e-2f) * (1.0f + max_abs(host));
  EXPECT_LE(max_abs_diff(got, host), tol);
  // The same neurons placed from scratch (ascending slots) give the same function.
  DevicePlacement q;
  q.hot.resize(static_cast<size_t>(spec.n_layer));
  for (int il = 0; il < spec.n_layer; ++il) {
    q.hot[il] = dm->layer(il).hot;
    std::sort(q.hot[il].begin(), q.hot[il].end());
  }
  auto fresh = DeviceModel::build(*fx.m, fx.sparse.get(), cpu_device(), q);
  ASSERT_TRUE(fresh.ok()) << fresh.message();
  const std::vector<float> ref =
      run_session(fx.m, fx.sparse, std::shared_ptr<const DeviceModel>(std::move(*fresh)), nullptr,
                  toks);
  EXPECT_LE(max_abs_diff(got, ref), tol);
}

INSTANTIATE_TEST_SUITE_P(Types, MigrateTypes,
                         ::testing::Values(GgmlType::F32, GgmlType::Q8_0, GgmlType::Q4_K),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(Migrate, BadSwapsAreRefusedAndChangeNothing) {
  const TinyModelSpec spec = spec_of(GgmlType::F32, "relu");
  Fixture fx(spec);
  ASSERT_TRUE(fx.m && fx.sparse);
  DevicePlacement p;
  p.hot = even_neurons(spec.n_layer, spec.n_ff);
  p.hot[1].clear();  // layer 1: nothing on the device
  auto dm = DeviceModel::build(*fx.m, fx.sparse.get(), cpu_device(), p);
  ASSERT_TRUE(dm.ok()) << dm.message();
  const std::vector<int32_t> before = (*dm)->layer(0).hot;
  const struct {
    int il;
    std::vector<sparse::Swap> swaps;
    const char* expect;
  } bad[] = {
      {0, {{0, 2, 1}}, "expected neuron 2"},            // slot 0 holds neuron 0
      {0, {{0, 0, 4}}, "already on the device"},        // 4 is held (slot 2)
      {0, {{300, 0, 1}}, "out of range"},               // 256 slots
      {0, {{0, 0, 512}}, "out of range"},               // n_ff = 512
      {0, {{0, 0, 1}, {1, 2, 1}}, "already on the device"},  // admitted twice
      {1, {{0, 0, 1}}, "holds no hot neurons"},
      {5, {{0, 0, 1}}, "out of range"},
  };
  for (const auto& b : bad) {
    Status st = (*dm)->migrate(b.il, b.swaps);
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.message().find(b.expect), std::string::npos) << st.message();
    EXPECT_EQ((*dm)->layer(0).hot, before);
    EXPECT_EQ((*dm)->migrated_neurons(), 0u);
  }
  // A chain within one call is fine: slot 0 gives up 0 for 1, slot 1 gives up 2 for 0.
  EXPECT_TRUE((*dm)->migrate(0, {{0, 0, 1}, {1, 2, 0}}).ok());
  EXPECT_EQ((*dm)->layer(0).hot[0], 1);
  EXPECT_EQ((*dm)->layer(0).hot[1], 0);
}

TEST(DynamicThresholds, ControllerReachesTheRecallTargetFromABadStart) {
  const TinyModelSpec spec = spec_of(GgmlType::F32, "", 512);
  // SwiGLU with a far too high threshold: at the start most of the activation mass is skipped.
  SparseOptions so;
  so.thresholds.assign(static_cast<size_t>(spec.n_layer), 5.0f);
  Fixture fx(spec, so);
  ASSERT_TRUE(fx.m && fx.sparse);
  DynamicOptions o;
  o.control = true;
  o.controller.target_value = 0.95;
  auto dyn = DynamicSparsity::create(*fx.m, fx.sparse.get(), nullptr, o);
  ASSERT_TRUE(dyn.ok()) << dyn.message();
  std::shared_ptr<DynamicSparsity> d(std::move(*dyn));
  const std::vector<int32_t> toks = stream(400, spec.n_vocab, 11);
  run_session(fx.m, fx.sparse, nullptr, d, toks);
  const auto& tr = d->trace();
  ASSERT_GT(tr.size(), 300u);
  EXPECT_LT(tr[1].recall, 0.8) << "the start really is bad";
  double rec = 0;
  for (size_t i = tr.size() - 100; i < tr.size(); ++i) rec += tr[i].recall;
  rec /= 100;
  EXPECT_NEAR(rec, 0.95, 0.02);
  for (float t : d->thresholds()) EXPECT_LT(t, 5.0f);
  // Static thresholds (no controller) stay where they were and so does the recall.
  DynamicOptions watch;
  auto w = DynamicSparsity::create(*fx.m, fx.sparse.get(), nullptr, watch);
  ASSERT_TRUE(w.ok());
  std::shared_ptr<DynamicSparsity> ws(std::move(*w));
  run_session(fx.m, fx.sparse, nullptr, ws, toks);
  EXPECT_LT(ws->totals().recall(), 0.8);
  for (float t : ws->thresholds()) EXPECT_EQ(t, 5.0f);
}

// Firing counts per neuron of layer il over a stream, host-only (exact ReLU).
std::vector<double> firing_counts(const Fixture& fx, const std::vector<int32_t>& toks, int il) {
  DynamicOptions watch;
  watch.half_life = 1e9;  // no decay: plain counts
  auto w = DynamicSparsity::create(*fx.m, fx.sparse.get(), nullptr, watch);
  EXPECT_TRUE(w.ok());
  std::shared_ptr<DynamicSparsity> ws(std::move(*w));
  run_session(fx.m, fx.sparse, nullptr, ws, toks);
  std::vector<double> c;
  ws->counters().counts(il, &c);
  return c;
}

std::vector<int32_t> top_k(const std::vector<double>& c, size_t k, bool least) {
  std::vector<int32_t> idx(c.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(),
                   [&](int32_t a, int32_t b) { return least ? c[a] < c[b] : c[a] > c[b]; });
  idx.resize(k);
  std::sort(idx.begin(), idx.end());
  return idx;
}

TEST(DynamicPlacement, MigrationRecoversTheDeviceShareAfterAShift) {
  const TinyModelSpec spec = spec_of(GgmlType::F32, "relu", 512);
  Fixture fx(spec);
  ASSERT_TRUE(fx.m && fx.sparse);
  // A stream of a few token ids only, so a small set of neurons does most of the firing.
  const std::vector<int32_t> toks = stream(300, spec.n_vocab, 5, 3, 9);
  // The placement is the least-firing 64 neurons per layer (a profile of other text): the
  // device starts with little of the firing mass.
  DevicePlacement p;
  p.hot.resize(static_cast<size_t>(spec.n_layer));
  for (int il = 0; il < spec.n_layer; ++il) p.hot[il] = top_k(firing_counts(fx, toks, il), 64, true);
  const std::vector<float> host = run_session(fx.m, fx.sparse, nullptr, nullptr, toks);
  double share[2] = {0, 0};
  for (int mig = 0; mig < 2; ++mig) {
    auto built = DeviceModel::build(*fx.m, fx.sparse.get(), cpu_device(), p);
    ASSERT_TRUE(built.ok()) << built.message();
    std::shared_ptr<DeviceModel> dm(std::move(*built));
    DynamicOptions o;
    o.migrate = mig == 1;
    o.audit_every = 1;
    o.migrate_every = 8;
    o.half_life = 32;
    o.migration.max_swaps = 16;
    auto dyn = DynamicSparsity::create(*fx.m, fx.sparse.get(), dm.get(), o);
    ASSERT_TRUE(dyn.ok()) << dyn.message();
    std::shared_ptr<DynamicSparsity> d(std::move(*dyn));
    const std::vector<float> got = run_session(fx.m, fx.sparse, dm, d, toks);
    // Whatever moved, the output is host-only sparse inference's (up to float summation order,
    // which over 300 positions reaches ~1e-3 of the largest logit).
    EXPECT_LE(max_abs_diff(got, host), 5e-3f * (1.0f + max_abs(host))) << "migrate " << mig;
    const auto& tr = d->trace();
    ASSERT_GT(tr.size(), 200u);
    for (size_t i = tr.size() - 100; i < tr.size(); ++i) share[mig] += tr[i].device_mass / 100;
    if (mig == 1) {
      EXPECT_GT(d->totals().swaps, 64u);
      EXPECT_EQ(dm->n_hot_neurons(), 2 * 64) << "capacity unchanged";
    } else {
      EXPECT_EQ(d->totals().swaps, 0u);
    }
  }
  // The oracle: the 64 most-firing neurons' share of the firing mass is the best possible.
  std::printf("firing mass on the device, last 100 tokens: static %.3f, migrating %.3f\n",
              share[0], share[1]);
  EXPECT_LT(share[0], 0.10);
  EXPECT_GT(share[1], 3 * share[0] + 0.15);
}

TEST(DynamicPlacement, HybridAuditSeesTheHostOnlyDecisions) {
  const TinyModelSpec spec = spec_of(GgmlType::F32, "relu", 128);
  Fixture fx(spec);
  ASSERT_TRUE(fx.m && fx.sparse);
  const std::vector<int32_t> toks = stream(40, spec.n_vocab, 9);
  DynamicOptions o;
  o.audit_every = 1;
  o.half_life = 1e9;
  auto a = DynamicSparsity::create(*fx.m, fx.sparse.get(), nullptr, o);
  ASSERT_TRUE(a.ok());
  std::shared_ptr<DynamicSparsity> host_dyn(std::move(*a));
  run_session(fx.m, fx.sparse, nullptr, host_dyn, toks);
  DevicePlacement p;
  p.hot = even_neurons(spec.n_layer, spec.n_ff);
  auto built = DeviceModel::build(*fx.m, fx.sparse.get(), cpu_device(), p);
  ASSERT_TRUE(built.ok());
  std::shared_ptr<DeviceModel> dm(std::move(*built));
  auto b = DynamicSparsity::create(*fx.m, fx.sparse.get(), dm.get(), o);
  ASSERT_TRUE(b.ok());
  std::shared_ptr<DynamicSparsity> hyb(std::move(*b));
  run_session(fx.m, fx.sparse, dm, hyb, toks);
  EXPECT_EQ(hyb->totals().audited_tokens, host_dyn->totals().audited_tokens);
  EXPECT_NEAR(hyb->totals().sparsity(), host_dyn->totals().sparsity(), 0.002);
  EXPECT_NEAR(hyb->totals().recall(), 1.0, 1e-9) << "exact ReLU computes all its mass";
  // Firing counts per neuron agree (a neuron within rounding of 0 may differ in a few tokens).
  for (int il = 0; il < spec.n_layer; ++il) {
    std::vector<double> c1, c2;
    host_dyn->counters().counts(il, &c1);
    hyb->counters().counts(il, &c2);
    double diff = 0, sum = 0;
    for (size_t i = 0; i < c1.size(); ++i) diff += std::fabs(c1[i] - c2[i]), sum += c1[i];
    EXPECT_LT(diff, 0.01 * sum);
  }
  // Even neurons are on the device: the device share is the even neurons' share of the mass.
  EXPECT_GT(hyb->totals().device_mass_share(), 0.3);
  EXPECT_LT(hyb->totals().device_mass_share(), 0.7);
}

TEST(DynamicThresholds, PredictorThresholdIsSteeredToTheSparsityTarget) {
  // An exact predictor (logit_i = relu(gate_i)) of a ReLU model: at its threshold 0 about half
  // the neurons fire. The controller moves the predictor's logit threshold (linear domain) until
  // 80% are skipped; audits (every 2nd call) see the dense gate, so recall drops below 1.
  TinyModelSpec spec = spec_of(GgmlType::F32, "relu", 512);
  spec.n_ff = 256;
  std::vector<std::vector<uint8_t>> bufs;
  auto bytes = testing::model_with_predictor(spec, bufs);
  auto m = testing::load_tiny(bytes, /*repack=*/true);
  ASSERT_TRUE(m);
  SparseOptions so;
  so.use_predictor = true;
  so.max_union_share = 1.0;
  auto built = SparseFfn::build(*m, so);
  ASSERT_TRUE(built.ok()) << built.message();
  std::shared_ptr<const SparseFfn> sparse(std::move(*built));
  DynamicOptions o;
  o.control = true;
  o.controller.target = sparse::ControllerParams::Target::kSparsity;
  o.controller.target_value = 0.8;
  // Linear-domain steps are in logit units: the gain has to suit the logits' scale (here the
  // gate of this random layer times the rms of the residual the predictor reads: the final
  // thresholds are ~25 and ~100); docs/DYNAMIC.md.
  o.controller.gain = 4;
  o.controller.max_step = 4;
  o.audit_every = 2;
  auto dyn = DynamicSparsity::create(*m, sparse.get(), nullptr, o);
  ASSERT_TRUE(dyn.ok()) << dyn.message();
  std::shared_ptr<DynamicSparsity> d(std::move(*dyn));
  run_session(m, sparse, nullptr, d, stream(400, spec.n_vocab, 21));
  const auto& tr = d->trace();
  ASSERT_GT(tr.size(), 150u) << "one trace point per audited call";
  EXPECT_LT(tr.front().sparsity, 0.7) << "the predictor's own threshold fires about half";
  double sp = 0, rec = 0;
  for (size_t i = tr.size() - 50; i < tr.size(); ++i) sp += tr[i].sparsity / 50, rec += tr[i].recall / 50;
  EXPECT_NEAR(sp, 0.8, 0.04);
  EXPECT_LT(rec, 0.98);
  EXPECT_GT(rec, 0.3);
  for (float t : d->thresholds()) EXPECT_GT(t, 0.0f);
}

TEST(DynamicSparsity, CreateRefusesBadOptions) {
  const TinyModelSpec spec = spec_of(GgmlType::F32, "relu");
  Fixture fx(spec);
  ASSERT_TRUE(fx.m && fx.sparse);
  DynamicOptions o;
  o.migrate = true;  // no device
  auto r = DynamicSparsity::create(*fx.m, fx.sparse.get(), nullptr, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("needs hot neurons on a device"), std::string::npos);
  o.migrate = false;
  o.audit_every = 0;
  EXPECT_FALSE(DynamicSparsity::create(*fx.m, fx.sparse.get(), nullptr, o).ok());
}

}  // namespace
}  // namespace hc
