// The projection model (perfmodel/simulate.h): hand-computed dense offload, the byte accounting of
// the catalog shapes (GQA), the power-law fit against the statistic it was fitted to, the
// rescaling of measured statistics, the drift, and the invariants between modes: static ==
// dynamic without drift, dynamic >= static with drift and free migration, tok/s monotone in
// the budget and the host bandwidth, device bytes within the budget. MoE: the catalog shapes'
// bytes, the routing law and measured routing, hand-computed llama.cpp split and hot-experts
// times, the most routed experts on the device, and the same invariants.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include "perfmodel/simulate.h"

namespace hc::perfmodel {
namespace {

using sparse::LayerCosts;
using sparse::LayerPlacement;
using sparse::PlacementPlan;
using sparse::PlannerOptions;
using sparse::Prediction;
using sparse::empty_plan;

// Two layers, n_embd 64, n_ff 128, 4 heads of 16, vocab 256, F16 weights.
ModelShape toy_shape() { return {"toy", 2, 64, 128, 4, 4, 256, "test"}; }

HardwareSpec toy_hw() {
  HardwareSpec h;
  h.key = "toy";
  h.host_peak_gbps = 10;
  h.host_read_fraction = 1;
  h.dev_peak_gbps = 100;
  h.dev_eff = 1;
  h.link_gbps = 10;
  h.op_us = 2;
  h.sync_us = 7;
  h.dev_mem_bytes = 1 << 30;
  return h;
}

HostEfficiency half_eff() {
  HostEfficiency e;
  e.dense = 0.5;
  e.sparse_rel = {{0.1, 0.5}, {1.0, 0.8}};
  e.source = "test";
  return e;
}

// The toy shape in F16 on toy_hw / half_eff, every neuron of both layers firing with p.
SimInput toy_input(double p) {
  SimInput in;
  in.model = *model_bytes(toy_shape(), GgmlType::F16);
  in.hw = toy_hw();
  in.eff = half_eff();
  in.profile.assign(2, std::vector<double>(128, p));
  return in;
}

SimInput power_law_input(const std::string& shape, GgmlType t, const HardwareSpec& hw,
                         double firing = 0.1) {
  SimInput in;
  in.model = *model_bytes(*find_shape(shape), t);
  in.hw = hw;
  in.eff = builtin_host_efficiency(t);
  const PowerLaw pl = *fit_power_law(in.model.n_ff, firing, kReluLlamaCoverShare);
  in.profile.assign(static_cast<size_t>(in.model.n_layer()), power_law_probs(pl, in.model.n_ff));
  return in;
}

TEST(SimulateBytes, ToyShapeAsComputedByHand) {
  auto m = model_bytes(toy_shape(), GgmlType::F16);
  ASSERT_TRUE(m.ok()) << m.message();
  ASSERT_EQ(m->n_layer(), 2);
  // F16 row of 64 = 128 B; wq, wo 64 rows, wk, wv 64 rows (4 kv heads x 16); norm 256 B.
  EXPECT_EQ(m->layers[0].attn, 256u + 128u * 256u);
  // gate, up: 128 rows of 128 B; down: 64 rows of 128 F16 = 256 B; norm 256 B.
  EXPECT_EQ(m->layers[0].ffn_dense, 256u + 2u * 128u * 128u + 64u * 256u);
  EXPECT_EQ(m->layers[0].neuron(), 3u * 128u);  // F16 keeps F16 down_t
  EXPECT_EQ(m->kv_bytes_per_pos, 2u * 64u * 2u);
  EXPECT_EQ(m->output, 256u + 128u * 256u);
  EXPECT_EQ(m->type, "f16");
}

TEST(SimulateBytes, Llama70bUsesGqaKvBytes) {
  auto m70 = model_bytes(*find_shape("70b"), GgmlType::F16);
  auto m7 = model_bytes(*find_shape("llama2-7b"), GgmlType::F16);
  ASSERT_TRUE(m70.ok() && m7.ok());
  // 8 KV heads of 128: K and V of 1024 fp16 each per position, not 8192 as for MHA.
  EXPECT_EQ(m70->kv_bytes_per_pos, 2u * 8u * 128u * 2u);
  EXPECT_EQ(m7->kv_bytes_per_pos, 2u * 4096u * 2u);
  // wk and wv have 1024 rows: attention = norm + (2 * 8192 + 2 * 1024) rows of 16 KiB.
  EXPECT_EQ(m70->layers[0].attn, 8192u * 4 + (2u * 8192 + 2u * 1024) * 16384u);
  EXPECT_EQ(m70->n_layer(), 80);
  EXPECT_EQ(m70->n_ff, 28672);
  // Q4_0 7B: block types get a Q8_0 down_t (4352 B for 4096 weights), gate/up 2304 B.
  auto q = model_bytes(*find_shape("7b"), GgmlType::Q4_0);
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->layers[0].neuron(), 2304u + 2304u + 4352u);
  EXPECT_DOUBLE_EQ(bytes_per_weight(GgmlType::Q4_0), 18.0 / 32);
  EXPECT_DOUBLE_EQ(bytes_per_weight(GgmlType::Q8_0), 34.0 / 32);
}

TEST(SimulateBytes, ErrorsNameWhatWasExpected) {
  auto s = find_shape("llama9");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("llama2-7b"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("llama9"), std::string::npos) << s.message();
  auto h = find_hardware("tpu-v5");
  ASSERT_FALSE(h.ok());
  EXPECT_NE(h.message().find("rtx4090"), std::string::npos) << h.message();
  EXPECT_NE(h.message().find("h100-sxm"), std::string::npos) << h.message();
  // The lent GPU's entry under its short names, its overhead charged inside the budget.
  auto h100 = find_hardware("h100");
  ASSERT_TRUE(h100.ok()) << h100.message();
  EXPECT_EQ(h100->key, "h100-sxm");
  EXPECT_EQ(h100->dev_overhead_bytes, uint64_t{688} << 20);
  EXPECT_EQ(h100->default_budget(), uint64_t{80} << 30);
  ModelShape bad = toy_shape();
  bad.n_embd = 100;  // not a multiple of Q4_0's 32
  auto b = model_bytes(bad, GgmlType::Q4_0);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.message().find("100"), std::string::npos) << b.message();
}

