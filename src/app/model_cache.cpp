#include "app/model_cache.h"

#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <map>
#include <system_error>
#include <tuple>

namespace hc {

namespace fs = std::filesystem;

namespace {

fs::path home_dir() {
  if (const char* h = std::getenv("HOME"); h && *h) return h;
  if (const passwd* pw = getpwuid(getuid()); pw && pw->pw_dir) return pw->pw_dir;
  return "/";
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool ends_with_gguf(const std::string& name) {
  return name.size() > 5 && lower(name.substr(name.size() - 5)) == ".gguf";
}

std::string strip_gguf(const std::string& name) {
  return ends_with_gguf(name) ? name.substr(0, name.size() - 5) : name;
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string dirs_text() {
  std::string out;
  for (const fs::path& d : model_cache_dirs()) out += (out.empty() ? "" : ", ") + d.string();
  return out;
}

}  // namespace

fs::path hotcold_cache_dir() {
  const char* env = std::getenv("HOTCOLD_CACHE");
  return env && *env ? fs::path(env) : home_dir() / ".cache" / "hotcold";
}

std::vector<fs::path> model_cache_dirs() {
  const char* llama_cache = std::getenv("LLAMA_CACHE");
  return {hotcold_cache_dir() / "models",
          llama_cache && *llama_cache ? fs::path(llama_cache) : home_dir() / ".cache" / "llama.cpp"};
}

std::vector<CachedModel> cached_models() {
  std::map<std::string, CachedModel> by_name;
  for (const fs::path& dir : model_cache_dirs()) {
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string file = it->path().filename().string();
      if (file.empty() || file[0] == '.' || !ends_with_gguf(file)) continue;
      std::error_code fe;
      if (!it->is_regular_file(fe)) continue;
      CachedModel m{strip_gguf(file), it->path(), static_cast<uint64_t>(it->file_size(fe))};
      by_name.emplace(m.name, std::move(m));  // an earlier folder's name wins
    }
  }
  std::vector<CachedModel> out;
  for (auto& [name, m] : by_name) out.push_back(std::move(m));
  return out;
}

std::string resolve_model_arg(const std::string& arg) {
  std::error_code ec;
  if (arg.empty() || fs::exists(arg, ec) || arg.find('/') != std::string::npos) return arg;
  const std::string want = strip_gguf(arg);
  const std::vector<CachedModel> models = cached_models();
  for (const CachedModel& m : models)
    if (m.name == want) return m.path.string();
  const CachedModel* only = nullptr;
  for (const CachedModel& m : models) {
    if (lower(m.name) != lower(want)) continue;
    if (only) return arg;  // two names differ only in case: say which ones at open
    only = &m;
  }
  return only ? only->path.string() : arg;
}

std::vector<std::string> close_names(const std::string& want, const std::vector<std::string>& names,
                                     size_t max) {
  const std::string w = lower(want);
  struct Scored {
    int substring;  // 0: one holds the other
    size_t distance;
    std::string name;
  };
  std::vector<Scored> scored;
  for (const std::string& n : names) {
    const std::string l = lower(n);
    const bool sub = !w.empty() && (l.find(w) != std::string::npos || w.find(l) != std::string::npos);
    const size_t d = edit_distance(w, l);
    if (sub || d <= std::max<size_t>(2, w.size() / 3)) scored.push_back({sub ? 0 : 1, d, n});
  }
  std::sort(scored.begin(), scored.end(), [](const Scored& a, const Scored& b) {
    return std::tie(a.substring, a.distance, a.name) < std::tie(b.substring, b.distance, b.name);
  });
  std::vector<std::string> out;
  for (size_t i = 0; i < scored.size() && i < max; ++i) out.push_back(scored[i].name);
  return out;
}

Status require_model_file(const std::string& path) {
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) return Status::Ok();
  if (fs::is_directory(path, ec))
    return Status::Error("cannot open model '" + path + "': a directory, expected a GGUF file");
  if (path.find('/') != std::string::npos || fs::exists(path, ec))
    return Status::Error("cannot open model '" + path + "': no such file");
  std::string msg = "cannot open model '" + path + "': no such file, and no model of that name " +
                    "in the model cache (" + dirs_text() + ")";
  const std::vector<CachedModel> models = cached_models();
  if (models.empty())
    return Status::Error(msg + "; the cache is empty (scripts/setup.sh puts SmolLM2 there)");
  std::vector<std::string> names;
  for (const CachedModel& m : models) names.push_back(m.name);
  const std::vector<std::string> close = close_names(strip_gguf(path), names);
  if (close.empty()) return Status::Error(msg + "; `hotcold models` lists the cached models");
  msg += "; close names:";
  for (size_t i = 0; i < close.size(); ++i) msg += (i ? ", " : " ") + close[i];
  return Status::Error(msg);
}

}  // namespace hc
