#include "app/eval_data.h"

#include <cstdlib>
#include <filesystem>
#include <system_error>

#include "core/module.h"

namespace hc {

namespace fs = std::filesystem;

std::vector<std::string> eval_data_candidates() {
  std::vector<std::string> out;
  if (const char* env = std::getenv("HOTCOLD_DATA"); env && *env) out.push_back(env);
  out.push_back("../shared/data");
  if (Result<fs::path> bin = executable_dir(); bin.ok()) {
    out.push_back((*bin / ".." / "share" / "hotcold" / "data").lexically_normal().string());
    out.push_back((*bin / ".." / ".." / "shared" / "data").lexically_normal().string());
  }
  return out;
}

std::string eval_task_file(const std::string& task) {
  if (task == "wikitext2") return "wikitext-2/wiki.test.raw";
  if (task == "tinystories") return "tinystories/tinystories_val_head.txt";
  if (task == "mbpp") return "mbpp/mbpp.jsonl";
  return "humaneval/HumanEval.jsonl.gz";  // humaneval, code-ppl
}

Result<std::string> find_eval_data(const std::string& flag, const std::vector<std::string>& files) {
  std::error_code ec;
  if (!flag.empty()) {
    if (fs::is_directory(flag, ec)) return flag;
    return Status::Error("--data " + flag + ": not a folder (expected the folder holding "
                         "wikitext-2/, tinystories/, humaneval/, mbpp/)");
  }
  std::string looked, wanted;
  for (const std::string& f : files) wanted += (wanted.empty() ? "" : ", ") + f;
  for (const std::string& dir : eval_data_candidates()) {
    bool all = true;
    for (const std::string& f : files) all = all && fs::is_regular_file(fs::path(dir) / f, ec);
    if (all) return dir;
    looked += (looked.empty() ? "" : ", ") + dir;
  }
  return Status::Error("the eval data (" + wanted + ") is not in any of " + looked +
                       ": pass --data DIR (the folder holding wikitext-2/, tinystories/, "
                       "humaneval/, mbpp/), set HOTCOLD_DATA, or install hotcold with "
                       "`cmake --install BUILD --prefix PREFIX` from a checkout beside shared/");
}

}  // namespace hc
