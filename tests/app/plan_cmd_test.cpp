// hotcold plan end to end on the real stories260K weights run as a ReLU model: statistics from
// hotcold profile, a plan under a budget on the CPU device (given bandwidths, so nothing is
// measured), the per-layer table, and the plan file read back: within the budget, of the
// model's shape, each layer's device neurons the most frequent ones of that layer's own
// statistics. Plus the usage and runtime errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <sstream>

#include "cli_util.h"
#include "model/act_stats.h"
#include "sparse/placement_plan.h"
#include "sparse/planner.h"

namespace hc {
namespace {

using test::CliResult;
using test::has;
using test::run_hotcold;
using test::ScratchDir;

class PlanCli : public test::ReluStoriesProfileTest {
 protected:
  // The flags every run shares: the CPU device, bandwidths given (no probe), a short ILP.
  static std::vector<std::string> base_args(const std::string& out, const std::string& gib) {
    return {"plan", "-m", model_, "--stats", stats_, "--vram-budget", gib, "-o", out,
            "--device", "cpu", "--host-gbps", "20", "--dev-gbps", "400", "--link-gbps", "25",
            "--time-limit", "5", "--granule", "4"};
  }
};

// Rows of the per-layer table: "| layer | attention | hot / n_ff | ..." in Markdown.
int table_rows(const std::string& out) {
  int n = 0;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    int layer = -1;
    char attn[16] = {};
    if (std::sscanf(line.c_str(), "| %d | %15s |", &layer, attn) == 2) ++n;
  }
  return n;
}

TEST_F(PlanCli, WritesAPlanWithinTheBudgetFromEachLayersOwnStatistics) {
  ScratchDir dir;
  const std::string out = dir.file("plan.gguf");
  for (const char* gib : {"0", "0.0005", "1"}) {
    SCOPED_TRACE(gib);
    CliResult r = run_hotcold(base_args(out, gib));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(table_rows(r.out), 5) << r.out;
    EXPECT_TRUE(has(r.out, "predicted: ")) << r.out;
    EXPECT_TRUE(has(r.out, "greedy")) << r.out;
    EXPECT_TRUE(has(r.out, "ilp")) << r.out;
    EXPECT_FALSE(std::filesystem::exists(out + ".tmp"));

    auto plan = sparse::read_plan(out);
    ASSERT_TRUE(plan.ok()) << plan.message();
    EXPECT_TRUE(plan->check_matches(5, 172).ok());
    const uint64_t budget = static_cast<uint64_t>(std::atof(gib) * 1073741824.0);
    EXPECT_EQ(plan->budget_bytes, budget);
    EXPECT_EQ(plan->model_id, *sparse::file_identity(model_));
    EXPECT_EQ(plan->stats_id, *sparse::file_identity(stats_));
    EXPECT_GT(plan->predicted_tok_s, 0.0f);
    EXPECT_TRUE(plan->solver == "greedy" || plan->solver == "ilp") << plan->solver;
    if (budget == 0) {
      EXPECT_EQ(plan->n_hot_total(), 0);
    }

    double used_mib = -1, budget_mib = -1;
    const size_t at = r.out.find("device bytes: ");
    ASSERT_NE(at, std::string::npos) << r.out;
    ASSERT_EQ(std::sscanf(r.out.c_str() + at, "device bytes: %lf MiB of a %lf MiB budget",
                          &used_mib, &budget_mib),
              2)
        << r.out;
    EXPECT_LE(used_mib, budget_mib);

    auto st = ActStats::read(stats_);
    ASSERT_TRUE(st.ok());
    for (int il = 0; il < 5; ++il) {
      SCOPED_TRACE(il);
      auto p = sparse::fire_probabilities(st->fire_count(il), st->n_tokens());
      ASSERT_TRUE(p.ok());
      const auto& hot = plan->layers[static_cast<size_t>(il)].hot;
      std::vector<int32_t> order = sparse::neurons_by_frequency(*p);
      std::vector<int32_t> top(order.begin(), order.begin() + static_cast<int64_t>(hot.size()));
      std::sort(top.begin(), top.end());
      EXPECT_EQ(hot, top);
    }
  }
}

TEST_F(PlanCli, SolversAndAGenerousBudget) {
  ScratchDir dir;
  for (const char* solver : {"greedy", "ilp", "best"}) {
    SCOPED_TRACE(solver);
    const std::string out = dir.file(std::string(solver) + ".gguf");
    std::vector<std::string> args = base_args(out, "1");
    args.insert(args.end(), {"--solver", solver});
    CliResult r = run_hotcold(args);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto plan = sparse::read_plan(out);
    ASSERT_TRUE(plan.ok()) << plan.message();
    if (std::string(solver) != "best") {
      EXPECT_EQ(plan->solver, solver);
    }
  }
}

// A plan made for a device fits it at run time under the same budget: the planner counts what
// the device charges (allocation rounding; the CPU device's decode layout beside ggml's rows
// for the hot gate rows of a Q8_0 model), and plan loads the model as run does. Budgets where
// the plan fills the budget; a planner counting file rows only overshot at load.
TEST_F(PlanCli, APlanFitsTheBudgetItWasMadeForAtRunTime) {
  ScratchDir dir;
  const std::string q8 = dir.file("relu-q8.gguf");
  CliResult q = run_hotcold({"quantize", model_, q8, "Q8_0"});
  ASSERT_EQ(q.exit_code, 0) << q.err;
  for (const char* gib : {"0.0005", "0.0007"}) {
    SCOPED_TRACE(gib);
    const std::string plan_file = dir.file(std::string("plan-") + gib + ".gguf");
    // A slow host and free round trips, so the device is worth filling.
    CliResult r = run_hotcold({"plan", "-m", q8, "--stats", stats_, "--vram-budget", gib, "-o",
                               plan_file, "--device", "cpu", "--host-gbps", "0.5", "--dev-gbps",
                               "400", "--link-gbps", "25", "--op-us", "0", "--sync-us", "0",
                               "--time-limit", "5", "--granule", "4"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    double used_mib = -1, budget_mib = -1;
    const size_t at = r.out.find("device bytes: ");
    ASSERT_NE(at, std::string::npos) << r.out;
    ASSERT_EQ(std::sscanf(r.out.c_str() + at, "device bytes: %lf MiB of a %lf MiB budget",
                          &used_mib, &budget_mib),
              2);
    EXPECT_GT(used_mib, 0.75 * budget_mib) << r.out;  // the budget binds
    auto plan = sparse::read_plan(plan_file);
    ASSERT_TRUE(plan.ok()) << plan.message();
    EXPECT_GT(plan->n_hot_total(), 5 * 16);  // some layer has a group of 16 hot rows or more
    CliResult run = run_hotcold({"run", "-m", q8, "--sparse", "--device", "cpu", "--plan",
                                 plan_file, "--vram-budget", gib, "-p", "Once upon", "-n", "4",
                                 "--temp", "0"});
    EXPECT_EQ(run.exit_code, 0) << run.err;
    EXPECT_FALSE(has(run.err, "cannot allocate")) << run.err;
  }
}

TEST_F(PlanCli, Errors) {
  ScratchDir dir;
  const std::string out = dir.file("p.gguf");
  // Statistics recorded on another shape (3 layers of 100 neurons).
  const std::string other = dir.file("other.stats.gguf");
  ASSERT_TRUE(ActStats(3, 100, FfnActivation::kRelu).write(other, "x", "y").ok());
  struct Case {
    std::vector<std::string> args;
    std::string msg;
  };
  const Case cases[] = {
      {{"plan", "-m", model_, "--vram-budget", "1", "-o", out}, "--stats"},
      {{"plan", "-m", model_, "--stats", stats_, "--vram-budget", "1"}, "-o"},
      {{"plan", "-m", model_, "--stats", stats_, "-o", out}, "--vram-budget"},
      {{"plan", "-m", model_, "--stats", stats_, "-o", out, "--vram-budget", "-1"},
       "--vram-budget"},
      {{"plan", "-m", model_, "--stats", stats_, "-o", out, "--vram-budget", "nan"},
       "--vram-budget"},
      {{"plan", "-m", model_, "--stats", other, "-o", out, "--vram-budget", "1", "--device",
        "cpu", "--host-gbps", "20"},
       "n_layer"},
      {{"plan", "-m", model_, "--stats", dir.file("missing.gguf"), "-o", out, "--vram-budget",
        "1", "--device", "cpu", "--host-gbps", "20"},
       "missing.gguf"},
      {{"plan", "-m", model_, "--stats", stats_, "-o", out, "--vram-budget", "1", "--device",
        "cpu", "--host-gbps", "20", "--solver", "magic"},
       "--solver"},
  };
  for (const Case& c : cases) {
    const CliResult r = run_hotcold(c.args);
    EXPECT_NE(r.exit_code, 0) << c.msg;
    EXPECT_TRUE(has(r.err, "hotcold plan: error: ")) << r.err;
    EXPECT_TRUE(has(r.err, c.msg)) << c.msg << " in: " << r.err;
    EXPECT_FALSE(std::filesystem::exists(out));
  }
}

}  // namespace
}  // namespace hc
