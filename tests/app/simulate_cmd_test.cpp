// hotcold simulate end to end: the catalog projections (dense and MoE shapes) as a table and as
// JSON, the usage errors (exit 2, naming the flag), --stats resampled to a catalog shape, and
// --calibrate on the real stories260K weights followed by a projection of this machine (--hw
// host) from that file.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli_util.h"
#include "model/act_stats.h"

namespace hc {
namespace {

using json = nlohmann::json;
using test::CliResult;
using test::has;
using test::run_hotcold;
using test::ScratchDir;

const std::vector<std::string> kModes = {"dense-cpu", "sparse-cpu", "dense-offload", "static",
                                         "dynamic"};
// MoE shapes with dense experts (sparse experts add sparse-cpu after dense-cpu).
const std::vector<std::string> kMoeModes = {"dense-cpu", "dense-offload", "llamacpp-cpu-moe",
                                            "hot-experts", "dynamic"};

TEST(SimulateCli, ProjectsACatalogShapeAsATable) {
  CliResult r = run_hotcold({"simulate", "--model-shape", "llama2-7b", "--hw", "rtx4090", "--type",
                             "q4_0", "--sparsity", "0.9"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const std::string& m : kModes)
    EXPECT_TRUE(has(r.out, "| llama2-7b q4_0 | rtx4090 | 23.00 | " + m + " |")) << m << "\n"
                                                                                << r.out;
  // The ratio column: dense offload is llama.cpp's -ngl, 1.00 against itself.
  EXPECT_TRUE(has(r.out, "| x llama.cpp |")) << r.out;
  EXPECT_TRUE(has(r.out, "| dense-offload | 144.37 | 6.93 | 1.00 |")) << r.out;
  EXPECT_TRUE(has(r.out, "# firing: llama2-7b: power law")) << r.out;
  EXPECT_TRUE(has(r.out, "top-20% overlap")) << r.out;
}

TEST(SimulateCli, JsonParsesForEveryShapeAndHardware) {
  CliResult r = run_hotcold({"simulate", "--model-shape", "all", "--hw", "all", "--json",
                             "--drift", "0.2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  ASSERT_EQ(j["results"].size(), 28u);  // 7 shapes x 4 catalog machines
  for (const json& res : j["results"]) {
    const std::string model = res["model"].get<std::string>();
    SCOPED_TRACE(model + " on " + res["hw"].get<std::string>());
    const bool moe = res["unit"] == "expert";
    std::vector<std::string> modes = moe ? kMoeModes : kModes;
    if (model == "turbosparse-mixtral") modes.insert(modes.begin() + 1, "sparse-cpu");
    ASSERT_EQ(res["modes"].size(), modes.size());
    const uint64_t budget = res["budget_bytes"].get<uint64_t>();
    for (size_t i = 0; i < modes.size(); ++i) {
      const json& m = res["modes"][i];
      EXPECT_EQ(m["mode"], modes[i]);
      EXPECT_GT(m["tok_s"].get<double>(), 0);
      EXPECT_GT(m["vs_llamacpp"].get<double>(), 0);
      EXPECT_LE(m["device_bytes"].get<uint64_t>(), budget) << m.dump();
    }
    EXPECT_EQ(res["llamacpp_mode"], moe ? "llamacpp-cpu-moe" : "dense-offload");
    // MoE: the share of experts a token is routed to.
    const double share =
        moe ? res["n_expert_used"].get<double>() / res["n_expert"].get<double>() : 0.1;
    EXPECT_NEAR(res["firing_share"].get<double>(), share, 0.001);
    EXPECT_LT(res["top20_overlap"].get<double>(), 1.0);
  }
  // The A100 80GB holds a 7B model whole; the static mode then computes nearly all firings there.
  EXPECT_EQ(j["results"][1]["hw"], "a100-80g");
  EXPECT_GT(j["results"][1]["modes"][3]["device_mass"].get<double>(), 0.9);
}

TEST(SimulateCli, ProjectsQwen3MoeAsATableAndJson) {
  CliResult r = run_hotcold({"simulate", "--model-shape", "qwen3-30b-a3b", "--hw", "rtx4090"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const std::string& m : kMoeModes)
    EXPECT_TRUE(has(r.out, "| qwen3-30b-a3b q4_0 | rtx4090 | 23.00 | " + m + " |")) << m << "\n"
                                                                                    << r.out;
  EXPECT_FALSE(has(r.out, "| sparse-cpu |")) << r.out;  // dense experts
  EXPECT_TRUE(has(r.out, "# routing: qwen3-30b-a3b: 8 of 128 experts per token")) << r.out;
  EXPECT_TRUE(has(r.out, "dense experts")) << r.out;
  // Q4_0 fits in 23 GiB: llama.cpp keeps every expert on the device.
  EXPECT_TRUE(has(r.out, "experts of 48/48 layers (--n-cpu-moe 0), output")) << r.out;
  EXPECT_TRUE(has(r.out, "experts in 48 layers")) << r.out;

  r = run_hotcold({"simulate", "--model-shape", "qwen3-30b-a3b", "--hw", "rtx4090", "--type",
                   "q8_0", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  ASSERT_EQ(j["results"].size(), 1u);
  const json& res = j["results"][0];
  EXPECT_EQ(res["n_layer"], 48);
  EXPECT_EQ(res["n_ff"], 768);
  EXPECT_EQ(res["n_expert"], 128);
  EXPECT_EQ(res["n_expert_used"], 8);
  EXPECT_EQ(res["unit"], "expert");
  EXPECT_EQ(res["expert_firing"], 1.0);
  EXPECT_EQ(res["budget_bytes"], uint64_t{23} << 30);
  ASSERT_EQ(res["modes"].size(), kMoeModes.size());
  for (size_t i = 0; i < kMoeModes.size(); ++i) EXPECT_EQ(res["modes"][i]["mode"], kMoeModes[i]);
  // Q8_0 (~30 GiB) does not fit: llama.cpp keeps the experts of the first layers on the host;
  // the hot experts spread the host's share over every layer, next to the device's.
  const json& cm = res["modes"][2];
  EXPECT_GT(cm["n_cpu_moe"].get<int>(), 0);
  EXPECT_LT(cm["n_cpu_moe"].get<int>(), 48);
  EXPECT_EQ(cm["attn_on_device"], 48);
  EXPECT_DOUBLE_EQ(cm["vs_llamacpp"].get<double>(), 1.0);
  const json& he = res["modes"][3];
  EXPECT_GT(he["hot_neurons"].get<int64_t>(), 0);
  EXPECT_LT(he["hot_neurons"].get<int64_t>(), 48 * 128);
  EXPECT_GT(he["vs_llamacpp"].get<double>(), 1.0);
  EXPECT_EQ(he["solver"], "greedy");
  // --n-cpu-moe fixes llama.cpp's split; the other modes do not depend on it.
  r = run_hotcold(
      {"simulate", "--model-shape", "qwen3-moe", "--type", "q8_0", "--n-cpu-moe", "48", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j48 = json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j48.is_discarded());
  EXPECT_EQ(j48["results"][0]["modes"][2]["n_cpu_moe"], 48);
  EXPECT_LT(j48["results"][0]["modes"][2]["tok_s"].get<double>(), cm["tok_s"].get<double>());
  EXPECT_EQ(j48["results"][0]["modes"][3]["tok_s"], he["tok_s"]);
}

TEST(SimulateCli, TurboSparseExpertsAreSparseAndSkewIsAFlag) {
  CliResult r = run_hotcold(
      {"simulate", "--model-shape", "turbosparse-mixtral", "--json", "--expert-skew", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  const json& res = j["results"][0];
  EXPECT_NEAR(res["expert_firing"].get<double>(), 0.15, 1e-9);  // 85% idle (the paper's figure)
  EXPECT_EQ(res["modes"][1]["mode"], "sparse-cpu");
  EXPECT_LT(res["modes"][0]["tok_s"].get<double>(), res["modes"][1]["tok_s"].get<double>());
  EXPECT_NEAR(res["cover80"].get<double>(), 0.875, 1e-9);  // uniform: 7 of 8 experts for 80%
  // --sparsity sets the experts' sparsity; the table says so.
  r = run_hotcold({"simulate", "--model-shape", "turbosparse", "--sparsity", "0.9",
                   "--expert-predictor-rank", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "90% of a routed expert's neurons idle, no predictors")) << r.out;
}

TEST(SimulateCli, BadFlagsAreUsageErrorsNamingTheFlag) {
  const std::vector<std::pair<std::vector<std::string>, std::vector<std::string>>> cases = {
      {{"--sparsity", "1.5"}, {"--sparsity", "1.5"}},
      {{"--drift", "2"}, {"--drift"}},
      {{"--bogus"}, {"--bogus"}},
      {{"--hw", "tpu-v5"}, {"--hw", "rtx4090", "a100-80g", "a100-40g", "h100-sxm", "host"}},
      {{"--dev-overhead-mib", "x"}, {"--dev-overhead-mib"}},
      {{"--model-shape", "llama9"}, {"--model-shape", "llama2-7b", "llama2-70b"}},
      {{"--type", "q9"}, {"--type", "q9"}},
      {{"--hw", "host"}, {"--calibration"}},
      {{"--solver", "magic"}, {"--solver", "magic"}},
      {{"--stats", "x.gguf", "--sparsity", "0.5"}, {"--sparsity", "--stats"}},
      {{"-m", "x.gguf", "--type", "q4_0"}, {"--type"}},
      {{"--vram-budget", "-3"}, {"--vram-budget"}},
      {{"--calibrate"}, {"--calibrate", "-m"}},
      {{"-ngl", "-4"}, {"-ngl"}},
      {{"--device-emulate-gbps", "10"}, {"--device-emulate-gbps", "--hw host"}},
      {{"--expert-skew", "-1"}, {"--expert-skew", "-1"}},
      {{"--expert-skew", "30"}, {"--expert-skew", "[0, 20]"}},
      {{"--n-cpu-moe", "-2"}, {"--n-cpu-moe", "-2"}},
      {{"--expert-predictor-rank", "-3"}, {"--expert-predictor-rank"}},
      {{"--model-shape", "mixtral-9x7b"}, {"--model-shape", "mixtral-8x7b", "qwen3-30b-a3b"}},
      {{"--twin", "relullama-70b"}, {"--twin", "relullama-7b", "prosparse-7b", "relullama-70b"}},
      {{"--twin", "prosparse-7b", "--sparsity", "0.9"}, {"--twin", "--sparsity"}},
  };
  for (const auto& [args, needles] : cases) {
    std::vector<std::string> full = {"simulate"};
    full.insert(full.end(), args.begin(), args.end());
    CliResult r = run_hotcold(full);
    SCOPED_TRACE(args[0]);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_TRUE(has(r.err, "hotcold simulate: error: ")) << r.err;
    for (const std::string& n : needles) EXPECT_TRUE(has(r.err, n)) << n << ": " << r.err;
  }
  // Runtime errors (exit 1) name the file.
  ScratchDir dir;
  test::write_all(dir.file("bad.json"), "{\"version\": 7}");
  CliResult r = run_hotcold({"simulate", "--calibration", dir.file("bad.json")});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(has(r.err, "bad.json")) << r.err;
  EXPECT_TRUE(has(r.err, "version")) << r.err;
}

// --twin: the statistical twin's per-layer profile on a larger shape. relullama-7b fires 33% of
// a layer's neurons with 41% (middle layer) to 72% (first and last) carrying 80% of the firings,
// U-shaped over depth: the mean over 40 layers of that parabola is about 0.52 (a power law fitted
// to one cover share would give every layer the same). prosparse-7b: 11% firing, 30% flat.
TEST(SimulateCli, TwinProfilesGiveTheirFiringOnLargerShapes) {
  struct Case {
    const char* twin;
    double firing, cover_lo, cover_hi;
  };
  for (const Case& c : {Case{"relullama-7b", 0.33, 0.48, 0.54}, Case{"prosparse-7b", 0.11, 0.29, 0.31}}) {
    SCOPED_TRACE(c.twin);
    CliResult r = run_hotcold({"simulate", "--model-shape", "13b", "--hw", "rtx4090", "--twin",
                               c.twin, "--json"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const json j = json::parse(r.out, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << r.out;
    const json& res = j["results"][0];
    EXPECT_NEAR(res["firing_share"].get<double>(), c.firing, 0.005);
    EXPECT_GT(res["cover80"].get<double>(), c.cover_lo);
    EXPECT_LT(res["cover80"].get<double>(), c.cover_hi);
  }
  CliResult r = run_hotcold({"simulate", "--model-shape", "qwen3-30b-a3b", "--twin", "prosparse-7b"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(has(r.err, "experts")) << r.err;
  CliResult t = run_hotcold({"simulate", "--model-shape", "70b", "--twin", "prosparse-7b"});
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_TRUE(has(t.out, "# firing: llama2-70b: statistical twin prosparse-7b")) << t.out;
}

// --dev-overhead-mib: the device's bytes at open come out of the budget before any layer: on a
// 4 GiB budget, 2 GiB of overhead leave room for about half the layers of 7B Q4_0 (113 MiB each).
TEST(SimulateCli, DeviceOverheadComesOutOfTheBudget) {
  auto layers = [](const std::string& overhead) {
    CliResult r = run_hotcold({"simulate", "--model-shape", "7b", "--hw", "h100", "--vram-budget",
                               "4", "-c", "64", "--dev-overhead-mib", overhead, "--json"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    const json j = json::parse(r.out, nullptr, false);
    for (const json& m : j["results"][0]["modes"])
      if (m["mode"] == "dense-offload") return m["layers_on_device"].get<int>();
    return -1;
  };
  const int none = layers("0"), two_gib = layers("2048");
  EXPECT_EQ(none, 32);  // 3.6 GiB of layers (and a 64-position KV) fit in 4 GiB
  EXPECT_GE(two_gib, 15);
  EXPECT_LE(two_gib, 18);
}

// Statistics of an MoE model of 8 experts of width n_ff: every token routed to expert 0 and one
// of experts 1-3 (ReLU activations, every 10th neuron of a routed expert firing), as hotcold
// profile records them.
std::string write_moe_stats(const ScratchDir& dir, int n_layer, int64_t n_ff) {
  ActStats st(n_layer, 8 * n_ff, FfnActivation::kRelu, 8);
  std::vector<float> act(static_cast<size_t>(n_ff));
  for (size_t i = 0; i < act.size(); ++i) act[i] = i % 10 == 0 ? 1.0f : 0.0f;
  for (int t = 0; t < 30; ++t) {
    const int32_t experts[2] = {0, 1 + t % 3};
    for (int il = 0; il < n_layer; ++il) {
      st.on_moe_routing(il, experts, 1, 2);
      for (int32_t e : experts) st.on_expert_activation(il, e, act.data(), 1, n_ff);
    }
  }
  const std::string path = dir.file("moe.stats.gguf");
  const Status s = st.write(path, "moe-test", "test");
  EXPECT_TRUE(s.ok()) << s.message();
  return path;
}

TEST(SimulateCli, MeasuredRoutingOfAnMoeModel) {
  ScratchDir dir;
  const std::string stats = write_moe_stats(dir, 2, 16);
  CliResult r = run_hotcold({"simulate", "--model-shape", "mixtral-8x7b", "--stats", stats,
                             "--type", "q8_0", "--json", "--drift", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  const json& res = j["results"][0];
  EXPECT_NEAR(res["firing_share"].get<double>(), 0.25, 1e-9);
  // Expert 0 takes every token, experts 1-3 a third each: 3 of 8 experts carry 80% (1 + 2/3 of
  // the 2 routings a token makes).
  EXPECT_NEAR(res["cover80"].get<double>(), 0.375, 1e-9);
  EXPECT_EQ(res["expert_firing"], 1.0);  // Mixtral's experts are dense whatever was measured
  r = run_hotcold({"simulate", "--model-shape", "mixtral-8x7b", "--stats", stats});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "resampled by rank quantile")) << r.out;
  // MoE statistics do not describe a dense shape's neurons.
  r = run_hotcold({"simulate", "--model-shape", "llama2-7b", "--stats", stats});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(has(r.err, "MoE")) << r.err;
}

TEST(SimulateCli, MeasuredExpertSparsityForTurboSparse) {
  // One layer as wide as TurboSparse-Mixtral's experts: its measured firing (every 10th neuron:
  // 1434 of 14336) replaces the paper's 15%.
  ScratchDir dir;
  const std::string stats = write_moe_stats(dir, 1, 14336);
  CliResult r =
      run_hotcold({"simulate", "--model-shape", "turbosparse-mixtral", "--stats", stats, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  EXPECT_NEAR(j["results"][0]["expert_firing"].get<double>(), 1434.0 / 14336, 1e-9);
}

class SimulateStoriesCli : public test::ReluStoriesProfileTest {};

TEST_F(SimulateStoriesCli, MeasuredStatisticsAreResampledToTheShape) {
  CliResult r = run_hotcold({"simulate", "--model-shape", "13b", "--hw", "a100-40g", "--stats",
                             stats_, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  ASSERT_EQ(j["results"].size(), 1u);
  EXPECT_EQ(j["results"][0]["n_ff"], 13824);
  const double share = j["results"][0]["firing_share"].get<double>();
  EXPECT_GT(share, 0.0);
  EXPECT_LT(share, 0.5);  // stories260K-relu fires ~7-14% of its neurons
  r = run_hotcold({"simulate", "--model-shape", "13b", "--stats", stats_});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "resampled by rank quantile")) << r.out;
}

TEST_F(SimulateStoriesCli, MoeShapesNeedRoutingStatistics) {
  // stories260K is a dense model: its statistics have no routing to give an MoE shape.
  CliResult r = run_hotcold({"simulate", "--model-shape", "mixtral-8x7b", "--stats", stats_});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(has(r.err, "--stats")) << r.err;
  EXPECT_TRUE(has(r.err, "dense model")) << r.err;
  EXPECT_TRUE(has(r.err, "mixtral-8x7b")) << r.err;
}

TEST_F(SimulateStoriesCli, CalibratesThenProjectsThisMachine) {
  ScratchDir dir;
  const std::string cal = dir.file("cal.json");
  CliResult r = run_hotcold({"simulate", "--calibrate", "-m", model_, "-t", "1", "-o", cal,
                             "--calib-tokens", "8"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json c = json::parse(test::read_all(cal), nullptr, false);
  ASSERT_FALSE(c.is_discarded());
  EXPECT_EQ(c["version"], 1);
  EXPECT_GT(c["host"]["read_gbps"].get<double>(), 0);
  EXPECT_GT(c["efficiency"]["dense"].get<double>(), 0);
  // The bounds come from the same run: reads of buffers that sit in cache (no fixed ceiling:
  // stories260K's weights are cache-resident, and on a fast host it decodes at over 2x the
  // DRAM probe).
  EXPECT_GT(c["host"]["resident_read_gbps"].get<double>(), 0);
  EXPECT_GT(c["host"]["l1_read_gbps"].get<double>(), 0);
  EXPECT_LE(c["efficiency"]["dense"].get<double>(), c["efficiency"]["dense_max"].get<double>());
  for (const json& pt : c["efficiency"]["sparse_rel"])
    EXPECT_LE(pt[1].get<double>(), c["efficiency"]["rel_max"].get<double>()) << pt.dump();
  EXPECT_EQ(c["efficiency"]["sparse_rel"].size(), 5u);
  EXPECT_GT(c["cpu_device"]["dense_gbps"].get<double>(), 0);
  EXPECT_GE(c["cpu_device"]["op_us"].get<double>(), 0);
  EXPECT_GT(c["cpu_device"]["sync_us"].get<double>(), 0);
  EXPECT_GE(c["cpu_device"]["sleep_overshoot_us"].get<double>(), 0);

  r = run_hotcold({"simulate", "-m", model_, "--hw", "host", "--calibration", cal, "--stats",
                   stats_, "-c", "65", "-ngl", "2", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  const json& res = j["results"][0];
  EXPECT_EQ(res["hw"], "host");
  EXPECT_EQ(res["n_layer"], 5);
  EXPECT_EQ(res["n_ff"], 172);
  EXPECT_EQ(res["modes"][2]["mode"], "dense-offload");
  EXPECT_EQ(res["modes"][2]["layers_on_device"], 2);
  // The file's own type: its calibration's efficiencies are used.
  EXPECT_TRUE(has(res["efficiency_source"].get<std::string>(), "calibration")) << res.dump();
  EXPECT_FALSE(res["overlap"].get<bool>() && c["host"]["cores"].get<int>() < 2);

  // The paced CPU device: slower than the unpaced one at 0.01 GB/s.
  CliResult paced = run_hotcold({"simulate", "-m", model_, "--hw", "host", "--calibration", cal,
                                 "-c", "65", "-ngl", "2", "--device-emulate-gbps", "0.01", "--json"});
  ASSERT_EQ(paced.exit_code, 0) << paced.err;
  const json pj = json::parse(paced.out, nullptr, false);
  ASSERT_FALSE(pj.is_discarded());
  EXPECT_LT(pj["results"][0]["modes"][2]["tok_s"].get<double>(),
            res["modes"][2]["tok_s"].get<double>());
  EXPECT_NEAR(pj["results"][0]["dev_gbps"].get<double>(), 0.01, 1e-9);
}

}  // namespace
}  // namespace hc
