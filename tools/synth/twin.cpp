// Statistical twins: targets, firing probabilities and the calibration pass (twin.h).
#include "twin.h"

#include "synth.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>

#include "app/common.h"
#include "core/thread_pool.h"
#include "engine/session.h"
#include "model/ffn_observer.h"
#include "model/llama_model.h"
#include "model/predictor_train.h"
#include "model/sparse_ffn.h"
#include "ops/cpu/matmul.h"
#include "ops/cpu/ops.h"
#include "perfmodel/firing.h"
#include "quant/quant.h"

namespace hc::synth {


namespace {

// Collects, per layer and neuron, w = -z / s for every token (T-major), and how often each
// neuron fired with the biases the file has.
class Collector final : public FfnObserver {
 public:
  Collector(const LlamaModel& m, ThreadPool& pool) : m_(m), pool_(pool) {
    const LlamaHParams& hp = m.hparams();
    w_.resize(static_cast<size_t>(hp.n_layer));
    fired_.assign(static_cast<size_t>(hp.n_layer),
                  std::vector<double>(static_cast<size_t>(hp.n_ff), 0.0));
    g0_.resize(static_cast<size_t>(hp.n_layer));
  }
  void on_ffn_activation(int, const float*, int64_t, int64_t) override {}
  void on_ffn_input(int il, const float* x, int64_t n_tok, int64_t n_embd) override {
    const LlamaHParams& hp = m_.hparams();
    const LlamaLayerWeights& L = m_.weights().layers[static_cast<size_t>(il)];
    const int64_t n_ff = hp.n_ff;
    std::vector<float>& g0 = g0_[static_cast<size_t>(il)];
    if (g0.empty()) {  // column 0 of every gate row (= its channel columns), as stored
      g0.resize(static_cast<size_t>(n_ff));
      const int64_t blk = dtype_traits(L.ffn_gate.type).block_size;
      std::vector<float> first(static_cast<size_t>(blk));
      for (int64_t i = 0; i < n_ff; ++i) {
        quant::dequantize_row(L.ffn_gate.type, L.ffn_gate.row(i), first.data(), blk);
        g0[static_cast<size_t>(i)] = first[0];
      }
    }
    xb_.resize(static_cast<size_t>(n_tok * n_embd));
    for (int64_t t = 0; t < n_tok; ++t)
      ops::rmsnorm(xb_.data() + t * n_embd, x + t * n_embd,
                   static_cast<const float*>(L.ffn_norm.data), n_embd, hp.rms_eps);
    g_.resize(static_cast<size_t>(n_tok * n_ff));
    ops::matmul(L.ffn_gate, xb_.data(), n_tok, g_.data(), pool_, in_);
    std::vector<float>& w = w_[static_cast<size_t>(il)];
    std::vector<double>& fired = fired_[static_cast<size_t>(il)];
    for (int64_t t = 0; t < n_tok; ++t) {
      // s: the channel's sum (the gate row holds its bias in every channel column).
      float s = 0.0f;
      for (int j = 0; j < kTwinChannel; ++j) s += xb_[static_cast<size_t>(t * n_embd + j)];
      for (int64_t i = 0; i < n_ff; ++i) {
        const float g = g_[static_cast<size_t>(t * n_ff + i)];
        fired[static_cast<size_t>(i)] += g > 0.0f;
        const float z = g - g0[static_cast<size_t>(i)] * s;
        w.push_back(s > 0.0f ? -z / s : 0.0f);
      }
    }
    if (il == 0) tokens_ += n_tok;
  }
  const std::vector<float>& w(int il) const { return w_[static_cast<size_t>(il)]; }
  const std::vector<double>& fired(int il) const { return fired_[static_cast<size_t>(il)]; }
  int64_t tokens() const { return tokens_; }

 private:
  const LlamaModel& m_;
  ThreadPool& pool_;
  ops::MatmulInput in_;
  std::vector<float> xb_, g_;
  std::vector<std::vector<float>> w_, g0_;
  std::vector<std::vector<double>> fired_;
  int64_t tokens_ = 0;
};

// Keeps, per layer, every token's FFN input before ffn_norm (what the predictor reads) and
// which neurons fired (act != 0, the dense pass's activations).
class InputCollector final : public FfnObserver {
 public:
  explicit InputCollector(int n_layer) : x_(static_cast<size_t>(n_layer)), fired_(x_.size()) {}
  void on_ffn_input(int il, const float* x, int64_t n_tok, int64_t n_embd) override {
    std::vector<float>& v = x_[static_cast<size_t>(il)];
    v.insert(v.end(), x, x + n_tok * n_embd);
  }
  void on_ffn_activation(int il, const float* act, int64_t n_tok, int64_t n_ff) override {
    std::vector<uint8_t>& f = fired_[static_cast<size_t>(il)];
    for (int64_t i = 0; i < n_tok * n_ff; ++i) f.push_back(act[i] != 0.0f);
  }
  const std::vector<float>& x(int il) const { return x_[static_cast<size_t>(il)]; }
  const std::vector<uint8_t>& fired(int il) const { return fired_[static_cast<size_t>(il)]; }

