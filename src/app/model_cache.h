// The model cache: the folders where scripts/setup.sh (and the user) keep GGUF files, so that
// `-m NAME` finds a model by its name, as `ollama run NAME` does, and `hotcold models` lists them.
//
// Folders, in this order: $HOTCOLD_CACHE/models (default ~/.cache/hotcold/models, where setup
// puts SmolLM2 and the models it makes), then llama.cpp's download cache $LLAMA_CACHE (default
// ~/.cache/llama.cpp, where `llama-cli -hf` puts its files). A model's name is its file name
// without `.gguf`: `SmolLM2-135M-Instruct.Q4_1`.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "core/status.h"

namespace hc {

// hotcold's cache: $HOTCOLD_CACHE, default ~/.cache/hotcold (as scripts/setup.sh): models/,
// plans/ (the planner's cached placements), the venv, wheels.
std::filesystem::path hotcold_cache_dir();

std::vector<std::filesystem::path> model_cache_dirs();

struct CachedModel {
  std::string name;             // the file name without .gguf
  std::filesystem::path path;
  uint64_t bytes = 0;
};
// Every *.gguf file directly in the cache folders (a name in an earlier folder hides the same
// name in a later one), sorted by name. Folders that do not exist are skipped.
std::vector<CachedModel> cached_models();

// The value of -m: an existing file as it is; else, for a name without '/', the cached model
// of that name (or file name; case-insensitive when only one matches); else the value unchanged,
// so that require_model_file() explains.
std::string resolve_model_arg(const std::string& arg);

// Ok when `path` is a file; otherwise the error for -m: no such file, the folders searched for
// a model of that name, and the cached names closest to it.
Status require_model_file(const std::string& path);

// Names among `names` close to `want` (a substring either way, case-insensitive, or a few edits
// away), closest first, at most `max`.
std::vector<std::string> close_names(const std::string& want, const std::vector<std::string>& names,
                                     size_t max = 5);

}  // namespace hc
