// `--sparse` on run / perplexity / bench with the real stories260K weights run as a ReLU model
// (converted with a name containing "relu", so the FFN is ReGLU): exact ReLU with the firing
// set read off the gate (an oracle set) generates the dense run's tokens one for one and gives
// its perplexity; SwiGLU models refuse --sparse without thresholds; bad values are usage errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>

#include "cli_util.h"

namespace hc {
namespace {

using test::CliResult;
using test::has;
using test::run_hotcold;
using test::ScratchDir;

const std::string kText = "../shared/data/tinystories/tinystories_val_head.txt";

double ppl_of(const std::string& out) {
  const auto p = out.find("PPL = ");
  return p == std::string::npos ? NAN : std::atof(out.c_str() + p + 6);
}

TEST(SparseCli, ExactReluGeneratesTheDenseTokensAndPerplexity) {
  ScratchDir dir;
  const std::string model = test::convert_stories260k(dir, "stories260K-relu");
  const std::vector<std::string> gen = {"run", "-m", model, "-p", "Once upon a time", "-n", "48",
                                        "--temp", "0", "--ids", "-t", "2"};
  CliResult dense = run_hotcold(gen);
  ASSERT_EQ(dense.exit_code, 0) << dense.err;
  std::vector<std::string> sgen = gen;
  sgen.push_back("--sparse");
  CliResult sparse = run_hotcold(sgen);
  ASSERT_EQ(sparse.exit_code, 0) << sparse.err;
  EXPECT_EQ(sparse.out, dense.out);
  EXPECT_TRUE(has(sparse.err, "sparse FFN: exact ReLU")) << sparse.err;
  EXPECT_TRUE(has(sparse.err, "of activations skipped")) << sparse.err;

  const std::vector<std::string> ppl = {"perplexity", "-m", model, "-f", kText, "-c", "128",
                                        "--chunks", "4", "-t", "2"};
  CliResult pd = run_hotcold(ppl);
  ASSERT_EQ(pd.exit_code, 0) << pd.err;
  std::vector<std::string> sppl = ppl;
  sppl.push_back("--sparse");
  CliResult ps = run_hotcold(sppl);
  ASSERT_EQ(ps.exit_code, 0) << ps.err;
  const double a = ppl_of(pd.out), b = ppl_of(ps.out);
  ASSERT_TRUE(std::isfinite(a) && std::isfinite(b)) << pd.out << ps.out;
  EXPECT_NEAR(a, b, 1e-3 * a);
  EXPECT_TRUE(has(ps.out, "FFN sparsity: ")) << ps.out;

  CliResult bench = run_hotcold({"bench", "-m", model, "-p", "16", "-n", "8", "-r", "1",
                                 "--no-membw", "--sparse"});
  ASSERT_EQ(bench.exit_code, 0) << bench.err;
  EXPECT_TRUE(has(bench.out, "| FFN sparsity")) << bench.out;
}

TEST(SparseCli, SwigluNeedsThresholdsAndBadValuesAreErrors) {
  ScratchDir dir;
  const std::string model = test::convert_stories260k(dir, "stories260K");
  CliResult r = run_hotcold({"run", "-m", model, "-p", "Hi", "-n", "2", "--sparse"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(has(r.err, "needs a ReLU-family model")) << r.err;
  r = run_hotcold({"run", "-m", model, "-p", "Hi", "-n", "2", "--sparsity", "0.5"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(has(r.err, "--sparsity needs --stats")) << r.err;
  r = run_hotcold({"run", "-m", model, "-p", "Hi", "-n", "2", "--sparsity", "1.5", "--stats", "x"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(has(r.err, "expected a share in [0, 1)")) << r.err;
  r = run_hotcold({"run", "-m", model, "-p", "Hi", "-n", "2", "--sparsity", "0.5", "--stats",
                   dir.file("missing.gguf")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(has(r.err, "missing.gguf")) << r.err;
  r = run_hotcold({"run", "-m", model, "-p", "Hi", "-n", "2", "--sparsity", "abc"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
}

}  // namespace
}  // namespace hc
