// The second device from the command line: -ngl (llama.cpp's dense layer offload) and the
// hybrid placement (--plan, --vram-budget) on the CPU device give the host's tokens; the
// backends a build has are reported by --version (CI requires CUDA there); bad flags are
// clear errors.
#include <gtest/gtest.h>

#include <string>

#include "cli_util.h"

namespace hc {
namespace {

using test::CliResult;
using test::has;
using test::run_hotcold;
using test::ScratchDir;

const std::string kText = "../shared/data/tinystories/tinystories_val_head.txt";

TEST(DeviceCli, VersionNamesTheCompiledBackends) {
  CliResult r = run_hotcold({"--version"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string want = "backends: cpu";
#ifdef HC_CUDA_BUILT
  want += ", cuda";
#endif
#ifdef HC_VULKAN_BUILT
  want += ", vulkan";
  // The devices the loader sees (lavapipe on CI), or why there are none.
  EXPECT_TRUE(has(r.out, "vulkan devices (--device vulkan:N):\n  ")) << r.out;
#endif
  EXPECT_TRUE(has(r.out, want + " (")) << r.out;
}

TEST(DeviceCli, DenseOffloadOnTheCpuDeviceGivesTheHostTokens) {
  ScratchDir dir;
  const std::string model = test::convert_stories260k(dir, "stories260K");
  const std::vector<std::string> gen = {"run", "-m", model, "-p", "Once upon a time", "-n", "40",
                                        "--temp", "0", "--ids"};
  CliResult host = run_hotcold(gen);
  ASSERT_EQ(host.exit_code, 0) << host.err;
  for (const char* ngl : {"1", "3", "99"}) {
    std::vector<std::string> a = gen;
    a.insert(a.end(), {"-ngl", ngl, "--device", "cpu"});
    CliResult r = run_hotcold(a);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, host.out) << "-ngl " << ngl;
    EXPECT_TRUE(has(r.err, "device: cpu device")) << r.err;
  }
  // A budget: as many trailing layers as fit (here: all 5, and the log says so).
  std::vector<std::string> a = gen;
  a.insert(a.end(), {"--vram-budget", "0.01", "--device", "cpu"});
  CliResult r = run_hotcold(a);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, host.out);
  EXPECT_TRUE(has(r.err, "5/5 layers' attention, 5 dense FFNs")) << r.err;
  // Perplexity with offload equals the host's.
  const std::vector<std::string> ppl = {"perplexity", "-m", model, "-f", kText, "-c", "128",
                                        "--chunks", "2"};
  CliResult p0 = run_hotcold(ppl);
  std::vector<std::string> p1a = ppl;
  p1a.insert(p1a.end(), {"-ngl", "2", "--device", "cpu"});
  CliResult p1 = run_hotcold(p1a);
  ASSERT_EQ(p0.exit_code, 0) << p0.err;
  ASSERT_EQ(p1.exit_code, 0) << p1.err;
  const auto pos0 = p0.out.find("PPL = "), pos1 = p1.out.find("PPL = ");
  ASSERT_NE(pos0, std::string::npos);
  ASSERT_NE(pos1, std::string::npos);
  EXPECT_EQ(p0.out.substr(pos0, 20), p1.out.substr(pos1, 20));
}

// --vram-budget without a sparse FFN offloads as many trailing layers as fit, counting what the
// device charges: on a Q8_0 model the CPU device keeps the decode layout beside ggml's rows, and
// counting file bytes only (as before) picked layers that then failed to load at most of these
// budgets. Every budget runs and gives the host's tokens.
TEST(DeviceCli, DenseOffloadUnderABudgetCountsWhatTheDeviceCharges) {
  ScratchDir dir;
  const std::string f32 = test::convert_stories260k(dir, "stories260K");
  const std::string model = dir.file("q8.gguf");
  CliResult q = run_hotcold({"quantize", f32, model, "Q8_0"});
  ASSERT_EQ(q.exit_code, 0) << q.err;
  const std::vector<std::string> gen = {"run", "-m", model, "-p", "Once upon a time", "-n", "12",
                                        "--temp", "0", "--ids"};
  CliResult host = run_hotcold(gen);
  ASSERT_EQ(host.exit_code, 0) << host.err;
  int partial = 0;
  for (const char* gib : {"0.0005", "0.0006", "0.00065", "0.0007", "0.0008", "0.0009", "0.001",
                          "0.0011"}) {
    SCOPED_TRACE(gib);
    std::vector<std::string> a = gen;
    a.insert(a.end(), {"--vram-budget", gib, "--device", "cpu"});
    CliResult r = run_hotcold(a);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, host.out);
    for (const char* n : {"1/5", "2/5", "3/5", "4/5"}) partial += has(r.err, n);
  }
  EXPECT_GE(partial, 4);  // the budgets bind: most offload some layers, not all
}

TEST(DeviceCli, BadDeviceFlagsAreClearErrors) {
  ScratchDir dir;
  const std::string model = test::convert_stories260k(dir, "stories260K");
  auto run = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = {"run", "-m", model, "-p", "x", "-n", "2"};
    a.insert(a.end(), extra.begin(), extra.end());
    return run_hotcold(a);
  };
  CliResult r = run({"-ngl", "-1"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(has(r.err, "-ngl: expected a non-negative layer count, found -1")) << r.err;
  r = run({"-ngl", "1", "--device", "tpu"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(has(r.err, "--device: expected auto, cuda, vulkan[:N] or cpu, found 'tpu'")) << r.err;
  r = run({"--plan", "nope.gguf"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(has(r.err, "--plan places hot neurons of the sparse FFN")) << r.err;
  r = run({"-ngl", "1", "--device", "cpu", "--vram-budget", "0.000001"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(has(r.err, "budget")) << r.err;
#ifndef HC_CUDA_BUILT
  r = run({"-ngl", "1", "--device", "cuda"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(has(r.err, "built without the CUDA backend")) << r.err;
#endif
  // serve takes the same device flags, with the same errors (and one of its own: the slots'
  // device buffers must fit the budget).
  r = run_hotcold({"serve", "-m", model, "-ngl", "2", "--device", "tpu", "--port", "0"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(has(r.err, "--device: expected auto, cuda, vulkan[:N] or cpu, found 'tpu'")) << r.err;
  r = run_hotcold({"serve", "-m", model, "-ngl", "2", "--device", "cpu", "--vram-budget",
                   "0.000001", "--parallel", "4", "--port", "0"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(has(r.err, "does not hold the buffers of 4 sessions")) << r.err;
}

}  // namespace
}  // namespace hc
