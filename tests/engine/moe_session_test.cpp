// Mixture-of-experts models in sessions: the hybrid executor with experts on the CPU device
// (bit-identical to host-only for every placement), qwen attention on the device, migration of
// experts, and profiling the routing (tests/model/moe_test.cpp: the forward pass itself).
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "engine/session.h"
#include "model/act_stats.h"
#include "model/device_model.h"
#include "model/dynamic_sparsity.h"
#include "../model/moe_fixture.h"

namespace hc {
namespace {

using testing::load_spec;
using testing::moe_spec;
using testing::TinyModelSpec;
const std::vector<int32_t>& kToks = testing::kMoeToks;

// Session logits over a prompt and then some decode steps, with the device placement `p`
// (nullopt: host only) and optionally migration of experts.
struct RunResult {
  std::vector<float> logits;  // every step's last-token logits
  uint64_t routes = 0, routes_device = 0, swaps = 0;
  std::vector<int32_t> last_layer_experts;  // the device's experts of the last layer, by slot
  std::vector<double> last_layer_counts;    // migration's routing counters of that layer
};

RunResult run(std::shared_ptr<const LlamaModel> m, const DevicePlacement* p, bool migrate = false,
              int n_steps = 24) {
  RunResult out;
  Session s(m, SessionParams{64, 2, 8});
  std::shared_ptr<DeviceModel> dm;
  if (p) {
    auto built = DeviceModel::build(*m, nullptr, testing::cpu_device(), *p);
    EXPECT_TRUE(built.ok()) << built.message();
    if (!built.ok()) return out;
    dm = std::move(*built);
    EXPECT_TRUE(s.set_device(dm).ok());
  }
  std::shared_ptr<DynamicSparsity> dyn;
  if (migrate) {
    DynamicOptions o;
    o.migrate = true;
    o.migrate_every = 2;
    o.half_life = 16;
    o.migration.hysteresis = 0;
    o.migration.min_margin = 0.5;
    auto d = DynamicSparsity::create(*m, nullptr, dm.get(), o);
    EXPECT_TRUE(d.ok()) << d.message();
    dyn = std::move(*d);
    s.set_dynamic(dyn);
  }
  EXPECT_TRUE(s.eval(std::span(kToks).subspan(0, 9)).ok());  // a prompt batch (>= 8 tokens)
  out.logits = s.logits();
  for (int i = 0; i < n_steps; ++i) {
    const auto& l = s.logits();
    const int32_t next =
        static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
    EXPECT_TRUE(s.eval(std::vector<int32_t>{next}).ok());
    out.logits.insert(out.logits.end(), s.logits().begin(), s.logits().end());
  }
  out.routes = s.moe_stats().routes;
  out.routes_device = s.moe_stats().routes_device;
  if (dyn) {
    out.swaps = dyn->totals().swaps;
    dyn->counters().counts(m->hparams().n_layer - 1, &out.last_layer_counts);
  }
  if (dm) out.last_layer_experts = dm->layer(m->hparams().n_layer - 1).expert_of;
  return out;
}

class HybridTypes : public ::testing::TestWithParam<GgmlType> {};

TEST_P(HybridTypes, ExpertsOnTheCpuDeviceGiveHostOnlyBitsForEveryPlacement) {
  for (const char* arch : {"qwen3moe", "mixtral"}) {
    std::vector<uint8_t> bytes;
    auto m = load_spec(moe_spec(arch, GetParam()), bytes, /*repack=*/true);
    ASSERT_TRUE(m);
    const int n_layer = m->hparams().n_layer;
    const RunResult host = run(m, nullptr);
    ASSERT_GT(host.routes, 0u);
    EXPECT_EQ(host.routes_device, 0u);
    DevicePlacement all;  // -ngl past the layers: attention, every expert and the output
    all.n_gpu_layers = n_layer + 1;
    DevicePlacement first_cpu = all;  // --n-cpu-moe 1: layer 0's experts on the host
    first_cpu.n_cpu_moe = 1;
    DevicePlacement some;  // a plan: some experts of each layer, attention in layer 1 only
    some.attn = {0, 1};
    some.experts = {{0, 3, 5}, {1, 2}};
    for (const DevicePlacement* p : {&all, &first_cpu, &some}) {
      const RunResult got = run(m, p);
      // The CPU device computes each expert with the host's kernels, and the host sums each
      // token's expert outputs in the same top-k order: host-only's bits exactly.
      EXPECT_TRUE(got.logits == host.logits) << arch << " " << dtype_name(GetParam());
      EXPECT_EQ(got.routes, host.routes);
      EXPECT_GT(got.routes_device, 0u);
      if (p == &all) {
        EXPECT_EQ(got.routes_device, got.routes);
      } else {
        EXPECT_LT(got.routes_device, got.routes);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Moe, HybridTypes,
                         ::testing::Values(GgmlType::F32, GgmlType::Q8_0, GgmlType::Q4_0,
                                           GgmlType::Q4_K),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(MoeHybrid, QwenAttentionOnTheDeviceIsTheHostsToo) {
  // qwen2's biases and qwen3's Q/K norms with NeoX RoPE on the CPU device (-ngl): bit-identical.
  for (const char* arch : {"qwen2", "qwen3"}) {
    std::vector<uint8_t> bytes;
    auto m = load_spec(moe_spec(arch, GgmlType::Q8_0), bytes, true);
    ASSERT_TRUE(m);
    DevicePlacement all;
    all.n_gpu_layers = m->hparams().n_layer + 1;
    EXPECT_TRUE(run(m, &all, false, 4).logits == run(m, nullptr, false, 4).logits) << arch;
  }
}

TEST(MoeHybrid, MigrationMovesTheMostRoutedExpertsAndKeepsTheBits) {
  std::vector<uint8_t> bytes;
  auto m = load_spec(moe_spec("qwen3moe", GgmlType::Q8_0), bytes, true);
  ASSERT_TRUE(m);
  const RunResult host = run(m, nullptr, false, 40);
  DevicePlacement p;  // the two least useful experts to start with: migration must replace them
  p.experts = {{14, 15}, {14, 15}};
  const RunResult got = run(m, &p, /*migrate=*/true, 40);
  EXPECT_TRUE(got.logits == host.logits);
  EXPECT_GT(got.swaps, 0u);
  ASSERT_EQ(got.last_layer_experts.size(), 2u);
  // The device now holds the two experts its counters rank first (hysteresis 0).
  const std::vector<double>& c = got.last_layer_counts;
  ASSERT_EQ(c.size(), 16u);
  std::vector<double> sorted = c;
  std::sort(sorted.rbegin(), sorted.rend());
  const double held = c[got.last_layer_experts[0]] + c[got.last_layer_experts[1]];
  EXPECT_GE(held, sorted[0] + sorted[1] - 2 * 0.5) << "within the migration margin";
  EXPECT_GT(held, c[14] + c[15]);
}

TEST(MoeProfile, CountsEveryRoutingAndTheExpertsNeurons) {
  std::vector<uint8_t> bytes;
  TinyModelSpec spec = moe_spec("mixtral");
  spec.activation = "relu";  // ReLU experts (TurboSparse-like): per-neuron firing inside experts
  auto m = load_spec(spec, bytes, false);
  ASSERT_TRUE(m);
  const LlamaHParams& hp = m->hparams();
  ActStats st(hp.n_layer, int64_t{hp.n_ff} * hp.n_expert, hp.ffn_act, hp.n_expert);
  Session s(m, SessionParams{64, 2, 64});
  s.set_ffn_observer(&st);
  ASSERT_TRUE(s.eval(kToks).ok());
  EXPECT_EQ(st.n_tokens(), kToks.size());
  for (int il = 0; il < hp.n_layer; ++il) {
    const auto& c = st.expert_count(il);
    EXPECT_FLOAT_EQ(std::accumulate(c.begin(), c.end(), 0.0f),
                    static_cast<float>(kToks.size() * hp.n_expert_used));
    // A neuron fires only for tokens routed to its expert: at most the expert's count.
    const auto& f = st.fire_count(il);
    double fired = 0;
    for (int e = 0; e < hp.n_expert; ++e)
      for (int i = 0; i < hp.n_ff; ++i) {
        EXPECT_LE(f[e * hp.n_ff + i], c[e]);
        fired += f[e * hp.n_ff + i];
      }
    EXPECT_GT(fired, 0);
  }
  const std::string path = ::testing::TempDir() + "/moe_stats.gguf";
  ASSERT_TRUE(st.write(path, "tiny", "toks").ok());
  auto back = ActStats::read(path);
  ASSERT_TRUE(back.ok()) << back.message();
  EXPECT_EQ(back->n_expert(), hp.n_expert);
  EXPECT_EQ(back->expert_count(1), st.expert_count(1));
  EXPECT_TRUE(back->check_matches(hp).ok());
  std::vector<uint8_t> b2;
  auto dense = load_spec(moe_spec("qwen3"), b2, false);
  const Status mismatch = back->check_matches(dense->hparams());
  EXPECT_FALSE(mismatch.ok());
  EXPECT_NE(mismatch.message().find("experts"), std::string::npos) << mismatch.message();
}

}  // namespace
}  // namespace hc
