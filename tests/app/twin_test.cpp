// Statistical twins (hc-synth-model --twin, tools/synth/twin.h): calibrated on one TinyStories
// slice, each twin, profiled by `hotcold profile` on another slice, fires in every layer
// within 3 points of its target share and has its target share of neurons covering 80% of the
// firings within 3 points (relullama-7b: U-shaped over depth); its hot neurons are the same on
// a different corpus (WikiText-2): Jaccard >= 0.75 between the two profiles' sets covering 80%;
// with --gate-rank --powerinfer, its predictors keep >= 0.99 of the firing pairs there.
// In the tiny shape (n_embd 256, n_ff 768; vocabulary 32000), 6 layers, Q4_0, so the suite runs
// in seconds; the construction does not depend on the shape (docs/BENCHMARKS.md has the
// 7B-shaped figures).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "app/common.h"
#include "cli_util.h"

namespace hc {
namespace {

using test::CliResult;
using test::has;
using test::run_binary;
using test::run_hotcold;
using test::ScratchDir;

std::string synth_binary() {
  return (std::filesystem::path(HC_BINARY).parent_path() / "hc-synth-model").string();
}

struct Target {
  const char* twin;
  double firing;
  double top80_ends, top80_mid;
};
// tools/synth/twin.h kTwins, restated: the test checks the tool against the numbers.
const Target kTargets[] = {
    {"relullama-7b", 0.33, 0.72, 0.41},
    {"prosparse-7b", 0.11, 0.30, 0.30},
    {"opt-like-7b", 0.03, 0.26, 0.26},
    {"bamboo-7b", 0.10, 0.30, 0.30},
};
constexpr int kLayers = 6;
// gtest names a parameter by its bytes otherwise (a pointer: ctest's names change per build).
void PrintTo(const Target& t, std::ostream* os) { *os << t.twin; }

double top80_target(const Target& t, int il) {
  const double x = 2.0 * il / (kLayers - 1) - 1.0;
  return t.top80_mid + (t.top80_ends - t.top80_mid) * x * x;
}

struct LayerRow {
  double firing = -1, top80 = -1;
};

// The per-layer rows of `hotcold profile`'s table: "layer threshold firing top50 top80 ...".
std::vector<LayerRow> profile_rows(const std::string& out) {
  std::vector<LayerRow> rows;
  const size_t head = out.find("layer   threshold");
  if (head == std::string::npos) return rows;
  size_t at = out.find('\n', head);
  while (at != std::string::npos) {
    int il = -1;
    double thr, firing, top50, top80;
    if (std::sscanf(out.c_str() + at + 1, "%d %lf %lf%% %lf%% %lf%%", &il, &thr, &firing, &top50,
                    &top80) != 5)
      break;
    rows.push_back({firing / 100.0, top80 / 100.0});
    at = out.find('\n', at + 1);
  }
  return rows;
}

// Each layer's neurons covering 80% of its firings (most frequent first), from a stats file.
std::vector<std::set<int>> hot_sets(const std::string& stats) {
  std::vector<std::set<int>> sets;
  auto g = open_gguf(stats);
  EXPECT_TRUE(g.ok()) << g.message();
  if (!g.ok()) return sets;
  for (int il = 0;; ++il) {
    const GgufTensorInfo* t = g->gguf.find_tensor("blk." + std::to_string(il) + ".fire_count");
    if (!t) break;
    const auto* c = reinterpret_cast<const float*>(t->data);
    const int64_t n = t->n_elements();
    std::vector<int> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return c[a] > c[b]; });
    const double total = std::accumulate(c, c + n, 0.0);
    double sum = 0;
    std::set<int> s;
    for (int i : order) {
      if (sum >= 0.8 * total) break;
      s.insert(i);
      sum += c[i];
    }
    sets.push_back(std::move(s));
  }
  return sets;
}

double jaccard(const std::set<int>& a, const std::set<int>& b) {
  std::vector<int> both;
  std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(both));
  const double uni = static_cast<double>(a.size() + b.size() - both.size());
  return uni > 0 ? static_cast<double>(both.size()) / uni : 1.0;
}


// The calibration text (TinyStories' first 60 kB) and the held-out text (the next 80 kB).
bool write_slices(const std::string& calib, const std::string& held) {
  const std::string stories = test::read_all(test::kTinyStories);
  if (stories.size() < 150000u) return false;
  test::write_all(calib, stories.substr(0, 60000));
  test::write_all(held, stories.substr(60000, 80000));
  return true;
}

