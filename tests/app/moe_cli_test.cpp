// Mixture-of-experts models through the binary (tiny hc-synth-model files): run host-only and
// with experts on the CPU device (-ngl, --n-cpu-moe, --vram-budget without and with profiled
// routing, a plan of experts, --migrate) give the same tokens; profile prints and stores the
// routing; bench reports the device's share of routes; and the flags that do not apply to
// experts are clear errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "cli_util.h"
#include "format/gguf.h"
#include "core/mmap.h"

namespace hc::test {
namespace {

class MoeCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new ScratchDir();
    model_ = dir_->file("qwen3moe.gguf");
    const std::string synth =
        (std::filesystem::path(HC_BINARY).parent_path() / "hc-synth-model").string();
    ASSERT_TRUE(std::filesystem::exists(synth)) << synth << " not found: build hc-synth-model";
    CliResult r = run_binary(synth, {"--shape", "tiny", "--arch", "qwen3moe", "--experts", "16",
                                     "--experts-used", "4", "--n-ff-exp", "256", "--layers", "2",
                                     "--type", "q8_0", "-o", model_});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    dense_ = dir_->file("qwen3.gguf");
    r = run_binary(synth, {"--shape", "tiny", "--arch", "qwen3", "--layers", "1", "-o", dense_});
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  // Greedy ids of `run` with extra flags; a failure is a test failure and "".
  static std::string ids(std::vector<std::string> extra) {
    std::vector<std::string> args = {"run", "-m", model_, "-p", "Once upon a time there was",
                                     "-n", "24", "--temp", "0", "--ids", "--plan-cache",
                                     dir_->file("plans")};
    args.insert(args.end(), extra.begin(), extra.end());
    CliResult r = run_hotcold(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.exit_code == 0 ? r.out : "";
  }
  static inline ScratchDir* dir_ = nullptr;
  static inline std::string model_, dense_;
};

TEST_F(MoeCli, ExpertsOnTheCpuDeviceGiveTheHostTokens) {
  const std::string host = ids({});
  ASSERT_FALSE(host.empty());
  EXPECT_EQ(ids({"-ngl", "99", "--device", "cpu"}), host);
  EXPECT_EQ(ids({"-ngl", "99", "--n-cpu-moe", "1", "--device", "cpu"}), host);
  EXPECT_EQ(ids({"-ngl", "99", "--cpu-moe", "--device", "cpu"}), host);
  EXPECT_EQ(ids({"--vram-budget", "0.05", "--device", "cpu"}), host);  // uniform routing
  EXPECT_EQ(ids({"-ngl", "2", "--device", "cpu", "--migrate", "--migrate-every", "4"}), host);
}

TEST_F(MoeCli, ProfilePlanAndRunWithProfiledRouting) {
  const std::string stats = dir_->file("stats.gguf"), plan = dir_->file("plan.gguf");
  const std::string corpus = corpus_slice(*dir_, 6000);
  CliResult r = run_hotcold({"profile", "-m", model_, "-f", corpus, "-o", stats, "-c", "128"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "# experts: routing per layer")) << r.out;
  EXPECT_TRUE(has(r.out, "share of the 16 experts")) << r.out;
  // A device profile that makes experts worth placing (the CPU device is no faster than the
  // host here): the plan holds experts, ranked by their routing.
  r = run_hotcold({"plan", "-m", model_, "--stats", stats, "--vram-budget", "0.012", "--device",
                   "cpu", "--dev-gbps", "500", "--op-us", "0.1", "--sync-us", "1", "-o", plan});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "| layer | attention | hot experts | routing mass on device |")) << r.out;
  auto mf = MappedFile::open(plan);
  ASSERT_TRUE(mf.ok());
  auto g = parse_gguf(mf->bytes());
  ASSERT_TRUE(g.ok());
  auto unit = g->get_string("hotcold.plan.unit");
  ASSERT_TRUE(unit.ok());
  EXPECT_EQ(*unit, "expert");
  const GgufTensorInfo* bucket = g->find_tensor("blk.1.gpu_bucket");
  ASSERT_TRUE(bucket);
  EXPECT_GT(bucket->ne[0], 0) << r.out;
  const std::string host = ids({});
  EXPECT_EQ(ids({"--plan", plan, "--device", "cpu"}), host);
  EXPECT_EQ(ids({"--vram-budget", "0.012", "--stats", stats, "--device", "cpu"}), host);
  r = run_hotcold({"bench", "-m", model_, "-p", "16", "-n", "8", "-r", "1", "--plan", plan,
                   "--device", "cpu", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "\"experts\": ")) << r.out;
  EXPECT_TRUE(has(r.out, "\"device_route_share\": 0.")) << r.out;
}

TEST_F(MoeCli, FlagsThatDoNotApplyAreClearErrors) {
  struct Case {
    std::vector<std::string> args;
    const char* want;
  };
  const Case cases[] = {
      {{"--sparse"}, "routes each token to 4 of 16 experts"},
      {{"-ngl", "99", "--device", "cpu", "--dynamic"}, "no --dynamic; --migrate moves experts"},
      {{"--n-cpu-moe", "1", "--device", "cpu", "--vram-budget", "1"}, "go with -ngl"},
      {{"--migrate"}, "needs experts on a device"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = {"run", "-m", model_, "-p", "hi", "-n", "2"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    CliResult r = run_hotcold(args);
    EXPECT_NE(r.exit_code, 0) << c.args[0];
    EXPECT_TRUE(has(r.err, c.want)) << c.args[0] << ": " << r.err;
  }
  CliResult r = run_hotcold({"run", "-m", dense_, "-p", "hi", "-n", "2", "-ngl", "1",
                             "--n-cpu-moe", "1", "--device", "cpu"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(has(r.err, "has no experts")) << r.err;
  r = run_hotcold({"train-predictor", "-m", model_, "-f", kTinyStories, "-o",
                   dir_->file("x.gguf")});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(has(r.err, "routed experts")) << r.err;
}

}  // namespace
}  // namespace hc::test
