// hotcold bench: prompt processing (ppN) and generation (tgN) throughput like llama-bench,
// with the achieved weight bandwidth of generation against the machine's measured read
// bandwidth (the roofline of batch-1 decode: every weight is read once per token), and peak
// RSS against the budget file + KV cache + 10%. `--membw` runs only the STREAM-like probe.
#include <cmath>
#include <cstdio>
#include <random>
#include <string>

#include "app/commands.h"
#include "app/common.h"
#include "app/device_setup.h"
#include "app/dynamic_setup.h"
#include "core/log.h"
#include "core/thread_pool.h"
#include "ops/cpu/membw.h"

namespace hc {

namespace {

constexpr char kCmd[] = "bench";

struct BenchFlags {
  ModelFlags model;
  SparseFlags sparse;
  DeviceFlags device;
  DynamicFlags dynamic;
  int n_prompt = 512;
  int n_gen = 128;
  int reps = 5;
  bool json = false;
  bool tg_logits = false;   // --tg-logits: tg brings every token's logits back (a sampled decode)
  bool membw_only = false;  // --membw: the probe alone, no model
  bool no_membw = false;    // --no-membw: no probe, no roofline figures
  float membw_gbs = 0;      // --membw-gbs: a given read bandwidth instead of the probe; 0 = measure
  int membw_mib = 256;      // array size of the probe
  int membw_reps = 0;       // timed passes per kernel; 0: 10 for --membw, 20 for the short probe
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

// A JSON string literal (the model path may hold quotes, backslashes or control bytes).
std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

// Tokens per second of one prompt-processing run from an empty cache.
Result<double> run_pp(Session& s, const std::vector<int32_t>& toks) {
  s.truncate(0);
  const double t0 = now_seconds();
  HC_TRY(s.eval(toks));
  return toks.size() / (now_seconds() - t0);
}

// Tokens per second of generating n tokens one at a time from an empty cache: as greedy
// decoding does (only each step's argmax needed: Session::eval_argmax), or, with logits, as a
// sampled decode does (every step's logits on the host).
Result<double> run_tg(Session& s, int n, int n_vocab, bool logits) {
  s.truncate(0);
  std::vector<int32_t> toks = random_tokens(n, n_vocab, 7);
  const double t0 = now_seconds();
  for (int i = 0; i < n; ++i) {
    const std::span<const int32_t> one(&toks[i], 1);
    if (logits) HC_TRY(s.eval(one));
    else HC_TRY(s.eval_argmax(one).status());
  }
  return n / (now_seconds() - t0);
}

// --- memory bandwidth --------------------------------------------------------------------

Result<ops::MembwResult> run_probe(const BenchFlags& f, bool read_only) {
  ops::MembwParams p;
  p.array_bytes = static_cast<int64_t>(f.membw_mib) << 20;
  p.reps = f.membw_reps > 0 ? f.membw_reps : (read_only ? 20 : 10);
  p.read_only = read_only;
  ThreadPool pool(f.model.threads);
  return ops::measure_membw(p, pool);
}

// The probe's arrays are freed by now, but they raised the process's peak RSS. Linux resets
// the high-water mark that getrusage reports when "5" is written to /proc/self/clear_refs, so
// the RSS budget check then sees the model alone.
bool reset_peak_rss() {
  std::FILE* fp = std::fopen("/proc/self/clear_refs", "w");
  if (!fp) return false;
  const bool wrote = std::fputs("5", fp) >= 0;
  return std::fclose(fp) == 0 && wrote;
}

// The read bandwidth the roofline figures use: measured, given, or none (--no-membw).
struct Bandwidth {
  double read_gbs = 0;  // 0: unknown
  const char* source = "";
  ops::MembwResult probe;  // when measured
};

// The probe's settings and, with `kernels`, "<kernel>_gbps" for each kernel run.
void print_membw_json_fields(const ops::MembwResult& r, bool kernels) {
  std::printf("\"threads\": %d, \"array_mib\": %.1f, \"reps\": %d, \"read_isa\": \"%s\"", r.n_threads,
              r.array_bytes / 1048576.0, r.reps, r.read_isa);
  for (int k = 0; k < ops::kMembwKernels && kernels; ++k) {
    const char* name = ops::membw_kernel_name(static_cast<ops::MembwKernel>(k));
    if (r.gbs[k] > 0) std::printf(", \"%s_gbps\": %.3f, \"%s_gbps_median\": %.3f", name, r.gbs[k], name, r.median_gbs[k]);
  }
}

Status membw_only(const BenchFlags& f) {
  HC_ASSIGN_OR_RETURN(ops::MembwResult r, run_probe(f, /*read_only=*/false));
  if (f.json) {
    std::printf("{\"membw\": {");
    print_membw_json_fields(r, /*kernels=*/true);
    std::printf("}}\n");
    return Status::Ok();
  }
  std::printf("STREAM-like probe: %d thread%s, arrays of %.0f MiB, best of %d passes, read kernel %s\n\n",
              r.n_threads, r.n_threads == 1 ? "" : "s", r.array_bytes / 1048576.0, r.reps, r.read_isa);
  std::printf("| kernel | bytes/element | GB/s (best) | GB/s (median) |\n|---|---|---|---|\n");
  for (int k = 0; k < ops::kMembwKernels; ++k) {
    const auto kk = static_cast<ops::MembwKernel>(k);
    std::printf("| %s | %lld | %.2f | %.2f |\n", ops::membw_kernel_name(kk),
                static_cast<long long>(ops::membw_bytes_per_element(kk)), r.gbs[k], r.median_gbs[k]);
  }
  return Status::Ok();
}

Result<Bandwidth> read_bandwidth(const BenchFlags& f) {
  Bandwidth bw;
  if (f.no_membw) return bw;
  if (f.membw_gbs > 0) {
    bw.read_gbs = f.membw_gbs;
    bw.source = "given";
    return bw;
  }
  HC_ASSIGN_OR_RETURN(bw.probe, run_probe(f, /*read_only=*/true));
  bw.read_gbs = bw.probe.gbs_of(ops::MembwKernel::kRead);
  bw.source = "measured";
  if (!reset_peak_rss())
    HC_LOG_WARN("cannot reset the peak RSS after the bandwidth probe: it includes %d MiB of probe buffers",
                f.membw_mib);
  HC_LOG_INFO("memory read bandwidth: %.2f GB/s (%d threads, %s)", bw.read_gbs, bw.probe.n_threads,
              bw.probe.read_isa);
  return bw;
}

// --- the benchmark -------------------------------------------------------------------------

struct Report {
  Stat pp, tg;
  bool has_pp = false, has_tg = false;
  double gb_tok = 0;        // weight GB read per generated token (a sparse FFN: what it read)
  double gb_tok_dense = 0;  // the same for the dense model (differs only with a sparse FFN)
  double rss_mib = 0, file_mib = 0, kv_mib = 0;
  double budget_mib() const { return (file_mib + kv_mib) * 1.1; }
  bool within_budget() const { return rss_mib <= budget_mib(); }
};

void print_json(const BenchFlags& f, const Report& r, const Bandwidth& bw) {
  std::printf("{\"model\": %s, \"file_mib\": %.2f, \"threads\": %d, \"reps\": %d",
              json_string(f.model.model).c_str(), r.file_mib, f.model.threads, f.reps);
  if (bw.read_gbs > 0) {
    std::printf(", \"membw\": {\"read_gbps\": %.3f, \"source\": \"%s\"", bw.read_gbs, bw.source);
    if (bw.probe.n_threads > 0) {
      std::printf(", \"read_gbps_median\": %.3f, ", bw.probe.median_gbs_of(ops::MembwKernel::kRead));
      print_membw_json_fields(bw.probe, /*kernels=*/false);
    }
    std::printf("}");
  }
  if (r.has_pp)
    std::printf(", \"pp\": {\"n\": %d, \"tps_mean\": %.3f, \"tps_sd\": %.3f}", f.n_prompt, r.pp.mean, r.pp.sd);
  if (r.has_tg) {
    const double gbps = r.gb_tok * r.tg.mean;
    std::printf(", \"tg\": {\"n\": %d, \"tps_mean\": %.3f, \"tps_sd\": %.3f, \"weight_gb_per_token\": %.6f, "
                "\"weight_gb_per_token_dense\": %.6f, \"gbps\": %.3f",
                f.n_gen, r.tg.mean, r.tg.sd, r.gb_tok, r.gb_tok_dense, gbps);
    if (bw.read_gbs > 0)
      std::printf(", \"roofline_tps\": %.3f, \"roofline_share_pct\": %.2f", bw.read_gbs / r.gb_tok,
                  100.0 * gbps / bw.read_gbs);
    std::printf("}");
  }
  std::printf(", \"peak_rss_mib\": %.1f, \"kv_cache_mib\": %.2f, \"rss_budget_mib\": %.1f, \"rss_within_budget\": %s",
              r.rss_mib, r.kv_mib, r.budget_mib(), r.within_budget() ? "true" : "false");
  // The object stays open: bench() adds the device / sparse / dynamic sections, then closes it.
}

void print_table(const BenchFlags& f, const Report& r, const Bandwidth& bw) {
  if (bw.read_gbs > 0 && bw.probe.n_threads > 0)
    std::printf("memory read bandwidth: %.2f GB/s, median pass %.2f (measured: STREAM-like read of %.0f MiB, "
                "best of %d passes, %d threads, %s)\n\n",
                bw.read_gbs, bw.probe.median_gbs_of(ops::MembwKernel::kRead), bw.probe.array_bytes / 1048576.0, bw.probe.reps,
                bw.probe.n_threads, bw.probe.read_isa);
  else if (bw.read_gbs > 0)
    std::printf("memory read bandwidth: %.2f GB/s (given by --membw-gbs)\n\n", bw.read_gbs);
  std::printf("| model | size MiB | threads | test | t/s | weights GB/s | %% of read BW | roofline t/s |\n"
              "|---|---|---|---|---|---|---|---|\n");
  if (r.has_pp)
    std::printf("| %s | %.1f | %d | pp%d | %.2f ± %.2f | | | |\n", f.model.model.c_str(), r.file_mib,
                f.model.threads, f.n_prompt, r.pp.mean, r.pp.sd);
  if (r.has_tg) {
    const double gbps = r.gb_tok * r.tg.mean;
    std::printf("| %s | %.1f | %d | tg%d | %.2f ± %.2f | %.2f | ", f.model.model.c_str(), r.file_mib,
                f.model.threads, f.n_gen, r.tg.mean, r.tg.sd, gbps);
    if (bw.read_gbs > 0) std::printf("%.1f | %.1f |\n", 100.0 * gbps / bw.read_gbs, bw.read_gbs / r.gb_tok);
    else std::printf("| |\n");
    if (r.gb_tok != r.gb_tok_dense)
      std::printf("\nweights read per generated token: %.2f MB (sparse FFN; the dense model reads %.2f MB)\n",
                  r.gb_tok * 1e3, r.gb_tok_dense * 1e3);
  }
  std::printf("\n| peak RSS MiB | file MiB | KV cache MiB | budget MiB (file + KV + 10%%) | within budget |\n"
              "|---|---|---|---|---|\n| %.1f | %.1f | %.2f | %.1f | %s |\n",
              r.rss_mib, r.file_mib, r.kv_mib, r.budget_mib(), r.within_budget() ? "yes" : "no");
}

Status bench(const BenchFlags& fl) {
  BenchFlags f = fl;
  f.sparse.apply_to(&f.model);
  HC_ASSIGN_OR_RETURN(auto model, load_model_logged(f.model));
  HC_ASSIGN_OR_RETURN(auto sparse, sparse_from_flags(f.sparse, *model));
  HC_ASSIGN_OR_RETURN(const Bandwidth bw, read_bandwidth(f));
  const int n_vocab = model->hparams().n_vocab;
  SessionParams sp = session_params(f.model);
  sp.n_ctx = std::max(f.n_prompt, f.n_gen) + 1;
  sp.n_batch = std::max(f.model.batch, f.n_prompt);
  Session session(model, sp);
  session.set_sparse(sparse);
  DeviceModel* placed = nullptr;
  HC_TRY(attach_device(session, f.device, f.sparse, f.model.model, sparse, &placed));
  HC_ASSIGN_OR_RETURN(std::shared_ptr<DynamicSparsity> dyn,
                      attach_dynamic(session, f.dynamic, sparse.get(), placed, f.sparse.stats));
  std::vector<double> pp, tg;
  const auto prompt = random_tokens(f.n_prompt, n_vocab, 1);
  if (f.n_prompt > 0) HC_TRY(run_pp(session, prompt).status());  // warm-up: page in weights
  else if (f.n_gen > 0) HC_TRY(run_tg(session, 1, n_vocab, f.tg_logits).status());
  uint64_t tg_ffn_bytes = 0;  // what the sparse FFN read during the tg tests (host + device)
  ops::DeviceCounters tg_dev;  // what the device did during the tg tests
  const ops::Device* counted = session.device_model() ? &session.device_model()->device() : nullptr;
  for (int r = 0; r < f.reps; ++r) {
    if (f.n_prompt > 0) { HC_ASSIGN_OR_RETURN(double v, run_pp(session, prompt)); pp.push_back(v); }
    if (f.n_gen > 0) {
      const SparseStats before = session.sparse_stats();
      const ops::DeviceCounters dev_before = counted ? counted->counters() : ops::DeviceCounters{};
      HC_ASSIGN_OR_RETURN(double v, run_tg(session, f.n_gen, n_vocab, f.tg_logits));
      tg.push_back(v);
      if (counted) tg_dev += counted->counters() - dev_before;
      const SparseStats& after = session.sparse_stats();
      tg_ffn_bytes += (after.bytes - before.bytes) + (after.device_bytes - before.device_bytes);
    }
    HC_LOG_DEBUG("rep %d done", r + 1);
  }
  Report rep;
  rep.has_pp = !pp.empty();
  rep.has_tg = !tg.empty();
  if (rep.has_pp) rep.pp = stats(pp);
  if (rep.has_tg) rep.tg = stats(tg);
  rep.gb_tok_dense = model->weight_bytes_per_token() / 1e9;
  rep.gb_tok = rep.gb_tok_dense;
  if (sparse && rep.has_tg) {
    // The FFN's dense bytes are replaced by what the sparse FFN read per generated token; a
    // layer whose whole FFN runs on the device (-ngl) reads it densely there.
    uint64_t ffn_dense = 0, ffn_fixed = 0;
    const DeviceModel* dm = session.device_model();
    for (int il = 0; il < model->hparams().n_layer; ++il) {
      const LlamaLayerWeights& L = model->weights().layers[static_cast<size_t>(il)];
      const uint64_t b = rows_bytes(L.ffn_gate, L.ffn_gate.ne1) + rows_bytes(L.ffn_up, L.ffn_up.ne1) +
                         (L.ffn_down.empty() ? rows_bytes(L.ffn_down_t, L.ffn_down_t.ne1)
                                             : rows_bytes(L.ffn_down, L.ffn_down.ne1));
      ffn_dense += b;
      if (dm && dm->layer(il).ffn_dense) ffn_fixed += b;
    }
    const double tokens = static_cast<double>(f.n_gen) * static_cast<double>(f.reps);
    rep.gb_tok = (static_cast<double>(model->weight_bytes_per_token() - ffn_dense + ffn_fixed) +
                  static_cast<double>(tg_ffn_bytes) / tokens) / 1e9;
  }
  rep.rss_mib = peak_rss_bytes() / 1048576.0;
  rep.file_mib = model->file_bytes() / 1048576.0;
  rep.kv_mib = session.kv_bytes() / 1048576.0;
  if (f.json) print_json(f, rep, bw);
  else print_table(f, rep, bw);
  if (const DeviceModel* dm = session.device_model()) {
    const ops::Device& dev = dm->device();
    const SparseStats& st = session.sparse_stats();
    // The share of the FFN's work on the device: of the computed neurons, or of the routed
    // experts (a mixture of experts).
    const bool moe = model->hparams().is_moe();
    const double dev_share = moe ? session.moe_stats().device_share()
                             : st.device_computed + st.computed
                                 ? double(st.device_computed) / double(st.device_computed + st.computed)
                                 : 0.0;
    // Per generated token of the tg tests (none run: zeros).
    const double tg_tokens = rep.has_tg ? double(f.n_gen) * double(f.reps) : 0.0;
    const auto per_tok = [&](uint64_t v) { return tg_tokens > 0 ? double(v) / tg_tokens : 0.0; };
    if (f.json) {
      std::printf(", \"device\": {\"name\": %s, \"charged_mib\": %.1f, \"charged_bytes\": %llu, "
                  "\"measured_mib\": %.1f, "
                  "\"budget_mib\": %.1f, \"attn_layers\": %d, \"%s\": %lld, "
                  "\"%s\": %.4f, \"tg_output\": \"%s\", \"syncs_per_token\": %.3f, "
                  "\"ops_per_token\": %.3f, \"h2d_bytes_per_token\": %.1f, "
                  "\"d2h_bytes_per_token\": %.1f, \"replayed_tokens\": %llu}",
                  json_string(dev.name()).c_str(), dev.charged_bytes() / 1048576.0,
                  static_cast<unsigned long long>(dev.charged_bytes()),
                  dev.measured_bytes() / 1048576.0,
                  dev.budget_bytes() == UINT64_MAX ? -1.0 : dev.budget_bytes() / 1048576.0,
                  dm->n_attn_layers(), moe ? "experts" : "hot_neurons",
                  static_cast<long long>(moe ? dm->n_experts() : dm->n_hot_neurons()),
                  moe ? "device_route_share" : "device_neuron_share", dev_share,
                  f.tg_logits ? "logits" : "argmax", per_tok(tg_dev.syncs), per_tok(tg_dev.ops),
                  per_tok(tg_dev.h2d_bytes), per_tok(tg_dev.d2h_bytes),
                  static_cast<unsigned long long>(tg_dev.replayed));
    } else {
      std::printf("\n| device | charged MiB | measured MiB | attention layers | %s on device | %s on device |\n"
                  "|---|---|---|---|---|---|\n| %s | %.1f | %.1f | %d | %lld | %.1f%% |\n",
                  moe ? "experts" : "FFN neurons", moe ? "routed experts" : "computed neurons",
                  dev.name().c_str(), dev.charged_bytes() / 1048576.0,
                  dev.measured_bytes() / 1048576.0, dm->n_attn_layers(),
                  static_cast<long long>(moe ? dm->n_experts() : dm->n_hot_neurons()),
                  100.0 * dev_share);
      if (tg_tokens > 0)
        std::printf("\n| per generated token (tg, %s back) | host syncs | device commands | bytes to device | bytes back | steps replayed |\n"
                    "|---|---|---|---|---|---|\n| | %.2f | %.1f | %.0f | %.0f | %llu |\n",
                    f.tg_logits ? "logits" : "argmax", per_tok(tg_dev.syncs), per_tok(tg_dev.ops),
                    per_tok(tg_dev.h2d_bytes), per_tok(tg_dev.d2h_bytes),
                    static_cast<unsigned long long>(tg_dev.replayed));
    }
  }
  if (sparse) {  // over every test and repetition above
    const SparseStats& st = session.sparse_stats();
    if (f.json) {
      std::printf(", \"sparse\": {\"ffn_sparsity\": %.4f, \"computed_share\": %.4f, \"dense_fallbacks\": %llu}",
                  st.sparsity(), st.neurons ? double(st.computed) / double(st.neurons) : 0.0,
                  static_cast<unsigned long long>(st.dense_batches));
    } else {
      std::printf("\n| FFN sparsity (neurons not firing per token) | neurons computed (union sets included) | dense-fallback layer calls |\n"
                  "|---|---|---|\n| %.1f%% | %.1f%% | %llu |\n",
                  100.0 * st.sparsity(), st.neurons ? 100.0 * double(st.computed) / double(st.neurons) : 0.0,
                  static_cast<unsigned long long>(st.dense_batches));
    }
  }
  if (dyn) {  // over every test and repetition above
    const DynamicTotals& t = dyn->totals();
    double thr = 0;
    for (float v : dyn->thresholds()) thr += v;
    thr /= static_cast<double>(std::max<size_t>(1, dyn->thresholds().size()));
    if (f.json) {
      std::printf(", \"dynamic\": {\"audited_tokens\": %llu, \"recall\": %.5f, \"sparsity\": %.4f, "
                  "\"device_mass_share\": %.4f, \"mean_threshold\": %.6g, \"swaps\": %llu, "
                  "\"migrated_mib\": %.2f, \"observe_s\": %.4f, \"migrate_s\": %.4f}",
                  static_cast<unsigned long long>(t.audited_tokens), t.recall(), t.sparsity(),
                  t.device_mass_share(), thr, static_cast<unsigned long long>(t.swaps),
                  t.migrated_bytes / 1048576.0, t.observe_seconds, t.migrate_seconds);
    } else {
      std::printf("\n| audited tokens | recall of activation mass | sparsity | firing mass on device | mean threshold | neurons migrated | observe s | migrate s |\n"
                  "|---|---|---|---|---|---|---|---|\n| %llu | %.4f | %.1f%% | %.1f%% | %.4g | %llu | %.3f | %.3f |\n",
                  static_cast<unsigned long long>(t.audited_tokens), t.recall(),
                  100.0 * t.sparsity(), 100.0 * t.device_mass_share(), thr,
                  static_cast<unsigned long long>(t.swaps), t.observe_seconds, t.migrate_seconds);
    }
  }
  if (f.json) std::printf("}\n");
  return Status::Ok();
}

}  // namespace

int cmd_bench(const Args& args) {
  BenchFlags f;
  ArgParser p(kCmd, "prompt-processing and generation speed (like llama-bench), weight bandwidth "
                    "against the measured memory bandwidth, peak RSS");
  add_model_flags(p, &f.model);
  add_sparse_flags(p, &f.sparse);
  add_device_flags(p, &f.device);
  add_dynamic_flags(p, &f.dynamic);
  p.add_int("-p,--n-prompt", &f.n_prompt, "prompt tokens per pp test; 0 = skip");
  p.add_int("-n,--n-gen", &f.n_gen, "generated tokens per tg test; 0 = skip");
  p.add_int("-r,--repetitions", &f.reps, "repetitions of each test");
  p.add_flag("--json", &f.json, "print one JSON object instead of a table");
  p.add_flag("--tg-logits", &f.tg_logits,
             "tg brings every token's logits to the host, as a sampled decode does (default: only "
             "the greedy token id, as --temp 0 decoding)");
  p.add_flag("--membw", &f.membw_only,
             "only run the STREAM-like memory bandwidth probe (read, copy, scale, add, triad) with -t threads");
  p.add_flag("--no-membw", &f.no_membw, "skip the read-bandwidth probe and the roofline figures");
  p.add_float("--membw-gbs", &f.membw_gbs, "read bandwidth in GB/s to use instead of measuring it; 0 = measure");
  p.add_int("--membw-mib", &f.membw_mib, "MiB per array of the bandwidth probe (keep well above the LLC)");
  p.add_int("--membw-reps", &f.membw_reps, "timed passes per probe kernel, best one counts; 0 = 10 (--membw) or 20");
  if (int rc = parse_or_exit(p, args, kCmd); rc >= 0) return rc;
  if (f.membw_gbs < 0) {
    char got[32];
    std::snprintf(got, sizeof got, "%g", f.membw_gbs);
    return usage_error(kCmd, std::string("expected --membw-gbs > 0 (0 = measure), got ") + got);
  }
  const bool gbs_given = f.membw_gbs > 0;
  if (f.model.threads < 1) return usage_error(kCmd, "expected -t >= 1");
  if (f.membw_mib < 1 || f.membw_mib > 65536 || f.membw_reps < 0)
    return usage_error(kCmd, "expected 1 <= --membw-mib <= 65536 and --membw-reps >= 0");
  if (int(f.membw_only) + int(f.no_membw) + int(gbs_given) > 1)
    return usage_error(kCmd, "--membw, --no-membw and --membw-gbs exclude each other");
  if (f.membw_only) return exit_code_for(kCmd, membw_only(f));
  if (f.n_prompt < 0 || f.n_gen < 0 || f.reps < 1 || (f.n_prompt == 0 && f.n_gen == 0))
    return usage_error(kCmd, "expected -p >= 0, -n >= 0 (not both 0) and -r >= 1");
  return exit_code_for(kCmd, bench(f));
}

}  // namespace hc
