// Helpers for tests that run the hotcold binary: run it with arguments, capture stdout,
// stderr and the exit status, and make scratch directories.
#pragma once
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace hc::test {

struct CliResult {
  int exit_code = -1;  // 128 + signal when the process died from a signal
  std::string out;
  std::string err;
};

inline std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

inline void write_all(const std::string& path, const std::string& data) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(data.data(), static_cast<std::streamsize>(data.size()));
}

// A fresh directory under the system temp dir, removed when the object dies.
class ScratchDir {
 public:
  ScratchDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "hotcold_app_XXXXXX").string();
    char* p = mkdtemp(tmpl.data());
    path_ = p ? p : "";
  }
  ~ScratchDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// Runs `binary` with args (no shell interpretation of the arguments themselves).
inline CliResult run_binary(const std::string& binary, const std::vector<std::string>& args) {
  ScratchDir dir;
  const std::string out = dir.file("stdout"), err = dir.file("stderr");
  std::string cmd = shell_quote(binary);
  for (const auto& a : args) cmd += " " + shell_quote(a);
  cmd += " >" + shell_quote(out) + " 2>" + shell_quote(err) + " </dev/null";
  const int st = std::system(cmd.c_str());
  CliResult r;
  if (st != -1 && WIFEXITED(st)) r.exit_code = WEXITSTATUS(st);
  r.out = read_all(out);
  r.err = read_all(err);
  return r;
}

// Runs HC_BINARY with args.
inline CliResult run_hotcold(const std::vector<std::string>& args) { return run_binary(HC_BINARY, args); }

// Converts ../shared's stories260K to dir/NAME.gguf with general.name NAME (a name containing
// "relu" makes the engine run its FFN as ReGLU); returns the path.
inline std::string convert_stories260k(const ScratchDir& dir, const std::string& name) {
  const std::string src = "../shared/models/stories260K/";
  const std::string out = dir.file(name + ".gguf");
  CliResult r = run_hotcold({"convert", "--llama2c", src + "stories260K.bin", "--tokenizer",
                             src + "tok512.bin", "--name", name, "-o", out});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return out;
}

inline const std::string kTinyStories = "../shared/data/tinystories/tinystories_val_head.txt";

// The first `bytes` of kTinyStories, written into dir/corpus.txt.
inline std::string corpus_slice(const ScratchDir& dir, size_t bytes) {
  const std::string path = dir.file("corpus.txt");
  write_all(path, read_all(kTinyStories).substr(0, bytes));
  return path;
}

inline bool has(const std::string& hay, const std::string& needle) {
  return hay.find(needle) != std::string::npos;
}

// Test suites on the real stories260K model, converted from ../shared by the binary itself
// once per suite: model() is its path.
class StoriesModelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new ScratchDir();
    model_ = dir_->file("stories260K.gguf");
    CliResult r = run_hotcold({"convert", "--llama2c", "../shared/models/stories260K/stories260K.bin",
                               "--tokenizer", "../shared/models/stories260K/tok512.bin", "-o", model_});
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static inline ScratchDir* dir_ = nullptr;
  static inline std::string model_;
};

// Test suites on stories260K run as a ReLU model (model_) and its activation profile (stats_:
// hotcold profile over 40 kB of TinyStories, 8 chunks of 128 tokens), made once per suite.
class ReluStoriesProfileTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new ScratchDir();
    model_ = convert_stories260k(*dir_, "stories260K-relu");
    stats_ = dir_->file("relu.stats.gguf");
    const std::string corpus = corpus_slice(*dir_, 40000);
    CliResult r = run_hotcold({"profile", "-m", model_, "-f", corpus, "-o", stats_, "-c", "128",
                               "--chunks", "8"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static inline ScratchDir* dir_ = nullptr;
  static inline std::string model_, stats_;
};

// The predictor table of `hotcold profile` (model/predictor_audit.h): rows "layer threshold
// recall% precision% predicted%" after "# predictor:", as shares.
struct PredictorRow {
  double recall = -1, precision = -1, predicted = -1;
};
inline std::vector<PredictorRow> predictor_rows(const std::string& out) {
  std::vector<PredictorRow> rows;
  const size_t head = out.find("# predictor:");
  if (head == std::string::npos) return rows;
  size_t at = out.find('\n', out.find('\n', head) + 1);  // past the comment and the header
  while (at != std::string::npos) {
    int il = -1;
    double thr, recall, precision, predicted;
    if (std::sscanf(out.c_str() + at + 1, "%d %lf %lf%% %lf%% %lf%%", &il, &thr, &recall,
                    &precision, &predicted) != 5)
      break;
    rows.push_back({recall / 100, precision / 100, predicted / 100});
    at = out.find('\n', at + 1);
  }
  return rows;
}

}  // namespace hc::test