 private:
  std::vector<std::vector<float>> x_;
  std::vector<std::vector<uint8_t>> fired_;
};

// Runs the model at `path` over the first tokens_max tokens of `text` in kTwinChunk chunks, each
// from an empty cache (as hotcold profile -c reads it), with `obs` watching.
Status run_chunks(std::shared_ptr<const LlamaModel> model, const std::string& text,
                  int tokens_max, int threads, FfnObserver* obs) {
  std::vector<int32_t> tokens = model->tokenizer().encode(text, true, false);
  if (static_cast<int>(tokens.size()) > tokens_max) tokens.resize(static_cast<size_t>(tokens_max));
  if (tokens.size() < 64)
    return Status::Error("--calib: the text gives " + std::to_string(tokens.size()) +
                         " tokens, expected at least 64");
  SessionParams sp;
  sp.n_ctx = kTwinChunk;
  sp.n_threads = threads;
  Session session(std::move(model), sp);
  session.set_ffn_observer(obs);
  for (size_t b = 0; b < tokens.size(); b += kTwinChunk) {
    session.truncate(0);
    const size_t n = std::min<size_t>(kTwinChunk, tokens.size() - b);
    HC_TRY(session.eval(std::span<const int32_t>(tokens).subspan(b, n)));
  }
  return Status::Ok();
}

}  // namespace

Status calibrate_twin_predictors(Config& c) {
  HC_ASSIGN_OR_RETURN(std::string text, read_text_file(c.calib));
  const std::string tmp = c.out + ".calib.tmp";
  Status st = write_model(plain_layout(c), tmp);
  std::shared_ptr<const LlamaModel> model;
  if (st.ok()) {
    ModelFlags mf;
    mf.model = tmp;
    mf.threads = c.threads;
    auto loaded = load_model_logged(mf);
    if (loaded.ok()) model = *loaded; else st = loaded.status();
  }
  InputCollector col(c.n_layer);
  if (st.ok()) st = run_chunks(model, text, c.calib_tokens, c.threads, &col);
  model.reset();
  std::remove(tmp.c_str());
  HC_TRY(st);
  const std::vector<TensorSpec> specs = tensor_specs(c);  // PowerInfer's layout: fc1 / fc2
  const auto find = [&](const std::string& name) -> const TensorSpec* {
    for (const TensorSpec& t : specs)
      if (t.name == name) return &t;
    return nullptr;
  };
  ThreadPool pool(c.threads);
  c.pred_thresholds.assign(static_cast<size_t>(c.n_layer), 0.0f);
  c.pred_recall = c.pred_precision = c.pred_thresholds;
  std::fprintf(stderr, "%s: twin predictors (rank %d), thresholds for recall %.4f on %s:\n", kTool,
               c.pred_rank, c.target_recall, c.calib.c_str());
  const int64_t n_embd = c.shape.n_embd, n_ff = c.shape.n_ff;
  for (int il = 0; il < c.n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    const TensorSpec* f1 = find(p + "fc1.weight");
    const TensorSpec* f2 = find(p + "fc2.weight");
    if (!f1 || !f2) return Status::Error("internal: layer " + std::to_string(il) + " has no predictor");
    const TensorSpec& s1 = *f1;
    const TensorSpec& s2 = *f2;
    std::vector<uint8_t> b1, b2;
    generate_rows(s1, c.seed, c.threads, 0, s1.ne[1], &b1);
    generate_rows(s2, c.seed, c.threads, 0, s2.ne[1], &b2);
    const TensorView fc1 = TensorView::make(s1.type, b1.data(), s1.ne[0], s1.ne[1]);
    const TensorView fc2 = TensorView::make(s2.type, b2.data(), s2.ne[0], s2.ne[1]);
    const std::vector<float>& x = col.x(il);
    const int64_t T = static_cast<int64_t>(x.size()) / n_embd;
    std::vector<float> logit(static_cast<size_t>(T * n_ff)), hid;
    ops::MatmulInput in, pred_in;
    for (int64_t t0 = 0; t0 < T; t0 += kTwinChunk) {  // the runtime's arithmetic, a chunk a call
      const int64_t n = std::min<int64_t>(kTwinChunk, T - t0);
      in.reset(x.data() + t0 * n_embd, n, n_embd);
      predictor_logits(fc1, fc2, in, hid, logit.data() + t0 * n_ff, pred_in, pool);
    }
    // As train-predictor chooses its thresholds (model/predictor_train.h).
    const PredictorMetrics ch = choose_threshold(logit, col.fired(il), c.target_recall);
    c.pred_thresholds[static_cast<size_t>(il)] = ch.threshold;
    c.pred_recall[static_cast<size_t>(il)] = static_cast<float>(ch.recall);
    c.pred_precision[static_cast<size_t>(il)] = static_cast<float>(ch.precision);
    std::fprintf(stderr,
                 "  layer %2d: threshold %9.4g  recall %.4f  precision %.4f  predicted %5.1f%%\n",
                 il, ch.threshold, ch.recall, ch.precision, 100 * (1 - ch.predicted_sparsity));
  }
  return Status::Ok();
}

Result<std::vector<TwinLayerStats>> calibrate_twin(const std::string& path,
                                                   const std::string& text, int tokens_max,
                                                   int threads,
                                                   const std::vector<std::vector<float>>& p,
                                                   std::vector<std::vector<float>>* bias) {
  ModelFlags mf;
  mf.model = path;
  mf.threads = threads;
  HC_ASSIGN_OR_RETURN(std::shared_ptr<const LlamaModel> model, load_model_logged(mf));
  const LlamaHParams& hp = model->hparams();
  // The text in chunks of kTwinChunk tokens from an empty cache, as `hotcold profile -c`
  // reads it: what a position sees depends on how far into its context it is.
  ThreadPool pool(threads);
  Collector col(*model, pool);
  HC_TRY(run_chunks(model, text, tokens_max, threads, &col));
  const int64_t T = col.tokens(), n_ff = hp.n_ff;
  std::vector<TwinLayerStats> stats(static_cast<size_t>(hp.n_layer));
  std::vector<float> wi(static_cast<size_t>(T));
  for (int il = 0; il < hp.n_layer; ++il) {
    const std::vector<float>& w = col.w(il);
    const std::vector<double>& fired = col.fired(il);
    TwinLayerStats& st = stats[static_cast<size_t>(il)];
    st.firing = std::accumulate(fired.begin(), fired.end(), 0.0) / static_cast<double>(T * n_ff);
    st.top80 = perfmodel::neurons_covering(fired, 0.8);
    for (int64_t i = 0; i < n_ff; ++i) {
      for (int64_t t = 0; t < T; ++t) wi[static_cast<size_t>(t)] = w[static_cast<size_t>(t * n_ff + i)];
      // Fires when bias > w: the bias just above the share p of the w values fires for p.
      const double pi = p[static_cast<size_t>(il)][static_cast<size_t>(i)];
      const int64_t k = std::min<int64_t>(T - 1, static_cast<int64_t>(pi * static_cast<double>(T)));
      std::nth_element(wi.begin(), wi.begin() + k, wi.end());
      (*bias)[static_cast<size_t>(il)][static_cast<size_t>(i)] = wi[static_cast<size_t>(k)];
    }
  }
  return stats;
}

// A twin's calibration (twin.h): kTwinPasses times, the file written with the current biases
// (beside the output), run on the text, every gate bias set from what it saw.
Status calibrate_twin_biases(Config& c) {
  HC_ASSIGN_OR_RETURN(std::string text, read_text_file(c.calib));
  const TwinSpec& tw = *c.twin;
  std::vector<std::vector<float>> p(static_cast<size_t>(c.n_layer));
  for (int il = 0; il < c.n_layer; ++il)
    p[static_cast<size_t>(il)] = twin_probabilities(
        c.shape.n_ff, tw.firing, twin_top80(tw, il, c.n_layer), c.seed * 1000003u + il);
  const std::string tmp = c.out + ".calib.tmp";
  std::fprintf(stderr, "%s: twin %s: %s\n", kTool, tw.name, tw.source);
  const Config plain = plain_layout(c);  // biases shared (twin_bias)
  for (int pass = 1; pass <= kTwinPasses; ++pass) {
    const Status written = write_model(plain, tmp);
    auto stats = written.ok() ? calibrate_twin(tmp, text, c.calib_tokens, c.threads, p,
                                               c.twin_bias.get())
                              : Result<std::vector<TwinLayerStats>>(written);
    std::remove(tmp.c_str());  // also after a failure: no file is left behind
    if (!stats.ok()) return stats.status();
    std::fprintf(stderr, "%s: calibration pass %d of %d, on %s (what the biases of pass %d gave):\n",
                 kTool, pass, kTwinPasses, c.calib.c_str(), pass - 1);
    for (int il = 0; il < c.n_layer; ++il) {
      const TwinLayerStats& s = (*stats)[static_cast<size_t>(il)];
      std::fprintf(stderr, "  layer %2d: firing %5.1f%% (target %4.1f%%), top80%% %5.1f%% (target %4.1f%%)\n",
                   il, 100 * s.firing, 100 * tw.firing, 100 * s.top80,
                   100 * twin_top80(tw, il, c.n_layer));
    }
  }
  return Status::Ok();
}

}  // namespace hc::synth