// Twin t in the tiny shape with kLayers layers, Q4_0, calibrated on 2048 tokens of calib.
CliResult make_twin(const Target& t, const std::string& calib, const std::string& out,
                    std::vector<std::string> extra) {
  std::vector<std::string> args = {"--twin", t.twin, "--shape", "tiny", "--n-vocab", "32000",
                                   "--layers", std::to_string(kLayers), "--type", "q4_0",
                                   "--calib", calib, "--calib-tokens", "2048", "-o", out};
  args.insert(args.end(), extra.begin(), extra.end());
  return run_binary(synth_binary(), args);
}

class Twins : public ::testing::TestWithParam<Target> {};

TEST_P(Twins, FireAsTheirTargetsOnAnotherTextWithStableHotSets) {
  const Target& t = GetParam();
  ScratchDir dir;
  const std::string calib = dir.file("calib.txt"), held = dir.file("held.txt");
  ASSERT_TRUE(write_slices(calib, held));
  const std::string model = dir.file("twin.gguf");
  // The tiny shape with a real model's vocabulary size: with its own 512 pieces each
  // corpus is a few hundred embeddings, and what a neuron sees differs more between corpora
  // than it does through a 32000-token vocabulary.
  CliResult r = make_twin(t, calib, model, {});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(has(r.err, "calibration pass 4 of 4")) << r.err;
  const auto profile = [&](const std::string& text, const std::string& out) {
    // 16 chunks of 256 tokens: at 3% firing a neuron at the hot set's edge fires ~60 times,
    // few enough that counting noise alone moves the edge of 8 chunks' sets.
    CliResult p = run_hotcold({"profile", "-m", model, "-f", text, "-o", out, "-c", "256",
                               "--chunks", "16"});
    EXPECT_EQ(p.exit_code, 0) << p.err;
    return p.out + p.err;
  };
  const std::string stats_a = dir.file("a.stats.gguf"), stats_b = dir.file("b.stats.gguf");
  const std::vector<LayerRow> rows = profile_rows(profile(held, stats_a));
  ASSERT_EQ(rows.size(), static_cast<size_t>(kLayers));
  for (int il = 0; il < kLayers; ++il) {
    EXPECT_NEAR(rows[il].firing, t.firing, 0.03) << t.twin << " layer " << il;
    EXPECT_NEAR(rows[il].top80, top80_target(t, il), 0.03) << t.twin << " layer " << il;
  }
  profile("../shared/data/wikitext-2/wiki.test.raw", stats_b);
  const auto a = hot_sets(stats_a), b = hot_sets(stats_b);
  ASSERT_EQ(a.size(), static_cast<size_t>(kLayers));
  ASSERT_EQ(b.size(), a.size());
  double lowest = 1;
  for (int il = 0; il < kLayers; ++il) {
    const double j = jaccard(a[il], b[il]);
    lowest = std::min(lowest, j);
    EXPECT_GE(j, 0.75) << t.twin << " layer " << il << ": hot sets of " << a[il].size()
                       << " and " << b[il].size();
  }
  std::printf("%s: lowest Jaccard of a layer's hot sets, TinyStories vs WikiText-2: %.3f\n",
              t.twin, lowest);
}

// As the GPU check writes a twin: gates of low rank (48 here) and PowerInfer's layout with the
// twin's predictors (rank 2 x 48 + 32), thresholds chosen on the calibration text. On another
// text every layer's predictor keeps >= 0.99 of the firing pairs while choosing at most twice
// the pairs that fire, and the firing shares hold. The neurons covering 80% are within 4 points
// here: relullama-7b's last layer (72%, nearly uniform rates) measures 68.6-68.8% on the
// held-out slice with low-rank gates (69.4% full-rank), docs/BENCHMARKS.md.
class TwinPredictors : public ::testing::TestWithParam<Target> {};

