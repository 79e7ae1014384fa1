// hc-synth-model (tools/synth): tiny random-weight models load and run in hotcold for every
// weight type, the bytes depend only on the seed, and bad flags are usage errors naming the
// problem. The tool is built beside hotcold, so it is found next to HC_BINARY.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "cli_util.h"
#include "model/llama_model.h"

namespace hc::test {
namespace {

std::string synth_binary() {
  return (std::filesystem::path(HC_BINARY).parent_path() / "hc-synth-model").string();
}

// Runs hc-synth-model with args.
CliResult run_synth(const std::vector<std::string>& args) { return run_binary(synth_binary(), args); }

class SynthModel : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(std::filesystem::exists(synth_binary()))
        << synth_binary() << " not found: build the hc-synth-model target";
  }
  // A tiny model in the scratch dir; fails the test when the tool does.
  std::string make_tiny(const std::string& name, std::vector<std::string> extra) {
    const std::string path = dir_.file(name);
    std::vector<std::string> args = {"--shape", "tiny", "-o", path};
    args.insert(args.end(), extra.begin(), extra.end());
    const CliResult r = run_synth(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return path;
  }
  ScratchDir dir_;
};

TEST_F(SynthModel, EveryTypeInspectsAndRunsInHotcold) {
  for (const char* type : {"f16", "q8_0", "q4_0", "q4_k"}) {
    SCOPED_TRACE(type);
    const std::string model = make_tiny(std::string(type) + ".gguf", {"--type", type});
    CliResult r = run_hotcold({"inspect", "-m", model});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(has(r.out, "\"synth-tiny\"")) << r.out;
    EXPECT_TRUE(has(r.out, "blk.1.ffn_down.weight")) << r.out;

    const std::string logits = dir_.file(std::string(type) + ".logits");
    r = run_hotcold({"run", "-m", model, "-p", "hello", "-n", "4", "--temp", "0", "--ignore-eos",
                     "--ids", "--logits-out", logits});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_FALSE(r.out.empty()) << r.err;
    // Last prompt token's logits: finite and spread out (std ~1 by construction).
    const std::string bytes = read_all(logits);
    ASSERT_EQ(bytes.size(), 512u * 4);
    std::vector<float> v(512);
    std::memcpy(v.data(), bytes.data(), bytes.size());
    double sum = 0, sum2 = 0;
    for (float x : v) {
      ASSERT_TRUE(std::isfinite(x));
      sum += x;
      sum2 += static_cast<double>(x) * x;
    }
    const double sd = std::sqrt(sum2 / 512 - (sum / 512) * (sum / 512));
    EXPECT_GT(sd, 0.3);
    EXPECT_LT(sd, 3.0);
  }
}

TEST_F(SynthModel, ShapeTypesAndMetadataAsRequested) {
  const std::string path =
      make_tiny("m.gguf", {"--layers", "3", "--type", "q4_0", "--n-ff", "512", "--act", "relu"});
  auto model = LlamaModel::load(path);
  ASSERT_TRUE(model.ok()) << model.message();
  const LlamaHParams& hp = (*model)->hparams();
  EXPECT_EQ(hp.n_layer, 3);
  EXPECT_EQ(hp.n_embd, 256);
  EXPECT_EQ(hp.n_ff, 512);
  EXPECT_EQ(hp.n_head, 4);
  EXPECT_EQ(hp.n_head_kv, 2);
  EXPECT_EQ(hp.n_vocab, 512);
  EXPECT_EQ(hp.n_rot, 64);
  EXPECT_EQ(hp.ffn_act, FfnActivation::kRelu);
  const GgufFile& f = (*model)->gguf();
  EXPECT_EQ(f.tensors.size(), 3u + 9u * 3);
  for (const GgufTensorInfo& t : f.tensors) {
    const bool norm = t.ne.size() == 1;
    EXPECT_EQ(t.type, norm ? GgmlType::F32 : GgmlType::Q4_0) << t.name;
  }
  EXPECT_EQ(*f.get_u32("general.file_type"), 2u);  // LLAMA_FTYPE_MOSTLY_Q4_0
  const std::vector<int32_t> ids = (*model)->tokenizer().encode("hello world", true, true);
  ASSERT_GE(ids.size(), 2u);
  EXPECT_EQ(ids[0], 1);  // BOS
}

TEST_F(SynthModel, BytesDependOnSeedOnly) {
  auto make = [&](const char* name, const char* seed, const char* threads) {
    return read_all(make_tiny(name, {"--type", "q4_k", "--seed", seed, "-t", threads}));
  };
  const std::string a = make("a.gguf", "7", "1");
  const std::string b = make("b.gguf", "7", "3");
  const std::string c = make("c.gguf", "8", "1");
  ASSERT_FALSE(a.empty());
  EXPECT_TRUE(a == b) << "same seed, different thread counts: files differ";
  EXPECT_EQ(a.size(), c.size());
  EXPECT_FALSE(a == c) << "different seeds wrote identical files";
}

TEST_F(SynthModel, BadFlagsAreUsageErrorsNamingTheProblem) {
  const std::string out = dir_.file("bad.gguf");
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const Case cases[] = {
      {{"--type", "q3_k"},
       "--type: expected one of f32, f16, bf16, q8_0, q4_0, q4_1, q4_k, "
       "q5_k, q6_k, found 'q3_k'"},
      {{"--type", "q4_k", "--n-ff", "1000"},
       "--type q4_k needs n_ff to be a multiple of the Q4_K block size 256, found n_ff 1000"},
      {{"--type", "q8_0", "--n-embd", "240"},
       "needs n_embd to be a multiple of the Q8_0 block size 32, found n_embd 240"},
      {{"--shape", "llama3-8b"},
       "--shape: expected one of llama2-7b, mistral-7b, falcon-7b, opt-6.7b, qwen2.5-7b, "
       "mixtral-8x7b, qwen3-30b-a3b, tiny, found 'llama3-8b'"},
      {{"--twin", "llama-9b"},
       "--twin: expected one of relullama-7b, prosparse-7b, opt-like-7b, bamboo-7b, found "
       "'llama-9b'"},
      {{"--twin", "prosparse-7b"}, "--twin needs --calib TEXT.txt"},
      {{"--twin", "prosparse-7b", "--calib", "x.txt", "--arch", "falcon"},
       "--twin prosparse-7b sets the architecture, activation and norms"},
      {{"--calib", "x.txt"}, "--calib calibrates a --twin; none given"},
      {{"--gate-rank", "16"}, "--gate-rank shapes a --twin's gate; none given"},
      {{"--twin", "prosparse-7b", "--calib", "x.txt", "--powerinfer"},
       "--twin with --powerinfer needs --gate-rank R"},
      {{"--twin", "prosparse-7b", "--calib", "x.txt", "--gate-rank", "225"},
       "--gate-rank: expected 1..224 (n_embd less the channel), found 225"},
      {{"--twin", "prosparse-7b", "--calib", "x.txt", "--gate-rank", "48", "--powerinfer",
        "--pred-rank", "64"},
       "the predictor's rank is 2 R + 32 = 128, found --pred-rank 64"},
      {{"--twin", "prosparse-7b", "--calib", "x.txt", "--gate-rank", "48", "--powerinfer",
        "--pred-kind", "gate"},
       "a --twin's predictor is its own"},
      {{"--twin", "prosparse-7b", "--calib", "x.txt", "--gate-rank", "48", "--powerinfer",
        "--target-recall", "1"},
       "--target-recall: expected a share in (0.5, 1), found 1"},
      {{"--n-head-kv", "3"}, "n_head 4 is not a multiple of n_head_kv 3"},
      {{"--n-vocab", "100"}, "n_vocab 100 is too small"},
      {{"--layers", "0"}, "--layers: expected 1..1024, found 0"},
      {{"--act", "gelu"}, "--act: expected relu or silu, found 'gelu'"},
      {{"--frobnicate"}, "unknown flag '--frobnicate' for 'hc-synth-model'"},
      {{"--layers", "two"}, "--layers: expected an integer, found 'two'"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = {"--shape", "tiny", "-o", out};
    if (c.args[0] == "--shape") args = {"-o", out};
    args.insert(args.end(), c.args.begin(), c.args.end());
    const CliResult r = run_synth(args);
    EXPECT_EQ(r.exit_code, 2) << c.message << "\n" << r.err;
    EXPECT_TRUE(has(r.err, "hc-synth-model: error: ")) << r.err;
    EXPECT_TRUE(has(r.err, c.message)) << "expected: " << c.message << "\nfound: " << r.err;
  }
  const CliResult missing_out = run_synth({"--shape", "tiny"});
  EXPECT_EQ(missing_out.exit_code, 2);
  EXPECT_TRUE(has(missing_out.err, "no output file given: expected -o OUT.gguf"))
      << missing_out.err;
  EXPECT_FALSE(std::filesystem::exists(out));
}

TEST_F(SynthModel, UnwritableOutputIsRuntimeErrorLeavingNoFile) {
  const std::string out = dir_.file("no_such_dir/m.gguf");
  const CliResult r = run_synth({"--shape", "tiny", "-o", out});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(has(r.err, "cannot open '" + out + ".tmp' for writing")) << r.err;
}

TEST_F(SynthModel, HelpNamesTheTool) {
  const CliResult r = run_synth({"--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_TRUE(has(r.out, "usage: hc-synth-model [options]")) << r.out;
  EXPECT_TRUE(has(r.out, "--type")) << r.out;
  EXPECT_FALSE(has(r.out, "hotcold hc-synth-model")) << r.out;
}

}  // namespace
}  // namespace hc::test
