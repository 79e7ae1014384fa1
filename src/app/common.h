// Flags and helpers shared by the subcommands: model flags for run, chat, perplexity and bench;
// argument parsing, error reporting and GGUF file handling for all of them.
#pragma once
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "app/args.h"
#include "core/mmap.h"
#include "core/status.h"
#include "engine/sampler.h"
#include "engine/session.h"
#include "format/gguf.h"
#include "model/llama_model.h"
#include "model/sparse_ffn.h"

namespace hc {

struct ModelFlags {
  std::string model;
  int threads = 2;
  int ctx = 0;      // 0: model default (capped)
  int batch = 512;
  bool verbose = false;
  bool no_repack = false;  // keep weights in ggml's layout (zero-copy, slower decode)
  // --decode-kernels: "exact" (ggml's order, llama.cpp's bits at batch 1) or "fast" (block
  // sums, LoadOptions::block_sums). Commands set their default before parsing (serve: fast).
  std::string decode_kernels = "exact";
  // Set by commands that run a sparse FFN: ffn_up / ffn_down stay in the file's row layout
  // (the sparse operators read single rows), as LlamaModel::LoadOptions::sparse_ffn.
  bool sparse_ffn = false;
  bool sparse_gate = false;  // ... and ffn_gate too (predictor-driven sparsity)
  std::string predictor_type;  // LoadOptions::predictor_type by name ("" = the file's)
};

// Activation sparsity (model/sparse_ffn.h) for run, bench and perplexity.
struct SparseFlags {
  bool sparse = false;     // --sparse
  float sparsity = -1;     // --sparsity S: SwiGLU models, thresholds calibrated from --stats
  std::string stats;       // --stats FILE (hotcold profile output)
  float union_max = 0.5f;  // --sparse-union-max F
  bool predictor = false;  // --predictor: the model's activation predictors choose the set
  // --pred-threshold F: every layer's predictor logit threshold (PowerInfer's
  // LLAMA_SPARSE_PRED_THRESHOLD); NaN = the file's (hotcold.predictor.thresholds, else
  // powerinfer.sparse_threshold).
  float pred_threshold = std::numeric_limits<float>::quiet_NaN();
  std::string pred_type;  // --pred-type: store the predictors in this type (e.g. q8_0)
  bool enabled() const { return sparse || sparsity >= 0 || predictor; }
  // Sets the load options the sparse FFN wants (row layouts of the matrices it reads by row).
  void apply_to(ModelFlags* m) const {
    m->sparse_ffn = enabled();
    m->sparse_gate = predictor;
    m->predictor_type = predictor ? pred_type : "";
  }
};

void add_model_flags(ArgParser& p, ModelFlags* f);
void add_sparse_flags(ArgParser& p, SparseFlags* f);
// The sparse FFN the flags ask for (null when they ask for none), logged in one line.
Result<std::shared_ptr<const SparseFfn>> sparse_from_flags(const SparseFlags& f,
                                                           const LlamaModel& model);
void add_sampling_flags(ArgParser& p, SamplerParams* s, std::string* seed);
// Resolves the seed flag ("" or -1 = random, like llama.cpp) into params->seed.
Status resolve_seed(const std::string& seed_flag, SamplerParams* params);

Result<std::shared_ptr<const LlamaModel>> load_model_logged(const ModelFlags& f);
// Evaluates chunks [0, n_chunk) of `tokens`, n_ctx each, each in a fresh context with BOS first
// (as hotcold perplexity), for commands that watch the forward pass (profile,
// train-predictor). Progress on stderr: "LABEL [###...] done/total chunks, T tokens/s, ETA
// m:ss", redrawn in place on a terminal, one line per 10% elsewhere (logs, tests).
Status eval_corpus_chunks(Session& session, const std::vector<int32_t>& tokens, int n_ctx,
                          int n_chunk, const char* label);
// A progress line on stderr for long jobs: "LABEL [###...] done/total UNIT, T tokens/s, ETA
// m:ss[, extra]", redrawn in place on a terminal, one line per 10% elsewhere (logs, tests).
class ProgressBar {
 public:
  ProgressBar(std::string label, int64_t total, std::string unit);
  // done items of total; tokens processed so far (for the rate); extra: a short status.
  void update(int64_t done, double tokens, const std::string& extra = "");

 private:
  std::string label_, unit_;
  int64_t total_;
  bool tty_;
  double t0_;
  int last_tenth_ = -1;
};

// -log p(token) under softmax(logits), accumulated in double like llama.cpp.
double nll_of(const float* logits, int n_vocab, int32_t token);

// llama.cpp's perplexity: chunks [0, n_chunk) of n_ctx tokens, each from an empty context with
// BOS first, the second half of each scored. on_chunk (may be empty) sees the running result.
struct PplResult {
  double ppl = 0, err = 0;  // perplexity and its standard error
  int64_t count = 0;        // tokens scored
  int chunks = 0;
  double seconds = 0;
};
Result<PplResult> score_perplexity(Session& session, const std::vector<int32_t>& tokens, int n_ctx,
                                   int n_chunk,
                                   const std::function<void(int chunk, const PplResult&)>& on_chunk);

SessionParams session_params(const ModelFlags& f);
Result<std::string> read_text_file(const std::string& path);

// Every error a subcommand reports is one stderr line, "hotcold <cmd>: error: <message>", so a
// script running several subcommands can tell which one failed. Exit codes as in commands.h.
int print_error(const char* cmd, const std::string& message, int exit_code);
inline int usage_error(const char* cmd, const std::string& message) {
  return print_error(cmd, message, 2);
}
// 0 for an ok status; otherwise prints it as a runtime error and returns 1.
int exit_code_for(const char* cmd, const Status& st);

// Parses args; prints usage (--help wins over a bad flag after it) or the usage error.
// Returns -1 to continue, otherwise the exit code.
int parse_or_exit(ArgParser& p, const std::vector<std::string>& args, const char* cmd);

// A GGUF file mapped and parsed: `gguf`'s tensor data points into `file`, so they travel
// together. Errors name the file (the parser's own messages do not).
struct MappedGguf {
  MappedFile file;
  GgufFile gguf;
};
Result<MappedGguf> open_gguf(const std::string& path);
// "1.50 GiB", "93.8 MiB" (digits after the point), "512 B".
std::string human_bytes(uint64_t n, int digits = 2);

// A model's GGUF: open_gguf after require_model_file (app/model_cache.h), whose error for a
// missing file names the model cache and the closest cached names.
Result<MappedGguf> open_model_gguf(const std::string& path);
// -m,--model: a file, or a cached model's name resolved to its file (resolve_model_arg).
void add_model_option(ArgParser& p, std::string* out, const std::string& help);

// Lets write(path + ".tmp") make the file, then renames it over `path`: a failed write never
// leaves a partial model where a complete one is expected.
Status write_then_rename(const std::string& path,
                         const std::function<Status(const std::string& tmp_path)>& write);

// Control bytes as \n, \r, \t or \xNN, so any text prints on one line; `quoted` also escapes
// ' and \ for text shown between single quotes, which then reads back unambiguously.
std::string escape_control(const std::string& s, bool quoted);

// "[576, 49152]": a tensor shape in ggml order (ne[0], the contiguous row length, first).
std::string shape_string(const std::vector<int64_t>& ne);

double now_seconds();
long peak_rss_bytes();

}  // namespace hc
