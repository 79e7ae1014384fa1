#include "app/common.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <random>

#include "app/model_cache.h"
#include "core/log.h"
#include "model/act_stats.h"

namespace hc {

void add_model_flags(ArgParser& p, ModelFlags* f) {
  add_model_option(p, &f->model, "GGUF model file, or a cached model's name (required)");
  p.add_int("-t,--threads", &f->threads, "number of threads");
  p.add_int("-c,--ctx-size", &f->ctx, "context size in tokens (default: model's, max 4096)");
  p.add_int("-b,--batch-size", &f->batch, "prompt tokens per forward pass");
  p.add_flag("-nr,--no-repack", &f->no_repack,
             "keep quantised weights in the file's layout, mmapped and never copied (decode is "
             "slower; by default Q4_0/Q4_1/Q8_0/Q4_K matrices are repacked at load)");
  p.add_string("--decode-kernels", &f->decode_kernels,
               "exact | fast: Q4_1 / Q8_0 matrix-vector products in ggml's order (llama.cpp's "
               "results at batch 1) or in one integer sum per block (faster; tokens of a batch "
               "share each unpacked block; every token's result still independent of the "
               "batch; serve uses fast unless told exact)");
  p.add_flag("-v,--verbose", &f->verbose, "print debug logs");
}

void add_sparse_flags(ArgParser& p, SparseFlags* f) {
  p.add_flag("--sparse", &f->sparse,
             "activation-sparse FFN: compute only the neurons that fire (exact for ReLU-family "
             "models; SwiGLU models need --sparsity and --stats)");
  p.add_float("--sparsity", &f->sparsity,
               "SwiGLU models: skip this share of FFN activations per layer (0..1), thresholds "
               "calibrated from --stats; implies --sparse");
  p.add_string("--stats", &f->stats, "activation statistics from hotcold profile (for --sparsity)");
  p.add_flag("--predictor", &f->predictor,
             "the model's activation predictors (blk.N.fc1/fc2, from hotcold train-predictor or "
             "PowerInfer) choose the firing set before each FFN runs; implies --sparse");
  p.add_float("--pred-threshold", &f->pred_threshold,
              "with --predictor: every layer's predictor logit threshold, a neuron runs when its "
              "logit is at least this (PowerInfer's LLAMA_SPARSE_PRED_THRESHOLD) (default: the "
              "file's)");
  p.add_string("--pred-type", &f->pred_type,
               "with --predictor: convert the predictors to this type at load (q8_0, q4_0, f16, "
               "...): fewer bytes read per token, logits a little less precise (default: the "
               "file's)");
  p.add_float("--sparse-union-max", &f->union_max,
               "prompt batches whose union firing set exceeds this share of the neurons run the "
               "dense FFN");
}

Result<std::shared_ptr<const SparseFfn>> sparse_from_flags(const SparseFlags& f,
                                                           const LlamaModel& model) {
  if (!std::isnan(f.pred_threshold) && !f.predictor)
    return Status::Error("--pred-threshold needs --predictor");
  if (!f.pred_type.empty() && !f.predictor) return Status::Error("--pred-type needs --predictor");
  if (!f.enabled()) return std::shared_ptr<const SparseFfn>();
  SparseOptions opt;
  opt.max_union_share = f.union_max;
  opt.use_predictor = f.predictor;
  if (f.predictor && f.sparsity >= 0)
    return Status::Error("--predictor and --sparsity exclude each other (the predictor chooses the set)");
  if (!std::isnan(f.pred_threshold)) {
    if (!std::isfinite(f.pred_threshold))
      return Status::Error("--pred-threshold: expected a finite logit, found " +
                           std::to_string(f.pred_threshold));
    opt.predictor_thresholds.assign(static_cast<size_t>(model.hparams().n_layer), f.pred_threshold);
  }
  if (f.sparsity >= 0) {
    if (f.sparsity >= 1.0)
      return Status::Error("--sparsity: expected a share in [0, 1), found " + std::to_string(f.sparsity));
    if (f.stats.empty())
      return Status::Error("--sparsity needs --stats FILE (activation statistics from hotcold profile)");
    HC_ASSIGN_OR_RETURN(ActStats stats, ActStats::read(f.stats));
    HC_TRY(stats.check_matches(model.hparams()).with_context("--stats '" + f.stats + "'"));
    opt.thresholds = stats.thresholds_for_sparsity(f.sparsity);
  } else if (!f.stats.empty() && !f.enabled()) {
    return Status::Error("--stats is only used with --sparsity S, or with a sparse FFN placed "
                         "by --vram-budget");
  }
  if (!(f.union_max >= 0.0 && f.union_max <= 1.0))
    return Status::Error("--sparse-union-max: expected a share in [0, 1], found " + std::to_string(f.union_max));
  const double t0 = now_seconds();
  HC_ASSIGN_OR_RETURN(auto sp, SparseFfn::build(model, opt));
  HC_LOG_INFO("sparse FFN: %s, transposed down matrices %.1f MiB (%s), %.2f s",
              f.predictor ? "activation predictors"
              : opt.thresholds.empty() ? "exact ReLU"
                                       : ("thresholds for sparsity " + std::to_string(f.sparsity)).c_str(),
              sp->built_bytes() / 1048576.0, dtype_name(sp->down_t(0).type), now_seconds() - t0);
  return std::shared_ptr<const SparseFfn>(std::move(sp));
}

void add_sampling_flags(ArgParser& p, SamplerParams* s, std::string* seed) {
  p.add_float("--temp", &s->temp, "temperature; 0 = greedy");
  p.add_int("--top-k", &s->top_k, "top-k sampling; 0 = off");
  p.add_float("--top-p", &s->top_p, "top-p sampling; 1 = off");
  p.add_float("--min-p", &s->min_p, "min-p sampling; 0 = off");
  p.add_float("--repeat-penalty", &s->repeat_penalty, "repetition penalty; 1 = off");
  p.add_int("--repeat-last-n", &s->repeat_last_n, "tokens considered by the penalty");
  p.add_float("--frequency-penalty", &s->frequency_penalty, "frequency penalty");
  p.add_float("--presence-penalty", &s->presence_penalty, "presence penalty");
  p.add_string("-s,--seed", seed, "RNG seed; -1 = random");
}

Status resolve_seed(const std::string& seed_flag, SamplerParams* params) {
  if (seed_flag.empty() || seed_flag == "-1") {
    params->seed = std::random_device{}();
    return Status::Ok();
  }
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(seed_flag.c_str(), &end, 10);
  if (errno || end == seed_flag.c_str() || *end || seed_flag[0] == '-')
    return Status::Error("--seed: expected a non-negative integer or -1, found '" + seed_flag + "'");
  params->seed = v;
  return Status::Ok();
}

std::string human_bytes(uint64_t n, int digits) {
  char buf[40];
  const char* units[] = {"GiB", "MiB", "KiB"};
  for (int i = 0; i < 3; ++i) {
    const double unit = static_cast<double>(1ull << (10 * (3 - i)));
    if (static_cast<double>(n) >= unit) {
      std::snprintf(buf, sizeof buf, "%.*f %s", digits, static_cast<double>(n) / unit, units[i]);
      return buf;
    }
  }
  std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(n));
  return buf;
}

