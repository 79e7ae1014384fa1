// hotcold profile end to end: the per-layer table, the statistics file (read back through
// ActStats) and the PNG plot, on the real stories260K model (SiLU) and a tiny synthetic ReLU
// model; plus its usage errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <sstream>

#include "cli_util.h"
#include "model/act_stats.h"

namespace hc::test {
namespace {


uint32_t be32(const std::string& s, size_t at) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data() + at);
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

// A PNG's signature, IHDR size and chunk structure (the pixels are checked in png_test).
void expect_png(const std::string& path, uint32_t width, uint32_t height) {
  const std::string f = read_all(path);
  ASSERT_GT(f.size(), 33u) << path;
  EXPECT_EQ(f.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  EXPECT_EQ(f.substr(12, 4), "IHDR");
  EXPECT_EQ(be32(f, 16), width);
  EXPECT_EQ(be32(f, 20), height);
  size_t pos = 8;
  std::string last;
  while (pos + 12 <= f.size()) {
    last = f.substr(pos + 4, 4);
    pos += 12 + be32(f, pos);
  }
  EXPECT_EQ(pos, f.size());
  EXPECT_EQ(last, "IEND");
  // 8-bit RGB, stored: at least 3 bytes a pixel.
  EXPECT_GT(f.size(), size_t{width} * height * 3);
}

// Table rows: "layer threshold firing% top50% top80% top90% top99%".
struct Row {
  int layer;
  double threshold, firing, top[4];
};

std::vector<Row> table_rows(const std::string& out) {
  std::vector<Row> rows;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    std::istringstream l(line);
    Row r{};
    char pct;
    if (!(l >> r.layer >> r.threshold >> r.firing >> pct)) continue;
    for (double& t : r.top) l >> t >> pct;
    if (l) rows.push_back(r);
  }
  return rows;
}

class ProfileCli : public StoriesModelTest {};

TEST_F(ProfileCli, SiluModelTableStatsAndPlot) {
  ScratchDir dir;
  const std::string corpus = corpus_slice(dir, 20000);
  const std::string stats = dir.file("s.stats.gguf");
  CliResult r = run_hotcold({"profile", "-m", model_, "-f", corpus, "-o", stats, "--chunks", "2",
                             "-c", "128", "--sparsity", "0.7"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "silu activations")) << r.out;
  EXPECT_TRUE(has(r.out, "sparsity target 0.70")) << r.out;
  EXPECT_TRUE(has(r.out, "layer   threshold   firing   top50%   top80%   top90%   top99%"))
      << r.out;
  EXPECT_TRUE(has(r.out, "tokens: 256 (2 chunks of 128)")) << r.out;
  EXPECT_TRUE(has(r.err, "calibrate")) << r.err;
  EXPECT_TRUE(has(r.err, "2/2 chunks")) << r.err;

  auto st = ActStats::read(stats);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(st->n_layer(), 5);
  EXPECT_EQ(st->n_ff(), 172);
  EXPECT_EQ(st->n_tokens(), 256u);
  EXPECT_EQ(st->activation(), FfnActivation::kSilu);
  EXPECT_FLOAT_EQ(st->sparsity_target(), 0.7f);
  EXPECT_EQ(st->corpus(), corpus);
  EXPECT_EQ(st->model_name(), "stories260K.gguf");

  const std::vector<Row> rows = table_rows(r.out);
  ASSERT_EQ(rows.size(), 5u) << r.out;
  for (int il = 0; il < 5; ++il) {
    SCOPED_TRACE(il);
    const Row& row = rows[static_cast<size_t>(il)];
    EXPECT_EQ(row.layer, il);
    EXPECT_GT(st->threshold(il), 0.0f);
    EXPECT_NEAR(row.threshold, st->threshold(il), 1e-4 * st->threshold(il));
    double fired = 0, abs_sum = 0;
    for (float c : st->fire_count(il)) {
      EXPECT_GE(c, 0.0f);
      EXPECT_LE(c, 256.0f);
      EXPECT_EQ(c, std::floor(c));
      fired += c;
    }
    for (float a : st->act_abs_sum(il)) abs_sum += a;
    EXPECT_GT(abs_sum / (256.0 * 172), st->threshold(il) * 0.1);
    // Calibrated on these same tokens: 30% fire, to within the histogram's bin resolution.
    EXPECT_NEAR(fired / (256.0 * 172), 0.3, 0.01);
    EXPECT_NEAR(row.firing, 100 * fired / (256.0 * 172), 0.01);
    EXPECT_NEAR(row.top[0], 100 * st->neurons_covering(il, 0.5), 0.01);
    EXPECT_NEAR(row.top[3], 100 * st->neurons_covering(il, 0.99), 0.01);
    EXPECT_LE(row.top[0], row.top[1]);
    EXPECT_LE(row.top[1], row.top[2]);
    EXPECT_LE(row.top[2], row.top[3]);
    const auto& h = st->act_hist(il);
    EXPECT_EQ(std::accumulate(h.begin(), h.end(), 0.0), 256.0 * 172);
  }
  expect_png(dir.file("s.stats.png"), 1000, 640);
  EXPECT_FALSE(std::filesystem::exists(stats + ".tmp"));
}

TEST_F(ProfileCli, DefaultSparsityAndPlotPath) {
  ScratchDir dir;
  const std::string corpus = corpus_slice(dir, 20000);
  const std::string plot = dir.file("cdf.png");
  CliResult r = run_hotcold({"profile", "-m", model_, "-f", corpus, "-o", dir.file("out.bin"),
                             "--chunks", "1", "-c", "128", "--plot", plot, "--calib-tokens", "64"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "sparsity target 0.50")) << r.out;
  EXPECT_TRUE(has(r.out, "calibration: 128 tokens")) << r.out;  // whole chunks
  expect_png(plot, 1000, 640);
  auto st = ActStats::read(dir.file("out.bin"));
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(st->n_tokens(), 128u);
  EXPECT_FLOAT_EQ(st->sparsity_target(), 0.5f);
}

TEST(ProfileCliRelu, ExactZerosAreNotFirings) {
  ScratchDir dir;
  const std::string synth =
      (std::filesystem::path(HC_BINARY).parent_path() / "hc-synth-model").string();
  ASSERT_TRUE(std::filesystem::exists(synth)) << synth << " not found: build hc-synth-model";
  const std::string model = dir.file("relu.gguf");
  CliResult r = run_binary(synth, {"--shape", "tiny", "--act", "relu", "-o", model});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string corpus = corpus_slice(dir, 20000);
  const std::string stats = dir.file("relu.stats.gguf");
  r = run_hotcold({"profile", "-m", model, "-f", corpus, "-o", stats, "-c", "64", "--chunks", "3",
                   "--sparsity", "0.9"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "relu activations, fires when act != 0")) << r.out;
  EXPECT_TRUE(has(r.err, "--sparsity ignored")) << r.err;
  EXPECT_FALSE(has(r.err, "calibrate")) << r.err;
  auto st = ActStats::read(stats);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(st->activation(), FfnActivation::kRelu);
  EXPECT_EQ(st->n_tokens(), 192u);
  EXPECT_EQ(st->sparsity_target(), 0.0f);
  for (int il = 0; il < st->n_layer(); ++il) {
    EXPECT_EQ(st->threshold(il), 0.0f);
    // Every activation is either an exact zero (histogram bin 0) or a firing.
    double fired = 0;
    for (float c : st->fire_count(il)) fired += c;
    const double all = 192.0 * static_cast<double>(st->n_ff());
    EXPECT_EQ(fired + st->act_hist(il)[0], all);
    EXPECT_GT(fired, 0.05 * all);
    EXPECT_LT(fired, 0.95 * all);
  }
  expect_png(dir.file("relu.stats.png"), 1000, 640);
}


// --compare: a profile against itself agrees on every hot neuron (Jaccard 1), against another
// corpus's less so; the hot-set sizes are the table's top80% column; a statistics file of another
// model is refused before the pass, naming what differs.
TEST(ProfileCliRelu, CompareGivesTheHotSetOverlapPerLayer) {
  ScratchDir dir;
  const std::string synth =
      (std::filesystem::path(HC_BINARY).parent_path() / "hc-synth-model").string();
  const std::string model = dir.file("relu.gguf");
  CliResult r = run_binary(synth, {"--shape", "tiny", "--act", "relu", "-o", model});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string a = dir.file("a.txt"), b = dir.file("b.txt");
  write_all(a, read_all(kTinyStories).substr(0, 12000));
  write_all(b, read_all(kTinyStories).substr(200000, 12000));
  const auto profile = [&](const std::string& corpus, const std::string& out,
                           const std::string& compare) {
    std::vector<std::string> args = {"profile", "-m", model, "-f", corpus, "-o", out,
                                     "-c", "64", "--chunks", "3"};
    if (!compare.empty()) args.insert(args.end(), {"--compare", compare});
    return run_hotcold(args);
  };
  r = profile(a, dir.file("a.gguf"), "");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(has(r.out, "hot-set overlap")) << r.out;
  const std::vector<Row> own = table_rows(r.out);

  r = profile(a, dir.file("a2.gguf"), dir.file("a.gguf"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "hot-set jaccard: mean 1.0000, lowest layer 1.0000")) << r.out;

  r = profile(b, dir.file("b.gguf"), dir.file("a.gguf"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "# hot-set overlap with " + dir.file("a.gguf"))) << r.out;
  auto sa = ActStats::read(dir.file("a.gguf"));
  auto sb = ActStats::read(dir.file("b.gguf"));
  ASSERT_TRUE(sa.ok() && sb.ok());
  std::istringstream in(r.out.substr(r.out.find("layer      hot     hot'  jaccard")));
  std::string line;
  std::getline(in, line);
  double sum = 0;
  for (int il = 0; il < sa->n_layer(); ++il) {
    ASSERT_TRUE(std::getline(in, line)) << r.out;
    int layer = -1;
    double hot = 0, hot2 = 0, j = -1;
    char pct;
    std::istringstream l(line);
    ASSERT_TRUE(l >> layer >> hot >> pct >> hot2 >> pct >> j) << line;
    EXPECT_EQ(layer, il);
    EXPECT_NEAR(hot, 100 * sb->neurons_covering(il, 0.8), 0.01) << line;
    EXPECT_NEAR(hot2, 100 * sa->neurons_covering(il, 0.8), 0.01) << line;
    EXPECT_NEAR(hot2, own[static_cast<size_t>(il)].top[1], 0.01) << line;
    EXPECT_GT(j, 0.0) << line;
    EXPECT_LE(j, 1.0) << line;
    sum += j;
  }
  EXPECT_LT(sum / sa->n_layer(), 1.0) << r.out;  // other text, other neurons: not the same sets

  // A statistics file of another model (more layers): refused before any pass.
  const std::string other = dir.file("other.gguf");
  r = run_binary(synth, {"--shape", "tiny", "--act", "relu", "--layers", "3", "-o", other});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = run_hotcold({"profile", "-m", other, "-f", a, "-o", dir.file("o.gguf"), "-c", "64",
                   "--chunks", "1", "--compare", dir.file("a.gguf")});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(has(r.err, "--compare " + dir.file("a.gguf"))) << r.err;
  EXPECT_TRUE(has(r.err, "n_layer")) << r.err;
  EXPECT_FALSE(has(r.err, "chunks of")) << r.err;  // no pass ran
}


// Files with predictors get the audit: exact predictors (hc-synth-model --pred-kind gate: the
// logit is rms(x) x gate) are right for every pair, random ones for about half of the firing
// pairs; a file without predictors prints no such table.
TEST(ProfileCliRelu, PredictorTableAgainstTheDenseActivations) {
  ScratchDir dir;
  const std::string synth =
      (std::filesystem::path(HC_BINARY).parent_path() / "hc-synth-model").string();
  const std::string corpus = corpus_slice(dir, 20000);
  const auto profile = [&](const std::vector<std::string>& synth_args) {
    const std::string model = dir.file("m.gguf");
    std::vector<std::string> args = {"--shape", "tiny", "--layers", "3", "-o", model};
    args.insert(args.end(), synth_args.begin(), synth_args.end());
    CliResult r = run_binary(synth, args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    r = run_hotcold({"profile", "-m", model, "-f", corpus, "-o", dir.file("s.gguf"), "-c", "64",
                     "--chunks", "3"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.out;
  };
  const std::string exact = profile({"--powerinfer", "--pred-kind", "gate", "--norm-jitter", "0.2"});
  const std::vector<PredictorRow> e = predictor_rows(exact);
  ASSERT_EQ(e.size(), 3u) << exact;
  for (const PredictorRow& r : e) {
    EXPECT_GE(r.recall, 0.999) << exact;
    EXPECT_GE(r.precision, 0.999) << exact;
    EXPECT_GT(r.predicted, 0.2) << exact;  // random ReLU gates fire about half their neurons
    EXPECT_LT(r.predicted, 0.8) << exact;
  }
  EXPECT_TRUE(has(exact, "predictor recall: lowest layer ")) << exact;
  const std::string random = profile({"--powerinfer"});
  const std::vector<PredictorRow> rr = predictor_rows(random);
  ASSERT_EQ(rr.size(), 3u) << random;
  for (const PredictorRow& r : rr) {
    EXPECT_GT(r.recall, 0.2) << random;
    EXPECT_LT(r.recall, 0.8) << random;
    EXPECT_LT(r.precision, 0.8) << random;
  }
  const std::string none = profile({"--act", "relu"});
  EXPECT_FALSE(has(none, "# predictor:")) << none;
}

TEST_F(ProfileCli, UsageAndRuntimeErrors) {
  ScratchDir dir;
  const std::string corpus = corpus_slice(dir, 2000);
  const std::string out = dir.file("x.gguf");
  struct Case {
    std::vector<std::string> args;
    int code;
    std::string msg;
  };
  const Case cases[] = {
      {{"-m", model_, "-f", corpus}, 2, "expected -o STATS.gguf"},
      {{"-m", model_, "-o", out}, 2, "expected -f CORPUS.txt"},
      {{"-f", corpus, "-o", out}, 2, "expected -m MODEL.gguf"},
      {{"-m", model_, "-f", corpus, "-o", out, "--sparsity", "1.5"}, 2, "--sparsity"},
      {{"-m", model_, "-f", corpus, "-o", out, "--chunks", "0"}, 2, "--chunks"},
      {{"-m", model_, "-f", corpus, "-o", out, "--calib-tokens", "0"}, 2, "--calib-tokens"},
      {{"-m", model_, "-f", dir.file("nope.txt"), "-o", out}, 1, "cannot open"},
      {{"-m", model_, "-f", corpus, "-o", out, "-c", "4096"}, 1, "need at least 4096 tokens"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = {"profile"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    const CliResult r = run_hotcold(args);
    EXPECT_EQ(r.exit_code, c.code) << c.msg << ": " << r.err;
    EXPECT_TRUE(has(r.err, "hotcold profile: error: ")) << r.err;
    EXPECT_TRUE(has(r.err, c.msg)) << r.err;
  }
  EXPECT_FALSE(std::filesystem::exists(out));
  const CliResult h = run_hotcold({"profile", "--help"});
  EXPECT_EQ(h.exit_code, 0);
  EXPECT_TRUE(has(h.out, "--calib-tokens")) << h.out;
  EXPECT_TRUE(has(h.out, "--plot")) << h.out;
}

}  // namespace
}  // namespace hc::test