TEST(SimulateDense, OffloadEqualsHandComputedTime) {
  SimInput in = toy_input(0.25);
  SimOptions opt;
  opt.n_ctx = 100;
  opt.n_gpu_layers = 1;
  opt.budget_bytes = 1 << 30;
  auto r = simulate(in, opt);
  ASSERT_TRUE(r.ok()) << r.message();
  // Per layer read: attn 33024 + FFN 49408 + half the KV (100 x 256 / 2 = 12800) = 95232 B.
  // Host 10 GB/s x 0.5 = 5 GB/s; device 100 GB/s; link 10 GB/s.
  const double host_layer = 95232 / 5e9, dev_layer = 95232 / 100e9;
  const double ops = (16 + 2) * 2e-6, sync = 7e-6, xfer = (64 * 4 + 64 * 4) / 10e9;
  const double output = 33024 / 5e9;
  const ModeResult* off = r->find("dense-offload");
  ASSERT_NE(off, nullptr);
  EXPECT_NEAR(off->s_per_token, host_layer + dev_layer + ops + sync + xfer + output, 1e-15);
  EXPECT_NEAR(off->s_per_token, 69.65472e-6, 1e-15);
  EXPECT_EQ(off->device_bytes, 33024u + 49408u + 25600u);
  EXPECT_EQ(off->layers_on_device, 1);
  EXPECT_FALSE(off->output_on_device);
  const ModeResult* dense = r->find("dense-cpu");
  ASSERT_NE(dense, nullptr);
  EXPECT_NEAR(dense->s_per_token, 2 * host_layer + output, 1e-15);
  EXPECT_EQ(dense->device_bytes, 0u);
  const double dense_s = dense->s_per_token;  // r is reassigned below: keep values, not pointers

  // -ngl 3 > 2 layers: the output goes too, the logits come back instead of x.
  opt.n_gpu_layers = 3;
  r = simulate(in, opt);
  ASSERT_TRUE(r.ok());
  off = r->find("dense-offload");
  const double all_dev = 2 * dev_layer + (2 * 16 + 2 + 2) * 2e-6 + sync +
                         (64 * 4 + 256 * 4) / 10e9 + 33024 / 100e9;
  EXPECT_NEAR(off->s_per_token, all_dev, 1e-15);
  EXPECT_TRUE(off->output_on_device);
  EXPECT_EQ(off->device_bytes, 2u * (33024u + 49408u + 25600u) + 33024u);

  // A paced CPU device: each of its 7 matrices per layer, the output matrix and the 2 copies
  // sleep, each sleep overshooting by paced_op_us.
  in.hw.paced_op_us = 3;
  r = simulate(in, opt);
  ASSERT_TRUE(r.ok());
  EXPECT_NEAR(r->find("dense-offload")->s_per_token, all_dev + (2 * 7 + 1 + 2) * 3e-6, 1e-15);
  EXPECT_EQ(r->find("dense-cpu")->s_per_token, dense_s);
}

TEST(SimulateDense, AsManyLayersAsFit) {
  SimInput in = toy_input(0.25);
  SimOptions opt;
  opt.n_ctx = 100;
  const uint64_t layer = 33024 + 49408 + 25600;
  for (auto [budget, layers, out] : {std::tuple{layer - 1, 0, false}, std::tuple{layer, 1, false},
                                     std::tuple{2 * layer, 2, false},
                                     std::tuple{2 * layer + 33024, 2, true}}) {
    opt.budget_bytes = budget;
    int n = -1;
    bool o = true;
    dense_layers_that_fit(in, opt, &n, &o);
    EXPECT_EQ(n, layers) << budget;
    EXPECT_EQ(o, out) << budget;
  }
}

TEST(SimulateFiring, PowerLawFitReproducesItsTargets) {
  for (auto [n, firing] : {std::pair<int64_t, double>{11008, 0.10}, {28672, 0.18}, {13824, 0.30}}) {
    SCOPED_TRACE(n);
    auto pl = fit_power_law(n, firing, kReluLlamaCoverShare);
    ASSERT_TRUE(pl.ok()) << pl.message();
    EXPECT_GT(pl->a, 0);
    const std::vector<double> p = power_law_probs(*pl, n);
    ASSERT_EQ(static_cast<int64_t>(p.size()), n);
    EXPECT_TRUE(std::is_sorted(p.rbegin(), p.rend()));
    EXPECT_LE(*std::max_element(p.begin(), p.end()), 1.0);
    EXPECT_NEAR(mean_firing(p), firing, 0.01 * firing);
    EXPECT_NEAR(neurons_covering(p, 0.8), kReluLlamaCoverShare, 0.01 * kReluLlamaCoverShare);
  }
  // A weaker skew (PowerInfer's OPT-30B MLP block: 26%) is a steeper law.
  auto steep = fit_power_law(11008, 0.1, 0.26);
  ASSERT_TRUE(steep.ok());
  EXPECT_GT(steep->a, fit_power_law(11008, 0.1, 0.43)->a);
  EXPECT_NEAR(neurons_covering(power_law_probs(*steep, 11008), 0.8), 0.26, 0.0026);
}

TEST(SimulateFiring, PowerLawRejectsUnreachableTargets) {
  // At 10% firing even a step function needs 8% of the neurons for 80% of the firings.
  auto r = fit_power_law(11008, 0.1, 0.05);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("5%"), std::string::npos) << r.message();
  EXPECT_FALSE(fit_power_law(11008, 1.5, 0.43).ok());
  EXPECT_FALSE(fit_power_law(0, 0.1, 0.43).ok());
  // Uniform already covers: 80% of the neurons carry 80%.
  auto u = fit_power_law(1000, 0.2, 0.9);
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->a, 0);
}

TEST(SimulateFiring, RescalePreservesTheCoverageCurve) {
  // Four source layers of 1000 neurons, each its own power law, shuffled over the neurons.
  std::vector<std::vector<double>> src;
  std::mt19937 rng(3);
  for (double cover : {0.2, 0.3, 0.43, 0.6}) {
    std::vector<double> p = power_law_probs(*fit_power_law(1000, 0.12, cover), 1000);
    std::shuffle(p.begin(), p.end(), rng);
    src.push_back(p);
  }
  auto dst = rescale_firing(src, 8, 11008);
  ASSERT_TRUE(dst.ok()) << dst.message();
  ASSERT_EQ(dst->size(), 8u);
  for (int l = 0; l < 8; ++l) {
    const auto& d = (*dst)[static_cast<size_t>(l)];
    const auto& s = src[static_cast<size_t>(l / 2)];  // target layer l samples source l / 2
    ASSERT_EQ(d.size(), 11008u);
    for (double mass : {0.5, 0.8, 0.9, 0.99})
      EXPECT_NEAR(neurons_covering(d, mass), neurons_covering(s, mass), 2e-3)
          << "layer " << l << " mass " << mass;
    EXPECT_NEAR(mean_firing(d), mean_firing(s), 0.01 * mean_firing(s));
  }
  // Same shape: returned as is (neuron identities kept for plan files).
  auto same = rescale_firing(src, 4, 1000);
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(*same, src);
  EXPECT_FALSE(rescale_firing({{0.1, 0.2}, {0.3}}, 2, 10).ok());
}

