// End-to-end tests of the hotcold binary: dispatch, usage errors, inspect, tokenize, convert.
// Run from the project root (../shared is read by relative path).
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>

#include "cli_util.h"

namespace hc::test {
namespace {

const std::string kVocabDir = "../shared/tokenizer-conformance/";
const std::string kStoriesDir = "../shared/models/stories260K/";

// First test string of a conformance .inp file (strings are separated by this marker).
std::string first_inp(const std::string& vocab) {
  const std::string all = read_all(kVocabDir + vocab + ".inp");
  return all.substr(0, all.find("\n__ggml_vocab_test__\n"));
}

std::vector<int> first_out_ids(const std::string& vocab) {
  std::istringstream lines(read_all(kVocabDir + vocab + ".out"));
  std::string line;
  std::getline(lines, line);
  std::istringstream ids(line);
  std::vector<int> out;
  for (int id; ids >> id;) out.push_back(id);
  return out;
}

std::vector<int> ids_of(const std::string& stdout_text) {
  std::istringstream in(stdout_text);
  std::vector<int> out;
  for (int id; in >> id;) out.push_back(id);
  return out;
}

TEST(Cli, HelpListsCommands) {
  CliResult r = run_hotcold({"--help"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  for (const char* c : {"run", "chat", "serve", "bench", "perplexity", "convert", "inspect",
                        "tokenize", "quantize", "models"})
    EXPECT_TRUE(has(r.out, std::string("  ") + c)) << c << "\n" << r.out;
  r = run_hotcold({"--version"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_TRUE(has(r.out, "hotcold ")) << r.out;
}

TEST(Cli, NoArgumentsIsUsageError) {
  CliResult r = run_hotcold({});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(has(r.err, "usage: hotcold")) << r.err;
}

TEST(Cli, UnknownSubcommandIsUsageError) {
  CliResult r = run_hotcold({"frobnicate"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(has(r.err, "unknown command 'frobnicate'")) << r.err;
  r = run_hotcold({"--frobnicate"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(has(r.err, "unknown option '--frobnicate'")) << r.err;
}

TEST(Cli, UnknownFlagIsUsageError) {
  for (const char* cmd : {"inspect", "tokenize", "quantize", "convert", "run"}) {
    CliResult r = run_hotcold({cmd, "--foo"});
    EXPECT_EQ(r.exit_code, 2) << cmd << ": " << r.err;
    EXPECT_TRUE(has(r.err, std::string("unknown flag '--foo' for 'hotcold ") + cmd + "'"))
        << cmd << ": " << r.err;
  }
}

TEST(Cli, SubcommandHelp) {
  for (const char* cmd : {"inspect", "tokenize", "quantize", "convert"}) {
    CliResult r = run_hotcold({cmd, "--help"});
    EXPECT_EQ(r.exit_code, 0) << cmd << ": " << r.err;
    EXPECT_TRUE(has(r.out, std::string("usage: hotcold ") + cmd)) << r.out;
  }
  CliResult r = run_hotcold({"help", "quantize"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_TRUE(has(r.out, "Q4_K_M")) << r.out;
}

TEST(Cli, EveryListedCommandIsAvailable) {
  CliResult r = run_hotcold({"--help"});
  ASSERT_EQ(r.exit_code, 0);
  EXPECT_FALSE(has(r.out + r.err, "not available")) << r.out;
  for (const char* cmd : {"eval", "simulate", "plan", "profile", "train-predictor"}) {
    EXPECT_TRUE(has(r.out + r.err, std::string("  ") + cmd + " ")) << cmd;
    CliResult h = run_hotcold({cmd, "--help"});
    EXPECT_EQ(h.exit_code, 0) << cmd << ": " << h.err;
  }
}

// Each option's help states its default once: the parser appends "(default: V)" unless the
// help already explains one (a sentinel such as "(default: all)").
TEST(Cli, HelpStatesEachDefaultOnce) {
  for (const char* cmd : {"run", "chat", "serve", "bench", "perplexity", "eval", "profile",
                          "train-predictor", "plan", "simulate", "quantize", "convert", "inspect",
                          "tokenize"}) {
    CliResult h = run_hotcold({cmd, "--help"});
    ASSERT_EQ(h.exit_code, 0) << cmd << ": " << h.err;
    // An option's help may wrap: join continuation lines (deeper indent) to their option.
    std::vector<std::string> entries;
    std::istringstream in(h.out);
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("  -", 0) == 0 || entries.empty()) entries.push_back(line);
      else entries.back() += " " + line;
    }
    int n_defaults = 0;
    for (const std::string& e : entries) {
      size_t count = 0;
      for (size_t at = e.find("default"); at != std::string::npos; at = e.find("default", at + 1))
        ++count;
      EXPECT_LE(count, 1u) << cmd << ": " << e;
      n_defaults += count > 0;
    }
    EXPECT_GT(n_defaults, 0) << cmd << " --help states no default:\n" << h.out;
  }
}

TEST(Cli, InspectPrintsVocabKeys) {
  CliResult r = run_hotcold({"inspect", kVocabDir + "ggml-vocab-gpt-2.gguf"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "magic: GGUF, version 3")) << r.out.substr(0, 400);
  for (const char* key : {"general.architecture", "tokenizer.ggml.model", "tokenizer.ggml.tokens",
                          "tokenizer.ggml.merges"})
    EXPECT_TRUE(has(r.out, key)) << key;
  EXPECT_TRUE(has(r.out, "[string x 50257]")) << "arrays are abbreviated";
  EXPECT_TRUE(has(r.out, "totals:"));
  // -m form gives the same output.
  CliResult r2 = run_hotcold({"inspect", "-m", kVocabDir + "ggml-vocab-gpt-2.gguf"});
  EXPECT_EQ(r2.exit_code, 0);
  EXPECT_EQ(r2.out, r.out);
}

TEST(Cli, InspectTruncatedFileFailsCleanly) {
  ScratchDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string full = read_all(kVocabDir + "ggml-vocab-gpt-2.gguf");
  ASSERT_GT(full.size(), 100000u);
  for (size_t cut : {size_t{3}, size_t{20}, size_t{1000}, full.size() / 2}) {
    const std::string path = dir.file("cut.gguf");
    write_all(path, full.substr(0, cut));
    CliResult r = run_hotcold({"inspect", path});
    EXPECT_EQ(r.exit_code, 1) << "cut at " << cut << ": " << r.err;
    EXPECT_TRUE(has(r.err, "hotcold inspect: error: " + path + ": ")) << r.err;
    // The parser's message says what it expected and found; any of its forms will do.
    EXPECT_GT(r.err.size(), ("hotcold inspect: error: " + path + ": ").size() + 10) << r.err;
    EXPECT_TRUE(r.out.empty()) << "nothing printed before the file is validated";
  }
}

TEST(Cli, InspectMissingAndForeignFiles) {
  ScratchDir dir;
  CliResult r = run_hotcold({"inspect", dir.file("nope.gguf")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(has(r.err, "cannot open")) << r.err;
  write_all(dir.file("text.gguf"), "hello, this is not a model\n");
  r = run_hotcold({"inspect", dir.file("text.gguf")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(has(r.err, "not a GGUF file: expected magic 'GGUF' or 'PWRI', found 'hell'"))
      << r.err;
  r = run_hotcold({"inspect"});
  EXPECT_EQ(r.exit_code, 2);
}

TEST(Cli, TokenizeMatchesConformanceWithoutSpecials) {
  const std::string vocab = "ggml-vocab-gpt-2.gguf";
  CliResult r =
      run_hotcold({"tokenize", "-m", kVocabDir + vocab, "-p", first_inp(vocab), "--no-bos"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(ids_of(r.out), first_out_ids(vocab));
  // One id per line.
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'),
            static_cast<long>(first_out_ids(vocab).size()));
}

TEST(Cli, TokenizeFromFileAndWithBos) {
  const std::string vocab = "ggml-vocab-llama-spm.gguf";
  ScratchDir dir;
  write_all(dir.file("in.txt"), first_inp(vocab));
  CliResult plain =
      run_hotcold({"tokenize", "-m", kVocabDir + vocab, "-f", dir.file("in.txt"), "--no-bos"});
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_EQ(ids_of(plain.out), first_out_ids(vocab));
  CliResult bos = run_hotcold({"tokenize", "-m", kVocabDir + vocab, "-f", dir.file("in.txt")});
  ASSERT_EQ(bos.exit_code, 0) << bos.err;
  std::vector<int> expected = first_out_ids(vocab);
  expected.insert(expected.begin(), 1);  // llama-spm adds BOS (id 1) by default
  EXPECT_EQ(ids_of(bos.out), expected);
  CliResult pieces = run_hotcold(
      {"tokenize", "-m", kVocabDir + vocab, "-p", "Hello", "--show-pieces", "--no-bos"});
  ASSERT_EQ(pieces.exit_code, 0) << pieces.err;
  EXPECT_TRUE(has(pieces.out, "\t'")) << pieces.out;
}

TEST(Cli, TokenizeUsageErrors) {
  const std::string model = kVocabDir + "ggml-vocab-gpt-2.gguf";
  EXPECT_EQ(run_hotcold({"tokenize", "-m", model}).exit_code, 2);
  EXPECT_EQ(run_hotcold({"tokenize", "-m", model, "-p", "a", "-f", "b"}).exit_code, 2);
  EXPECT_EQ(run_hotcold({"tokenize", "-p", "a"}).exit_code, 2);
  CliResult r = run_hotcold({"tokenize", "-m", model, "-f", "/nonexistent/file.txt"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(has(r.err, "cannot open")) << r.err;
}

TEST(Cli, ConvertStories260KThenInspectAndQuantize) {
  ScratchDir dir;
  const std::string out = dir.file("stories260K.gguf");
  CliResult r = run_hotcold({"convert", "--llama2c", kStoriesDir + "stories260K.bin",
                             "--tokenizer", kStoriesDir + "tok512.bin", "-o", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = run_hotcold({"inspect", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "llama.block_count")) << r.out;
  EXPECT_TRUE(has(r.out, "blk.4.ffn_down.weight")) << r.out;
  // n_embd 64 and n_ff 172 divide no K-quant block: every matrix takes a fallback type.
  const std::string q = dir.file("q4km.gguf");
  r = run_hotcold({"quantize", "-m", out, "-o", q, "--type", "q4_k_m", "-t", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(has(r.err, "fallback to Q5_0")) << r.err;
  EXPECT_TRUE(has(r.err, "fallback to F16")) << r.err;  // ffn_down rows of 172
  r = run_hotcold({"inspect", q});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "general.file_type")) << r.out;
  // Bad inputs to convert: swapped files.
  r = run_hotcold({"convert", "--llama2c", kStoriesDir + "tok512.bin", "--tokenizer",
                   kStoriesDir + "stories260K.bin", "-o", dir.file("bad.gguf")});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(has(r.err, "hotcold convert: error:")) << r.err;
  EXPECT_EQ(run_hotcold({"convert", "-o", dir.file("x.gguf")}).exit_code, 2);
}

// --decode-kernels picks ggml's order or block sums for Q4_1 / Q8_0 (run's default: exact); any
// other value is an error naming what was expected and found.
TEST(Cli, DecodeKernelsFlag) {
  ScratchDir dir;
  const std::string f32 = dir.file("stories260K.gguf"), q8 = dir.file("q8.gguf");
  CliResult r = run_hotcold({"convert", "--llama2c", kStoriesDir + "stories260K.bin",
                             "--tokenizer", kStoriesDir + "tok512.bin", "-o", f32});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = run_hotcold({"quantize", "-m", f32, "-o", q8, "--type", "q8_0", "-t", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* k : {"exact", "fast"}) {
    r = run_hotcold({"run", "-m", q8, "-p", "Once", "-n", "8", "--temp", "0", "--decode-kernels", k});
    EXPECT_EQ(r.exit_code, 0) << k << ": " << r.err;
    EXPECT_GT(r.out.size(), 4u) << k;
  }
  r = run_hotcold({"run", "-m", q8, "-p", "Once", "-n", "8", "--decode-kernels", "fastest"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(has(r.err, "--decode-kernels: expected exact or fast, found 'fastest'")) << r.err;
}

#ifdef HC_CUDA_BUILT
// The CUDA backend, libhotcold_cuda.so, is opened the same way, by the first command that asks
// for a CUDA device: a binary without it names the file it looked for there, and runs on the
// CPU as before. Beside the built binary the module opens (the error, on a host without a GPU,
// is then that no device is visible).
TEST(Cli, CudaNamesAMissingCudaModuleAndCpuCommandsDoNotNeedIt) {
  ScratchDir dir;
  const std::string bin = dir.file("hotcold");
  std::filesystem::copy_file(HC_BINARY, bin);
  const std::string model = dir.file("stories260K.gguf");
  CliResult r = run_binary(bin, {"convert", "--llama2c", kStoriesDir + "stories260K.bin",
                                 "--tokenizer", kStoriesDir + "tok512.bin", "-o", model});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = run_binary(bin, {"run", "-m", model, "-p", "Once", "-n", "4", "--temp", "0"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = run_binary(bin, {"run", "-m", model, "-p", "Once", "-n", "4", "--device", "cuda", "-ngl", "1"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(has(r.err, "cannot open the CUDA backend module " + dir.file("libhotcold_cuda.so") +
                             ": ")) << r.err;
  r = run_hotcold({"run", "-m", model, "-p", "Once", "-n", "4", "--device", "cuda", "-ngl", "1"});
  EXPECT_FALSE(has(r.err, "CUDA backend module")) << r.err;
}
#endif

// hotcold serve opens its HTTP half, libhotcold_http.so, from beside the binary; no other
// command loads it. A binary without the module fails serve at once, naming the file it
// looked for, and still runs everything else.
TEST(Cli, ServeNamesAMissingHttpModuleAndOtherCommandsDoNotNeedIt) {
  ScratchDir dir;
  const std::string bin = dir.file("hotcold");
  std::filesystem::copy_file(HC_BINARY, bin);
  CliResult r = run_binary(bin, {"serve", "-m", "nope.gguf", "--port", "0"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(has(r.err, "cannot open the HTTP server module " + dir.file("libhotcold_http.so") +
                             ": ")) << r.err;
  EXPECT_FALSE(has(r.err, "nope.gguf")) << r.err;  // before the model is read
  const std::string model = dir.file("stories260K.gguf");
  r = run_binary(bin, {"convert", "--llama2c", kStoriesDir + "stories260K.bin", "--tokenizer",
                       kStoriesDir + "tok512.bin", "-o", model});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = run_binary(bin, {"run", "-m", model, "-p", "Once", "-n", "4", "--temp", "0"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(r.out.empty());
  // Beside the built binary the module opens: the error is the model file's.
  r = run_hotcold({"serve", "-m", dir.file("nope.gguf"), "--port", "0"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_FALSE(has(r.err, "HTTP server module")) << r.err;
  EXPECT_TRUE(has(r.err, "nope.gguf")) << r.err;
}

}  // namespace
}  // namespace hc::test
