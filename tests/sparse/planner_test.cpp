// The placement planner: the cost model against a hand computation, and the planners'
// invariants on synthetic models: the budget is never exceeded, nothing is placed with no
// budget, a budget that holds everything gets each layer's unconstrained optimum, predicted time
// never rises along a budget sweep, every layer's hot set is the top-k of its own statistics
// (13 layers with different distributions: PowerInfer's solver mixes layers up from 11 on), the
// ILP beats greedy on a knapsack trap, and results are deterministic.
#include "sparse/planner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

namespace hc::sparse {
namespace {

HardwareProfile test_hw() {
  HardwareProfile hw;
  hw.host_gbps = 50;
  hw.dev_gbps = 1000;
  hw.link_gbps = 25;
  hw.op_us = 0.5;
  hw.sync_us = 2;
  return hw;
}

// A layer of n_ff neurons (rows of 4096 Q8_0 weights, 4352 bytes) with a power-law firing
// distribution whose most frequent neurons start at `offset` (so different layers have
// different hot sets), scaled by `scale`.
LayerCosts power_law_layer(int64_t n_ff, int64_t offset, double alpha, double scale) {
  constexpr uint64_t kRow = 4352;
  LayerCosts l;
  l.attn_bytes = 4 * 4096 * kRow;
  l.kv_bytes = 2 * 512 * 4096 * 2;
  l.kv_read_bytes = l.kv_bytes / 2;
  l.neuron_bytes = 3 * kRow;
  l.host_neuron_bytes = 2 * kRow;
  l.host_cold_bytes = kRow;
  l.fire_prob.resize(static_cast<size_t>(n_ff));
  for (int64_t r = 0; r < n_ff; ++r) {
    const int64_t i = (r + offset) % n_ff;
    l.fire_prob[static_cast<size_t>(i)] = std::min(1.0, scale / std::pow(1.0 + r, alpha));
  }
  return l;
}

PlanInput power_law_input(int n_layer, int64_t n_ff) {
  PlanInput in;
  in.hw = test_hw();
  in.n_embd = 4096;
  in.other_s = 50e-6;
  for (int il = 0; il < n_layer; ++il)
    in.layers.push_back(power_law_layer(n_ff, (il * 37) % n_ff, 0.6 + 0.1 * (il % 5),
                                        0.9 - 0.03 * il));
  return in;
}

PlannerOptions opts(uint64_t budget, int granule = 8) {
  PlannerOptions o;
  o.budget_bytes = budget;
  o.granule = granule;
  o.ilp_time_limit_s = 20;
  o.ilp_mip_gap = 1e-9;  // small problems: solved to optimality
  o.log_progress = false;
  return o;
}

uint64_t everything_bytes(const PlanInput& in) {
  uint64_t b = in.hw.dev_overhead_bytes + in.hw.dev_fixed_bytes;
  for (const LayerCosts& l : in.layers)
    b += l.attn_bytes + l.kv_bytes + l.neuron_bytes * l.fire_prob.size() + l.predictor_bytes;
  return b;
}

// The k most frequent neurons of p (ties: lower index), ascending.
std::vector<int32_t> top_k(const std::vector<double>& p, size_t k) {
  std::vector<int32_t> order = neurons_by_frequency(p);
  std::vector<int32_t> hot(order.begin(), order.begin() + static_cast<int64_t>(k));
  std::sort(hot.begin(), hot.end());
  return hot;
}

TEST(Planner, NeuronsByFrequencyBreaksTiesByIndex) {
  EXPECT_EQ(neurons_by_frequency({0.1, 0.5, 0.1, 0.5, 0.0, 0.9}),
            (std::vector<int32_t>{5, 1, 3, 0, 2, 4}));
}

TEST(Planner, FireProbabilities) {
  auto p = fire_probabilities({0, 5, 10}, 10);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(*p, (std::vector<double>{0.0, 0.5, 1.0}));
  EXPECT_FALSE(fire_probabilities({1}, 0).ok());
  auto bad = fire_probabilities({0, 11}, 10);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("fire_count[1] is 11"), std::string::npos) << bad.message();
}

// One layer of 4 neurons, every term of the model computed by hand.
TEST(Planner, PredictMatchesHandComputation) {
  PlanInput in;
  in.hw = test_hw();
  in.hw.dev_overhead_bytes = 1000;
  in.hw.dev_fixed_bytes = 500;
  in.n_embd = 100;
  in.other_s = 1e-4;
  LayerCosts l;
  l.attn_bytes = 1'000'000;
  l.kv_bytes = 400'000;
  l.kv_read_bytes = 200'000;
  l.neuron_bytes = 3000;
  l.host_neuron_bytes = 2000;
  l.host_cold_bytes = 1000;
  l.host_fixed_bytes = 50'000;
  l.predictor_bytes = 10'000;
  l.fire_prob = {0.8, 0.1, 0.5, 0.0};
  in.layers = {l};

  PlacementPlan p = empty_plan(1, 4);
  auto all_host = predict_plan(in, p);
  ASSERT_TRUE(all_host.ok()) << all_host.message();
  const double attn_host = 1.2e6 / 50e9;
  const double host_all = (0.8 * 2000 + 1000 + 0.1 * 2000 + 1000 + 0.5 * 2000 + 1000 + 0 + 1000 +
                           50'000 + 10'000) / 50e9;
  EXPECT_NEAR(all_host->layers[0].attn_s, attn_host, 1e-15);
  EXPECT_NEAR(all_host->layers[0].ffn_s, host_all, 1e-15);
  EXPECT_NEAR(all_host->seconds_per_token, 1e-4 + attn_host + host_all, 1e-15);
  EXPECT_EQ(all_host->device_bytes, 0u);  // nothing placed: the device is not even opened
  EXPECT_NEAR(all_host->tok_s, 1 / all_host->seconds_per_token, 1e-9);

  p.layers[0].hot = {0, 2};
  p.layers[0].attn_on_device = true;
  auto mixed = predict_plan(in, p);
  ASSERT_TRUE(mixed.ok());
  const double trip = 2e-6 + 2 * 100 * 4 / 25e9;
  const double attn_dev = 1.2e6 / 1000e9 + 10 * 0.5e-6 + trip;
  const double dev = 2 * 3000 / 1000e9 + 3 * 0.5e-6;
  const double host = (0.1 * 2000 + 1000 + 0 + 1000 + 50'000 + 10'000) / 50e9;
  EXPECT_NEAR(mixed->layers[0].attn_s, attn_dev, 1e-15);
  EXPECT_NEAR(mixed->layers[0].ffn_device_s, dev, 1e-15);
  EXPECT_NEAR(mixed->layers[0].ffn_host_s, host, 1e-15);
  EXPECT_NEAR(mixed->layers[0].ffn_s, std::max(dev, host) + trip, 1e-15);
  EXPECT_NEAR(mixed->layers[0].device_mass, 1.3 / 1.4, 1e-12);
  EXPECT_EQ(mixed->device_bytes, 1000u + 500 + 1'400'000 + 2 * 3000);

  // Attention and hot neurons sharing one trip (the stream stays on the device): the FFN's
  // trip is the attention's.
  in.layers[0].shares_trip = true;
  auto shared = predict_plan(in, p);
  ASSERT_TRUE(shared.ok());
  EXPECT_NEAR(shared->layers[0].attn_s, attn_dev, 1e-15);
  EXPECT_NEAR(shared->layers[0].ffn_s, std::max(dev, host), 1e-15);
  p.layers[0].attn_on_device = false;  // alone, the FFN pays its own
  auto alone = predict_plan(in, p);
  ASSERT_TRUE(alone.ok());
  EXPECT_NEAR(alone->layers[0].ffn_s, std::max(dev, host) + trip, 1e-15);
  // Hot neurons alone: the session allocates none of the attention's buffers, which the
  // prediction then does not count.
  EXPECT_EQ(alone->device_bytes, 1000u + 500 + 2 * 3000);
  in.hw.dev_attn_fixed_bytes = 200;
  auto alone_attn = predict_plan(in, p);
  ASSERT_TRUE(alone_attn.ok());
  EXPECT_EQ(alone_attn->device_bytes, 1000u + 300 + 2 * 3000);
  p.layers[0].attn_on_device = true;
  auto with_attn = predict_plan(in, p);
  ASSERT_TRUE(with_attn.ok());
  EXPECT_EQ(with_attn->device_bytes, 1000u + 500 + 1'400'000 + 2 * 3000);
  in.hw.dev_attn_fixed_bytes = 0;
  in.layers[0].shares_trip = false;

  // Sparse device reads (a predictor-driven device kernel) and a predictor on the device.
  in.device_reads_all_hot = false;
  in.layers[0].predictor_on_device = true;
  auto sparse = predict_plan(in, p);
  ASSERT_TRUE(sparse.ok());
  EXPECT_NEAR(sparse->layers[0].ffn_device_s, (1.3 * 3000 + 10'000) / 1000e9 + 3 * 0.5e-6, 1e-15);
  EXPECT_NEAR(sparse->layers[0].ffn_host_s, (0.1 * 2000 + 1000 + 1000 + 50'000) / 50e9, 1e-15);
  EXPECT_EQ(sparse->device_bytes, 1000u + 500 + 1'400'000 + 2 * 3000 + 10'000);
}

TEST(Planner, PredictRejectsMismatchedPlans) {
  const PlanInput in = power_law_input(2, 64);
  EXPECT_FALSE(predict_plan(in, empty_plan(3, 64)).ok());
  EXPECT_FALSE(predict_plan(in, empty_plan(2, 65)).ok());
  PlacementPlan p = empty_plan(2, 64);
  p.layers[1].hot = {5, 64};
  auto r = predict_plan(in, p);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("layer 1"), std::string::npos) << r.message();
}

TEST(Planner, RejectsBadInput) {
  PlanInput in = power_law_input(2, 64);
  in.layers[1].fire_prob[3] = 1.5;
  auto r = plan_greedy(in, opts(1 << 20));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("layer 1: fire_prob[3] is 1.5"), std::string::npos) << r.message();

  in = power_law_input(2, 64);
  in.layers[1].fire_prob.pop_back();
  EXPECT_FALSE(plan_ilp(in, opts(1 << 20)).ok());
  in = power_law_input(2, 64);
  in.hw.dev_gbps = std::nan("");
  EXPECT_FALSE(plan_best(in, opts(1 << 20)).ok());
  in = power_law_input(2, 64);
  EXPECT_FALSE(plan_greedy(in, opts(1 << 20, 0)).ok());
  PlannerOptions o = opts(1 << 20);
  o.ilp_time_limit_s = -1;
  EXPECT_FALSE(plan_ilp(in, o).ok());
  o = opts(1 << 20);
  o.ilp_mip_gap = std::nan("");
  EXPECT_FALSE(plan_ilp(in, o).ok());
}

TEST(Planner, ZeroBudgetPlacesNothing) {
  PlanInput in = power_law_input(4, 100);
  in.hw.dev_overhead_bytes = 300 << 20;  // a real device's context: not even that fits
  for (uint64_t budget : {uint64_t{0}, uint64_t{1000}}) {
    for (auto* fn : {&plan_greedy, &plan_ilp}) {
      auto r = fn(in, opts(budget));
      ASSERT_TRUE(r.ok()) << r.message();
      EXPECT_EQ(r->plan.n_hot_total(), 0);
      for (const LayerPlacement& l : r->plan.layers) EXPECT_FALSE(l.attn_on_device);
      EXPECT_EQ(r->prediction.device_bytes, 0u);
    }
    auto best = plan_best(in, opts(budget));
    ASSERT_TRUE(best.ok());
    EXPECT_EQ(best->plan.n_hot_total(), 0);
  }
}

TEST(Planner, DevicePredictorsMustFit) {
  PlanInput in = power_law_input(2, 64);
  in.layers[0].predictor_bytes = 5000;
  in.layers[0].predictor_on_device = true;
  auto r = plan_greedy(in, opts(4000));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("predictors"), std::string::npos) << r.message();
  auto ok = plan_best(in, opts(6000));
  ASSERT_TRUE(ok.ok()) << ok.message();
  EXPECT_LE(ok->prediction.device_bytes, 6000u);
  EXPECT_GE(ok->prediction.device_bytes, 5000u);
}

// Each layer, alone (with the budget out of the way), at its best over every granule count and
// attention choice.
void expect_layerwise_optimal(const PlanInput& in, const PlanResult& r, int granule) {
  for (int il = 0; il < in.n_layer(); ++il) {
    SCOPED_TRACE(il);
    const auto l = static_cast<size_t>(il);
    const double got = r.prediction.layers[l].total_s();
    const size_t n_ff = in.layers[l].fire_prob.size();
    for (size_t k = 0; k <= n_ff; k = k == n_ff ? n_ff + 1 : std::min(k + granule, n_ff)) {
      for (bool attn : {false, true}) {
        PlacementPlan p = r.plan;
        p.layers[l].hot = top_k(in.layers[l].fire_prob, k);
        p.layers[l].attn_on_device = attn;
        auto pr = predict_plan(in, p);
        ASSERT_TRUE(pr.ok());
        EXPECT_LE(got, pr->layers[l].total_s() * (1 + 1e-12)) << "k " << k << " attn " << attn;
      }
    }
  }
}

TEST(Planner, BudgetForEverythingGetsEachLayersOptimum) {
  const PlanInput in = power_law_input(5, 96);
  const uint64_t all = everything_bytes(in);
  for (uint64_t budget : {all, all * 10}) {
    for (auto* fn : {&plan_greedy, &plan_ilp}) {
      auto r = fn(in, opts(budget, 8));
      ASSERT_TRUE(r.ok()) << r.message();
      expect_layerwise_optimal(in, *r, 8);
      // Fast device and slow host: attention is worth moving, and so are hot neurons.
      for (const LayerPlacement& l : r->plan.layers) {
        EXPECT_TRUE(l.attn_on_device);
        EXPECT_GT(l.hot.size(), 0u);
      }
      EXPECT_LE(r->prediction.device_bytes, budget);
    }
  }
}

// The fastest predicted time of every placement of 3 layers of 64 neurons (per layer attention
// on the device or not, 0, 32 or 64 top neurons) within the budget: what the ILP must find.
double best_of_every_placement(const PlanInput& in, uint64_t budget) {
  double best = INFINITY;
  for (int code = 0; code < 216; ++code) {
    PlacementPlan p = empty_plan(3, 64);
    int c = code;
    for (int il = 0; il < 3; ++il, c /= 6) {
      p.layers[il].attn_on_device = c % 2 == 1;
      p.layers[il].hot = top_k(in.layers[il].fire_prob, static_cast<size_t>(32 * (c / 2 % 3)));
    }
    auto pr = predict_plan(in, p);
    EXPECT_TRUE(pr.ok());
    if (pr.ok() && pr->device_bytes <= budget) best = std::min(best, pr->seconds_per_token);
  }
  return best;
}

// Attention that is slower on the device than on the host once it pays its own round trip
// (cheap attention, costly commands), in layers whose hot neurons belong on the device: with a
// shared trip it rides along, without it stays on the host; both solvers see this, and the ILP
// finds the optimum of every placement (enumerated) under a tight budget.
PlanInput shared_trip_input(bool shares) {
  PlanInput in = power_law_input(3, 64);
  in.hw.op_us = 0.1;
  for (LayerCosts& l : in.layers) {
    l.attn_bytes = 100'000;  // 2 us on the host; 0.1 + 1 (commands) + 3.3 (trip) on the device
    l.kv_bytes = 0;
    l.kv_read_bytes = 0;
    l.shares_trip = shares;
  }
  return in;
}

TEST(Planner, SharedTripPlacesAttentionWithHotNeurons) {
  for (bool shares : {false, true}) {
    SCOPED_TRACE(shares ? "shared trip" : "own trips");
    const PlanInput in = shared_trip_input(shares);
    const uint64_t all = everything_bytes(in);
    for (auto* fn : {&plan_greedy, &plan_ilp}) {
      auto r = fn(in, opts(all, 32));
      ASSERT_TRUE(r.ok()) << r.message();
      for (const LayerPlacement& l : r->plan.layers) {
        EXPECT_GT(l.hot.size(), 0u);
        EXPECT_EQ(l.attn_on_device, shares);
      }
    }
  }
  // Under a budget that holds some of it: the ILP's plan is the best of every placement.
  const PlanInput in = shared_trip_input(true);
  const uint64_t budget = 2 * in.layers[0].attn_bytes + 3 * 32 * in.layers[0].neuron_bytes;
  auto ilp = plan_ilp(in, opts(budget, 32));
  ASSERT_TRUE(ilp.ok()) << ilp.message();
  const double best = best_of_every_placement(in, budget);
  EXPECT_NEAR(ilp->prediction.seconds_per_token, best, 1e-12);
  auto greedy = plan_greedy(in, opts(budget, 32));
  ASSERT_TRUE(greedy.ok());
  EXPECT_GE(greedy->prediction.seconds_per_token, best - 1e-12);
}

// A predictor that follows the attention to the device (LayerCosts::predictor_follows_attn):
// by hand, the attention's device time gains its read and commands, the host part loses its
// read, the device holds its bytes; and a large predictor on a slow host makes attention worth
// moving even where the attention alone would not be: both solvers see this, the ILP finds
// the optimum of every placement (enumerated) under a tight budget.
TEST(Planner, PredictorFollowsTheAttention) {
  PlanInput in;
  in.hw = test_hw();
  in.n_embd = 100;
  LayerCosts l;
  l.attn_bytes = 1'000'000;
  l.neuron_bytes = 3000;
  l.host_neuron_bytes = 2000;
  l.host_fixed_bytes = 50'000;
  l.predictor_bytes = 400'000;
  l.predictor_store_bytes = 500'000;  // as the device charges it (a second layout)
  l.predictor_follows_attn = true;
  l.fire_prob = {0.8, 0.1, 0.5, 0.0};
  in.layers = {l};
  PlacementPlan p = empty_plan(1, 4);
  p.layers[0].hot = {0};
  auto host_attn = predict_plan(in, p);
  ASSERT_TRUE(host_attn.ok()) << host_attn.message();
  const double host_pred = 400'000 / 50e9;
  EXPECT_NEAR(host_attn->layers[0].ffn_host_s,
              (0.1 * 2000 + 0.5 * 2000 + 50'000) / 50e9 + host_pred, 1e-15);
  EXPECT_EQ(host_attn->layers[0].device_bytes, 3000u);
  p.layers[0].attn_on_device = true;
  auto dev_attn = predict_plan(in, p);
  ASSERT_TRUE(dev_attn.ok());
  const double trip = 2e-6 + 2 * 100 * 4 / 25e9;
  EXPECT_NEAR(dev_attn->layers[0].attn_s,
              1e6 / 1000e9 + 10 * 0.5e-6 + trip + 400'000 / 1000e9 + 6 * 0.5e-6, 1e-15);
  EXPECT_NEAR(dev_attn->layers[0].ffn_host_s, (0.1 * 2000 + 0.5 * 2000 + 50'000) / 50e9, 1e-15);
  EXPECT_EQ(dev_attn->layers[0].device_bytes, 1'000'000u + 500'000 + 3000);

  // Three layers whose attention alone is not worth a trip (cheap attention, costly commands)
  // but whose predictors are: placed with the predictor, left on the host without it.
  PlanInput three = power_law_input(3, 64);
  three.hw.op_us = 0.1;
  for (LayerCosts& c : three.layers) {
    c.attn_bytes = 100'000;
    c.kv_bytes = 0;
    c.kv_read_bytes = 0;
    c.predictor_bytes = 2'000'000;  // 40 us a token on the host, 2 on the device
  }
  for (bool follows : {false, true}) {
    SCOPED_TRACE(follows ? "the predictor follows" : "the predictor stays on the host");
    for (LayerCosts& c : three.layers) c.predictor_follows_attn = follows;
    const uint64_t all = everything_bytes(three);
    for (auto* fn : {&plan_greedy, &plan_ilp}) {
      auto r = fn(three, opts(all, 32));
      ASSERT_TRUE(r.ok()) << r.message();
      for (const LayerPlacement& lp : r->plan.layers) EXPECT_EQ(lp.attn_on_device, follows);
      EXPECT_LE(r->prediction.device_bytes, all);
    }
  }
  const uint64_t budget = 2 * (100'000 + 2'000'000) + 2 * 32 * three.layers[0].neuron_bytes;
  auto ilp = plan_ilp(three, opts(budget, 32));
  ASSERT_TRUE(ilp.ok()) << ilp.message();
  const double best = best_of_every_placement(three, budget);
  EXPECT_NEAR(ilp->prediction.seconds_per_token, best, 1e-12);
  EXPECT_LE(ilp->prediction.device_bytes, budget);
  auto greedy = plan_greedy(three, opts(budget, 32));
  ASSERT_TRUE(greedy.ok());
  EXPECT_GE(greedy->prediction.seconds_per_token, best - 1e-12);
  EXPECT_LE(greedy->prediction.device_bytes, budget);
}

TEST(Planner, BudgetNeverExceededAndSweepMonotone) {
  const PlanInput in = power_law_input(6, 128);
  const uint64_t all = everything_bytes(in);
  std::vector<uint64_t> budgets;
  for (int s = 0; s <= 40; ++s) budgets.push_back(all * static_cast<uint64_t>(s) / 36);
  double prev_greedy = INFINITY, prev_ilp = INFINITY;
  int greedy_rises = 0;
  for (uint64_t b : budgets) {
    SCOPED_TRACE(b);
    auto g = plan_greedy(in, opts(b));
    auto i = plan_ilp(in, opts(b));
    ASSERT_TRUE(g.ok() && i.ok());
    EXPECT_LE(g->prediction.device_bytes, b);
    EXPECT_LE(i->prediction.device_bytes, b);
    EXPECT_EQ(i->ilp_status.rfind("optimal", 0), 0u) << i->ilp_status;
    // Solved to optimality, the ILP is monotone by itself (its feasible set only grows) and
    // never worse than greedy.
    EXPECT_LE(i->prediction.seconds_per_token, prev_ilp * (1 + 1e-9));
    EXPECT_LE(i->prediction.seconds_per_token, g->prediction.seconds_per_token * (1 + 1e-9));
    greedy_rises += g->prediction.seconds_per_token > prev_greedy;
    prev_greedy = g->prediction.seconds_per_token;
    prev_ilp = i->prediction.seconds_per_token;
  }
  RecordProperty("greedy_rises", greedy_rises);

  auto sweep = plan_sweep(in, opts(0), budgets);
  ASSERT_TRUE(sweep.ok()) << sweep.message();
  ASSERT_EQ(sweep->size(), budgets.size());
  double prev = INFINITY;
  for (size_t k = 0; k < budgets.size(); ++k) {
    const PlanResult& r = (*sweep)[k];
    EXPECT_LE(r.prediction.device_bytes, budgets[k]);
    EXPECT_LE(r.prediction.seconds_per_token, prev) << "budget " << budgets[k];
    EXPECT_LE(r.prediction.seconds_per_token, r.greedy_s);
    prev = r.prediction.seconds_per_token;
    EXPECT_EQ(r.plan.budget_bytes, budgets[k]);
    EXPECT_FLOAT_EQ(r.plan.predicted_tok_s, static_cast<float>(1 / r.prediction.seconds_per_token));
  }
  // More budget never hurts, and the full budget is much faster than none.
  EXPECT_LT(sweep->back().prediction.seconds_per_token,
            0.5 * sweep->front().prediction.seconds_per_token);
  EXPECT_FALSE(plan_sweep(in, opts(0), {10, 5}).ok());
}

// Device bytes charged differently from the bytes read (the CPU device keeps two layouts of a
// matrix of 16+ rows; allocations round up): both planners keep the charged bytes within the
// budget, predict_plan reports them, and the read bytes still drive the time.
TEST(Planner, ChargedBytesNotReadBytesAreBudgeted) {
  PlanInput in = power_law_input(4, 128);
  const uint64_t row = in.layers[0].neuron_bytes;
  for (LayerCosts& l : in.layers) {
    l.attn_store_bytes = 2 * l.attn_bytes + 4096;
    l.hot_store_bytes = [row](int64_t n) -> uint64_t {
      if (n == 0) return 0;
      return (static_cast<uint64_t>(n) * row + 63) / 64 * 64 + (n >= 16 ? n * row : 0) + 512;
    };
  }
  PlanInput linear = power_law_input(4, 128);
  const uint64_t budget = 6u << 20;  // below what the best unconstrained plan would take
  for (int solver = 0; solver < 2; ++solver) {
    SCOPED_TRACE(solver == 0 ? "greedy" : "ilp");
    auto r = solver == 0 ? plan_greedy(in, opts(budget)) : plan_ilp(in, opts(budget));
    auto lin = solver == 0 ? plan_greedy(linear, opts(budget)) : plan_ilp(linear, opts(budget));
    ASSERT_TRUE(r.ok() && lin.ok());
    // What the charged figures add up to, layer by layer, from the plan alone.
    uint64_t charged = in.hw.dev_overhead_bytes + in.hw.dev_fixed_bytes;
    for (int il = 0; il < in.n_layer(); ++il) {
      const LayerPlacement& lp = r->plan.layers[static_cast<size_t>(il)];
      const LayerCosts& l = in.layers[static_cast<size_t>(il)];
      const uint64_t b = l.hot_store_bytes(static_cast<int64_t>(lp.hot.size())) +
                         (lp.attn_on_device ? l.attn_store_bytes + l.kv_bytes : 0);
      EXPECT_EQ(r->prediction.layers[static_cast<size_t>(il)].device_bytes, b) << il;
      charged += b;
    }
    EXPECT_EQ(r->prediction.device_bytes, charged);
    EXPECT_LE(charged, budget);
    EXPECT_GT(charged, budget / 2);  // the budget binds
    // Twice the bytes per neuron: fewer neurons fit than when charged bytes equal read bytes.
    EXPECT_LT(r->plan.n_hot_total(), lin->plan.n_hot_total());
    // The time model is the read bytes': the same plan predicts the same time either way.
    auto same = predict_plan(linear, r->plan);
    ASSERT_TRUE(same.ok());
    EXPECT_DOUBLE_EQ(same->seconds_per_token, r->prediction.seconds_per_token);
  }
  in.layers[2].hot_store_bytes = [](int64_t n) -> uint64_t { return 100 + n; };
  auto bad = plan_greedy(in, opts(budget));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("layer 2: hot_store_bytes"), std::string::npos) << bad.message();
}

// A sweep in which each plan_best is handed the previous plan keeps it when both solvers do
// worse: here the "ILP" is starved (1 ms) on purpose, so only the previous plan can guarantee
// monotonicity. Whatever the ILP manages, the chain must not rise.
TEST(Planner, PreviousPlanKeepsSweepMonotone) {
  const PlanInput in = power_law_input(8, 512);
  const uint64_t all = everything_bytes(in);
  PlannerOptions o = opts(0, 4);
  o.ilp_time_limit_s = 0.001;
  PlacementPlan prev_plan;
  double prev = INFINITY;
  for (int s = 0; s <= 12; ++s) {
    o.budget_bytes = all * static_cast<uint64_t>(s) / 10;
    auto r = plan_best(in, o, s ? &prev_plan : nullptr);
    ASSERT_TRUE(r.ok()) << r.message();
    EXPECT_FALSE(r->ilp_status.empty());
    EXPECT_LE(r->prediction.device_bytes, o.budget_bytes);
    EXPECT_LE(r->prediction.seconds_per_token, prev);
    prev = r->prediction.seconds_per_token;
    prev_plan = r->plan;
  }
  // A previous plan beyond this budget is never taken.
  o.budget_bytes = 0;
  auto r = plan_best(in, o, &prev_plan);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->plan.n_hot_total(), 0);
  EXPECT_NE(r->solver, "previous");
}

// 13 layers, each with its own hot region (offset 37 * il): every layer's device neurons must be
// the top-k of its own frequencies, never another layer's.
TEST(Planner, HotSetsComeFromTheirOwnLayer) {
  const int n_layer = 13;
  const PlanInput in = power_law_input(n_layer, 256);
  const uint64_t all = everything_bytes(in);
  for (auto* fn : {&plan_greedy, &plan_ilp, +[](const PlanInput& i, const PlannerOptions& o) {
                     return plan_best(i, o);
                   }}) {
    auto r = fn(in, opts(all / 3));
    ASSERT_TRUE(r.ok()) << r.message();
    int layers_with_hot = 0;
    for (int il = 0; il < n_layer; ++il) {
      SCOPED_TRACE(il);
      const auto& hot = r->plan.layers[static_cast<size_t>(il)].hot;
      EXPECT_EQ(hot, top_k(in.layers[static_cast<size_t>(il)].fire_prob, hot.size()));
      if (hot.empty()) continue;
      ++layers_with_hot;
      // The layer's most frequent neuron is its offset: it must be there, and other layers'
      // favourites (far from this layer's region) must not.
      const int32_t own = static_cast<int32_t>((il * 37) % 256);
      EXPECT_TRUE(std::binary_search(hot.begin(), hot.end(), own));
      if (hot.size() < 100) {
        const int32_t other = static_cast<int32_t>(((il + 6) * 37) % 256);
        EXPECT_FALSE(std::binary_search(hot.begin(), hot.end(), other));
      }
    }
    EXPECT_GE(layers_with_hot, n_layer - 1);
  }
}

// Two layers whose neurons never fire (never worth placing) and whose attention blocks are a
// knapsack trap under a 100 MB budget: layer 0's block has the better time per byte but blocks
// layer 1's larger block, which saves more.
PlanInput knapsack_trap() {
  PlanInput in;
  in.hw = test_hw();
  in.hw.op_us = 0;
  in.hw.sync_us = 0;
  in.hw.link_gbps = 1e9;
  in.n_embd = 64;
  for (int il = 0; il < 2; ++il) {
    LayerCosts l;
    l.neuron_bytes = 1 << 20;
    l.host_neuron_bytes = 1000;
    l.fire_prob.assign(32, 0.0);
    in.layers.push_back(l);
  }
  in.layers[0].attn_bytes = 60'000'000;
  in.layers[0].kv_read_bytes = 2'000'000;  // reads more per byte placed: the better ratio
  in.layers[1].attn_bytes = 100'000'000;
  return in;
}

// A knapsack trap: layer 0's attention has the best time per byte but blocks layer 1's larger
// attention block, which saves more. Greedy takes the first; the ILP takes the second.
TEST(Planner, IlpBeatsGreedyOnKnapsackTrap) {
  const PlanInput in = knapsack_trap();
  const uint64_t budget = 100'000'000;
  auto g = plan_greedy(in, opts(budget));
  auto i = plan_ilp(in, opts(budget));
  ASSERT_TRUE(g.ok() && i.ok());
  EXPECT_TRUE(g->plan.layers[0].attn_on_device);
  EXPECT_FALSE(g->plan.layers[1].attn_on_device);
  EXPECT_FALSE(i->plan.layers[0].attn_on_device);
  EXPECT_TRUE(i->plan.layers[1].attn_on_device);
  EXPECT_EQ(i->ilp_status, "optimal");
  EXPECT_LT(i->prediction.seconds_per_token, g->prediction.seconds_per_token * 0.99);
  auto best = plan_best(in, opts(budget));
  ASSERT_TRUE(best.ok());
  EXPECT_EQ(best->solver, "ilp");
  EXPECT_EQ(best->plan.solver, "ilp");
  EXPECT_DOUBLE_EQ(best->ilp_s, i->prediction.seconds_per_token);
  EXPECT_DOUBLE_EQ(best->greedy_s, g->prediction.seconds_per_token);
  EXPECT_DOUBLE_EQ(best->prediction.seconds_per_token, best->ilp_s);
}

// When both solvers do worse than the plan passed as `previous` (here the ILP gets no time at
// all), plan_best keeps the previous plan.
TEST(Planner, PreviousPlanWinsWhenSolversDoWorse) {
  const PlanInput in = knapsack_trap();
  auto ilp = plan_ilp(in, opts(100'000'000));
  ASSERT_TRUE(ilp.ok());
  PlannerOptions o = opts(100'000'000);
  o.ilp_time_limit_s = 1e-6;
  auto r = plan_best(in, o, &ilp->plan);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_DOUBLE_EQ(r->prediction.seconds_per_token, ilp->prediction.seconds_per_token);
  EXPECT_LT(r->prediction.seconds_per_token, r->greedy_s);
  if (r->ilp_status.rfind("failed", 0) == 0) {
    EXPECT_EQ(r->solver, "previous");
    EXPECT_EQ(r->plan.solver, "previous");
    EXPECT_TRUE(std::isnan(r->ilp_s));
  }
  RecordProperty("ilp_status", r->ilp_status);
}

// Branch and bound starts from the greedy plan: however little time it gets, a plan it returns
// is never slower than greedy's, and a failure says why.
TEST(Planner, IlpStartsFromGreedy) {
  const PlanInput in = power_law_input(8, 1024);
  for (double limit : {0.05, 5.0}) {
    for (double share : {0.2, 0.6, 0.9}) {
      SCOPED_TRACE(share);
      PlannerOptions o = opts(static_cast<uint64_t>(share * everything_bytes(in)), 4);
      o.ilp_time_limit_s = limit;
      o.ilp_mip_gap = 1e-4;
      auto g = plan_greedy(in, o);
      auto i = plan_ilp(in, o);
      ASSERT_TRUE(g.ok());
      if (!i.ok()) {
        EXPECT_NE(i.message().find("time limit"), std::string::npos) << i.message();
        continue;
      }
      EXPECT_LE(i->prediction.seconds_per_token, g->prediction.seconds_per_token * (1 + 1e-9))
          << i->ilp_status;
      EXPECT_LE(i->prediction.device_bytes, o.budget_bytes);
    }
  }
}

// GLPK's presolver (then without the greedy start) reaches the same optimum on small problems.
TEST(Planner, IlpWithPresolveAgrees) {
  const PlanInput in = power_law_input(4, 96);
  for (double share : {0.1, 0.5}) {
    PlannerOptions o = opts(static_cast<uint64_t>(share * everything_bytes(in)));
    auto a = plan_ilp(in, o);
    o.ilp_presolve = true;
    auto b = plan_ilp(in, o);
    ASSERT_TRUE(a.ok() && b.ok()) << a.message() << b.message();
    EXPECT_NEAR(a->prediction.seconds_per_token, b->prediction.seconds_per_token,
                1e-9 * a->prediction.seconds_per_token);
    EXPECT_LE(b->prediction.device_bytes, o.budget_bytes);
  }
}

// The round trip makes one granule alone useless; greedy must still open a layer with a span.
TEST(Planner, GreedyOpensLayersPastTheRoundTrip) {
  PlanInput in = power_law_input(3, 256);
  in.hw.sync_us = 10;
  auto g = plan_greedy(in, opts(everything_bytes(in), 4));
  auto i = plan_ilp(in, opts(everything_bytes(in), 4));
  ASSERT_TRUE(g.ok() && i.ok());
  EXPECT_GT(g->plan.n_hot_total(), 0);
  EXPECT_NEAR(g->prediction.seconds_per_token, i->prediction.seconds_per_token,
              1e-9 + 1e-6 * i->prediction.seconds_per_token);
}

TEST(Planner, Deterministic) {
  const PlanInput in = power_law_input(6, 200);
  const PlannerOptions o = opts(everything_bytes(in) / 4);
  for (auto* fn : {&plan_greedy, &plan_ilp}) {
    auto a = fn(in, o);
    auto b = fn(in, o);
    ASSERT_TRUE(a.ok() && b.ok());
    for (int il = 0; il < in.n_layer(); ++il) {
      EXPECT_EQ(a->plan.layers[static_cast<size_t>(il)].hot,
                b->plan.layers[static_cast<size_t>(il)].hot);
      EXPECT_EQ(a->plan.layers[static_cast<size_t>(il)].attn_on_device,
                b->plan.layers[static_cast<size_t>(il)].attn_on_device);
    }
    EXPECT_EQ(a->prediction.seconds_per_token, b->prediction.seconds_per_token);
  }
}

TEST(Planner, GranuleOfOneAndTailGranules) {
  const PlanInput in = power_law_input(3, 70);  // 70 = 2 * 32 + 6: a short tail granule
  for (int granule : {1, 32, 1000}) {
    auto r = plan_best(in, opts(everything_bytes(in), granule));
    ASSERT_TRUE(r.ok()) << r.message();
    for (const LayerPlacement& l : r->plan.layers) {
      const size_t n = l.hot.size();
      EXPECT_TRUE(n == 70 || n % static_cast<size_t>(granule) == 0) << n;
    }
  }
}

// A 7B-shaped problem (32 x 11008) plans quickly with greedy; its prediction is sane.
TEST(Planner, SevenBShapedGreedy) {
  PlanInput in;
  in.hw = test_hw();
  in.n_embd = 4096;
  for (int il = 0; il < 32; ++il) {
    LayerCosts l = power_law_layer(11008, il * 101, 0.7, 0.95);
    l.attn_bytes = 4ull * 4096 * 4096 * 9 / 16;  // Q4_0
    l.kv_bytes = 2ull * 4096 * 4096 * 2;
    l.kv_read_bytes = l.kv_bytes / 2;
    l.neuron_bytes = 2 * 4096 * 9 / 16 + 4096 * 34 / 32;
    l.host_neuron_bytes = 4096 * 9 / 16 + 4096 * 34 / 32;
    l.host_cold_bytes = 4096 * 9 / 16;
    in.layers.push_back(std::move(l));
  }
  auto r = plan_greedy(in, opts(uint64_t{4} << 30, 32));
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_LE(r->prediction.device_bytes, uint64_t{4} << 30);
  EXPECT_GT(r->prediction.device_bytes, uint64_t{3} << 30);
  EXPECT_GT(r->plan.n_hot_total(), 0);
}

}  // namespace
}  // namespace hc::sparse
