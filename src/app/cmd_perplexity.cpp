// hotcold perplexity: llama.cpp's method. The file is tokenised whole (with BOS), cut into
// non-overlapping chunks of n_ctx tokens whose first token is replaced by BOS, and only the
// second half of each chunk is scored (each token has at least n_ctx/2 tokens of context).
#include <cmath>
#include <cstdio>

#include "app/commands.h"
#include "app/common.h"
#include "app/device_setup.h"
#include "app/dynamic_setup.h"
#include "core/log.h"

namespace hc {

namespace {

constexpr char kCmd[] = "perplexity";

struct PplFlags {
  ModelFlags model;
  SparseFlags sparse;
  DeviceFlags device;
  DynamicFlags dynamic;
  std::string file;
  int chunks = -1;
};

Status perplexity(const PplFlags& f) {
  HC_ASSIGN_OR_RETURN(std::string text, read_text_file(f.file));
  ModelFlags mf = f.model;
  if (mf.ctx == 0) mf.ctx = 512;
  f.sparse.apply_to(&mf);
  HC_ASSIGN_OR_RETURN(auto model, load_model_logged(mf));
  HC_ASSIGN_OR_RETURN(auto sparse, sparse_from_flags(f.sparse, *model));
  const Tokenizer& tok = model->tokenizer();
  const int n_ctx = mf.ctx;
  const std::vector<int32_t> tokens = tok.encode(text, /*add_special=*/true, /*parse_special=*/false);
  if (static_cast<int64_t>(tokens.size()) < 2LL * n_ctx)
    return Status::Error("need at least " + std::to_string(2 * n_ctx) + " tokens (2 * -c), '" +
                         f.file + "' has " + std::to_string(tokens.size()));
  int n_chunk = static_cast<int>(tokens.size() / n_ctx);
  if (f.chunks >= 0 && f.chunks < n_chunk) n_chunk = f.chunks;
  HC_LOG_INFO("perplexity: %zu tokens, %d chunks of %d, scoring the second half of each",
              tokens.size(), n_chunk, n_ctx);
  SessionParams sp = session_params(mf);
  sp.n_ctx = n_ctx;
  sp.n_batch = std::max(mf.batch, n_ctx);
  Session session(model, sp);
  session.set_sparse(sparse);
  DeviceModel* placed = nullptr;
  HC_TRY(attach_device(session, f.device, f.sparse, f.model.model, sparse, &placed));
  HC_ASSIGN_OR_RETURN(std::shared_ptr<DynamicSparsity> dyn,
                      attach_dynamic(session, f.dynamic, sparse.get(), placed, f.sparse.stats));
  const double t0 = now_seconds();
  HC_ASSIGN_OR_RETURN(
      const PplResult r,
      score_perplexity(session, tokens, n_ctx, n_chunk, [&](int c, const PplResult& run) {
        std::fprintf(stderr, "[%d]%.4f,", c + 1, run.ppl);
        if (c == 0) std::fprintf(stderr, " (%.2f s per chunk) ", now_seconds() - t0);
        std::fflush(stderr);
      }));
  std::fputc('\n', stderr);
  std::printf("Final estimate: PPL = %.4f +/- %.5f\n", r.ppl, r.err);
  if (sparse) {
    const SparseStats& st = session.sparse_stats();
    std::printf("FFN sparsity: %.2f%% of activations skipped, %.2f%% of neuron rows computed\n",
                100.0 * st.sparsity(), st.neurons ? 100.0 * double(st.computed) / double(st.neurons) : 0.0);
    if (model->hparams().ffn_act == FfnActivation::kDRelu && st.active > 0)
      std::printf("FFN dReLU sparsity: %.2f%% of activations zero (gate or up not positive)\n",
                  100.0 * st.active_sparsity());
  }
  if (dyn) HC_LOG_INFO("%s", dyn->summary().c_str());
  return Status::Ok();
}

}  // namespace

int cmd_perplexity(const Args& args) {
  PplFlags f;
  ArgParser p(kCmd, "perplexity of a text file, llama.cpp's method");
  add_model_flags(p, &f.model);
  add_sparse_flags(p, &f.sparse);
  add_device_flags(p, &f.device);
  add_dynamic_flags(p, &f.dynamic);
  p.add_string("-f,--file", &f.file, "text file to score (required)");
  p.add_int("--chunks", &f.chunks, "score at most this many chunks (default: all)");
  if (int rc = parse_or_exit(p, args, kCmd); rc >= 0) return rc;
  if (f.file.empty()) return usage_error(kCmd, "expected -f FILE");
  return exit_code_for(kCmd, perplexity(f));
}

}  // namespace hc