TEST_P(TwinPredictors, KeepRecallOnAnotherText) {
  const Target& t = GetParam();
  ScratchDir dir;
  const std::string calib = dir.file("calib.txt"), held = dir.file("held.txt");
  ASSERT_TRUE(write_slices(calib, held));
  const std::string model = dir.file("pwri.gguf");
  CliResult r = make_twin(t, calib, model, {"--gate-rank", "48", "--powerinfer"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(has(r.err, "twin predictors (rank 128)")) << r.err;
  CliResult p = run_hotcold({"profile", "-m", model, "-f", held, "-o", dir.file("s.gguf"), "-c",
                             "256", "--chunks", "16"});
  ASSERT_EQ(p.exit_code, 0) << p.err;
  const std::vector<LayerRow> rows = profile_rows(p.out);
  const std::vector<test::PredictorRow> pred = test::predictor_rows(p.out);
  ASSERT_EQ(rows.size(), static_cast<size_t>(kLayers)) << p.out;
  ASSERT_EQ(pred.size(), static_cast<size_t>(kLayers)) << p.out;
  for (int il = 0; il < kLayers; ++il) {
    EXPECT_NEAR(rows[il].firing, t.firing, 0.03) << t.twin << " layer " << il;
    EXPECT_NEAR(rows[il].top80, top80_target(t, il), 0.04) << t.twin << " layer " << il;
    EXPECT_GE(pred[il].recall, 0.99) << t.twin << " layer " << il << "\n" << p.out;
    EXPECT_LE(pred[il].predicted, 2 * rows[il].firing) << t.twin << " layer " << il;
  }
  std::printf("%s\n", p.out.c_str());
}

std::string twin_param_name(const ::testing::TestParamInfo<Target>& info) {
  std::string n = info.param.twin;
  std::replace(n.begin(), n.end(), '-', '_');
  return n;
}

INSTANTIATE_TEST_SUITE_P(All, Twins, ::testing::ValuesIn(kTargets),
                         twin_param_name);
INSTANTIATE_TEST_SUITE_P(All, TwinPredictors, ::testing::ValuesIn(kTargets), twin_param_name);

// --powerinfer writes the same twin in PowerInfer's layout: calibrated on the llama layout, so
// the same flags give the same biases, and every tensor but the down projection (ffn_down_t
// there, its transpose) is byte for byte the llama-layout file's; fc1 / fc2 of rank 2 R + 32
// and per-layer thresholds are added.
TEST(TwinLayouts, PowerInferLayoutHoldsTheSameWeights) {
  ScratchDir dir;
  const std::string calib = dir.file("calib.txt");
  test::write_all(calib, test::read_all(test::kTinyStories).substr(0, 20000));
  const std::string plain = dir.file("plain.gguf"), pwri = dir.file("pwri.gguf");
  const std::vector<std::string> base = {"--twin", "prosparse-7b", "--shape", "tiny", "--layers",
                                         "2", "--type", "q4_0", "--calib", calib,
                                         "--calib-tokens", "512", "--gate-rank", "48"};
  std::vector<std::string> args = base;
  args.insert(args.end(), {"-o", plain});
  CliResult r = run_binary(synth_binary(), args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  args = base;
  args.insert(args.end(), {"--powerinfer", "-t", "1", "-o", pwri});
  r = run_binary(synth_binary(), args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto a = open_gguf(plain), b = open_gguf(pwri);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_FALSE(a->gguf.powerinfer_magic);
  EXPECT_TRUE(b->gguf.powerinfer_magic);
  int compared = 0;
  for (const GgufTensorInfo& ta : a->gguf.tensors) {
    if (ta.name.find("ffn_down") != std::string::npos) {
      const std::string dt = ta.name.substr(0, ta.name.find("ffn_down")) + "ffn_down_t.weight";
      EXPECT_NE(b->gguf.find_tensor(dt), nullptr) << dt;
      continue;
    }
    const GgufTensorInfo* tb = b->gguf.find_tensor(ta.name);
    ASSERT_NE(tb, nullptr) << ta.name;
    ASSERT_EQ(tb->nbytes, ta.nbytes) << ta.name;
    EXPECT_EQ(std::memcmp(tb->data, ta.data, ta.nbytes), 0) << ta.name << " differs";
    ++compared;
  }
  EXPECT_EQ(compared, 3 + 8 * 2);  // token_embd, output_norm, output; 8 a layer
  for (int il = 0; il < 2; ++il) {
    const GgufTensorInfo* fc1 = b->gguf.find_tensor("blk." + std::to_string(il) + ".fc1.weight");
    const GgufTensorInfo* fc2 = b->gguf.find_tensor("blk." + std::to_string(il) + ".fc2.weight");
    ASSERT_TRUE(fc1 && fc2);
    EXPECT_EQ(fc1->ne, (std::vector<int64_t>{256, 128}));
    EXPECT_EQ(fc2->ne, (std::vector<int64_t>{128, 768}));
  }
  auto thr = b->gguf.get_f32_array("hotcold.predictor.thresholds");
  ASSERT_TRUE(thr.ok()) << thr.message();
  EXPECT_EQ(thr->size(), 2u);
  for (float v : *thr) EXPECT_LT(v, 0.0f);  // the quantised gate's rounding: below 0 for 0.995
  EXPECT_EQ(a->gguf.find("hotcold.predictor.thresholds"), nullptr);
}

}  // namespace
}  // namespace hc