TEST(SimulateFiring, DriftPermutesRanksOnly) {
  std::vector<std::vector<double>> p(3, power_law_probs(*fit_power_law(2000, 0.1, 0.43), 2000));
  EXPECT_EQ(drift_firing(p, 0, 1), p);
  EXPECT_DOUBLE_EQ(top_overlap(p, p, 0.2), 1.0);
  const auto d = drift_firing(p, 0.3, 1);
  for (size_t l = 0; l < p.size(); ++l) {
    std::vector<double> a = p[l], b = d[l];
    std::sort(a.begin(), a.end());
    std::sort(b.begin(), b.end());
    EXPECT_EQ(a, b);  // same multiset: sparsity and coverage unchanged
    size_t moved = 0;
    for (size_t i = 0; i < p[l].size(); ++i) moved += p[l][i] != d[l][i];
    EXPECT_GT(moved, 500u);  // ~30% of 2000 neurons, nearly all with distinct p
    EXPECT_LE(moved, 600u);
  }
  const double ov = top_overlap(p, d, 0.2);
  EXPECT_LT(ov, 0.85);
  EXPECT_GT(ov, 0.6);
  EXPECT_EQ(drift_firing(p, 0.3, 1), d);  // deterministic
  EXPECT_NE(drift_firing(p, 0.3, 2), d);
}

TEST(SimulateModes, StaticEqualsDynamicWithoutDrift) {
  const SimInput in = power_law_input("llama2-7b", GgmlType::Q4_0, *find_hardware("rtx4090"));
  SimOptions opt;
  opt.budget_bytes = uint64_t{3} << 30;  // attention and part of the FFN neurons
  opt.n_ctx = 512;
  opt.drift = 0;
  auto r = simulate(in, opt);
  ASSERT_TRUE(r.ok()) << r.message();
  const ModeResult* st = r->find("static");
  const ModeResult* dy = r->find("dynamic");
  ASSERT_TRUE(st && dy);
  EXPECT_GT(st->hot_neurons, 0);
  EXPECT_EQ(st->s_per_token, dy->s_per_token);
  EXPECT_EQ(st->device_bytes, dy->device_bytes);
  EXPECT_EQ(dy->migration_s, 0.0);
  EXPECT_DOUBLE_EQ(r->top20_overlap, 1.0);
}

TEST(SimulateModes, DynamicAtLeastStaticWithDriftAndFreeMigration) {
  const SimInput in = power_law_input("llama2-7b", GgmlType::Q4_0, *find_hardware("rtx4090"));
  SimOptions opt;
  opt.budget_bytes = uint64_t{3} << 30;
  opt.n_ctx = 512;
  opt.drift = 0.3;
  opt.drift_period_tokens = std::numeric_limits<double>::infinity();  // migration free
  auto r = simulate(in, opt);
  ASSERT_TRUE(r.ok()) << r.message();
  const double st = r->find("static")->tok_s, dy = r->find("dynamic")->tok_s;
  EXPECT_GE(dy, st);
  EXPECT_GT(dy, st * 1.01) << "a 30% drift should cost the static plan something";
  EXPECT_EQ(r->find("dynamic")->migration_s, 0.0);
  EXPECT_GT(r->find("dynamic")->device_mass, r->find("static")->device_mass);
  // Drift never changes the modes that do not depend on which neurons are hot.
  opt.drift = 0;
  auto r0 = simulate(in, opt);
  ASSERT_TRUE(r0.ok());
  EXPECT_NEAR(r0->find("sparse-cpu")->s_per_token, r->find("sparse-cpu")->s_per_token,
              1e-12 * r->find("sparse-cpu")->s_per_token);  // summed in another order
  EXPECT_GT(r0->find("static")->tok_s, st);
  // A finite drift period charges the migration over the link.
  opt.drift = 0.3;
  opt.drift_period_tokens = 16;
  auto rm = simulate(in, opt);
  ASSERT_TRUE(rm.ok());
  const ModeResult* dm = rm->find("dynamic");
  EXPECT_GT(dm->migration_bytes_per_token, 0);
  EXPECT_NEAR(dm->migration_s, dm->migration_bytes_per_token / (25 * 1e9), 1e-15);
  EXPECT_NEAR(dm->s_per_token, 1 / dy + dm->migration_s, 1e-12);
}

TEST(SimulateModes, MonotoneInBudgetAndBytesWithinIt) {
  const SimInput in = power_law_input("llama2-7b", GgmlType::Q4_0, *find_hardware("rtx4090"));
  SimOptions opt;
  opt.drift = 0;
  std::vector<double> last(5, 0);
  for (double gib : {0.0, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 23.0}) {
    SCOPED_TRACE(gib);
    opt.budget_bytes = static_cast<uint64_t>(gib * 1073741824.0);
    auto r = simulate(in, opt);
    ASSERT_TRUE(r.ok()) << r.message();
    ASSERT_EQ(r->modes.size(), 5u);
    for (size_t i = 0; i < r->modes.size(); ++i) {
      const ModeResult& m = r->modes[i];
      EXPECT_LE(m.device_bytes, opt.budget_bytes) << m.mode;
      EXPECT_GE(m.tok_s, last[i] * (1 - 1e-9)) << m.mode;
      last[i] = m.tok_s;
    }
  }
  // Everything fits in 23 GiB: dense offload holds every layer and the output.
  opt.budget_bytes = uint64_t{23} << 30;
  auto full = simulate(in, opt);
  ASSERT_TRUE(full.ok());
  EXPECT_EQ(full->find("dense-offload")->layers_on_device, 32);
  EXPECT_TRUE(full->find("dense-offload")->output_on_device);
  // Hot/cold balances the two halves: the rarest neurons stay on the host.
  EXPECT_GT(full->find("static")->device_mass, 0.9);
}

TEST(SimulateModes, MonotoneInHostBandwidth) {
  HardwareSpec hw = *find_hardware("rtx4090");
  SimOptions opt;
  opt.budget_bytes = uint64_t{3} << 30;
  opt.drift = 0.1;
  std::vector<double> last(5, 0);
  for (double gbps : {20.0, 40.0, 67.2, 120.0, 200.0}) {
    SCOPED_TRACE(gbps);
    hw.host_peak_gbps = gbps;
    const SimInput in = power_law_input("llama2-13b", GgmlType::Q4_0, hw);
    auto r = simulate(in, opt);
    ASSERT_TRUE(r.ok()) << r.message();
    for (size_t i = 0; i < r->modes.size(); ++i) {
      EXPECT_GT(r->modes[i].tok_s, last[i]) << r->modes[i].mode;
      last[i] = r->modes[i].tok_s;
    }
  }
}

