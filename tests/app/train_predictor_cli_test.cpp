// hotcold train-predictor end to end on the real stories260K weights run as a ReLU model: the
// per-layer table, the written model (PowerInfer's layout: ffn_down_t, fc1, fc2, thresholds),
// generation and perplexity with --predictor; SiLU models through a profile; usage errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "cli_util.h"

namespace hc::test {
namespace {


double ppl_of(const std::string& out) {
  const auto p = out.find("PPL = ");
  return p == std::string::npos ? NAN : std::atof(out.c_str() + p + 6);
}

// Table rows: "layer rank train held pos_weight threshold recall% precision% pred% true%".
struct Row {
  int layer, rank, train, held;
  double pos_weight, threshold, recall, precision, pred_sparsity, true_sparsity;
};

std::vector<Row> table_rows(const std::string& out) {
  std::vector<Row> rows;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    std::istringstream l(line);
    Row r{};
    char pct = 0;
    if (!(l >> r.layer >> r.rank >> r.train >> r.held >> r.pos_weight >> r.threshold)) continue;
    l >> r.recall >> pct >> r.precision >> pct >> r.pred_sparsity >> pct >> r.true_sparsity >> pct;
    if (l && pct == '%') rows.push_back(r);
  }
  return rows;
}

class TrainPredictorCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new ScratchDir();
    relu_ = test::convert_stories260k(*dir_, "stories260K-relu");
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static inline ScratchDir* dir_ = nullptr;
  static inline std::string relu_;
};

