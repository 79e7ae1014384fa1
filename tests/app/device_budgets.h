// The structural budgets of a decode step on a second device (issue 35), read off
// `hotcold bench --json`'s device counters (syncs_per_token, d2h_bytes_per_token, ...): what
// may cross between host and device per generated token, whatever the device's speed.
//   full offload (-ngl 99), greedy:   <= 1 host sync, <= 64 bytes back (the token id only)
//   full offload, logits (sampled):   <= 1 host sync, at most the logits back
//   full offload, either:             every step but the first replayed from its recording
//                                     (replayed_tokens >= generated - 1), and the same text
//                                     as with every step queued anew (HOTCOLD_DEVICE_REPLAY=0)
//   hot/cold split, attention on the device and host neurons in every layer:
//                                     <= n_layer + 1 syncs, at most one activation row each
//                                     way per layer (plus the stream's entry and exit, and the
//                                     4-byte position in), so no weight bytes move; its device
//                                     work recorded in segments (model/segment_recorder.h) and
//                                     replayed: <= 2 commands a layer plus 2 (the segment up to
//                                     the host's wait for x, the one up to its cold half; the
//                                     output), every step but the first replayed, and the same
//                                     text as with every operation queued anew
// With activation predictors (--predictor), the predictor of every layer whose attention is
// on the device runs there (model/hybrid_forward.h device_predict), and its mask, one byte a
// neuron, is all that comes back besides x; no index list or mask goes over:
//   full offload (-ngl 99), greedy:   <= 1 host sync, the embedding row and the position in,
//                                     the token id and the layers' masks back (n_layer * n_ff
//                                     bytes, for the statistics, with the pass's last sync);
//                                     every step but the first replayed (also with thresholds,
//                                     --sparse), with the same text as queued anew
//   hot/cold split as above:          <= n_layer + 1 syncs, at most one activation row to the
//                                     device a layer (and the position), one row and the
//                                     layer's mask back; replayed in segments as above
//   on the CPU device, the same text as the host's own predictor (the same bits)
// A mixture of experts (a tiny qwen3moe from hc-synth-model: 2 layers, 16 experts, 4 used)
// wholly on the device routes there (Device::moe_topk, matmul_id, moe_combine):
//   -ngl 99, greedy:                  <= 1 host sync, the token id back, every step but the first
//                                     replayed, the same text as queued anew (and, on the CPU
//                                     device, as the host's)
// Run on stories260K as a ReLU model (5 layers, n_embd 64, n_ff 172, vocab 512) on the device
// given (cpu, vulkan:0). Shared by tests/app (the CPU device) and tests/vulkan (lavapipe).
#pragma once
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "cli_util.h"

