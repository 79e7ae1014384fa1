// hotcold bench: prompt processing (ppN) and generation (tgN) throughput like llama-bench,
// with the achieved weight bandwidth of generation and peak RSS.
#include <cmath>
#include <cstdio>
#include <random>

#include "app/commands.h"
#include "app/common.h"
#include "core/log.h"

namespace hc {

namespace {

constexpr char kCmd[] = "bench";

struct BenchFlags {
  ModelFlags model;
  int n_prompt = 512;
  int n_gen = 128;
  int reps = 5;
  bool json = false;
};

struct Stat {
  double mean = 0, sd = 0;
};

Stat stats(const std::vector<double>& v) {
  Stat s;
  for (double x : v) s.mean += x;
  s.mean /= static_cast<double>(v.size());
  for (double x : v) s.sd += (x - s.mean) * (x - s.mean);
  s.sd = v.size() > 1 ? std::sqrt(s.sd / static_cast<double>(v.size() - 1)) : 0.0;
  return s;
}

std::vector<int32_t> random_tokens(int n, int n_vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (int32_t& x : t) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(n_vocab));
  return t;
}

// Tokens per second of one prompt-processing run from an empty cache.
Result<double> run_pp(Session& s, const std::vector<int32_t>& toks) {
  s.truncate(0);
  const double t0 = now_seconds();
  HC_TRY(s.eval(toks));
  return toks.size() / (now_seconds() - t0);
}

// Tokens per second of generating n tokens one at a time from an empty cache.
Result<double> run_tg(Session& s, int n, int n_vocab) {
  s.truncate(0);
  std::vector<int32_t> toks = random_tokens(n, n_vocab, 7);
  const double t0 = now_seconds();
  for (int i = 0; i < n; ++i) HC_TRY(s.eval(std::span<const int32_t>(&toks[i], 1)));
  return n / (now_seconds() - t0);
}

Status bench(const BenchFlags& f) {
  HC_ASSIGN_OR_RETURN(auto model, load_model_logged(f.model));
  const int n_vocab = model->hparams().n_vocab;
  SessionParams sp = session_params(f.model);
  sp.n_ctx = std::max(f.n_prompt, f.n_gen) + 1;
  sp.n_batch = std::max(f.model.batch, f.n_prompt);
  Session session(model, sp);
  std::vector<double> pp, tg;
  const auto prompt = random_tokens(f.n_prompt, n_vocab, 1);
  if (f.n_prompt > 0) HC_TRY(run_pp(session, prompt).status());  // warm-up: page in weights
  else if (f.n_gen > 0) HC_TRY(run_tg(session, 1, n_vocab).status());
  for (int r = 0; r < f.reps; ++r) {
    if (f.n_prompt > 0) { HC_ASSIGN_OR_RETURN(double v, run_pp(session, prompt)); pp.push_back(v); }
    if (f.n_gen > 0) { HC_ASSIGN_OR_RETURN(double v, run_tg(session, f.n_gen, n_vocab)); tg.push_back(v); }
    HC_LOG_DEBUG("rep %d done", r + 1);
  }
  const double gb_tok = model->weight_bytes_per_token() / 1e9;
  const double rss_mib = peak_rss_bytes() / 1048576.0;
  const double file_mib = model->file_bytes() / 1048576.0;
  const Stat spp = pp.empty() ? Stat{} : stats(pp), stg = tg.empty() ? Stat{} : stats(tg);
  if (f.json) {
    std::printf("{\"model\": \"%s\", \"file_mib\": %.2f, \"threads\": %d, \"reps\": %d",
                f.model.model.c_str(), file_mib, f.model.threads, f.reps);
    if (!pp.empty()) std::printf(", \"pp\": {\"n\": %d, \"tps_mean\": %.3f, \"tps_sd\": %.3f}", f.n_prompt, spp.mean, spp.sd);
    if (!tg.empty())
      std::printf(", \"tg\": {\"n\": %d, \"tps_mean\": %.3f, \"tps_sd\": %.3f, \"weight_gb_per_token\": %.6f, \"gbps\": %.3f}",
                  f.n_gen, stg.mean, stg.sd, gb_tok, gb_tok * stg.mean);
    std::printf(", \"peak_rss_mib\": %.1f}\n", rss_mib);
    return Status::Ok();
  }
  std::printf("| model | size MiB | threads | test | t/s | weights GB/s |\n|---|---|---|---|---|---|\n");
  if (!pp.empty())
    std::printf("| %s | %.1f | %d | pp%d | %.2f ± %.2f | |\n", f.model.model.c_str(), file_mib,
                f.model.threads, f.n_prompt, spp.mean, spp.sd);
  if (!tg.empty())
    std::printf("| %s | %.1f | %d | tg%d | %.2f ± %.2f | %.2f |\n", f.model.model.c_str(), file_mib,
                f.model.threads, f.n_gen, stg.mean, stg.sd, gb_tok * stg.mean);
  std::printf("peak RSS: %.1f MiB (file %.1f MiB, KV cache %.1f MiB)\n", rss_mib, file_mib,
              session.kv_bytes() / 1048576.0);
  return Status::Ok();
}

}  // namespace

int cmd_bench(const Args& args) {
  BenchFlags f;
  ArgParser p(kCmd, "prompt-processing and generation speed (like llama-bench)");
  add_model_flags(p, &f.model);
  p.add_int("-p,--n-prompt", &f.n_prompt, "prompt tokens per pp test; 0 = skip (default 512)");
  p.add_int("-n,--n-gen", &f.n_gen, "generated tokens per tg test; 0 = skip (default 128)");
  p.add_int("-r,--repetitions", &f.reps, "repetitions of each test (default 5)");
  p.add_flag("--json", &f.json, "print one JSON object instead of a table");
  if (int rc = parse_or_exit(p, args, kCmd); rc >= 0) return rc;
  if (f.n_prompt < 0 || f.n_gen < 0 || f.reps < 1 || (f.n_prompt == 0 && f.n_gen == 0))
    return usage_error(kCmd, "expected -p >= 0, -n >= 0 (not both 0) and -r >= 1");
  return exit_code_for(kCmd, bench(f));
}

}  // namespace hc