TEST(SimulateModes, SeventyBShapeRunsQuicklyAndHotColdBeatsLayerOffload) {
  const SimInput in = power_law_input("70b", GgmlType::Q4_0, *find_hardware("rtx4090"), 0.18);
  SimOptions opt;
  opt.budget_bytes = in.hw.default_budget();
  auto r = simulate(in, opt);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(opt.budget_bytes, 23ull << 30);
  const ModeResult* off = r->find("dense-offload");
  EXPECT_GT(off->layers_on_device, 0);
  EXPECT_LT(off->layers_on_device, 80);
  EXPECT_GT(r->find("static")->tok_s, off->tok_s);
  EXPECT_GT(r->find("sparse-cpu")->tok_s, r->find("dense-cpu")->tok_s);
  for (const ModeResult& m : r->modes) EXPECT_LE(m.device_bytes, opt.budget_bytes) << m.mode;
}

// The toy model with its first 16 neurons of layer 0 firing 90% of the time, and a plan placing
// exactly those.
SimInput sixteen_hot_input() {
  SimInput in = toy_input(0.0);
  for (int i = 0; i < 16; ++i) in.profile[0][static_cast<size_t>(i)] = 0.9;
  return in;
}
PlacementPlan sixteen_hot_plan() {
  PlacementPlan plan = empty_plan(2, 128);
  for (int i = 0; i < 16; ++i) plan.layers[0].hot.push_back(i);
  return plan;
}

TEST(SimulateModes, GivenPlanIsEvaluatedAsIs) {
  SimInput in = sixteen_hot_input();
  PlacementPlan plan = sixteen_hot_plan();
  SimOptions opt;
  opt.budget_bytes = 1 << 30;
  opt.plan = &plan;
  auto r = simulate(in, opt);
  ASSERT_TRUE(r.ok()) << r.message();
  const ModeResult* st = r->find("static");
  EXPECT_EQ(st->hot_neurons, 16);
  EXPECT_EQ(st->solver, "file");
  EXPECT_FALSE(st->output_on_device);
  EXPECT_NEAR(st->device_mass, 1.0, 1e-12);  // every firing is in layer 0's 16 neurons
  PlacementPlan wrong = empty_plan(3, 128);
  opt.plan = &wrong;
  EXPECT_FALSE(simulate(in, opt).ok());
}

// hybrid_layer_us: a given plan with hot neurons in one layer pays it once per token; a plan
// with none does not.
TEST(SimulateModes, SplitLayerCostIsChargedPerSplitLayer) {
  SimInput in = sixteen_hot_input();
  PlacementPlan plan = sixteen_hot_plan();
  SimOptions opt;
  opt.budget_bytes = 1 << 30;
  opt.plan = &plan;
  auto base = simulate(in, opt);
  ASSERT_TRUE(base.ok()) << base.message();
  in.hw.hybrid_layer_us = 250;
  auto with = simulate(in, opt);
  ASSERT_TRUE(with.ok()) << with.message();
  EXPECT_NEAR(with->find("static")->s_per_token - base->find("static")->s_per_token, 250e-6, 1e-12);
  // The modes without split layers are unchanged.
  for (const char* m : {"dense-cpu", "sparse-cpu", "dense-offload"})
    EXPECT_EQ(with->find(m)->s_per_token, base->find(m)->s_per_token) << m;
  // A layer holding every neuron is not split: no charge.
  PlacementPlan whole = empty_plan(2, 128);
  for (int i = 0; i < 128; ++i) whole.layers[0].hot.push_back(i);
  opt.plan = &whole;
  auto whole_with = simulate(in, opt);
  in.hw.hybrid_layer_us = 0;
  auto whole_without = simulate(in, opt);
  ASSERT_TRUE(whole_with.ok() && whole_without.ok());
  EXPECT_EQ(whole_with->find("static")->s_per_token, whole_without->find("static")->s_per_token);
  in.hw.hybrid_layer_us = -1;
  EXPECT_FALSE(simulate(in, opt).ok());
}

TEST(SimulateModes, SparseHostEqualsHandComputedTime) {
  SimInput in = toy_input(0.25);
  SimOptions opt;
  opt.n_ctx = 100;
  opt.budget_bytes = 1 << 30;
  auto r = simulate(in, opt);
  ASSERT_TRUE(r.ok()) << r.message();
  // Host 5 GB/s. Sparse rows at 25% firing: 0.5 + 0.3 * (0.25 - 0.1) / 0.9 = 0.55 of dense, so
  // a firing neuron's up + down_t rows (256 B) cost round(256 / 0.55) = 465 dense-equivalent
  // bytes; the gate runs dense (128 rows of 128 B). Per layer: attention 33024 + KV 12800, FFN
  // 128 x 0.25 x 465 + 16384 = 31264; plus the output 33024.
  const double bytes = 2 * (33024 + 12800 + 31264) + 33024;
  EXPECT_NEAR(r->find("sparse-cpu")->s_per_token, bytes / 5e9, 1e-15);

  // 60% firing passes the union limit (0.5): the executor's dense fallback reads every up and
  // down_t row at the in-order row rate (0.8): 128 x 256 / 0.8 = 40960, plus the dense gate.
  in.profile.assign(2, std::vector<double>(128, 0.6));
  r = simulate(in, opt);
  ASSERT_TRUE(r.ok());
  const double fallback = 2 * (33024 + 12800 + 40960 + 16384) + 33024;
  EXPECT_NEAR(r->find("sparse-cpu")->s_per_token, fallback / 5e9, 1e-15);
  // No fallback under a 0.7 limit: rows at 60% firing at 0.5 + 0.3 * 0.5 / 0.9 = 2/3 of dense,
  // so 128 x 0.6 x round(256 x 1.5 = 384).
  opt.max_union_share = 0.7;
  r = simulate(in, opt);
  ASSERT_TRUE(r.ok());
  EXPECT_NEAR(r->find("sparse-cpu")->s_per_token,
              (2 * (33024 + 12800 + 128 * 0.6 * 384 + 16384) + 33024) / 5e9, 1e-15);
}