namespace hc::test {

// The number after "\"key\": " in a JSON text, or -1 when absent.
inline double json_number(const std::string& json, const std::string& key) {
  const size_t at = json.find("\"" + key + "\": ");
  if (at == std::string::npos) return -1;
  return std::atof(json.c_str() + at + key.size() + 4);
}

struct DecodeCounters {
  double syncs = -1, ops = -1, h2d = -1, d2h = -1, replayed = -1;
};

inline DecodeCounters bench_counters(const std::vector<std::string>& args) {
  std::vector<std::string> a = {"bench", "-p", "0", "-n", "16", "-r", "1", "--json", "--no-membw"};
  a.insert(a.end(), args.begin(), args.end());
  CliResult r = run_hotcold(a);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  DecodeCounters c;
  c.syncs = json_number(r.out, "syncs_per_token");
  c.ops = json_number(r.out, "ops_per_token");
  c.h2d = json_number(r.out, "h2d_bytes_per_token");
  c.d2h = json_number(r.out, "d2h_bytes_per_token");
  c.replayed = json_number(r.out, "replayed_tokens");
  EXPECT_GE(c.syncs, 0) << r.out;
  EXPECT_GT(c.ops, 0) << r.out;  // the device did the work
  return c;
}

// `hotcold run` with `run_args` gives the same text with its device steps replayed and with
// every operation queued anew (HOTCOLD_DEVICE_REPLAY=0); under that setting bench with
// `bench_args` (when given) replays nothing.
inline void expect_replay_keeps_text(const std::vector<std::string>& run_args,
                                     const std::vector<std::string>& bench_args = {}) {
  const CliResult replayed = run_hotcold(run_args);
  ::setenv("HOTCOLD_DEVICE_REPLAY", "0", 1);
  const CliResult queued = run_hotcold(run_args);
  const double replayed_tokens = bench_args.empty() ? 0 : bench_counters(bench_args).replayed;
  ::unsetenv("HOTCOLD_DEVICE_REPLAY");
  EXPECT_EQ(replayed_tokens, 0) << "HOTCOLD_DEVICE_REPLAY=0 should queue every operation anew";
  ASSERT_EQ(replayed.exit_code, 0) << replayed.err;
  ASSERT_EQ(queued.exit_code, 0) << queued.err;
  EXPECT_GT(replayed.out.size(), 20u) << replayed.out;
  EXPECT_EQ(replayed.out, queued.out) << "replayed steps must give the same tokens";
}

// The premise of a split's budgets, from `hotcold plan`'s table ("| il | device | hot / n_ff |
// ..."): every layer's attention on the device, and some but not all of its neurons.
inline void expect_split_in_every_layer(const std::string& plan_out, int n_layer) {
  for (int il = 0; il < n_layer; ++il) {
    const std::string row = "| " + std::to_string(il) + " | ";
    const size_t at = plan_out.find(row);
    ASSERT_NE(at, std::string::npos) << plan_out;
    char where[16] = {};
    int hot = -1, n_ff = -1;
    ASSERT_EQ(std::sscanf(plan_out.c_str() + at + row.size(), "%15s | %d / %d", where, &hot, &n_ff),
              3)
        << plan_out;
    ASSERT_EQ(std::string(where), "device") << "layer " << il << "'s attention\n" << plan_out;
    ASSERT_GT(hot, 0) << plan_out;
    ASSERT_LT(hot, n_ff) << "layer " << il << " needs host neurons\n" << plan_out;
  }
}

inline void check_decode_budgets(const std::string& device) {
  constexpr int kLayers = 5;
  constexpr double kRow = 64 * 4, kLogits = 512 * 4, kPos = 4;
  constexpr double kGenerated = 16;  // bench_counters' -n
  ScratchDir dir;
  const std::string model = convert_stories260k(dir, "stories260K-relu");
  {
    SCOPED_TRACE("-ngl 99, greedy");
    const DecodeCounters c = bench_counters({"-m", model, "-ngl", "99", "--device", device});
    EXPECT_LE(c.syncs, 1.0);
    EXPECT_LE(c.d2h, 64.0) << "greedy decoding should bring back the token id, not the logits";
    EXPECT_GE(c.replayed, kGenerated - 1) << "the decode step should be recorded and replayed";
  }
  {
    SCOPED_TRACE("-ngl 99, logits");
    const DecodeCounters c =
        bench_counters({"-m", model, "-ngl", "99", "--device", device, "--tg-logits"});
    EXPECT_LE(c.syncs, 1.0);
    EXPECT_LE(c.d2h, kLogits);
    EXPECT_GE(c.replayed, kGenerated - 1);
  }
  {
    SCOPED_TRACE("-ngl 99, replayed or queued anew");
    expect_replay_keeps_text({"run", "-m", model, "-p", "Once upon a time", "-n", "32", "--temp",
                              "0", "-ngl", "99", "--device", device},
                             {"-m", model, "-ngl", "99", "--device", device});
  }
  // A hot/cold split with the attention of every layer and some but not all neurons of every
  // layer on the device: a budget the planner fills so (a slow host, free round trips).
  const std::string stats = dir.file("stats.gguf"), plan = dir.file("plan.gguf");
  CliResult r = run_hotcold({"profile", "-m", model, "-f", corpus_slice(dir, 40000), "-o", stats,
                             "-c", "128", "--chunks", "8"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const char* gib = "0.0011";
  r = run_hotcold({"plan", "-m", model, "--stats", stats, "--vram-budget", gib, "-o", plan,
                   "--device", "cpu", "--host-gbps", "0.5", "--dev-gbps", "400", "--link-gbps",
                   "25", "--op-us", "0", "--sync-us", "0", "--time-limit", "5", "--granule", "4"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  expect_split_in_every_layer(r.out, kLayers);
  if (::testing::Test::HasFatalFailure()) return;
  const std::vector<std::string> split = {"-m", model, "--sparse", "--plan", plan,
                                          "--vram-budget", gib, "--device", device};
  {
    SCOPED_TRACE("hot/cold split");
    const DecodeCounters c = bench_counters(split);
    EXPECT_LE(c.syncs, kLayers + 1.0);
    EXPECT_LE(c.h2d, (kLayers + 1) * kRow + kPos)
        << "at most one activation row to the device a layer";
    EXPECT_LE(c.d2h, (kLayers + 1) * kRow) << "at most one activation row back a layer";
    EXPECT_LE(c.ops, 2 * kLayers + 2.0) << "the split's device work should be replayed segments";
    EXPECT_GE(c.replayed, kGenerated - 1) << "every split step but the first should be replayed";
  }
  {
    SCOPED_TRACE("hot/cold split, replayed or queued anew");
    // A context near bench's, which the plan was made for (the budget holds little KV).
    std::vector<std::string> gen = {"run", "-p", "Once upon a time", "-n", "32", "--temp", "0",
                                    "-c", "48"};
    gen.insert(gen.end(), split.begin(), split.end());
    expect_replay_keeps_text(gen, split);
  }
}

inline void check_predictor_budgets(const std::string& device) {
  constexpr int kLayers = 5;
  constexpr double kRow = 64 * 4, kMask = 172, kPos = 4;
  ScratchDir dir;
  const std::string relu = convert_stories260k(dir, "stories260K-relu");
  const std::string model = dir.file("pred.gguf"), stats = dir.file("stats.gguf"),
                    plan = dir.file("plan.gguf");
  CliResult r = run_hotcold({"train-predictor", "-m", relu, "-f", kTinyStories, "-o", model, "-c",
                             "128", "--chunks", "16", "--epochs", "15", "--rank", "64", "--lr",
                             "1e-2", "--seed", "3", "-t", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  {
    SCOPED_TRACE("-ngl 99 --predictor, greedy");
    const DecodeCounters c =
        bench_counters({"-m", model, "--predictor", "-ngl", "99", "--device", device});
    EXPECT_LE(c.syncs, 1.0) << "no layer should wait for the host";
    EXPECT_LE(c.h2d, kRow + 4) << "only the token's embedding row and position should go over";
    EXPECT_LE(c.d2h, 64.0 + kLayers * kMask);
    EXPECT_GE(c.replayed, 16 - 1) << "the sparse step wholly on the device should be replayed";
  }
  {
    SCOPED_TRACE("-ngl 99 --sparse (thresholds), greedy");
    const DecodeCounters c =
        bench_counters({"-m", model, "--sparse", "-ngl", "99", "--device", device});
    EXPECT_LE(c.syncs, 1.0);
    EXPECT_LE(c.d2h, 64.0);
    EXPECT_GE(c.replayed, 16 - 1);
  }
  {
    SCOPED_TRACE("-ngl 99 --predictor, replayed or queued anew");
    expect_replay_keeps_text({"run", "-m", model, "--predictor", "-p", "Once upon a time", "-n",
                              "32", "--temp", "0", "-ngl", "99", "--device", device});
  }
  if (device == "cpu") {  // the CPU device's predictor computes the host's bits
    const auto generate = [&](std::vector<std::string> extra) {
      std::vector<std::string> a = {"run", "-m", model, "--predictor", "-p", "Once upon a time",
                                    "-n", "40", "--temp", "0"};
      a.insert(a.end(), extra.begin(), extra.end());
      return run_hotcold(a);
    };
    const CliResult host = generate({});
    const CliResult full = generate({"-ngl", "99", "--device", device});
    const CliResult part = generate({"-ngl", "3", "--device", device});
    ASSERT_EQ(host.exit_code, 0) << host.err;
    EXPECT_GT(host.out.size(), 40u) << host.out;
    EXPECT_EQ(full.out, host.out) << full.err;
    EXPECT_EQ(part.out, host.out) << part.err;
  }
  // The split: every layer's attention (and so its predictor) and some of its neurons there.
  r = run_hotcold({"profile", "-m", model, "-f", corpus_slice(dir, 40000), "-o", stats, "-c",
                   "128", "--chunks", "8"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const char* gib = "0.0016";
  r = run_hotcold({"plan", "-m", model, "--stats", stats, "--predictor", "--vram-budget", gib,
                   "-o", plan, "--device", "cpu", "--host-gbps", "0.5", "--dev-gbps", "400",
                   "--link-gbps", "25", "--op-us", "0", "--sync-us", "0", "--time-limit", "5",
                   "--granule", "4"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  expect_split_in_every_layer(r.out, kLayers);
  if (::testing::Test::HasFatalFailure()) return;
  const std::vector<std::string> split = {"-m", model, "--predictor", "--plan", plan,
                                          "--vram-budget", gib, "--device", device};
  {
    SCOPED_TRACE("hot/cold split, --predictor");
    const DecodeCounters c = bench_counters(split);
    EXPECT_LE(c.syncs, kLayers + 1.0);
    EXPECT_LE(c.h2d, (kLayers + 1) * kRow + kPos)
        << "no index list or mask should go to the device";
    EXPECT_LE(c.d2h, (kLayers + 1) * kRow + kLayers * kMask);
    EXPECT_LE(c.ops, 2 * kLayers + 2.0) << "the split's device work should be replayed segments";
    EXPECT_GE(c.replayed, 16 - 1) << "every split step but the first should be replayed";
  }
  {
    SCOPED_TRACE("hot/cold split, --predictor, replayed or queued anew");
    std::vector<std::string> gen = {"run", "-p", "Once upon a time", "-n", "32", "--temp", "0",
                                    "-c", "48"};
    gen.insert(gen.end(), split.begin(), split.end());
    expect_replay_keeps_text(gen);
  }
}

inline void check_moe_budgets(const std::string& device) {
  ScratchDir dir;
  const std::string model = dir.file("qwen3moe.gguf");
  const std::string synth =
      (std::filesystem::path(HC_BINARY).parent_path() / "hc-synth-model").string();
  CliResult r = run_binary(synth, {"--shape", "tiny", "--arch", "qwen3moe", "--experts", "16",
                                   "--experts-used", "4", "--n-ff-exp", "256", "--layers", "2",
                                   "--type", "q8_0", "-o", model});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  {
    SCOPED_TRACE("mixture of experts, -ngl 99, greedy");
    const DecodeCounters c = bench_counters({"-m", model, "-ngl", "99", "--device", device});
    EXPECT_LE(c.syncs, 1.0) << "the layers should route on the device, not wait for the host";
    EXPECT_LE(c.d2h, 64.0) << "only the token id should come back";
    EXPECT_GE(c.replayed, 16 - 1) << "the step wholly on the device should be replayed";
  }
  {
    SCOPED_TRACE("mixture of experts, -ngl 99, replayed or queued anew");
    expect_replay_keeps_text({"run", "-m", model, "-p", "Once upon a time", "-n", "24", "--temp",
                              "0", "-ngl", "99", "--device", device},
                             {"-m", model, "-ngl", "99", "--device", device});
  }
  if (device == "cpu") {  // the CPU device routes and computes the experts as the host does
    const std::vector<std::string> gen = {"run", "-m", model, "-p", "Once upon a time", "-n",
                                          "24", "--temp", "0", "--ids"};
    std::vector<std::string> dev = gen;
    dev.insert(dev.end(), {"-ngl", "99", "--device", device});
    const CliResult host = run_hotcold(gen), on_device = run_hotcold(dev);
    ASSERT_EQ(host.exit_code, 0) << host.err;
    ASSERT_EQ(on_device.exit_code, 0) << on_device.err;
    EXPECT_EQ(on_device.out, host.out);
  }
}

}  // namespace hc::test
