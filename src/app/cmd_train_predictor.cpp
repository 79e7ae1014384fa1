// hotcold train-predictor: trains PowerInfer-style activation predictors (fc1 / fc2 per layer)
// and writes the model in PowerInfer's layout with them. Three steps:
//   1. collect: the model runs over the corpus in chunks of -c tokens (fresh context each, BOS
//      first, as hotcold profile and perplexity do); a PredictorSampler keeps up to
//      --max-samples (FFN input, firing mask) pairs per layer;
//   2. train: each layer's predictor on its samples (model/predictor_train.h), the threshold
//      chosen on the held-out share for --target-recall;
//   3. write: the input file's metadata and tensors copied through (streamed, never the whole
//      file in memory), ffn_down replaced by its transpose ffn_down_t, plus fc1 / fc2 (F16)
//      and the per-layer thresholds and metrics.
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>

#include "app/commands.h"
#include "app/common.h"
#include "core/log.h"
#include "model/act_stats.h"
#include "model/predictor_train.h"
#include "model/sparse_ffn.h"
#include "ops/cpu/sparse.h"

namespace hc {

namespace {

constexpr char kCmd[] = "train-predictor";

struct TrainFlags {
  ModelFlags model;
  std::string file, out, stats, pos_weight = "auto";
  int chunks = -1;
  int rank = 0;  // 0: default_predictor_rank
  int epochs = 10;
  float lr = 1e-2f;
  int batch = 256;
  float held_out = 0.1f;
  float target_recall = 0.99f;
  int max_samples = 20000;
  uint64_t seed = 0;
  float sparsity = -1.0f;  // < 0: not given
};

bool same_file(const std::string& a, const std::string& b) {
  struct stat sa {
  }, sb{};
  if (stat(a.c_str(), &sa) != 0 || stat(b.c_str(), &sb) != 0) return false;
  return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

// Per layer firing thresholds on |act|: 0 for ReLU models; from the profile for SiLU models.
Result<std::vector<float>> firing_thresholds(const TrainFlags& f, const LlamaHParams& hp) {
  if (relu_family(hp.ffn_act)) {
    if (!f.stats.empty())
      HC_LOG_WARN(
          "train-predictor: ReLU model: --stats / --sparsity ignored, a neuron fires "
          "when its activation is not 0");
    return std::vector<float>(static_cast<size_t>(hp.n_layer), 0.0f);
  }
  if (f.stats.empty())
    return Status::Error(
        "SiLU model: a neuron's firing needs calibrated thresholds; expected --stats STATS.gguf "
        "(from hotcold profile) and optionally --sparsity S");
  HC_ASSIGN_OR_RETURN(ActStats stats, ActStats::read(f.stats));
  HC_TRY(stats.check_matches(hp).with_context(f.stats));
  return f.sparsity >= 0 ? stats.thresholds_for_sparsity(f.sparsity) : stats.thresholds();
}

// Step 1: runs the corpus through the model with a PredictorSampler attached.
Result<std::unique_ptr<PredictorSampler>> collect(const TrainFlags& f,
                                                  std::shared_ptr<const LlamaModel> model,
                                                  const std::vector<float>& thresholds) {
  const LlamaHParams& hp = model->hparams();
  HC_ASSIGN_OR_RETURN(std::string text, read_text_file(f.file));
  const Tokenizer& tok = model->tokenizer();
  const int n_ctx = f.model.ctx;
  const std::vector<int32_t> tokens =
      tok.encode(text, /*add_special=*/true, /*parse_special=*/false);
  if (static_cast<int64_t>(tokens.size()) < n_ctx)
    return Status::Error("need at least " + std::to_string(n_ctx) + " tokens (one chunk of -c), '" +
                         f.file + "' has " + std::to_string(tokens.size()));
  int n_chunk = static_cast<int>(tokens.size() / static_cast<size_t>(n_ctx));
  if (f.chunks > 0 && f.chunks < n_chunk) n_chunk = f.chunks;
  const int64_t cap = f.max_samples;
  HC_LOG_INFO(
      "train-predictor: %zu tokens, %d chunks of %d, %s activations; up to %lld samples "
      "per layer (%.1f MiB in all)",
      tokens.size(), n_chunk, n_ctx, activation_name(hp.ffn_act),
      static_cast<long long>(cap),
      static_cast<double>(PredictorSamples::bytes_for(hp.n_embd, hp.n_ff, cap)) * hp.n_layer /
          1048576.0);

  auto sampler = std::make_unique<PredictorSampler>(hp.n_embd, hp.n_ff, thresholds, cap, f.seed);
  SessionParams sp = session_params(f.model);
  sp.n_ctx = n_ctx;
  sp.n_batch = std::max(f.model.batch, n_ctx);
  Session session(std::move(model), sp);
  session.set_ffn_observer(sampler.get());
  HC_TRY(eval_corpus_chunks(session, tokens, n_ctx, n_chunk, "collect"));
  return sampler;
}

// Step 2, one layer: training with per-epoch progress on stderr.
Result<TrainedPredictor> train_one(const TrainFlags& f, const PredictorSamples& s, int il,
                                   int n_layer, ThreadPool& pool) {
  PredictorTrainOptions o;
  o.rank = f.rank;
  o.epochs = f.epochs;
  o.lr = f.lr;
  o.batch = f.batch;
  o.pos_weight = f.pos_weight == "auto" ? 0.0f : std::stof(f.pos_weight);
  o.held_out = f.held_out;
  o.target_recall = f.target_recall;
  o.seed = f.seed + 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(il + 1);
  auto r = train_layer(s, o, pool, [&](const PredictorEpoch& e) {
    std::fprintf(stderr,
                 "train-predictor: layer %d/%d epoch %2d/%d  loss %.5f  held-out recall %.4f "
                 "precision %.4f (logit > 0)  %.1f s\n",
                 il + 1, n_layer, e.epoch, f.epochs, e.loss, e.held_out.recall,
                 e.held_out.precision, e.seconds);
  });
  if (!r.ok()) return r.status().with_context("layer " + std::to_string(il));
  return r;
}

void print_table(const std::vector<TrainedPredictor>& layers) {
  std::printf(
      "# recall, precision: held-out neurons x tokens predicted (logit > threshold) vs "
      "fired\n# pred_sparsity: 1 - predicted / total; true_sparsity: 1 - fired / total\n");
  std::printf("%5s %5s %8s %8s %10s %12s %9s %10s %14s %14s\n", "layer", "rank", "train", "held",
              "pos_weight", "threshold", "recall", "precision", "pred_sparsity", "true_sparsity");
  double sum[4] = {0, 0, 0, 0};
  for (size_t il = 0; il < layers.size(); ++il) {
    const TrainedPredictor& t = layers[il];
    const PredictorMetrics& m = t.held_out;
    std::printf("%5zu %5lld %8lld %8lld %10.3f %12.5g %8.2f%% %9.2f%% %13.2f%% %13.2f%%\n", il,
                static_cast<long long>(t.w.rank), static_cast<long long>(t.n_train),
                static_cast<long long>(t.n_held_out), t.pos_weight, m.threshold, 100 * m.recall,
                100 * m.precision, 100 * m.predicted_sparsity, 100 * m.true_sparsity);
    const double v[4] = {m.recall, m.precision, m.predicted_sparsity, m.true_sparsity};
    for (int k = 0; k < 4; ++k) sum[k] += v[k];
  }
  const double n = static_cast<double>(layers.size());
  std::printf("%5s %5s %8s %8s %10s %12s %8.2f%% %9.2f%% %13.2f%% %13.2f%%\n", "mean", "", "", "",
              "", "", 100 * sum[0] / n, 100 * sum[1] / n, 100 * sum[2] / n, 100 * sum[3] / n);
}

// ---- Step 3: the output file ----

// One output tensor: copied from the input, the transpose of an input ffn_down, or a predictor.
struct OutTensor {
  enum Kind { kCopy, kTranspose, kFc1, kFc2 } kind;
  const GgufTensorInfo* src;  // kCopy, kTranspose
  int il;                     // kFc1, kFc2
};

GgufValue u32_array(const std::vector<uint32_t>& v) {
  GgufValue g;
  g.type = GgufType::ARRAY;
  g.elem_type = GgufType::UINT32;
  g.arr_u.assign(v.begin(), v.end());
  return g;
}

std::vector<uint8_t> f16_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> out(v.size() * 2);
  auto* p = reinterpret_cast<fp16_t*>(out.data());
  for (size_t i = 0; i < v.size(); ++i) p[i] = fp32_to_fp16(v[i]);
  return out;
}

// The writer (metadata, tensor table) and, in the same order, how to make each tensor's bytes.
Result<std::pair<GgufWriter, std::vector<OutTensor>>> plan_output(
    const GgufFile& in, int n_layer, const std::vector<TrainedPredictor>& layers) {
  GgufWriter w;
  w.alignment = in.alignment;
  for (const auto& [key, v] : in.kv)
    if (key != "general.alignment") w.kv.emplace_back(key, v);  // the writer adds it
  std::vector<float> thr, recall, precision;
  std::vector<uint32_t> rank;
  for (const TrainedPredictor& t : layers) {
    thr.push_back(t.held_out.threshold);
    recall.push_back(static_cast<float>(t.held_out.recall));
    precision.push_back(static_cast<float>(t.held_out.precision));
    rank.push_back(static_cast<uint32_t>(t.w.rank));
  }
  w.set("powerinfer.sparse_threshold", GgufValue::f32(0.0f));
  w.set("hotcold.predictor.thresholds", GgufValue::f32_array(thr));
  // What the predictors read: the FFN input before ffn_norm, as PowerInfer's (ffn_inp).
  w.set("hotcold.predictor.input", GgufValue::str("residual"));
  w.set("hotcold.predictor.rank", u32_array(rank));
  w.set("hotcold.predictor.recall", GgufValue::f32_array(recall));
  w.set("hotcold.predictor.precision", GgufValue::f32_array(precision));

  std::vector<OutTensor> plan;
  std::vector<bool> done(static_cast<size_t>(n_layer), false);
  auto add_predictor = [&](int il) {
    const PredictorWeights& p = layers[static_cast<size_t>(il)].w;
    const std::string pre = "blk." + std::to_string(il) + ".";
    w.add_tensor({pre + "fc1.weight", {p.n_embd, p.rank}, GgmlType::F16, {}});
    plan.push_back({OutTensor::kFc1, nullptr, il});
    w.add_tensor({pre + "fc2.weight", {p.rank, p.n_ff}, GgmlType::F16, {}});
    plan.push_back({OutTensor::kFc2, nullptr, il});
    done[static_cast<size_t>(il)] = true;
  };
  for (const GgufTensorInfo& t : in.tensors) {
    int il = -1;
    char kind[32] = {0}, suffix[16] = {0};
    // blk.N.KIND.weight / .bias (sscanf counts conversions, not the literal dots: the suffix is
    // a conversion of its own so that a bias is not taken for its weight).
    const bool layer_tensor =
        std::sscanf(t.name.c_str(), "blk.%d.%31[a-z0-9_].%15[a-z]", &il, kind, suffix) == 3 &&
        il >= 0 && il < n_layer;
    if (layer_tensor && std::string(suffix) == "bias" && std::string(kind) == "ffn_down" &&
        !in.find_tensor("blk." + std::to_string(il) + ".ffn_down_t.bias")) {
      // OPT: the down projection's bias goes with its transpose, under PowerInfer's name.
      w.add_tensor({"blk." + std::to_string(il) + ".ffn_down_t.bias", t.ne, t.type, {}});
      plan.push_back({OutTensor::kCopy, &t, il});
      continue;
    }
    if (!layer_tensor || std::string(suffix) != "weight") {
      w.add_tensor({t.name, t.ne, t.type, {}});
      plan.push_back({OutTensor::kCopy, &t, -1});
      continue;
    }
    const std::string k = kind, pre = "blk." + std::to_string(il) + ".";
    if (k == "fc1" || k == "fc2") continue;  // replaced
    if (k == "ffn_down") {
      if (in.find_tensor(pre + "ffn_down_t.weight")) continue;  // the file's transpose is kept
      if (t.ne.size() != 2)
        return Status::Error("tensor '" + t.name + "': expected 2 dimensions, found " +
                             shape_string(t.ne));
      const GgmlType dt = ops::down_t_type(t.type);
      const int64_t block = dtype_traits(dt).block_size;
      if (t.ne[1] % block != 0)
        return Status::Error("tensor '" + t.name + "': its transpose is stored as " +
                             dtype_name(dt) + ", whose rows need a multiple of " +
                             std::to_string(block) + " elements; n_embd is " +
                             std::to_string(t.ne[1]));
      w.add_tensor({pre + "ffn_down_t.weight", {t.ne[1], t.ne[0]}, dt, {}});
      plan.push_back({OutTensor::kTranspose, &t, il});
      add_predictor(il);
      continue;
    }
    w.add_tensor({t.name, t.ne, t.type, {}});
    plan.push_back({OutTensor::kCopy, &t, il});
    if (k == "ffn_down_t") add_predictor(il);
  }
  for (int il = 0; il < n_layer; ++il)
    if (!done[static_cast<size_t>(il)])
      return Status::Error("layer " + std::to_string(il) +
                           " has neither ffn_down.weight nor ffn_down_t.weight");
  return std::make_pair(std::move(w), std::move(plan));
}

Status write_all(std::FILE* fp, const void* data, size_t n, const std::string& path) {
  if (n > 0 && std::fwrite(data, 1, n, fp) != n)
    return Status::Error("write to '" + path + "' failed");
  return Status::Ok();
}

// Streams the header, then each tensor (made one at a time) with its padding.
Status write_output(const std::string& path, const GgufWriter& w,
                    const std::vector<OutTensor>& plan,
                    const std::vector<TrainedPredictor>& layers) {
  HC_ASSIGN_OR_RETURN(std::vector<uint8_t> header, w.serialize_header());
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> fp(std::fopen(path.c_str(), "wb"), &std::fclose);
  if (!fp) return Status::Error("cannot open '" + path + "' for writing");
  HC_TRY(write_all(fp.get(), header.data(), header.size(), path));
  const std::vector<uint8_t> zeros(w.alignment, 0);
  std::vector<uint8_t> buf;
  for (size_t i = 0; i < plan.size(); ++i) {
    const OutTensor& o = plan[i];
    const GgufTensorToWrite& t = w.tensors[i];
    std::span<const uint8_t> bytes;
    switch (o.kind) {
      case OutTensor::kCopy:
        bytes = {o.src->data, o.src->nbytes};
        break;
      case OutTensor::kTranspose: {
        const TensorView down =
            TensorView::make(o.src->type, o.src->data, o.src->ne[0], o.src->ne[1]);
        buf.resize(static_cast<size_t>(ops::transpose_bytes(t.type, down)));
        ops::transpose_weights(down, t.type, buf.data());
        bytes = buf;
        break;
      }
      case OutTensor::kFc1:
      case OutTensor::kFc2: {
        const PredictorWeights& p = layers[static_cast<size_t>(o.il)].w;
        buf = f16_bytes(o.kind == OutTensor::kFc1 ? p.fc1 : p.fc2);
        bytes = buf;
        break;
      }
    }
    const uint64_t expect = static_cast<uint64_t>(row_bytes(t.type, t.ne[0])) *
                            static_cast<uint64_t>(t.ne.size() > 1 ? t.ne[1] : 1) *
                            static_cast<uint64_t>(t.ne.size() > 2 ? t.ne[2] : 1) *
                            static_cast<uint64_t>(t.ne.size() > 3 ? t.ne[3] : 1);
    if (bytes.size() != expect)
      return Status::Error("tensor '" + t.name + "': expected " + std::to_string(expect) +
                           " bytes, made " + std::to_string(bytes.size()));
    HC_TRY(write_all(fp.get(), bytes.data(), bytes.size(), path));
    HC_TRY(write_all(fp.get(), zeros.data(), static_cast<size_t>(w.padding(bytes.size())), path));
  }
  if (std::fflush(fp.get()) != 0) return Status::Error("write to '" + path + "' failed");
  return Status::Ok();
}

Status train_predictor(const TrainFlags& f) {
  const double t0 = now_seconds();
  std::vector<TrainedPredictor> layers;
  int n_layer = 0;
  {
    HC_ASSIGN_OR_RETURN(auto model, load_model_logged(f.model));
    const LlamaHParams hp = model->hparams();
    if (hp.is_moe())
      return Status::Error("train-predictor: this " + hp.arch + " model's FFN is " +
                           std::to_string(hp.n_expert) + " routed experts: its router already "
                           "predicts which run (activation predictors are for dense FFNs)");
    n_layer = hp.n_layer;
    HC_ASSIGN_OR_RETURN(std::vector<float> thresholds, firing_thresholds(f, hp));
    HC_ASSIGN_OR_RETURN(auto sampler, collect(f, std::move(model), thresholds));
    const double t1 = now_seconds();
    std::fprintf(stderr,
                 "train-predictor: collected %lld samples per layer of %lld tokens in %.2f s\n",
                 static_cast<long long>(sampler->layer(0).size()),
                 static_cast<long long>(sampler->layer(0).seen()), t1 - t0);
    ThreadPool pool(f.model.threads);
    for (int il = 0; il < n_layer; ++il) {
      HC_ASSIGN_OR_RETURN(TrainedPredictor t, train_one(f, sampler->layer(il), il, n_layer, pool));
      std::fprintf(stderr,
                   "train-predictor: layer %d/%d: threshold %.5g, held-out recall %.4f, "
                   "precision %.4f, predicted sparsity %.4f (true %.4f)\n",
                   il + 1, n_layer, t.held_out.threshold, t.held_out.recall, t.held_out.precision,
                   t.held_out.predicted_sparsity, t.held_out.true_sparsity);
      layers.push_back(std::move(t));
    }
    std::printf(
        "hotcold train-predictor: %s, %s activations, %lld tokens seen, %lld samples "
        "per layer, target recall %.4g\n",
        f.model.model.c_str(), activation_name(hp.ffn_act),
        static_cast<long long>(sampler->layer(0).seen()),
        static_cast<long long>(sampler->layer(0).size()), f.target_recall);
    print_table(layers);
    std::printf("collect: %.2f s, train: %.2f s\n", t1 - t0, now_seconds() - t1);
  }
  // The raw tensors come from the file itself (not the loaded model, whose matrices may have
  // been repacked and their mmapped pages dropped).
  HC_ASSIGN_OR_RETURN(MappedGguf in, open_model_gguf(f.model.model));
  HC_ASSIGN_OR_RETURN(auto planned, plan_output(in.gguf, n_layer, layers));
  const double t2 = now_seconds();
  HC_TRY(write_then_rename(f.out, [&](const std::string& tmp) {
    return write_output(tmp, planned.first, planned.second, layers);
  }));
  std::fprintf(stderr, "train-predictor: wrote %s (%zu tensors) in %.2f s\n", f.out.c_str(),
               planned.second.size(), now_seconds() - t2);
  return Status::Ok();
}

// Usage errors in the flags' values, or "" when they are fine.
std::string check_flags(const TrainFlags& f) {
  auto num = [](auto v) { return std::to_string(v); };
  if (f.model.model.empty()) return "expected -m MODEL.gguf";
  if (f.file.empty()) return "expected -f CORPUS.txt";
  if (f.out.empty()) return "expected -o OUT.gguf";
  if (f.model.threads < 1 || f.model.threads > 512)
    return "-t: expected 1..512 threads, found " + num(f.model.threads);
  if (f.model.ctx < 2) return "-c: expected at least 2 tokens per chunk, found " + num(f.model.ctx);
  if (f.chunks == 0 || f.chunks < -1)
    return "--chunks: expected a positive number, found " + num(f.chunks);
  if (f.rank < 0) return "--rank: expected a rank >= 1 (0: the default), found " + num(f.rank);
  if (f.epochs < 1) return "--epochs: expected at least 1, found " + num(f.epochs);
  if (!(f.lr > 0.0f) || !std::isfinite(f.lr))
    return "--lr: expected a positive learning rate, found " + num(f.lr);
  if (f.batch < 1) return "--batch: expected a positive batch size, found " + num(f.batch);
  if (f.pos_weight != "auto") {
    char* end = nullptr;
    const float v = std::strtof(f.pos_weight.c_str(), &end);
    if (f.pos_weight.empty() || *end != '\0' || !(v > 0.0f) || !std::isfinite(v))
      return "--pos-weight: expected 'auto' or a positive number, found '" + f.pos_weight + "'";
  }
  if (!(f.held_out > 0.0f && f.held_out < 1.0f))
    return "--held-out: expected a share in (0, 1), found " + num(f.held_out);
  if (!(f.target_recall > 0.0f && f.target_recall <= 1.0f))
    return "--target-recall: expected a value in (0, 1], found " + num(f.target_recall);
  if (f.max_samples < 2)
    return "--max-samples: expected at least 2 samples per layer, found " + num(f.max_samples);
  if (f.sparsity != -1.0f && f.stats.empty())
    return "--sparsity needs --stats STATS.gguf (the profile whose histogram calibrates it)";
  if (f.sparsity != -1.0f && !(f.sparsity >= 0.0f && f.sparsity < 1.0f))
    return "--sparsity: expected a share in [0, 1), found " + num(f.sparsity);
  if (same_file(f.model.model, f.out))
    return "output '" + f.out + "' is the input model; choose another path";
  return "";
}

}  // namespace

int cmd_train_predictor(const Args& args) {
  TrainFlags f;
  f.model.ctx = 512;
  ArgParser p(
      kCmd,
      "Train activation predictors (PowerInfer's fc1 / fc2) on a text corpus and write the\n"
      "model with them, in PowerInfer's layout (ffn_down_t), for run / bench / perplexity\n"
      "--predictor.");
  add_model_option(p, &f.model.model, "GGUF model file, or a cached model's name (required)");
  p.add_string("-f,--file", &f.file, "text corpus (required)");
  p.add_string("-o,--output", &f.out, "model file to write, GGUF (required)");
  p.add_int("-t,--threads", &f.model.threads, "number of threads");
  p.add_int("-c,--ctx-size", &f.model.ctx, "tokens per chunk, each in a fresh context");
  p.add_int("--chunks", &f.chunks, "run at most this many chunks; -1 = all");
  p.add_int("--rank", &f.rank, "predictor hidden size; 0 = max(64, n_embd/4), at most n_ff");
  p.add_int("--epochs", &f.epochs, "training epochs per layer");
  p.add_float("--lr", &f.lr, "Adam learning rate");
  p.add_int("--batch", &f.batch, "samples per mini-batch");
  p.add_string("--pos-weight", &f.pos_weight,
               "weight of firing neurons in the loss: a number, or 'auto' = negatives / "
               "positives per layer, at most 20");
  p.add_float("--held-out", &f.held_out,
              "share of the samples (the last ones) held out to choose thresholds");
  p.add_float("--target-recall", &f.target_recall,
              "held-out share of firing neurons the threshold must predict");
  p.add_int("--max-samples", &f.max_samples, "tokens kept per layer, reservoir-sampled");
  p.add_u64("--seed", &f.seed, "seed for sampling, initialisation and shuffling");
  p.add_string("--stats", &f.stats,
               "SiLU models (required): hotcold profile output whose calibrated thresholds on "
               "|act| define firing");
  p.add_float("--sparsity", &f.sparsity,
              "SiLU models: recalibrate the --stats thresholds for this sparsity, 0..1; "
              "-1 = the profile's own");
  p.add_flag("-v,--verbose", &f.model.verbose, "print debug logs");
  if (int rc = parse_or_exit(p, args, kCmd); rc >= 0) return rc;
  if (std::string err = check_flags(f); !err.empty()) return usage_error(kCmd, err);
  return exit_code_for(kCmd, train_predictor(f));
}

}  // namespace hc
