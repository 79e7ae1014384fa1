// Flags and helpers shared by the model-running subcommands (run, chat, perplexity, bench).
#pragma once
#include <memory>
#include <string>

#include "app/args.h"
#include "core/status.h"
#include "engine/sampler.h"
#include "engine/session.h"
#include "model/llama_model.h"

namespace hc {

struct ModelFlags {
  std::string model;
  int threads = 2;
  int ctx = 0;      // 0: model default (capped)
  int batch = 512;
  bool verbose = false;
};

void add_model_flags(ArgParser& p, ModelFlags* f);
void add_sampling_flags(ArgParser& p, SamplerParams* s, std::string* seed);
// Resolves the seed flag ("" or -1 = random, like llama.cpp) into params->seed.
Status resolve_seed(const std::string& seed_flag, SamplerParams* params);

Result<std::shared_ptr<const LlamaModel>> load_model_logged(const ModelFlags& f);
SessionParams session_params(const ModelFlags& f);
Result<std::string> read_text_file(const std::string& path);

// Parses args; prints usage/errors. Returns -1 to continue, otherwise the exit code.
int parse_or_exit(ArgParser& p, const std::vector<std::string>& args);

double now_seconds();
long peak_rss_bytes();

}  // namespace hc