TEST_F(TrainPredictorCli, ReluModelTrainsWritesAndRunsWithPredictors) {
  ScratchDir dir;
  const std::string out = dir.file("pred.gguf");
  // Rank n_embd and a higher learning rate than the defaults: a few seconds of training give
  // a predictor good enough for the perplexity comparison below.
  CliResult r = run_hotcold({"train-predictor",
                             "-m",
                             relu_,
                             "-f",
                             kTinyStories,
                             "-o",
                             out,
                             "-c",
                             "128",
                             "--chunks",
                             "16",
                             "--epochs",
                             "15",
                             "--rank",
                             "64",
                             "--lr",
                             "1e-2",
                             "--seed",
                             "3",
                             "-t",
                             "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "relu activations, 2048 tokens seen, 2048 samples per layer")) << r.out;
  EXPECT_TRUE(has(r.err, "layer 5/5 epoch 15/15")) << r.err;
  EXPECT_TRUE(has(r.err, "collect [")) << r.err;
  const std::vector<Row> rows = table_rows(r.out);
  ASSERT_EQ(rows.size(), 5u) << r.out;
  for (const Row& row : rows) {
    EXPECT_EQ(row.rank, 64);
    EXPECT_EQ(row.held, 205);  // 10% of 2048
    EXPECT_EQ(row.train, 2048 - 205);
    EXPECT_GE(row.recall, 99.0) << row.layer;
    EXPECT_GT(row.precision, 70.0) << row.layer;  // chance would be ~50%
    EXPECT_GT(row.pred_sparsity, 25.0) << row.layer;
    EXPECT_NEAR(row.true_sparsity, 50.0, 10.0) << row.layer;
    EXPECT_LT(row.pred_sparsity, row.true_sparsity) << row.layer;
  }

  CliResult info = run_hotcold({"inspect", out, "--max-elems", "16"});
  ASSERT_EQ(info.exit_code, 0) << info.err;
  for (int il = 0; il < 5; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    EXPECT_TRUE(has(info.out, p + "ffn_down_t.weight   F32      [64, 172]")) << info.out;
    EXPECT_TRUE(has(info.out, p + "fc1.weight          F16      [64, 64]")) << info.out;
    EXPECT_TRUE(has(info.out, p + "fc2.weight          F16      [64, 172]")) << info.out;
  }
  EXPECT_FALSE(has(info.out, "ffn_down.weight")) << info.out;
  EXPECT_TRUE(has(info.out, "powerinfer.sparse_threshold             float32  0")) << info.out;
  EXPECT_TRUE(has(info.out, "hotcold.predictor.thresholds            array    [float32 x 5]"));
  EXPECT_TRUE(
      has(info.out, "hotcold.predictor.rank                  array    [uint32 x 5] 64, 64"));
  EXPECT_TRUE(has(info.out, "hotcold.predictor.recall")) << info.out;
  EXPECT_TRUE(has(info.out, "hotcold.predictor.precision")) << info.out;
  EXPECT_TRUE(has(info.out, "tokenizer.ggml.tokens")) << info.out;  // metadata copied through

  CliResult gen = run_hotcold(
      {"run", "-m", out, "--predictor", "--temp", "0", "-n", "32", "-p", "Once upon a time"});
  ASSERT_EQ(gen.exit_code, 0) << gen.err;
  EXPECT_TRUE(has(gen.err, "activation predictors")) << gen.err;
  EXPECT_GT(gen.out.size(), 40u) << gen.out;

  const std::vector<std::string> ppl = {"perplexity", "-m",  out,        "-f", kTinyStories,
                                        "-c",         "128", "--chunks", "4"};
  CliResult dense = run_hotcold(ppl);
  ASSERT_EQ(dense.exit_code, 0) << dense.err;
  std::vector<std::string> pppl = ppl;
  pppl.push_back("--predictor");
  CliResult pred = run_hotcold(pppl);
  ASSERT_EQ(pred.exit_code, 0) << pred.err;
  CliResult orig =
      run_hotcold({"perplexity", "-m", relu_, "-f", kTinyStories, "-c", "128", "--chunks", "4"});
  ASSERT_EQ(orig.exit_code, 0) << orig.err;
  const double d = ppl_of(dense.out), p = ppl_of(pred.out), o = ppl_of(orig.out);
  ASSERT_TRUE(std::isfinite(d) && std::isfinite(p)) << dense.out << pred.out;
  std::printf("perplexity: dense %.4f (input model %.4f), --predictor %.4f\n", d, o, p);
  EXPECT_NEAR(d, o, 1e-3 * o);  // ffn_down_t in place of ffn_down: the same model
  EXPECT_NEAR(p, d, 0.02 * d);
  EXPECT_TRUE(has(pred.out, "FFN sparsity: ")) << pred.out;
  // --pred-threshold replaces every layer's threshold (PowerInfer's
  // LLAMA_SPARSE_PRED_THRESHOLD): far above every logit nothing is predicted, every activation
  // is skipped; and it needs --predictor.
  std::vector<std::string> high = pppl;
  high.insert(high.end(), {"--pred-threshold", "1e30"});
  CliResult none = run_hotcold(high);
  ASSERT_EQ(none.exit_code, 0) << none.err;
  EXPECT_TRUE(has(none.out, "FFN sparsity: 100.00% of activations skipped")) << none.out;
  std::vector<std::string> no_pred = ppl;
  no_pred.insert(no_pred.end(), {"--pred-threshold", "0"});
  CliResult bad = run_hotcold(no_pred);
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_TRUE(has(bad.err, "--pred-threshold needs --predictor")) << bad.err;
  // --pred-type converts the predictors at load: the same model within the predictors'
  // rounding; an unknown type, or no --predictor, is an error.
  std::vector<std::string> q8 = pppl;
  q8.insert(q8.end(), {"--pred-type", "q8_0"});
  CliResult pq = run_hotcold(q8);
  ASSERT_EQ(pq.exit_code, 0) << pq.err;
  EXPECT_NEAR(ppl_of(pq.out), p, 0.01 * p);
  std::vector<std::string> bogus = pppl;
  bogus.insert(bogus.end(), {"--pred-type", "q9_9"});
  CliResult bt = run_hotcold(bogus);
  EXPECT_NE(bt.exit_code, 0);
  EXPECT_TRUE(has(bt.err, "--pred-type: unknown type 'q9_9'")) << bt.err;
  std::vector<std::string> nopred = ppl;
  nopred.insert(nopred.end(), {"--pred-type", "q8_0"});
  CliResult np = run_hotcold(nopred);
  EXPECT_NE(np.exit_code, 0);
  EXPECT_TRUE(has(np.err, "--pred-type needs --predictor")) << np.err;
}

// Falcon (ReluFalcon: ungated ReLU on attn_norm, parallel blocks) and OPT (biases, ffn_down.bias
// carried to PowerInfer's ffn_down_t.bias): profile, train-predictor and the written model run,
// dense equal to the input model, with predictors close to it.
TEST(TrainPredictorFamilies, FalconAndOptProfileTrainAndRun) {
  const std::string synth =
      (std::filesystem::path(HC_BINARY).parent_path() / "hc-synth-model").string();
  ASSERT_TRUE(std::filesystem::exists(synth)) << synth << " not found: build hc-synth-model";
  for (const std::vector<std::string>& arch :
       {std::vector<std::string>{"--arch", "falcon", "--act", "relu"},
        std::vector<std::string>{"--arch", "opt"}}) {
    ScratchDir dir;
    const std::string model = dir.file("m.gguf"), out = dir.file("pred.gguf");
    std::vector<std::string> args = {"--shape", "tiny", "--layers", "2", "--seed", "2", "-o", model};
    args.insert(args.end(), arch.begin(), arch.end());
    CliResult r = run_binary(synth, args);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const std::string corpus = corpus_slice(dir, 20000);
    r = run_hotcold({"profile", "-m", model, "-f", corpus, "-o", dir.file("st.gguf"), "-c", "64",
                     "--chunks", "3"});
    ASSERT_EQ(r.exit_code, 0) << arch[1] << ": " << r.err;
    EXPECT_TRUE(has(r.out, "relu activations, fires when act != 0")) << r.out;
    r = run_hotcold({"train-predictor", "-m", model, "-f", corpus, "-o", out, "-c", "64",
                     "--chunks", "8", "--epochs", "3", "--rank", "32", "--seed", "3"});
    ASSERT_EQ(r.exit_code, 0) << arch[1] << ": " << r.err;
    ASSERT_EQ(table_rows(r.out).size(), 2u) << r.out;
    CliResult info = run_hotcold({"inspect", out});
    ASSERT_EQ(info.exit_code, 0) << info.err;
    EXPECT_TRUE(has(info.out, "blk.1.fc2.weight")) << info.out;
    EXPECT_TRUE(has(info.out, "blk.1.ffn_down_t.weight")) << info.out;
    EXPECT_FALSE(has(info.out, "blk.1.ffn_down.weight")) << info.out;
    EXPECT_EQ(has(info.out, "blk.1.ffn_down_t.bias"), arch[1] == "opt") << info.out;
    const std::vector<std::string> ppl = {"perplexity", "-f", corpus, "-c", "64", "--chunks", "4"};
    auto ppl_on = [&](const std::string& m, bool pred) {
      std::vector<std::string> a = ppl;
      a.insert(a.end(), {"-m", m});
      if (pred) a.push_back("--predictor");
      CliResult c = run_hotcold(a);
      EXPECT_EQ(c.exit_code, 0) << c.err;
      return ppl_of(c.out);
    };
    const double orig = ppl_on(model, false), dense = ppl_on(out, false), pred = ppl_on(out, true);
    ASSERT_TRUE(std::isfinite(orig) && std::isfinite(dense) && std::isfinite(pred));
    EXPECT_NEAR(dense, orig, 1e-3 * orig) << arch[1];  // ffn_down_t for ffn_down: the same model
    EXPECT_NEAR(pred, dense, 0.05 * dense) << arch[1];
  }
}

TEST_F(TrainPredictorCli, SameSeedSameFileOnAnyThreadCount) {
  ScratchDir dir;
  const std::string corpus = corpus_slice(dir, 8000);
  std::vector<std::string> files;
  for (const char* t : {"1", "2"}) {
    files.push_back(dir.file(std::string("p") + t + ".gguf"));
    CliResult r = run_hotcold({"train-predictor", "-m", relu_, "-f", corpus, "-o", files.back(),
                               "-c", "64", "--chunks", "4", "--epochs", "2", "--seed", "9",
                               "--max-samples", "200", "-t", t});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(has(r.out, "256 tokens seen, 200 samples per layer")) << r.out;
  }
  const std::string a = read_all(files[0]);
  EXPECT_FALSE(a.empty());
  EXPECT_TRUE(a == read_all(files[1]));
}

TEST_F(TrainPredictorCli, SiluModelNeedsAProfile) {
  ScratchDir dir;
  const std::string silu = test::convert_stories260k(dir, "stories260K");
  const std::string corpus = corpus_slice(dir, 8000);
  const std::string out = dir.file("pred.gguf");
  CliResult r = run_hotcold(
      {"train-predictor", "-m", silu, "-f", corpus, "-o", out, "-c", "64", "--chunks", "2"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(has(r.err, "hotcold train-predictor: error: SiLU model")) << r.err;
  EXPECT_TRUE(has(r.err, "--stats")) << r.err;
  EXPECT_FALSE(std::ifstream(out).good());

  const std::string stats = dir.file("s.stats.gguf");
  r = run_hotcold({"profile", "-m", silu, "-f", corpus, "-o", stats, "-c", "64", "--chunks", "2",
                   "--sparsity", "0.7"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = run_hotcold({"train-predictor", "-m", silu, "-f", corpus, "-o", out, "-c", "64", "--chunks",
                   "4", "--epochs", "2", "--stats", stats, "--sparsity", "0.8"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "silu activations")) << r.out;
  const std::vector<Row> rows = table_rows(r.out);
  ASSERT_EQ(rows.size(), 5u) << r.out;
  for (const Row& row : rows) EXPECT_NEAR(row.true_sparsity, 80.0, 8.0) << r.out;
  // A profile of another model is refused.
  const std::string relu_stats = dir.file("relu.stats.gguf");
  r = run_hotcold(
      {"profile", "-m", relu_, "-f", corpus, "-o", relu_stats, "-c", "64", "--chunks", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = run_hotcold(
      {"train-predictor", "-m", silu, "-f", corpus, "-o", out, "-c", "64", "--stats", relu_stats});
  EXPECT_EQ(r.exit_code, 1) << r.err;
}

TEST_F(TrainPredictorCli, BadFlagsAreUsageErrors) {
  const std::vector<std::string> base = {"train-predictor",   "-m", relu_, "-f", kTinyStories, "-o",
                                         dir_->file("x.gguf")};
  struct Case {
    std::vector<std::string> extra;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"--epochs", "0"}, "--epochs: expected at least 1"},
      {{"--lr", "-1"}, "--lr: expected a positive learning rate"},
      {{"--batch", "0"}, "--batch: expected a positive batch size"},
      {{"--rank", "-3"}, "--rank: expected a rank >= 1 (0: the default)"},
      {{"--pos-weight", "heavy"},
       "--pos-weight: expected 'auto' or a positive number, found 'heavy'"},
      {{"--pos-weight", "0"}, "--pos-weight: expected 'auto' or a positive number"},
      {{"--held-out", "1.5"}, "--held-out: expected a share in (0, 1)"},
      {{"--target-recall", "0"}, "--target-recall: expected a value in (0, 1]"},
      {{"--max-samples", "1"}, "--max-samples: expected at least 2"},
      {{"--sparsity", "0.5"}, "--sparsity needs --stats"},
      {{"--stats", "s.gguf", "--sparsity", "1.5"}, "--sparsity: expected a share in [0, 1)"},
      {{"-c", "1"}, "-c: expected at least 2 tokens per chunk"},
      {{"--chunks", "0"}, "--chunks: expected a positive number"},
      {{"--epochs", "many"}, "--epochs"},
      {{"--no-such-flag"}, "--no-such-flag"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = base;
    args.insert(args.end(), c.extra.begin(), c.extra.end());
    CliResult r = run_hotcold(args);
    EXPECT_EQ(r.exit_code, 2) << c.message << ": " << r.err;
    EXPECT_TRUE(has(r.err, "hotcold train-predictor: error: ")) << r.err;
    EXPECT_TRUE(has(r.err, c.message)) << r.err;
  }
  CliResult r = run_hotcold({"train-predictor", "-m", relu_, "-f", kTinyStories});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(has(r.err, "expected -o OUT.gguf")) << r.err;
  r = run_hotcold({"train-predictor", "-m", relu_, "-f", kTinyStories, "-o", relu_});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(has(r.err, "is the input model")) << r.err;
  r = run_hotcold({"train-predictor", "--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_TRUE(has(r.out, "--target-recall")) << r.out;
  // A missing corpus is a runtime error.
  r = run_hotcold(
      {"train-predictor", "-m", relu_, "-f", dir_->file("none.txt"), "-o", dir_->file("y.gguf")});
  EXPECT_EQ(r.exit_code, 1) << r.err;
}

}  // namespace
}  // namespace hc::test
