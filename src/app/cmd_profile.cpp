// hotcold profile: activation profiling. The corpus is tokenised whole (with BOS) and run in
// non-overlapping chunks of n_ctx tokens, each in a fresh context with its first token replaced
// by BOS (as hotcold perplexity does). An ActStats observer records, per layer and neuron, how
// often it fires and the sum of |act|, and per layer a histogram of |act|. SiLU models first run
// a calibration pass over the first --calib-tokens tokens (whole chunks) that only fills a
// histogram, from which each layer's firing threshold for --sparsity is read; the counting pass
// then covers every chunk with those thresholds. Prints the per-layer power law, writes the
// statistics file (GGUF) and a PNG of the firing CDF. --compare OTHER.gguf (a profile of the same
// model on another corpus) adds how far the two agree on each layer's hot neurons.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>

#include "app/commands.h"
#include "app/common.h"
#include "app/plot.h"
#include "app/png.h"
#include "core/log.h"
#include "model/act_stats.h"
#include "model/hot_set.h"
#include "model/predictor_audit.h"

namespace hc {

namespace {

constexpr char kCmd[] = "profile";
constexpr double kCoverMass[] = {0.5, 0.8, 0.9, 0.99};

struct ProfileFlags {
  ModelFlags model;
  std::string file, out, plot, compare;
  int chunks = -1;
  float sparsity = -1.0f;  // < 0: not given
  int calib_tokens = 2048;
};

// general.name, or the file name when that is missing or only the architecture's name (as
// converted llama2.c checkpoints have).
std::string model_name_of(const LlamaModel& model, const std::string& path) {
  if (const GgufValue* v = model.gguf().find("general.name"); v && v->type == GgufType::STRING) {
    const std::string& name = std::get<std::string>(v->scalar);
    if (!name.empty() && name != model.hparams().arch) return name;
  }
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

void print_table(const ActStats& st) {
  std::printf(
      "# firing: mean share of the layer's neurons that fire per token\n"
      "# topN%%: share of neurons (most frequent first) that covers N%% of its firings\n");
  std::printf("%5s %11s %8s %8s %8s %8s %8s\n", "layer", "threshold", "firing", "top50%", "top80%",
              "top90%", "top99%");
  double sum_fire = 0, sum_cover[4] = {0, 0, 0, 0};
  for (int il = 0; il < st.n_layer(); ++il) {
    const double fire = st.firing_share(il);
    sum_fire += fire;
    std::printf("%5d %11.5g %7.2f%%", il, st.threshold(il), 100 * fire);
    for (int k = 0; k < 4; ++k) {
      const double c = st.neurons_covering(il, kCoverMass[k]);
      sum_cover[k] += c;
      std::printf(" %7.2f%%", 100 * c);
    }
    std::printf("\n");
  }
  const double n = st.n_layer();
  std::printf("%5s %11s %7.2f%%", "mean", "", 100 * sum_fire / n);
  for (double c : sum_cover) std::printf(" %7.2f%%", 100 * c / n);
  std::printf("\n");
}

// The hot sets (neurons covering 80% of a layer's firings) of this profile and another one of the
// same model: their sizes and overlap (Jaccard) per layer.
void print_overlap_table(const ActStats& st, const ActStats& other, const std::string& other_path) {
  constexpr double kMass = 0.8;
  std::printf(
      "# hot-set overlap with %s (corpus %s): hot = the neurons covering 80%% of a layer's "
      "firings; jaccard = |both| / |either|\n",
      other_path.c_str(), other.corpus().empty() ? "?" : other.corpus().c_str());
  std::printf("%5s %8s %8s %8s\n", "layer", "hot", "hot'", "jaccard");
  double sum = 0, lowest = 1.0;
  const double n_ff = static_cast<double>(st.n_ff());
  for (int il = 0; il < st.n_layer(); ++il) {
    const std::vector<int32_t> a = hot_set(st.fire_count(il), kMass);
    const std::vector<int32_t> b = hot_set(other.fire_count(il), kMass);
    const double j = jaccard(a, b);
    sum += j;
    lowest = std::min(lowest, j);
    std::printf("%5d %7.2f%% %7.2f%% %8.4f\n", il, 100 * static_cast<double>(a.size()) / n_ff,
                100 * static_cast<double>(b.size()) / n_ff, j);
  }
  std::printf("hot-set jaccard: mean %.4f, lowest layer %.4f\n", sum / st.n_layer(), lowest);
}

// A file with predictors: how well they chose the neurons that fired (a pair: a token and a
// neuron; predicted when the logit >= the layer's threshold, as the sparse FFN decides).
void print_predictor_table(const PredictorAudit& a) {
  std::printf(
      "# predictor: fc1 / fc2 of the file against the dense activations; recall: share of the "
      "firing (token, neuron) pairs predicted; precision: share of the predicted that fired\n");
  std::printf("%5s %11s %8s %9s %9s\n", "layer", "threshold", "recall", "precision", "predicted");
  double min_recall = 1.0;
  for (int il = 0; il < a.n_layer(); ++il) {
    const PredictorLayerAudit& l = a.layer(il);
    min_recall = std::min(min_recall, l.recall());
    std::printf("%5d %11.5g %7.3f%% %8.3f%% %8.3f%%\n", il, a.threshold(il), 100 * l.recall(),
                100 * l.precision(), 100 * l.predicted_share());
  }
  std::printf("predictor recall: lowest layer %.4f\n", min_recall);
}

// Mixture of experts: how skewed each layer's routing is.
void print_expert_table(const ActStats& st) {
  std::printf(
      "# experts: routing per layer; topN%%: share of the %d experts (most routed first) that "
      "takes N%% of the routings; max: the most routed expert's share of the tokens\n",
      st.n_expert());
  std::printf("%5s %8s %8s %8s %8s %8s\n", "layer", "max", "top50%", "top80%", "top90%", "top99%");
  for (int il = 0; il < st.n_layer(); ++il) {
    const std::vector<float>& c = st.expert_count(il);
    const double top = c.empty() ? 0 : *std::max_element(c.begin(), c.end());
    std::printf("%5d %7.2f%%", il,
                st.n_tokens() ? 100 * top / static_cast<double>(st.n_tokens()) : 0.0);
    for (int k = 0; k < 4; ++k) std::printf(" %7.2f%%", 100 * st.experts_covering(il, kCoverMass[k]));
    std::printf("\n");
  }
}

// The firing CDF of every layer: neurons sorted by firing count, most frequent first.
LinePlot cdf_plot(const ActStats& st, const std::string& model_name) {
  LinePlot p;
  p.title = "firing CDF: " + model_name + ", " + std::to_string(st.n_tokens()) + " tokens";
  p.x_label = "share of neurons, most frequent first";
  p.y_label = "cumulative share of firings";
  p.legend_title = "layer";
  p.diagonal = true;
  const int64_t n_ff = st.n_ff();
  for (int il = 0; il < st.n_layer(); ++il) {
    std::vector<double> c(st.fire_count(il).begin(), st.fire_count(il).end());
    std::sort(c.begin(), c.end(), std::greater<>());
    double total = 0;
    for (double v : c) total += v;
    PlotSeries s{std::to_string(il), series_color(il, st.n_layer()), {{0.0, 0.0}}};
    if (total > 0) {
      // At most ~1000 points per line: the plot is about that many pixels wide.
      const int64_t stride = std::max<int64_t>(1, n_ff / 1000);
      double cum = 0;
      for (int64_t k = 0; k < n_ff; ++k) {
        cum += c[static_cast<size_t>(k)];
        if ((k + 1) % stride == 0 || k + 1 == n_ff)
          s.points.emplace_back(static_cast<double>(k + 1) / static_cast<double>(n_ff),
                                cum / total);
      }
    }
    p.series.push_back(std::move(s));
  }
  return p;
}

std::string default_plot_path(const std::string& out) {
  const std::string ext = ".gguf";
  if (out.size() > ext.size() && out.compare(out.size() - ext.size(), ext.size(), ext) == 0)
    return out.substr(0, out.size() - ext.size()) + ".png";
  return out + ".png";
}

Status profile(const ProfileFlags& f) {
  HC_ASSIGN_OR_RETURN(std::string text, read_text_file(f.file));
  HC_ASSIGN_OR_RETURN(auto model, load_model_logged(f.model));
  const LlamaHParams& hp = model->hparams();
  const bool relu = relu_family(hp.ffn_act);
  std::unique_ptr<ActStats> other;  // --compare: read and checked before the long pass
  if (!f.compare.empty()) {
    HC_ASSIGN_OR_RETURN(ActStats o, ActStats::read(f.compare));
    if (Status m = o.check_matches(hp); !m.ok())
      return Status::Error("--compare " + f.compare + ": " + m.message());
    other = std::make_unique<ActStats>(std::move(o));
  }
  const int n_ctx = f.model.ctx;
  const std::vector<int32_t> tokens =
      model->tokenizer().encode(text, /*add_special=*/true, /*parse_special=*/false);
  if (static_cast<int64_t>(tokens.size()) < n_ctx)
    return Status::Error("need at least " + std::to_string(n_ctx) + " tokens (one chunk of -c), '" +
                         f.file + "' has " + std::to_string(tokens.size()));
  int n_chunk = static_cast<int>(tokens.size() / static_cast<size_t>(n_ctx));
  if (f.chunks > 0 && f.chunks < n_chunk) n_chunk = f.chunks;
  double sparsity = 0.0;
  if (relu && f.sparsity >= 0)
    HC_LOG_WARN(
        "profile: ReLU model: --sparsity ignored, a neuron fires when its activation is not 0");
  if (!relu) sparsity = f.sparsity >= 0 ? f.sparsity : 0.5;
  HC_LOG_INFO("profile: %zu tokens, %d chunks of %d, %s activations", tokens.size(), n_chunk, n_ctx,
              relu ? "relu" : "silu");

  SessionParams sp = session_params(f.model);
  sp.n_ctx = n_ctx;
  sp.n_batch = std::max(f.model.batch, n_ctx);
  Session session(model, sp);
  // A mixture of experts: the neurons of every expert, and each layer's routing.
  const int64_t n_neurons = int64_t{hp.n_ff} * std::max(hp.n_expert, 1);
  ActStats stats(hp.n_layer, n_neurons, hp.ffn_act, hp.n_expert);
  const double t0 = now_seconds();
  int n_calib_chunks = 0;
  if (!relu) {
    n_calib_chunks = std::min(n_chunk, (f.calib_tokens + n_ctx - 1) / n_ctx);
    ActStats calib(hp.n_layer, n_neurons, hp.ffn_act, hp.n_expert);
    calib.set_counting(false);
    session.set_ffn_observer(&calib);
    Status st = eval_corpus_chunks(session, tokens, n_ctx, n_calib_chunks, "calibrate");
    session.set_ffn_observer(nullptr);
    HC_TRY(st);
    stats.set_thresholds(calib.thresholds_for_sparsity(sparsity));
    stats.set_sparsity_target(static_cast<float>(sparsity));
  }
  const double t1 = now_seconds();
  // Predictors in the file (PowerInfer's layout): audited against the dense pass as it runs.
  std::unique_ptr<ThreadPool> audit_pool;
  std::unique_ptr<PredictorAudit> audit;
  if (PredictorAudit::applies(*model)) {
    audit_pool = std::make_unique<ThreadPool>(sp.n_threads);
    audit = std::make_unique<PredictorAudit>(*model, *audit_pool, &stats);
  }
  session.set_ffn_observer(audit ? static_cast<FfnObserver*>(audit.get()) : &stats);
  Status st = eval_corpus_chunks(session, tokens, n_ctx, n_chunk, "profile");
  session.set_ffn_observer(nullptr);
  HC_TRY(st);
  const double t2 = now_seconds();

  const std::string name = model_name_of(*model, f.model.model);
  std::printf("hotcold profile: %s, %s activations, ", name.c_str(), relu ? "relu" : "silu");
  if (relu)
    std::printf("fires when act != 0\n");
  else
    std::printf("fires when |act| > threshold (sparsity target %.2f)\n", sparsity);
  print_table(stats);
  if (hp.is_moe()) print_expert_table(stats);
  if (other) print_overlap_table(stats, *other, f.compare);
  if (audit) print_predictor_table(*audit);
  std::printf("tokens: %llu (%d chunks of %d)", static_cast<unsigned long long>(stats.n_tokens()),
              n_chunk, n_ctx);
  if (!relu) std::printf(", calibration: %d tokens in %.2f s", n_calib_chunks * n_ctx, t1 - t0);
  std::printf(", profile: %.2f s (%.1f tokens/s)\n", t2 - t1,
              static_cast<double>(stats.n_tokens()) / std::max(t2 - t1, 1e-9));

  HC_TRY(write_then_rename(f.out,
                           [&](const std::string& tmp) { return stats.write(tmp, name, f.file); }));
  const std::string plot_path = f.plot.empty() ? default_plot_path(f.out) : f.plot;
  const Image img = render_line_plot(cdf_plot(stats, name), 1000, 640);
  HC_TRY(write_then_rename(plot_path, [&](const std::string& tmp) { return write_png(tmp, img); }));
  std::fprintf(stderr, "hotcold profile: wrote %s and %s\n", f.out.c_str(), plot_path.c_str());
  return Status::Ok();
}

}  // namespace

int cmd_profile(const Args& args) {
  ProfileFlags f;
  f.model.ctx = 512;
  ArgParser p(kCmd, "record FFN neuron activation statistics over a text corpus");
  add_model_option(p, &f.model.model, "GGUF model file, or a cached model's name (required)");
  p.add_string("-f,--file", &f.file, "text corpus (required)");
  p.add_string("-o,--output", &f.out, "statistics file to write, GGUF (required)");
  p.add_int("-t,--threads", &f.model.threads, "number of threads");
  p.add_int("-c,--ctx-size", &f.model.ctx,
            "tokens per chunk, each in a fresh context");
  p.add_int("-b,--batch-size", &f.model.batch, "tokens per forward pass (default: -c)");
  p.add_int("--chunks", &f.chunks, "profile at most this many chunks (default: all)");
  p.add_float("--sparsity", &f.sparsity,
              "SiLU models: share of activations treated as not firing, 0..1; "
              "ReLU models fire exactly when act != 0");
  p.add_int("--calib-tokens", &f.calib_tokens,
            "SiLU models: tokens of the calibration pass that sets the thresholds");
  p.add_string("--plot", &f.plot, "PNG of the firing CDF (default: -o with .png for .gguf)");
  p.add_string("--compare", &f.compare,
               "a statistics file of the same model on another corpus: print each layer's "
               "hot-set overlap (Jaccard) with it");
  p.add_flag("-nr,--no-repack", &f.model.no_repack, "keep quantised weights in the file's layout");
  p.add_flag("-v,--verbose", &f.model.verbose, "print debug logs");
  if (int rc = parse_or_exit(p, args, kCmd); rc >= 0) return rc;
  if (f.model.model.empty()) return usage_error(kCmd, "expected -m MODEL.gguf");
  if (f.file.empty()) return usage_error(kCmd, "expected -f CORPUS.txt");
  if (f.out.empty()) return usage_error(kCmd, "expected -o STATS.gguf");
  if (f.model.ctx < 2)
    return usage_error(
        kCmd, "-c: expected at least 2 tokens per chunk, found " + std::to_string(f.model.ctx));
  if (f.chunks == 0 || f.chunks < -1)
    return usage_error(kCmd,
                       "--chunks: expected a positive number, found " + std::to_string(f.chunks));
  const bool sparsity_given = f.sparsity != -1.0f;
  if (sparsity_given && !(f.sparsity >= 0.0f && f.sparsity < 1.0f))
    return usage_error(
        kCmd, "--sparsity: expected a share in [0, 1), found " + std::to_string(f.sparsity));
  if (f.calib_tokens < 1)
    return usage_error(kCmd, "--calib-tokens: expected a positive number, found " +
                                 std::to_string(f.calib_tokens));
  return exit_code_for(kCmd, profile(f));
}

}  // namespace hc
