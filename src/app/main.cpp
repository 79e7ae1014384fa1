// hotcold <subcommand> [args]: dispatch only. Each subcommand parses its own flags and returns
// the exit code (0 ok, 1 runtime error, 2 usage error); nothing below may end the process, and
// any exception that escapes a subcommand is reported here instead of crashing.
#include <cstdio>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include "app/commands.h"
#include "ops/device.h"

namespace {

constexpr const char* kVersion = "0.1.0";

struct Subcommand {
  const char* name;
  int (*fn)(const hc::Args&);  // nullptr: planned but not available in this build
  const char* summary;
};

const Subcommand kSubcommands[] = {
    {"run", hc::cmd_run, "generate text from a prompt"},
    {"chat", hc::cmd_chat, "interactive chat using the model's chat template"},
    {"serve", hc::cmd_serve, "OpenAI-compatible HTTP server and web chat"},
    {"bench", hc::cmd_bench, "measure prompt and generation speed"},
    {"perplexity", hc::cmd_perplexity, "perplexity of a model over a text file"},
    {"eval", hc::cmd_eval, "accuracy, speed and memory: perplexity, HumanEval / MBPP pass@1"},
    {"profile", hc::cmd_profile, "record neuron activation statistics"},
    {"train-predictor", hc::cmd_train_predictor, "train activation predictors on a corpus"},
    {"plan", hc::cmd_plan, "compute a CPU/GPU neuron placement plan"},
    {"simulate", hc::cmd_simulate, "project tokens/s for large models on named hardware"},
    {"convert", hc::cmd_convert, "convert a llama2.c checkpoint to GGUF"},
    {"models", hc::cmd_models, "list the models in the model cache (-m NAME finds them)"},
    {"inspect", hc::cmd_inspect, "show a GGUF file's metadata and tensors"},
    {"tokenize", hc::cmd_tokenize, "print the token ids of a text"},
    {"quantize", hc::cmd_quantize, "convert a GGUF model's weights to another type"},
};

std::string usage() {
  std::string out =
      "usage: hotcold <command> [options]\n"
      "       hotcold <command> --help\n"
      "\n"
      "commands:\n";
  for (const Subcommand& s : kSubcommands) {
    std::string name = s.name;
    out += "  " + name + std::string(name.size() < 17 ? 17 - name.size() : 1, ' ') + s.summary +
           (s.fn ? "" : " (not available yet)") + "\n";
  }
  out +=
      "\n"
      "  -h, --help       show this help and exit\n"
      "  --version        show the version and exit\n";
  return out;
}

const Subcommand* find_subcommand(const std::string& name) {
  for (const Subcommand& s : kSubcommands)
    if (name == s.name) return &s;
  return nullptr;
}

int dispatch(const std::vector<std::string>& argv) {
  if (argv.empty()) {
    std::fputs(usage().c_str(), stderr);
    return 2;
  }
  const std::string& cmd = argv[0];
  if (cmd == "-h" || cmd == "--help") {
    std::fputs(usage().c_str(), stdout);
    return 0;
  }
  if (cmd == "--version" || cmd == "version") {
    std::printf("hotcold %s\n", kVersion);
    // Scripts (and CI) check this line: a CUDA build that silently lost its backend shows.
    std::printf("backends: cpu%s%s (%d CUDA device%s visible)\n",
                hc::ops::cuda_compiled() ? ", cuda" : "",
                hc::ops::vulkan_compiled() ? ", vulkan" : "", hc::ops::cuda_device_count(),
                hc::ops::cuda_device_count() == 1 ? "" : "s");
    if (hc::ops::vulkan_compiled()) {
      std::printf("vulkan devices (--device vulkan:N):\n");
      for (const std::string& line : hc::ops::vulkan_device_lines()) std::printf("  %s\n", line.c_str());
    }
    return 0;
  }
  std::vector<std::string> rest(argv.begin() + 1, argv.end());
  // "hotcold help quantize" == "hotcold quantize --help".
  if (cmd == "help") {
    if (rest.empty()) {
      std::fputs(usage().c_str(), stdout);
      return 0;
    }
    const Subcommand* s = find_subcommand(rest[0]);
    if (s && s->fn) return s->fn({"--help"});
    if (!s) {
      std::fprintf(stderr, "hotcold: unknown command '%s'; see 'hotcold --help'\n",
                   rest[0].c_str());
      return 2;
    }
    std::printf("hotcold %s: %s (not available yet)\n", s->name, s->summary);
    return 0;
  }
  const Subcommand* s = find_subcommand(cmd);
  if (s == nullptr) {
    if (!cmd.empty() && cmd[0] == '-') {
      std::fprintf(stderr, "hotcold: unknown option '%s'; see 'hotcold --help'\n", cmd.c_str());
    } else {
      std::fprintf(stderr, "hotcold: unknown command '%s'; see 'hotcold --help'\n", cmd.c_str());
    }
    return 2;
  }
  if (s->fn == nullptr) {
    std::fprintf(stderr, "hotcold %s: not available yet in this build (%s)\n", s->name,
                 s->summary);
    return 2;
  }
  return s->fn(rest);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::vector<std::string> args(argv + (argc > 0 ? 1 : 0), argv + argc);
    const int rc = dispatch(args);
    std::fflush(stdout);
    if (std::ferror(stdout)) {
      std::fprintf(stderr, "hotcold: error writing to stdout\n");
      return 1;
    }
    return rc;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "hotcold: out of memory\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hotcold: internal error: %s\n", e.what());
  } catch (...) {
    std::fprintf(stderr, "hotcold: internal error: unknown exception\n");
  }
  return 1;
}