void add_model_option(ArgParser& p, std::string* out, const std::string& help) {
  p.add_string("-m,--model", out, help, resolve_model_arg);
}

Result<MappedGguf> open_model_gguf(const std::string& path) {
  HC_TRY(require_model_file(path));
  return open_gguf(path);
}

Result<std::shared_ptr<const LlamaModel>> load_model_logged(const ModelFlags& f) {
  if (f.verbose) set_log_level(LogLevel::kDebug);
  if (f.model.empty()) return Status::Error("no model given: expected -m FILE.gguf or -m NAME");
  HC_TRY(require_model_file(f.model));
  if (f.threads < 1 || f.threads > 512)
    return Status::Error("-t: expected 1..512 threads, found " + std::to_string(f.threads));
  if (f.ctx < 0) return Status::Error("-c: expected a non-negative context size, found " + std::to_string(f.ctx));
  if (f.batch < 1) return Status::Error("-b: expected a positive batch size, found " + std::to_string(f.batch));
  const double t0 = now_seconds();
  LlamaModel::LoadOptions opt;
  opt.repack = !f.no_repack;
  if (f.decode_kernels != "exact" && f.decode_kernels != "fast")
    return Status::Error("--decode-kernels: expected exact or fast, found '" + f.decode_kernels +
                         "'");
  opt.block_sums = f.decode_kernels == "fast";
  opt.sparse_ffn = f.sparse_ffn;
  opt.sparse_gate = f.sparse_gate;
  if (!f.predictor_type.empty()) {
    GgmlType t;
    if (!dtype_from_name(f.predictor_type, &t))
      return Status::Error("--pred-type: unknown type '" + f.predictor_type +
                           "' (expected e.g. f16, q8_0, q4_0)");
    opt.predictor_type = t;
  }
  auto m = LlamaModel::load(f.model, opt);
  if (!m.ok()) return m.status();
  const LlamaHParams& hp = (*m)->hparams();
  HC_LOG_INFO("loaded %s: %s, %d layers, n_embd %d, n_ff %d, heads %d/%d, vocab %d, %.1f MiB "
              "(%.1f MiB repacked), %.2f s",
              f.model.c_str(), hp.arch.c_str(), hp.n_layer, hp.n_embd, hp.n_ff, hp.n_head,
              hp.n_head_kv, hp.n_vocab, (*m)->file_bytes() / 1048576.0,
              (*m)->repacked_bytes() / 1048576.0, now_seconds() - t0);
  return m;
}

