// The Vulkan backend end to end through the hotcold binary, on the first device the Vulkan loader
// lists (lavapipe, Mesa's CPU driver, on CI; named explicitly as vulkan:0, since --device auto
// never picks a CPU implementation): dense offload (-ngl, --vram-budget) and the hot/cold split
// (--plan) give the host's greedy tokens, migration keeps them, a plan made for the device fits
// its budget at run time, and bad device flags and budgets are clear errors. Skips only when the
// build has no Vulkan backend or the loader lists no usable device (tests/device opens it
// directly and fails if it is listed but does not open).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "../app/cli_util.h"
#include "ops/device.h"
#include "vulkan_test_util.h"

namespace hc {
namespace {

using test::CliResult;
using test::has;
using test::run_hotcold;
using test::ScratchDir;


std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& extra) {
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

TEST(VulkanCli, DenseOffloadGivesTheHostTokens) {
  REQUIRE_VULKAN();
  ScratchDir dir;
  const std::string f32 = test::convert_stories260k(dir, "stories260K");
  const std::string q8 = dir.file("q8.gguf");
  ASSERT_EQ(run_hotcold({"quantize", f32, q8, "Q8_0"}).exit_code, 0);
  for (const std::string& model : {f32, q8}) {
    SCOPED_TRACE(model);
    const std::vector<std::string> gen = {"run", "-m", model, "-p", "Once upon a time", "-n",
                                          "40", "--temp", "0", "--ids"};
    CliResult host = run_hotcold(gen);
    ASSERT_EQ(host.exit_code, 0) << host.err;
    for (const char* ngl : {"1", "3", "99"}) {
      CliResult r = run_hotcold(with(gen, {"-ngl", ngl, "--device", "vulkan:0"}));
      ASSERT_EQ(r.exit_code, 0) << r.err;
      EXPECT_EQ(r.out, host.out) << "-ngl " << ngl;
      EXPECT_TRUE(has(r.err, "(Vulkan ")) << r.err;  // the device's name says which API
    }
    // A budget: every layer and the output fit in 10 MiB.
    CliResult r = run_hotcold(with(gen, {"--vram-budget", "0.01", "--device", "vulkan:0"}));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, host.out);
    EXPECT_TRUE(has(r.err, "5/5 layers' attention, 5 dense FFNs")) << r.err;
  }
  // Perplexity with two layers offloaded: fp32 on the device against the host's rounding, so
  // equal to about six digits, not bit for bit.
  const std::vector<std::string> ppl = {"perplexity", "-m", f32, "-f", test::kTinyStories, "-c",
                                        "128", "--chunks", "2"};
  CliResult p0 = run_hotcold(ppl), p1 = run_hotcold(with(ppl, {"-ngl", "2", "--device", "vulkan:0"}));
  ASSERT_EQ(p0.exit_code, 0) << p0.err;
  ASSERT_EQ(p1.exit_code, 0) << p1.err;
  double a = 0, b = 0;
  ASSERT_EQ(std::sscanf(p0.out.c_str() + p0.out.find("PPL = "), "PPL = %lf", &a), 1) << p0.out;
  ASSERT_EQ(std::sscanf(p1.out.c_str() + p1.out.find("PPL = "), "PPL = %lf", &b), 1) << p1.out;
  EXPECT_NEAR(b, a, 1e-4 * a);
}

class VulkanHotCold : public test::ReluStoriesProfileTest {};

// A plan made for the Vulkan device (bandwidths given: a slow host, so the planner fills the
// device), then the hot neurons run there while the host computes the cold ones.
TEST_F(VulkanHotCold, SplitAndMigrationGiveTheHostTokens) {
  REQUIRE_VULKAN();
  ScratchDir dir;
  const std::string plan = dir.file("plan.gguf");
  const std::string gib = "0.0005";
  CliResult p = run_hotcold({"plan", "-m", model_, "--stats", stats_, "--vram-budget", gib, "-o",
                             plan, "--device", "vulkan:0", "--host-gbps", "0.5", "--dev-gbps",
                             "400", "--link-gbps", "25", "--op-us", "0", "--sync-us", "0",
                             "--granule", "4"});
  ASSERT_EQ(p.exit_code, 0) << p.err;
  const std::vector<std::string> gen = {"run", "-m", model_, "-p", "Once", "-n", "48", "--temp",
                                        "0", "--ids", "--sparse"};
  CliResult host = run_hotcold(gen);
  ASSERT_EQ(host.exit_code, 0) << host.err;
  const std::vector<std::string> dev = {"--plan", plan, "--vram-budget", gib, "--device", "vulkan:0"};
  CliResult split = run_hotcold(with(gen, dev));
  ASSERT_EQ(split.exit_code, 0) << split.err;
  EXPECT_EQ(split.out, host.out);
  EXPECT_FALSE(has(split.err, " 0 FFN neurons")) << split.err;  // the plan put neurons there
  // Migration every 2 observed tokens, no hysteresis: neurons move, the tokens do not change.
  CliResult mig = run_hotcold(with(with(gen, dev), {"--migrate", "--migrate-every", "2",
                                                    "--hysteresis", "0"}));
  ASSERT_EQ(mig.exit_code, 0) << mig.err;
  EXPECT_EQ(mig.out, host.out);
  EXPECT_FALSE(has(mig.err, " 0 swaps")) << mig.err;
  // What the planner predicts is what the device charges, to the byte (weights, KV cache,
  // the session's buffers and the device's own operation scratch): a plan for bench's
  // context (max(-p, -n) + 1 = 16 positions), then bench under it.
  const std::string plan16 = dir.file("plan16.gguf");
  p = run_hotcold({"plan", "-m", model_, "-c", "16", "--stats", stats_, "--vram-budget", gib,
                   "-o", plan16, "--device", "vulkan:0", "--host-gbps", "0.5", "--dev-gbps", "400",
                   "--link-gbps", "25", "--op-us", "0", "--sync-us", "0", "--granule", "4"});
  ASSERT_EQ(p.exit_code, 0) << p.err;
  unsigned long long predicted = 0, budget = 0, charged = 0;
  ASSERT_EQ(std::sscanf(p.out.c_str() + p.out.find(" MiB budget ("), " MiB budget (%llu of %llu bytes)",
                        &predicted, &budget), 2) << p.out;
  CliResult b = run_hotcold({"bench", "-m", model_, "-p", "8", "-n", "15", "-r", "1",
                             "--no-membw", "--json", "--sparse", "--plan", plan16, "--vram-budget",
                             gib, "--device", "vulkan:0"});
  ASSERT_EQ(b.exit_code, 0) << b.err;
  EXPECT_TRUE(has(b.out, "\"hot_neurons\": ")) << b.out;
  ASSERT_EQ(std::sscanf(b.out.c_str() + b.out.find("\"charged_bytes\": "),
                        "\"charged_bytes\": %llu", &charged), 1) << b.out;
  EXPECT_GT(charged, 0u);
  EXPECT_EQ(charged, predicted);
  EXPECT_LE(charged, budget);
}

// A budget too small for anything: the planner places nothing and the run is the host's, with
// nothing allocated on the device (no "cannot allocate").
TEST_F(VulkanHotCold, ABudgetTooSmallForAnythingRunsOnTheHost) {
  REQUIRE_VULKAN();
  const std::vector<std::string> gen = {"run", "-m", model_, "-p", "Once", "-n", "16", "--temp",
                                        "0", "--ids", "--sparse"};
  CliResult host = run_hotcold(gen);
  ASSERT_EQ(host.exit_code, 0) << host.err;
  ScratchDir cache;
  CliResult r = run_hotcold(with(gen, {"--stats", stats_, "--vram-budget", "0.00001", "--device",
                                       "vulkan:0", "--plan-cache", cache.path()}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, host.out);
  EXPECT_TRUE(has(r.err, " 0 FFN neurons")) << r.err;
  EXPECT_TRUE(has(r.err, "0.0 MiB charged")) << r.err;
}

TEST(VulkanCli, BadDeviceFlagsAndBudgetsAreClearErrors) {
  REQUIRE_VULKAN();
  ScratchDir dir;
  const std::string model = test::convert_stories260k(dir, "stories260K");
  auto run = [&](const std::vector<std::string>& extra) {
    return run_hotcold(with({"run", "-m", model, "-p", "x", "-n", "2"}, extra));
  };
  CliResult r = run({"-ngl", "1", "--device", "vulkan:99"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(has(r.err, "Vulkan: device 99 requested, but the loader sees ")) << r.err;
  r = run({"-ngl", "1", "--device", "vulkan:x"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(has(r.err, "--device: expected vulkan:N")) << r.err;
  r = run({"-ngl", "1", "--device", "tpu"});
  EXPECT_TRUE(has(r.err, "--device: expected auto, cuda, vulkan[:N] or cpu, found 'tpu'")) << r.err;
  // One layer does not fit in ~1 KiB: an error naming the budget, no crash.
  r = run({"-ngl", "1", "--device", "vulkan:0", "--vram-budget", "0.000001"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(has(r.err, "budget")) << r.err;
  EXPECT_TRUE(has(r.err, "vulkan device: cannot allocate")) << r.err;
  // auto never picks a CPU implementation: with no Vulkan GPU (and no CUDA GPU) it says so and
  // runs on the CPU device.
  if (ops::vulkan_gpu_index() < 0 && ops::cuda_device_count() == 0) {
    r = run({"-ngl", "1", "--device", "auto"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(has(r.err, "no Vulkan GPU")) << r.err;
    EXPECT_TRUE(has(r.err, "device: cpu device")) << r.err;
  }
}

}  // namespace
}  // namespace hc