TEST(SimulateModes, CpuDeviceSharingCoresAddsTheHalves) {
  SimInput in = toy_input(0.1);
  for (int i = 0; i < 32; ++i) in.profile[0][static_cast<size_t>(i)] = 0.9;
  PlacementPlan plan = empty_plan(2, 128);
  for (int i = 0; i < 32; ++i) plan.layers[0].hot.push_back(i);
  SimOptions opt;
  opt.budget_bytes = 1 << 30;
  opt.plan = &plan;
  auto overlapped = simulate(in, opt);
  in.hw.overlap = false;
  auto serial = simulate(in, opt);
  ASSERT_TRUE(overlapped.ok() && serial.ok());
  auto pin = hybrid_plan_input(in, in.profile, opt);
  ASSERT_TRUE(pin.ok()) << pin.message();
  const Prediction pr = *predict_plan(*pin, plan);
  const double smaller = std::min(pr.layers[0].ffn_device_s, pr.layers[0].ffn_host_s);
  EXPECT_GT(smaller, 0);
  EXPECT_NEAR(serial->find("static")->s_per_token - overlapped->find("static")->s_per_token,
              smaller, 1e-15);
  // Modes without device work are untouched.
  EXPECT_EQ(serial->find("sparse-cpu")->s_per_token, overlapped->find("sparse-cpu")->s_per_token);
}

TEST(SimulateInput, ValidationNamesTheProblem) {
  SimInput in = toy_input(0.1);
  in.profile.assign(2, std::vector<double>(100, 0.1));
  auto r = simulate(in, SimOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("100"), std::string::npos) << r.message();
  in.profile.assign(2, std::vector<double>(128, 0.1));
  in.hw.dev_eff = 1.5;
  r = simulate(in, SimOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("1.5"), std::string::npos) << r.message();
  in.hw.dev_eff = 1;
  SimOptions opt;
  opt.drift = 2;
  r = simulate(in, opt);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("drift"), std::string::npos) << r.message();
}

// The bounds are the efficiency's own: a calibration raises them from what it measured (a model
// in cache decodes faster than the DRAM probe), the defaults hold typed-in figures.
TEST(SimulateEfficiency, BoundsComeWithTheFigures) {
  HostEfficiency e = builtin_host_efficiency(GgmlType::Q4_0);
  e.dense = 2.02;  // stories260K on a fast host, against the DRAM probe
  Status st = e.validate();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("in (0, 2], found 2.02"), std::string::npos) << st.message();
  e.dense_max = 1.25 * 3.1;  // that run's read of a buffer the model's size: 3.1x the DRAM probe
  EXPECT_TRUE(e.validate().ok()) << e.validate().message();
  e.dense = 4.0;
  EXPECT_FALSE(e.validate().ok());
  e.dense = 0.85;
  e.rel_max = 0.5;  // below the table's ratios
  st = e.validate();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("(0, 0.5]"), std::string::npos) << st.message();
  e.rel_max = 4;
  e.gate_rows_rel = 4.5;
  EXPECT_FALSE(e.validate().ok());
  e.gate_rows_rel = 0;
  e.dense_max = 0;
  EXPECT_FALSE(e.validate().ok());
}

TEST(SimulateEfficiency, BuiltInTableFromTheBenchmarks) {
  const HostEfficiency q4 = builtin_host_efficiency(GgmlType::Q4_0);
  EXPECT_DOUBLE_EQ(q4.dense, 0.851);
  // Q4_0 at 90% sparsity: 1100.8 neurons x 8960 B in 692 us = 14.25 GB/s; dense 76.09 MB in
  // 3080 us = 24.70 GB/s.
  EXPECT_NEAR(q4.sparse_at(0.1), 14.254 / 24.705, 1e-3);
  EXPECT_TRUE(q4.validate().ok());
  // Interpolation between the 10% and 20% points, clamped outside.
  EXPECT_NEAR(q4.sparse_at(0.15), 0.5 * (q4.sparse_at(0.1) + q4.sparse_at(0.2)), 1e-12);
  // All rows in order (a hybrid layer's cold gate): 18.5 / 27.5 GB/s, clamped past it.
  EXPECT_DOUBLE_EQ(q4.sparse_at(1.0), 18.5 / 27.5);
  EXPECT_DOUBLE_EQ(q4.sparse_at(2.0), q4.sparse_at(1.0));
  EXPECT_DOUBLE_EQ(q4.sparse_at(0.01), q4.sparse_at(0.05));
  EXPECT_NE(builtin_host_efficiency(GgmlType::Q6_K).source.find("Q8_0"), std::string::npos);
}

// ---- MoE ----------------------------------------------------------------------------------

// Two layers, n_embd 64, 4 experts of width 32 (2 routed per token), 4 heads of 16, vocab 256,
// F16 weights.
ModelShape toy_moe_shape() {
  ModelShape s{"toy-moe", 2, 64, 32, 4, 4, 256, "test"};
  s.n_expert = 4;
  s.n_expert_used = 2;
  return s;
}

// The toy MoE on toy_hw / half_eff with cheap device operations (the toy's experts are tiny) and
// routing {0.9, 0.6, 0.3, 0.2} in both layers (sums to 2).
SimInput toy_moe_input() {
  SimInput in;
  in.model = *model_bytes(toy_moe_shape(), GgmlType::F16);
  in.hw = toy_hw();
  in.hw.op_us = 0;
  in.hw.sync_us = 0.1;
  in.eff = half_eff();
  in.profile.assign(2, {0.9, 0.6, 0.3, 0.2});
  return in;
}

SimInput catalog_moe_input(const std::string& shape, GgmlType t, double skew) {
  SimInput in;
  const ModelShape s = *find_shape(shape);
  in.model = *model_bytes(s, t);
  in.hw = *find_hardware("rtx4090");
  in.eff = builtin_host_efficiency(t);
  in.profile.assign(static_cast<size_t>(s.n_layer),
                    *expert_routing_probs(s.n_expert, s.n_expert_used, skew));
  in.expert_firing = 1 - s.expert_sparsity;
  return in;
}

TEST(SimulateMoe, ToyBytesAsComputedByHand) {
  auto m = model_bytes(toy_moe_shape(), GgmlType::F16);
  ASSERT_TRUE(m.ok()) << m.message();
  EXPECT_TRUE(m->moe());
  EXPECT_EQ(m->n_units(), 4);
  const LayerBytes& b = m->layers[0];
  EXPECT_EQ(b.attn, 33024u);  // as the dense toy: norm + wq, wk, wv, wo of 64 x 64
  // One expert: gate and up 32 rows of 128 B, down 64 rows of 32 F16 (64 B).
  EXPECT_EQ(b.expert, 2u * 32 * 128 + 64u * 64);
  EXPECT_EQ(b.router, 4u * 64 * 4);  // F32 [4, 64]
  EXPECT_EQ(b.ffn_dense, 256u + 1024u + 4u * 12288);
  EXPECT_EQ(m->ffn_read(0), 256u + 1024u + 2u * 12288);
  EXPECT_EQ(b.expert_predictor, 0u);
}