ProgressBar::ProgressBar(std::string label, int64_t total, std::string unit)
    : label_(std::move(label)), unit_(std::move(unit)), total_(total),
      tty_(isatty(fileno(stderr)) != 0), t0_(now_seconds()) {}

void ProgressBar::update(int64_t done, double tokens, const std::string& extra) {
  const int tenth = total_ > 0 ? static_cast<int>(done * 10 / total_) : 10;
  if (!tty_ && tenth == last_tenth_ && done != total_) return;
  last_tenth_ = tenth;
  constexpr int kWidth = 30;
  const int fill = total_ > 0 ? static_cast<int>(done * kWidth / total_) : kWidth;
  const double dt = now_seconds() - t0_;
  const double tps = dt > 0 ? tokens / dt : 0.0;
  const double eta = done > 0 ? dt / static_cast<double>(done) * static_cast<double>(total_ - done) : 0.0;
  std::fprintf(stderr, "%s%s [%s%s] %lld/%lld %s, %.1f tokens/s, ETA %d:%02d%s%s%s",
               tty_ ? "\r" : "", label_.c_str(), std::string(static_cast<size_t>(fill), '#').c_str(),
               std::string(static_cast<size_t>(kWidth - fill), '.').c_str(),
               static_cast<long long>(done), static_cast<long long>(total_), unit_.c_str(), tps,
               static_cast<int>(eta) / 60, static_cast<int>(eta) % 60, extra.empty() ? "" : ", ",
               extra.c_str(), tty_ ? "  " : "\n");
  if (tty_ && done == total_) std::fputc('\n', stderr);
  std::fflush(stderr);
}

namespace {

// Chunks [0, n_chunk) of `tokens`, n_ctx each, each evaluated in a fresh context with BOS
// first (as llama.cpp's perplexity); after(c) runs once chunk c is evaluated.
Status eval_chunks(Session& session, const std::vector<int32_t>& tokens, int n_ctx, int n_chunk,
                   bool all_logits, const std::function<void(int)>& after) {
  const Tokenizer& tok = session.model().tokenizer();
  std::vector<int32_t> chunk(static_cast<size_t>(n_ctx));
  for (int c = 0; c < n_chunk; ++c) {
    std::copy(tokens.begin() + int64_t{c} * n_ctx, tokens.begin() + int64_t{c + 1} * n_ctx,
              chunk.begin());
    if (tok.add_bos() && tok.bos_id() >= 0) chunk[0] = tok.bos_id();
    session.truncate(0);
    HC_TRY(session.eval(chunk, all_logits));
    after(c);
  }
  return Status::Ok();
}

}  // namespace

Status eval_corpus_chunks(Session& session, const std::vector<int32_t>& tokens, int n_ctx,
                          int n_chunk, const char* label) {
  ProgressBar bar(label, n_chunk, "chunks");
  bar.update(0, 0);
  return eval_chunks(session, tokens, n_ctx, n_chunk, /*all_logits=*/false, [&](int c) {
    bar.update(c + 1, static_cast<double>(c + 1) * n_ctx);
  });
}

double nll_of(const float* logits, int n_vocab, int32_t token) {
  float mx = logits[0];
  for (int i = 1; i < n_vocab; ++i) mx = std::max(mx, logits[i]);
  double sum = 0.0;
  for (int i = 0; i < n_vocab; ++i) sum += std::exp(static_cast<double>(logits[i] - mx));
  return std::log(sum) - static_cast<double>(logits[token] - mx);
}

