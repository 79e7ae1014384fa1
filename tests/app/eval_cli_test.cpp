// hotcold eval on the real stories260K model (a small subset of every task) and the dynamic
// sparsity flags of run / bench: results files, the merged report and plots, resuming, errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli_util.h"

namespace hc {
namespace {

using test::CliResult;
using test::has;
using test::run_hotcold;
using test::ScratchDir;

int count_lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

std::vector<std::string> eval_args(const std::string& model, const std::string& out, int limit) {
  return {"eval", "-m", model, "--tasks", "tinystories,code-ppl,humaneval,mbpp", "--limit",
          std::to_string(limit), "--n-predict", "8", "--ppl-chunks", "2", "--ppl-ctx", "64",
          "-o", out, "-t", "2"};
}

TEST(EvalCli, WritesResultsReportAndPlotsAndResumes) {
  ScratchDir dir;
  const std::string model = test::convert_stories260k(dir, "stories260K-relu");
  const std::string out = dir.file("out");
  CliResult dense = run_hotcold(eval_args(model, out, 2));
  ASSERT_EQ(dense.exit_code, 0) << dense.err;
  EXPECT_TRUE(has(dense.err, "humaneval [")) << "progress bar: " << dense.err;
  const auto summary = nlohmann::json::parse(test::read_all(out + "/dense/summary.json"));
  EXPECT_EQ(summary["label"], "dense");
  EXPECT_EQ(summary["tasks"]["humaneval"]["problems"], 2);
  EXPECT_EQ(summary["tasks"]["mbpp"]["problems"], 2);
  // 0 of 2 passed: pass@1 0 with its 95% Wilson interval [0, 0.658].
  EXPECT_EQ(summary["tasks"]["humaneval"]["passed"], 0);
  EXPECT_EQ(summary["tasks"]["humaneval"]["pass@1_ci95"][0].get<double>(), 0.0);
  EXPECT_NEAR(summary["tasks"]["humaneval"]["pass@1_ci95"][1].get<double>(), 0.6576, 1e-4);
  const double ppl = summary["tasks"]["tinystories"]["ppl"].get<double>();
  EXPECT_GT(ppl, 1.0);
  EXPECT_LT(ppl, 300.0);  // a real model on its own domain (run as ReLU: worse than its SiLU)
  EXPECT_GT(summary["tasks"]["code-ppl"]["ppl"].get<double>(), ppl)
      << "stories260K knows stories, not Python";
  EXPECT_GT(summary["speed"]["gen_tok_s"].get<double>(), 0.0);
  const std::string he = test::read_all(out + "/dense/humaneval.jsonl");
  EXPECT_EQ(count_lines(he), 2);
  // Every problem ran in the sandbox and got an outcome (this model cannot write Python).
  for (const char* id : {"HumanEval/0", "HumanEval/1"}) EXPECT_TRUE(has(he, id)) << he;
  EXPECT_TRUE(has(he, "\"outcome\":\"failed\"")) << he;

  // A sparse configuration with the threshold controller: its own row, statistics, a trace.
  std::vector<std::string> sargs = eval_args(model, out, 2);
  sargs.insert(sargs.end(), {"--sparse", "--dynamic", "--dyn-target", "sparsity:0.7"});
  CliResult sp = run_hotcold(sargs);
  ASSERT_EQ(sp.exit_code, 0) << sp.err;
  const auto s2 = nlohmann::json::parse(test::read_all(out + "/relu-dyn/summary.json"));
  EXPECT_GT(s2["dynamic"]["audited_tokens"].get<double>(), 100.0);
  EXPECT_NEAR(s2["sparse"]["sparsity"].get<double>(), 0.7, 0.1);
  EXPECT_TRUE(std::filesystem::exists(out + "/relu-dyn/trace.csv"));
  // The same command again has nothing left to run: the statistics and the trace of the run that
  // measured them stay (a rerun used to overwrite them with an idle session's zeros).
  const std::string trace = test::read_all(out + "/relu-dyn/trace.csv");
  CliResult idle = run_hotcold(sargs);
  ASSERT_EQ(idle.exit_code, 0) << idle.err;
  EXPECT_TRUE(has(idle.err, "every task resumed")) << idle.err;
  const auto s2b = nlohmann::json::parse(test::read_all(out + "/relu-dyn/summary.json"));
  for (const char* part : {"sparse", "dynamic", "speed"}) EXPECT_EQ(s2b[part], s2[part]) << part;
  EXPECT_EQ(test::read_all(out + "/relu-dyn/trace.csv"), trace);
  const std::string md = test::read_all(out + "/results.md");
  EXPECT_TRUE(has(md, "| dense |")) << md;
  EXPECT_TRUE(has(md, "| 0.000 (0.000-0.658) | 0.000 (0.000-0.658) |")) << md;
  EXPECT_TRUE(has(md, "| relu-dyn |")) << md;
  const auto all = nlohmann::json::parse(test::read_all(out + "/results.json"));
  EXPECT_EQ(all.size(), 2u);
  for (const char* png : {"ppl_vs_sparsity.png", "pass_vs_sparsity.png"}) {
    const std::string bytes = test::read_all(out + "/" + png);
    ASSERT_GT(bytes.size(), 8u) << png;
    EXPECT_EQ(bytes.substr(1, 3), "PNG") << png;
  }

  // Rerun with a larger limit: the finished problems are kept, only the new one runs.
  CliResult again = run_hotcold(eval_args(model, out, 3));
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_TRUE(has(again.err, "humaneval: 2 problems resumed")) << again.err;
  EXPECT_TRUE(has(again.err, "tinystories: kept from")) << again.err;
  EXPECT_EQ(count_lines(test::read_all(out + "/dense/humaneval.jsonl")), 3);
  const auto s3 = nlohmann::json::parse(test::read_all(out + "/dense/summary.json"));
  EXPECT_EQ(s3["tasks"]["humaneval"]["problems"], 3);
  EXPECT_EQ(s3["tasks"]["tinystories"]["ppl"].get<double>(), ppl);

  // --report alone rebuilds the merged files.
  std::filesystem::remove(out + "/results.md");
  CliResult rep = run_hotcold({"eval", "--report", "-o", out});
  ASSERT_EQ(rep.exit_code, 0) << rep.err;
  EXPECT_TRUE(has(test::read_all(out + "/results.md"), "| relu-dyn |"));
}

TEST(EvalCli, BadFlagsAndInputsAreClearErrors) {
  ScratchDir dir;
  const std::string model = test::convert_stories260k(dir, "stories260K-relu");
  CliResult r = run_hotcold({"eval", "-m", model, "--tasks", "humaneval,bogus"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(has(r.err, "unknown task 'bogus'")) << r.err;
  r = run_hotcold({"eval", "-m", model, "--label", "a/b"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(has(r.err, "--label")) << r.err;
  r = run_hotcold({"eval", "-m", model, "--dyn-target", "recall:2"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(has(r.err, "--dyn-target")) << r.err;
  r = run_hotcold({"eval", "-m", model, "--dynamic", "--tasks", "tinystories", "-o",
                   dir.file("o")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(has(r.err, "need a sparse FFN")) << r.err;
  r = run_hotcold({"eval", "-m", model, "--tasks", "mbpp", "--data", dir.file("nodata"), "-o",
                   dir.file("o")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(has(r.err, "nodata")) << r.err;
  r = run_hotcold({"eval"});
  EXPECT_EQ(r.exit_code, 2);
}

TEST(DynamicCli, RunAndBenchTakeTheDynamicFlags) {
  ScratchDir dir;
  const std::string model = test::convert_stories260k(dir, "stories260K-relu");
  CliResult b = run_hotcold({"bench", "-m", model, "-p", "0", "-n", "64", "-r", "1", "--no-membw",
                             "--sparse", "--dynamic", "--dyn-target", "sparsity:0.8"});
  ASSERT_EQ(b.exit_code, 0) << b.err;
  EXPECT_TRUE(has(b.out, "| audited tokens | recall of activation mass")) << b.out;
  CliResult j = run_hotcold({"bench", "-m", model, "-p", "0", "-n", "64", "-r", "1", "--no-membw",
                             "--sparse", "--dynamic", "--dyn-target", "sparsity:0.8", "--json"});
  ASSERT_EQ(j.exit_code, 0) << j.err;
  // One JSON object (the help says so): the sparse and dynamic sections are its members.
  const auto dyn = nlohmann::json::parse(j.out, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(dyn.is_object()) << j.out;
  EXPECT_NEAR(dyn["dynamic"]["sparsity"].get<double>(), 0.8, 0.08);
  EXPECT_NEAR(dyn["sparse"]["ffn_sparsity"].get<double>(), 0.8, 0.08);
  // Weight bytes of a sparse run: what the sparse FFN read, fewer than the dense model's.
  EXPECT_LT(dyn["tg"]["weight_gb_per_token"].get<double>(),
            dyn["tg"]["weight_gb_per_token_dense"].get<double>());
  CliResult r = run_hotcold({"run", "-m", model, "-p", "Once", "-n", "4", "--sparse", "--migrate"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(has(r.err, "needs hot neurons on a device")) << r.err;
  r = run_hotcold({"run", "-m", model, "-p", "Once", "-n", "4", "--dynamic"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(has(r.err, "needs a sparse FFN")) << r.err;
  r = run_hotcold({"run", "-m", model, "-p", "Once", "-n", "4", "--sparse", "--dynamic",
                   "--dyn-audit", "0"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(has(r.err, "--dyn-audit")) << r.err;
}

}  // namespace
}  // namespace hc