TEST(SimulateMoe, CatalogShapesFromTheirConfigs) {
  // Qwen3-30B-A3B: 32 q heads of 128 on n_embd 2048, so wq is [4096, 2048] and wo [2048, 4096].
  auto q = model_bytes(*find_shape("qwen3-30b-a3b"), GgmlType::Q4_0);
  ASSERT_TRUE(q.ok()) << q.message();
  EXPECT_EQ(q->n_layer(), 48);
  EXPECT_EQ(q->n_expert, 128);
  EXPECT_EQ(q->n_expert_used, 8);
  EXPECT_EQ(q->kv_bytes_per_pos, 2u * 4 * 128 * 2);
  // norm 8192 + (4096 + 2 x 512) rows of 1152 B + 2048 rows of 2304 B + q/k norms 2 x 128 x 4.
  EXPECT_EQ(q->layers[0].attn, 8192u + 5120u * 1152 + 2048u * 2304 + 1024u);
  EXPECT_EQ(q->layers[0].expert, 2u * 768 * 1152 + 2048u * 432);  // 768 Q4_0 = 24 blocks
  EXPECT_EQ(q->layers[0].router, 128u * 2048 * 4);
  // Mixtral: 8 experts of 14336, top 2; TurboSparse: the same with a 57024 vocabulary and F16
  // rank-1024 predictors (fc1 [1024, 4096], fc2 [14336, 1024]).
  auto mx = model_bytes(*find_shape("mixtral"), GgmlType::Q4_0);
  auto ts = model_bytes(*find_shape("turbosparse"), GgmlType::Q4_0);
  ASSERT_TRUE(mx.ok() && ts.ok());
  EXPECT_EQ(mx->layers[0].expert, 99090432u);  // 2 x 14336 x 2304 + 4096 x 8064
  EXPECT_EQ(ts->layers[0].expert, mx->layers[0].expert);
  EXPECT_EQ(mx->layers[0].expert_predictor, 0u);
  EXPECT_EQ(ts->layers[0].expert_predictor, 1024u * 8192 + 14336u * 2048);
  EXPECT_EQ(ts->n_vocab, 57024);
  EXPECT_DOUBLE_EQ(find_shape("turbosparse-mixtral")->expert_sparsity, 0.85);
  // The dense shapes are unchanged by the head-size field: q_dim = n_embd.
  EXPECT_EQ(find_shape("7b")->head_dim(), 128);
}

TEST(SimulateMoe, RoutingPowerLawSumsToTheExpertsUsed) {
  for (auto [n, k] : {std::pair{8, 2}, std::pair{128, 8}}) {
    for (double skew : {0.0, 0.3, 0.5, 1.0, 3.0}) {
      SCOPED_TRACE(std::to_string(n) + " experts, skew " + std::to_string(skew));
      auto p = expert_routing_probs(n, k, skew);
      ASSERT_TRUE(p.ok()) << p.message();
      ASSERT_EQ(p->size(), static_cast<size_t>(n));
      EXPECT_NEAR(std::accumulate(p->begin(), p->end(), 0.0), k, 1e-9);
      EXPECT_TRUE(std::is_sorted(p->rbegin(), p->rend()));
      EXPECT_LE(p->front(), 1.0);
      if (skew == 0) {
        EXPECT_DOUBLE_EQ(p->front(), p->back());
      }
    }
  }
  // Steeper is more skewed: fewer experts carry 80% of the routings.
  EXPECT_LT(neurons_covering(*expert_routing_probs(128, 8, 1.0), 0.8),
            neurons_covering(*expert_routing_probs(128, 8, 0.3), 0.8));
  EXPECT_FALSE(expert_routing_probs(8, 8, 0.3).ok());
  EXPECT_FALSE(expert_routing_probs(8, 2, -1).ok());
}

TEST(SimulateMoe, MeasuredRoutingIsResampledToTheShape) {
  // Two layers of 4 experts, 2 routed per token, over 100 tokens.
  const std::vector<std::vector<double>> counts = {{100, 60, 30, 10}, {50, 50, 50, 50}};
  auto same = routing_from_counts(counts, 100, 2, 4, 2);
  ASSERT_TRUE(same.ok()) << same.message();
  EXPECT_EQ((*same)[0], (std::vector<double>{1.0, 0.6, 0.3, 0.1}));
  // To 4 layers of 8 experts, top 2: every layer sums to 2, none above 1, the curve's order kept.
  auto to8 = routing_from_counts(counts, 100, 4, 8, 2);
  ASSERT_TRUE(to8.ok()) << to8.message();
  ASSERT_EQ(to8->size(), 4u);
  for (const std::vector<double>& p : *to8) {
    ASSERT_EQ(p.size(), 8u);
    EXPECT_NEAR(std::accumulate(p.begin(), p.end(), 0.0), 2.0, 1e-9);
    EXPECT_LE(*std::max_element(p.begin(), p.end()), 1.0);
    EXPECT_TRUE(std::is_sorted(p.rbegin(), p.rend()));
  }
  EXPECT_DOUBLE_EQ((*to8)[3][0], (*to8)[3][7]);  // from the uniform source layer
  EXPECT_FALSE(routing_from_counts({{101, 1}}, 100, 2, 4, 2).ok());
  EXPECT_FALSE(routing_from_counts({{0, 0}}, 100, 2, 4, 2).ok());
  EXPECT_FALSE(routing_from_counts({}, 100, 2, 4, 2).ok());
}

TEST(SimulateMoe, LlamaCppSplitEqualsHandComputedTime) {
  SimInput in = toy_moe_input();
  SimOptions opt;
  opt.n_ctx = 100;
  // Per layer on the device: attention 33024 + KV 25600 + norm 256 + router 1024 = 59904; the
  // output 33024; one layer's experts 4 x 12288 = 49152.
  const uint64_t rest = 59904, output = 33024, experts = 49152;
  for (auto [budget, n_cpu_moe] :
       {std::pair{2 * rest + output, 2}, std::pair{2 * rest + output + experts - 1, 2},
        std::pair{2 * rest + output + experts, 1}, std::pair{2 * rest + output + 2 * experts, 0}}) {
    opt.budget_bytes = budget;
    const CpuMoeSplit sp = cpu_moe_split_that_fits(in, opt);
    EXPECT_EQ(sp.n_cpu_moe, n_cpu_moe) << budget;
    EXPECT_EQ(sp.n_gpu_layers, 2);
    EXPECT_TRUE(sp.output);
  }
  opt.budget_bytes = 2 * rest + output + experts;
  auto r = simulate(in, opt);
  ASSERT_TRUE(r.ok()) << r.message();
  const ModeResult* cm = r->find("llamacpp-cpu-moe");
  ASSERT_NE(cm, nullptr);
  // Each layer reads attention 33024 + norm and router 1280 + half the KV 12800 = 47104 B on the
  // device (100 GB/s) and 2 experts (24576 B): layer 0's on the host (5 GB/s), layer 1's on the
  // device. Ops cost nothing here; 2 syncs of 0.1 us (the token, layer 0's round trip); the link
  // (10 GB/s) carries x in, x out and back for layer 0, and the logits (256 x 4) back.
  const double t = 2 * 47104 / 100e9 + 24576 / 5e9 + 24576 / 100e9 + 2 * 0.1e-6 +
                   (64 * 4 * 3 + 256 * 4) / 10e9 + 33024 / 100e9;
  EXPECT_NEAR(cm->s_per_token, t, 1e-15);
  EXPECT_EQ(cm->n_cpu_moe, 1);
  EXPECT_EQ(cm->device_bytes, 2 * rest + output + experts);
  EXPECT_EQ(cm->layers_on_device, 1);
  // Operation costs: layer 0 queues attention 10 + router 5 + 2 copies + the add, layer 1 10 +
  // 5 + experts 4 + 2, the token 2 copies + the output's 2.
  in.hw.op_us = 2;
  r = simulate(in, opt);
  ASSERT_TRUE(r.ok());
  EXPECT_NEAR(r->find("llamacpp-cpu-moe")->s_per_token, t + (18 + 21 + 4) * 2e-6, 1e-15);
  // Dense-cpu: everything on the host, 2 experts a layer.
  EXPECT_NEAR(r->find("dense-cpu")->s_per_token, (2 * (47104 + 24576) + 33024) / 5e9, 1e-15);
  EXPECT_EQ(r->find("sparse-cpu"), nullptr);  // dense experts: the same as dense-cpu
}

