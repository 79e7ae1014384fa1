// The model cache (app/model_cache.h): -m NAME, `hotcold models`, and the error for a name that
// matches nothing.
#include "app/model_cache.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <sstream>

#include "cli_util.h"

namespace hc::test {
namespace {

namespace fs = std::filesystem;

// HOTCOLD_CACHE and LLAMA_CACHE pointed at two scratch folders for one test (each test runs in
// its own process under ctest; the old values come back at the end anyway).
class CacheEnv {
 public:
  CacheEnv() {
    fs::create_directories(hc_.file("models"));
    save("HOTCOLD_CACHE", hc_.path());
    save("LLAMA_CACHE", llama_.path());
  }
  ~CacheEnv() {
    for (auto& [k, v] : saved_) v ? setenv(k.c_str(), v->c_str(), 1) : unsetenv(k.c_str());
  }
  std::string hc_model(const std::string& file) const { return hc_.file("models/" + file); }
  std::string llama_model(const std::string& file) const { return llama_.file(file); }
  const ScratchDir& hc_models_parent() const { return hc_; }

 private:
  void save(const std::string& key, const std::string& value) {
    const char* old = std::getenv(key.c_str());
    saved_.emplace_back(key, old ? std::optional<std::string>(old) : std::nullopt);
    setenv(key.c_str(), value.c_str(), 1);
  }
  ScratchDir hc_, llama_;
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

TEST(ModelCache, CloseNamesPutSubstringsFirstThenFewEdits) {
  const std::vector<std::string> names = {"SmolLM2-135M-Instruct.Q4_1", "SmolLM2-135M-Instruct.F16",
                                          "stories260K", "Qwen3-0.6B.Q8_0", "llama-7b"};
  EXPECT_EQ(close_names("smollm2-135m", names),
            (std::vector<std::string>{"SmolLM2-135M-Instruct.F16", "SmolLM2-135M-Instruct.Q4_1"}));
  EXPECT_EQ(close_names("storis260k", names), (std::vector<std::string>{"stories260K"}));
  EXPECT_EQ(close_names("lama-7b", names), (std::vector<std::string>{"llama-7b"}));
  EXPECT_TRUE(close_names("mistral", names).empty());
  EXPECT_EQ(close_names("smollm2", names, 1).size(), 1u);
}

TEST(ModelCache, NamesResolveToTheirFilesInCacheOrder) {
  CacheEnv env;
  for (const std::string& f : {env.hc_model("tiny-a.gguf"), env.hc_model("Tiny-B.gguf"),
                               env.llama_model("tiny-a.gguf"), env.llama_model("other.gguf"),
                               env.hc_model("notes.txt"), env.hc_model(".hidden.gguf")})
    write_all(f, "x");
  std::vector<std::string> names;
  for (const CachedModel& m : cached_models()) names.push_back(m.name);
  EXPECT_EQ(names, (std::vector<std::string>{"Tiny-B", "other", "tiny-a"}));
  EXPECT_EQ(resolve_model_arg("tiny-a"), env.hc_model("tiny-a.gguf"));  // the first folder wins
  EXPECT_EQ(resolve_model_arg("tiny-a.gguf"), env.hc_model("tiny-a.gguf"));
  EXPECT_EQ(resolve_model_arg("tiny-b"), env.hc_model("Tiny-B.gguf"));  // one case-insensitive match
  EXPECT_EQ(resolve_model_arg("other"), env.llama_model("other.gguf"));
  EXPECT_EQ(resolve_model_arg("missing"), "missing");
  EXPECT_EQ(resolve_model_arg("sub/tiny-a"), "sub/tiny-a");  // a path is never a name
  write_all(env.hc_model("TINY-A.gguf"), "x");
  EXPECT_EQ(resolve_model_arg("Tiny-a"), "Tiny-a");  // two case-insensitive matches: none
  EXPECT_EQ(resolve_model_arg("TINY-A"), env.hc_model("TINY-A.gguf"));  // the exact one
}

TEST(ModelCache, MissingModelErrorsNameTheCacheAndCloseNames) {
  CacheEnv env;
  Status st = require_model_file("stories");
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(has(st.message(), "the cache is empty")) << st.message();
  write_all(env.hc_model("stories260K.gguf"), "x");
  st = require_model_file("storys260K");
  EXPECT_TRUE(has(st.message(), "cannot open model 'storys260K': no such file, and no model of "
                                "that name in the model cache (" +
                                    env.hc_model("").substr(0, env.hc_model("").size() - 1)))
      << st.message();
  EXPECT_TRUE(has(st.message(), "close names: stories260K")) << st.message();
  st = require_model_file("zzz");
  EXPECT_TRUE(has(st.message(), "`hotcold models` lists the cached models")) << st.message();
  EXPECT_TRUE(has(require_model_file("./x/y.gguf").message(), "'./x/y.gguf': no such file"));
  EXPECT_TRUE(require_model_file(env.hc_model("stories260K.gguf")).ok());
}

TEST(ModelCache, CommandsTakeACachedModelsName) {
  CacheEnv env;
  ScratchDir tmp;
  fs::rename(convert_stories260k(tmp, "stories260K"), env.hc_model("stories260K.gguf"));
  const CliResult by_path = run_hotcold({"run", "-m", env.hc_model("stories260K.gguf"), "-p",
                                         "Once upon a time", "-n", "6", "--temp", "0"});
  ASSERT_EQ(by_path.exit_code, 0) << by_path.err;
  const CliResult by_name =
      run_hotcold({"run", "-m", "stories260K", "-p", "Once upon a time", "-n", "6", "--temp", "0"});
  ASSERT_EQ(by_name.exit_code, 0) << by_name.err;
  EXPECT_EQ(by_name.out, by_path.out);
  EXPECT_TRUE(has(by_name.err, env.hc_model("stories260K.gguf"))) << by_name.err;  // the load log
  CliResult r = run_hotcold({"inspect", "stories260K.gguf", "--no-tensors"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = run_hotcold({"tokenize", "-m", "stories260K", "-p", "Once"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = run_hotcold({"run", "-m", "storie260K", "-p", "x", "-n", "1"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(has(r.err, "hotcold run: error: cannot open model 'storie260K': no such file"))
      << r.err;
  EXPECT_TRUE(has(r.err, "close names: stories260K")) << r.err;
}

TEST(ModelCache, ModelsListsNameSizeTypeAndArchitecture) {
  CacheEnv env;
  CliResult r = run_hotcold({"models"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_TRUE(has(r.err, "no models")) << r.err;
  ScratchDir tmp;
  fs::rename(convert_stories260k(tmp, "stories260K"), env.hc_model("stories260K.gguf"));
  write_all(env.llama_model("broken.gguf"), "GGUF but not really");
  r = run_hotcold({"models", "--paths"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::istringstream lines(r.out);
  std::string header, broken, stories;
  std::getline(lines, header);
  std::getline(lines, broken);
  std::getline(lines, stories);
  EXPECT_TRUE(has(header, "NAME") && has(header, "SIZE") && has(header, "TYPE") && has(header, "ARCH"))
      << r.out;
  EXPECT_EQ(broken.rfind("broken ", 0), 0u) << r.out;
  EXPECT_TRUE(has(broken, "(unreadable: ")) << r.out;
  EXPECT_EQ(stories.rfind("stories260K ", 0), 0u) << r.out;
  EXPECT_TRUE(has(stories, " 1.1 MiB  F32 ") && has(stories, " llama  ")) << r.out;
  EXPECT_TRUE(has(stories, env.hc_model("stories260K.gguf"))) << r.out;
}

}  // namespace
}  // namespace hc::test