Result<PplResult> score_perplexity(Session& session, const std::vector<int32_t>& tokens, int n_ctx,
                                   int n_chunk,
                                   const std::function<void(int chunk, const PplResult&)>& on_chunk) {
  const int n_vocab = session.model().hparams().n_vocab;
  if (n_ctx < 4 || static_cast<int64_t>(tokens.size()) < int64_t{n_chunk} * n_ctx)
    return Status::Error("perplexity: need " + std::to_string(int64_t{n_chunk} * n_ctx) +
                         " tokens for " + std::to_string(n_chunk) + " chunks of " +
                         std::to_string(n_ctx) + ", have " + std::to_string(tokens.size()));
  const int first = n_ctx / 2;
  double nll = 0.0, nll2 = 0.0;
  PplResult r;
  const double t0 = now_seconds();
  HC_TRY(eval_chunks(session, tokens, n_ctx, n_chunk, /*all_logits=*/true, [&](int c) {
    const std::vector<float>& logits = session.logits();
    for (int j = first; j < n_ctx - 1; ++j) {
      const double v = nll_of(logits.data() + int64_t{j} * n_vocab, n_vocab,
                              tokens[int64_t{c} * n_ctx + j + 1]);
      nll += v;
      nll2 += v * v;
      ++r.count;
    }
    const double mean = nll / static_cast<double>(r.count);
    r.ppl = std::exp(mean);
    const double var = nll2 / static_cast<double>(r.count) - mean * mean;
    r.err = var > 0 && r.count > 1 ? std::sqrt(var / static_cast<double>(r.count - 1)) * r.ppl : 0.0;
    r.chunks = c + 1;
    r.seconds = now_seconds() - t0;
    if (on_chunk) on_chunk(c, r);
  }));
  return r;
}

SessionParams session_params(const ModelFlags& f) {
  SessionParams sp;
  sp.n_ctx = f.ctx;
  sp.n_threads = f.threads;
  sp.n_batch = f.batch;
  return sp;
}

Result<std::string> read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::Error("cannot open '" + path + "' for reading");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return Status::Error("read from '" + path + "' failed");
  return text;
}

int print_error(const char* cmd, const std::string& message, int exit_code) {
  std::fprintf(stderr, "hotcold %s: error: %s\n", cmd, message.c_str());
  return exit_code;
}

int exit_code_for(const char* cmd, const Status& st) {
  return st.ok() ? 0 : print_error(cmd, st.message(), 1);
}

int parse_or_exit(ArgParser& p, const std::vector<std::string>& args, const char* cmd) {
  Status st = p.parse(args);
  if (p.help_requested()) {
    std::fputs(p.usage().c_str(), stdout);
    return 0;
  }
  return st.ok() ? -1 : usage_error(cmd, st.message());
}

Result<MappedGguf> open_gguf(const std::string& path) {
  HC_ASSIGN_OR_RETURN(MappedFile file, MappedFile::open(path));
  auto gguf = parse_gguf(file.bytes());
  if (!gguf.ok()) return gguf.status().with_context(path);
  return MappedGguf{std::move(file), std::move(*gguf)};
}

Status write_then_rename(const std::string& path,
                         const std::function<Status(const std::string& tmp_path)>& write) {
  const std::string tmp_path = path + ".tmp";
  if (Status st = write(tmp_path); !st.ok()) {
    std::remove(tmp_path.c_str());
    return st;
  }
  if (std::rename(tmp_path.c_str(), path.c_str()) != 0) {
    std::remove(tmp_path.c_str());
    return Status::Error("cannot rename '" + tmp_path + "' to '" + path + "'");
  }
  return Status::Ok();
}

std::string escape_control(const std::string& s, bool quoted) {
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (quoted && (c == '\'' || c == '\\')) out += {'\\', static_cast<char>(c)};
    else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

std::string shape_string(const std::vector<int64_t>& ne) {
  std::string s = "[";
  for (size_t k = 0; k < ne.size(); ++k) s += (k ? ", " : "") + std::to_string(ne[k]);
  return s + "]";
}

double now_seconds() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

long peak_rss_bytes() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss * 1024L;
}

}  // namespace hc