TEST(SimulateMoe, PlannerPutsTheMostRoutedExpertsOnTheDevice) {
  SimInput in = toy_moe_input();
  SimOptions opt;
  opt.n_ctx = 100;
  opt.output_on_device = false;
  opt.budget_bytes = 4 * 12288;  // four experts
  auto r = simulate(in, opt);
  ASSERT_TRUE(r.ok()) << r.message();
  const ModeResult* he = r->find("hot-experts");
  ASSERT_NE(he, nullptr);
  EXPECT_EQ(he->hot_neurons, 4);
  EXPECT_EQ(he->layers_on_device, 2);
  EXPECT_EQ(he->attn_on_device, 0);  // attention and its KV (58624 B) do not fit
  EXPECT_EQ(he->device_bytes, 4u * 12288);
  EXPECT_NEAR(he->device_mass, 1.5 / 2, 1e-12);  // experts 0 and 1 of each layer: 0.9 + 0.6
  // Per layer: attention and half the KV on the host, 45824 B at 5 GB/s. The FFN's host half:
  // norm and router (1280 B) and the cold experts' 0.5 routings x 12288 B at 5 GB/s; its device
  // half 1.5 x 12288 B at 100 GB/s. The host half is the longer, so the router's lead costs
  // nothing; a round trip of 0.1 us + 512 B over the link. Output on the host.
  const double ffn = (1280 + 0.5 * 12288) / 5e9 + 0.1e-6 + 2 * 64 * 4 / 10e9;
  EXPECT_NEAR(he->s_per_token, 2 * (45824 / 5e9 + ffn) + 33024 / 5e9, 1e-15);
  // The plan behind it: experts 0 and 1 in both layers.
  auto pin = moe_plan_input(in, in.profile, opt);
  ASSERT_TRUE(pin.ok()) << pin.message();
  PlannerOptions po;
  po.budget_bytes = opt.budget_bytes;
  po.granule = 1;
  po.log_progress = false;
  auto plan = plan_greedy(*pin, po);
  ASSERT_TRUE(plan.ok()) << plan.message();
  for (const LayerPlacement& lp : plan->plan.layers)
    EXPECT_EQ(lp.hot, (std::vector<int32_t>{0, 1}));
}

TEST(SimulateMoe, RouterPrecedesTheDeviceHalf) {
  // A slow device: the device half is the longer, and the router (read on the host before the
  // experts are dispatched) adds to it rather than hiding under it.
  SimInput in = toy_moe_input();
  in.hw.dev_peak_gbps = 6;
  PlacementPlan plan = empty_plan(2, 4);
  plan.layers[0].hot = {0, 1, 2, 3};
  SimOptions opt;
  opt.n_ctx = 100;
  opt.budget_bytes = 1 << 30;
  opt.plan = &plan;
  auto r = simulate(in, opt);
  ASSERT_TRUE(r.ok()) << r.message();
  const double dev = 2 * 12288 / 6e9, router = 1280 / 5e9, trip = 0.1e-6 + 512 / 10e9;
  const double layer1 = (1280 + 2 * 12288) / 5e9;
  EXPECT_NEAR(r->find("hot-experts")->s_per_token,
              2 * 45824 / 5e9 + router + dev + trip + layer1 + 33024 / 5e9, 1e-15);
  EXPECT_EQ(r->find("hot-experts")->solver, "file");
}

TEST(SimulateMoe, SparseExpertsReadTheirFiringRows) {
  ModelShape s = toy_moe_shape();
  s.expert_predictor_rank = 16;
  SimInput in = toy_moe_input();
  in.model = *model_bytes(s, GgmlType::F16);
  in.expert_firing = 0.25;
  SimOptions opt;
  opt.n_ctx = 100;
  auto pin = moe_plan_input(in, in.profile, opt);
  ASSERT_TRUE(pin.ok()) << pin.message();
  const LayerCosts& c = pin->layers[0];
  // Predictor: fc1 16 rows of 64 F16 + fc2 32 rows of 16 F16 = 2048 + 1024. Rows: 32 neurons x
  // (gate + up + down_t) 384 B = 12288. Host rows at rel(0.25) = 0.5 + 0.3 x 0.15 / 0.9 = 0.55.
  EXPECT_EQ(c.hot_store_bytes(1), 12288u + 3072u);
  EXPECT_EQ(c.hot_store_bytes(3), 3 * (12288u + 3072u));
  EXPECT_EQ(c.neuron_bytes, 3072u + 3072u);
  EXPECT_EQ(c.host_neuron_bytes, static_cast<uint64_t>(std::llround(3072 + 3072 / 0.55)));
  EXPECT_EQ(c.host_cold_bytes, 0u);
  EXPECT_EQ(c.host_fixed_bytes, 1280u);
  EXPECT_FALSE(pin->device_reads_all_hot);
  // Without a predictor every gate row (4096 B, dense rate) and a quarter of up and down_t.
  s.expert_predictor_rank = 0;
  in.model = *model_bytes(s, GgmlType::F16);
  pin = moe_plan_input(in, in.profile, opt);
  ASSERT_TRUE(pin.ok());
  EXPECT_EQ(pin->layers[0].neuron_bytes, 4096u + 2048u);
  EXPECT_EQ(pin->layers[0].host_neuron_bytes,
            static_cast<uint64_t>(std::llround(4096 + 2048 / 0.55)));
  // Sparse experts get a sparse-cpu mode: the empty plan, faster than dense-cpu.
  opt.budget_bytes = 1 << 30;
  auto r = simulate(in, opt);
  ASSERT_TRUE(r.ok()) << r.message();
  ASSERT_NE(r->find("sparse-cpu"), nullptr);
  EXPECT_LT(r->find("sparse-cpu")->s_per_token, r->find("dense-cpu")->s_per_token);
}

