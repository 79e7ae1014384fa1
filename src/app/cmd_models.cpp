// hotcold models: the models in the model cache (app/model_cache.h), one a line with its name
// (what `-m NAME` takes), size, type and architecture, as `ollama list` lists its models.
#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <system_error>

#include "app/commands.h"
#include "app/common.h"
#include "app/model_cache.h"
#include "core/dtype.h"
#include "format/gguf.h"
#include "model/quantize_plan.h"

namespace hc {

namespace {

constexpr char kCmd[] = "models";

struct Row {
  std::string name, size, type, arch;
};

// The type as llama.cpp names the file's mix (general.file_type), else the type holding most of
// the weights' bytes.
std::string model_type(const GgufFile& g) {
  if (auto ft = g.get_u32("general.file_type"); ft.ok()) {
    if (std::string name = llama_ftype_name(*ft); !name.empty()) return name;
  }
  std::map<std::string, uint64_t> bytes;
  for (const GgufTensorInfo& t : g.tensors) bytes[dtype_name(t.type)] += t.nbytes;
  auto top = std::max_element(bytes.begin(), bytes.end(),
                              [](const auto& a, const auto& b) { return a.second < b.second; });
  return top == bytes.end() ? "-" : top->first;
}

Row describe(const CachedModel& m) {
  Row r{m.name, human_bytes(m.bytes, 1), "?", "?"};
  auto mapped = open_gguf(m.path.string());
  if (!mapped.ok()) {
    r.arch = "(unreadable: " + mapped.status().message() + ")";
    return r;
  }
  r.type = model_type(mapped->gguf);
  auto arch = mapped->gguf.get_string("general.architecture");
  r.arch = arch.ok() ? *arch : "-";
  return r;
}

}  // namespace

int cmd_models(const Args& args) {
  bool paths = false;
  ArgParser p(kCmd,
              "List the models in the model cache: the name `-m NAME` takes, size, type and "
              "architecture.\nFolders: $HOTCOLD_CACHE/models (default ~/.cache/hotcold/models), "
              "then $LLAMA_CACHE (default ~/.cache/llama.cpp).");
  p.add_flag("--paths", &paths, "also print each model's file");
  if (int rc = parse_or_exit(p, args, kCmd); rc >= 0) return rc;
  std::string dirs;
  for (const auto& d : model_cache_dirs()) {
    std::error_code ec;
    dirs += (dirs.empty() ? "" : ", ") + d.string() +
            (std::filesystem::is_directory(d, ec) ? "" : " (absent)");
  }
  const std::vector<CachedModel> models = cached_models();
  std::fprintf(stderr, "model cache: %s\n", dirs.c_str());
  if (models.empty()) {
    std::fprintf(stderr, "no models (scripts/setup.sh puts SmolLM2 in the first folder)\n");
    return 0;
  }
  std::vector<Row> rows{{"NAME", "SIZE", "TYPE", "ARCH"}};
  for (const CachedModel& m : models) rows.push_back(describe(m));
  size_t w[3] = {0, 0, 0};
  for (const Row& r : rows) {
    w[0] = std::max(w[0], r.name.size());
    w[1] = std::max(w[1], r.size.size());
    w[2] = std::max(w[2], r.type.size());
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    std::printf("%-*s  %*s  %-*s  %s", static_cast<int>(w[0]), r.name.c_str(), static_cast<int>(w[1]),
                r.size.c_str(), static_cast<int>(w[2]), r.type.c_str(), r.arch.c_str());
    if (paths) std::printf("  %s", i == 0 ? "PATH" : models[i - 1].path.c_str());
    std::printf("\n");
  }
  return 0;
}

}  // namespace hc