TEST(SimulateMoe, InvariantsBetweenModes) {
  SimInput in = toy_moe_input();
  in.profile.assign(2, std::vector<double>(4, 0.5));  // uniform
  SimOptions opt;
  opt.n_ctx = 100;
  opt.drift = 0;
  // Budget 0: nothing on the device; the empty plan reads what dense-cpu reads.
  opt.budget_bytes = 0;
  auto r0 = simulate(in, opt);
  ASSERT_TRUE(r0.ok()) << r0.message();
  EXPECT_NEAR(r0->find("hot-experts")->s_per_token, r0->find("dense-cpu")->s_per_token, 1e-15);
  EXPECT_EQ(r0->find("hot-experts")->device_bytes, 0u);
  EXPECT_EQ(r0->find("llamacpp-cpu-moe")->s_per_token, r0->find("dense-cpu")->s_per_token);
  // A budget holding everything: llama.cpp's split is the whole model on the device, as
  // dense offload; and with a host far slower than the device, uniform routing puts every
  // expert (and attention) there: hot-experts is the all-on-device plan.
  opt.budget_bytes = 1 << 30;
  opt.output_on_device = false;  // as a plan file: the output on the host
  in.hw.host_peak_gbps = 0.01;
  auto r = simulate(in, opt);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->find("llamacpp-cpu-moe")->s_per_token, r->find("dense-offload")->s_per_token);
  EXPECT_EQ(r->find("llamacpp-cpu-moe")->n_cpu_moe, 0);
  const ModeResult he = *r->find("hot-experts");
  EXPECT_EQ(he.hot_neurons, 8);
  EXPECT_EQ(he.attn_on_device, 2);
  PlacementPlan all = empty_plan(2, 4);
  for (LayerPlacement& lp : all.layers) {
    lp.hot = {0, 1, 2, 3};
    lp.attn_on_device = true;
  }
  opt.plan = &all;
  auto ra = simulate(in, opt);
  ASSERT_TRUE(ra.ok()) << ra.message();
  EXPECT_NEAR(he.s_per_token, ra->find("hot-experts")->s_per_token, 1e-15);
  EXPECT_EQ(he.device_bytes, ra->find("hot-experts")->device_bytes);
}

TEST(SimulateMoe, LargerBudgetsAreNeverSlower) {
  for (const char* shape : {"mixtral-8x7b", "qwen3-30b-a3b", "turbosparse-mixtral"}) {
    const SimInput in = catalog_moe_input(shape, GgmlType::Q8_0, 0.3);
    SimOptions opt;
    opt.drift = 0;
    std::vector<double> last;
    for (double gib : {0.0, 2.0, 6.0, 12.0, 18.0, 23.0, 40.0}) {
      SCOPED_TRACE(std::string(shape) + " at " + std::to_string(gib) + " GiB");
      opt.budget_bytes = static_cast<uint64_t>(gib * 1073741824.0);
      auto r = simulate(in, opt);
      ASSERT_TRUE(r.ok()) << r.message();
      last.resize(r->modes.size(), 0);
      for (size_t i = 0; i < r->modes.size(); ++i) {
        const ModeResult& m = r->modes[i];
        EXPECT_LE(m.device_bytes, opt.budget_bytes) << m.mode;
        EXPECT_GE(m.tok_s, last[i] * (1 - 1e-9)) << m.mode;
        last[i] = m.tok_s;
      }
    }
  }
}

TEST(SimulateMoe, SkewHelpsHotExpertsOnly) {
  // Mixtral Q8_0 does not fit: llama.cpp keeps the experts of 17 layers on the host whatever the
  // routing; hot experts gain from a skew (the most routed experts are the ones on the device).
  SimOptions opt;
  opt.budget_bytes = uint64_t{23} << 30;
  opt.drift = 0;
  const SimInput flat = catalog_moe_input("mixtral-8x7b", GgmlType::Q8_0, 0.0);
  const SimInput steep = catalog_moe_input("mixtral-8x7b", GgmlType::Q8_0, 1.0);
  auto a = simulate(flat, opt), b = simulate(steep, opt);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->find("llamacpp-cpu-moe")->s_per_token, b->find("llamacpp-cpu-moe")->s_per_token);
  EXPECT_EQ(a->find("dense-offload")->s_per_token, b->find("dense-offload")->s_per_token);
  EXPECT_GT(b->find("hot-experts")->tok_s, a->find("hot-experts")->tok_s);
  EXPECT_GT(b->find("hot-experts")->device_mass, a->find("hot-experts")->device_mass);
  // Uniform routing: the device's share of the routings is its share of the experts.
  const ModeResult& u = *a->find("hot-experts");
  EXPECT_NEAR(u.device_mass, static_cast<double>(u.hot_neurons) / (32 * 8), 1e-9);
}

TEST(SimulateMoe, DynamicMovesWholeExperts) {
  SimInput in = catalog_moe_input("qwen3-30b-a3b", GgmlType::Q8_0, 0.3);
  SimOptions opt;
  opt.budget_bytes = uint64_t{23} << 30;
  opt.drift = 0.3;
  opt.drift_period_tokens = std::numeric_limits<double>::infinity();
  auto r = simulate(in, opt);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_GE(r->find("dynamic")->tok_s, r->find("hot-experts")->tok_s);
  EXPECT_LT(r->top20_overlap, 1.0);
  opt.drift_period_tokens = 1000;
  r = simulate(in, opt);
  ASSERT_TRUE(r.ok());
  const ModeResult& dy = *r->find("dynamic");
  const ModeResult& st = *r->find("hot-experts");
  EXPECT_GT(dy.migration_bytes_per_token, 0);
  // Whole experts (5 MiB each at Q8_0) over 1000 tokens, when attention stays put.
  const double expert = static_cast<double>(in.model.layers[0].expert);
  if (dy.attn_on_device == st.attn_on_device) {
    const double moved = dy.migration_bytes_per_token * 1000 / expert;
    EXPECT_NEAR(moved, std::round(moved), 1e-6);
  }
  EXPECT_NEAR(dy.migration_s, dy.migration_bytes_per_token / 25e9, 1e-15);
}

}  // namespace
}  // namespace hc::perfmodel
