// Activation predictors (hotcold train-predictor): per layer, a two-layer MLP in PowerInfer's
// layout that predicts from x, the layer's FFN input before ffn_norm (the residual stream,
// PowerInfer's ffn_inp), which neurons will fire,
//
//   logit = fc2 . relu(fc1 . x)      fc1: [rank, n_embd], fc2: [n_ff, rank], no biases
//
// and a neuron is predicted to fire when its logit is at least the layer's threshold
// (PowerInfer's rule: ggml.c skips a row when its logit < threshold; sparse_ffn.h).
// Training data: (x, firing mask) pairs recorded while the model runs over a corpus
// (PredictorSampler, an FfnObserver; at most `capacity` tokens per layer, reservoir-sampled).
// Training: weighted binary cross-entropy on the logits (PyTorch's BCEWithLogitsLoss with
// pos_weight: positives' terms are multiplied by pos_weight, mean over all elements), Adam,
// shuffled mini-batches. The last `held_out` share of the samples is never trained on; the
// layer's logit threshold is chosen there (choose_threshold) and its metrics reported.
//
// Everything is deterministic for a given seed, and independent of the thread count apart
// from the order in which the reported loss is summed: each gradient element is written by
// one thread, summing the batch in a fixed order.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "model/ffn_observer.h"

namespace hc {

// Samples of one layer. x is kept as F16: the engine rounds x to F16 anyway before the dot
// products with an F16 fc1 (the type predictors are written in), and it halves the memory.
class PredictorSamples {
 public:
  PredictorSamples(int64_t n_embd, int64_t n_ff, int64_t capacity, uint64_t seed);

  // Offers one token: x [n_embd], act [n_ff]; neuron j fired when |act[j]| > threshold (0 for
  // ReLU: act != 0). Reservoir sampling (algorithm R): after n offers, each offered token is
  // kept with probability min(1, capacity / n).
  void offer(const float* x, const float* act, float threshold);

  int64_t n_embd() const { return n_embd_; }
  int64_t n_ff() const { return n_ff_; }
  int64_t capacity() const { return capacity_; }
  int64_t size() const { return size_; }
  int64_t seen() const { return seen_; }
  // Sample i's x decoded to floats: out [n_embd].
  void x(int64_t i, float* out) const;
  bool fired(int64_t i, int64_t j) const {
    const uint64_t w = mask_[static_cast<size_t>(i * words_ + j / 64)];
    return (w >> (j % 64)) & 1u;
  }
  // Sample i's firing flags as bytes: out [n_ff].
  void mask(int64_t i, uint8_t* out) const;
  // Bytes held for `capacity` samples.
  static uint64_t bytes_for(int64_t n_embd, int64_t n_ff, int64_t capacity);

 private:
  int64_t slot_for_next();  // the slot the next offer fills, or -1 when it is dropped
  int64_t n_embd_, n_ff_, capacity_, words_;
  int64_t size_ = 0, seen_ = 0;
  uint64_t rng_;
  std::vector<fp16_t> x_;       // [size, n_embd]
  std::vector<uint64_t> mask_;  // [size, words]: bit j of sample i = neuron j fired
};

// An FfnObserver filling one PredictorSamples per layer from a session's forward passes.
// Every layer keeps the same tokens (one seed), so the held-out tokens agree across layers.
class PredictorSampler : public FfnObserver {
 public:
  // thresholds: per layer, on |act| (all 0 for a ReLU model).
  PredictorSampler(int64_t n_embd, int64_t n_ff, std::vector<float> thresholds, int64_t capacity,
                   uint64_t seed);
  void on_ffn_input(int il, const float* x, int64_t n_tok, int64_t n_embd) override;
  void on_ffn_activation(int il, const float* act, int64_t n_tok, int64_t n_ff) override;
  int n_layer() const { return static_cast<int>(layers_.size()); }
  const PredictorSamples& layer(int il) const { return layers_[static_cast<size_t>(il)]; }

 private:
  std::vector<float> thresholds_;
  std::vector<PredictorSamples> layers_;
  std::vector<float> x_;  // [n_tok, n_embd] the current layer's FFN input
  int x_layer_ = -1;
  int64_t x_tok_ = 0;
};

// Weights of one layer's predictor, row-major floats.
struct PredictorWeights {
  int64_t n_embd = 0, n_ff = 0, rank = 0;
  std::vector<float> fc1;  // [rank, n_embd] one row per hidden unit
  std::vector<float> fc2;  // [n_ff, rank] one row per neuron

  static PredictorWeights zeros(int64_t n_embd, int64_t n_ff, int64_t rank);
  // fc1 He-normal (a ReLU follows), fc2 Xavier-uniform, from `seed`.
  static PredictorWeights init(int64_t n_embd, int64_t n_ff, int64_t rank, uint64_t seed);
  // Both matrices rounded to F16, the type they are written in.
  void round_to_f16();
};

// max(64, n_embd / 4), at most n_ff.
int64_t default_predictor_rank(int64_t n_embd, int64_t n_ff);

// logits [n, n_ff] of x [n, n_embd]. round_hidden_f16: round relu(fc1 . x) to F16 first, as
// the engine's F16 matmul does with fc2's input.
void predictor_logits(const PredictorWeights& w, const float* x, int64_t n, float* logits,
                      ThreadPool& pool, bool round_hidden_f16 = false);

// Mean weighted BCE over the n * n_ff logits of x [n, n_embd] against y [n, n_ff] (0 / 1), and
// its gradient with respect to fc1 and fc2 in *grad (resized to w's shapes).
double predictor_loss_and_grad(const PredictorWeights& w, const float* x, const uint8_t* y,
                               int64_t n, float pos_weight, PredictorWeights* grad,
                               ThreadPool& pool);

// Predictions (logit >= threshold) against firings over a set of samples and neurons.
struct PredictorMetrics {
  float threshold = 0;
  double recall = 1;              // predicted & fired / fired (1 when nothing fired)
  double precision = 1;           // predicted & fired / predicted (1 when nothing predicted)
  double predicted_sparsity = 1;  // 1 - predicted / total
  double true_sparsity = 1;       // 1 - fired / total
  int64_t total = 0, fired = 0, predicted = 0, hits = 0;
};

PredictorMetrics evaluate_threshold(std::span<const float> logits, std::span<const uint8_t> fired,
                                    float threshold);
// The largest threshold whose recall (logit >= threshold) is >= target_recall: the
// ceil(target * fired)-th largest logit of a firing neuron. When nothing fired, the float just
// above the largest logit (nothing is predicted).
PredictorMetrics choose_threshold(std::span<const float> logits, std::span<const uint8_t> fired,
                                  double target_recall);

struct PredictorTrainOptions {
  int64_t rank = 0;  // 0: default_predictor_rank
  int epochs = 10;
  float lr = 1e-3f;
  int64_t batch = 256;
  float pos_weight = 0;  // <= 0: negatives / positives of the training split, at most 20
  double held_out = 0.1;
  double target_recall = 0.99;
  uint64_t seed = 0;
};

// After each epoch: mean training loss, and held-out metrics at logit > 0.
struct PredictorEpoch {
  int epoch = 0;  // 1-based
  double loss = 0;
  PredictorMetrics held_out;
  double seconds = 0;  // since training began
};

struct TrainedPredictor {
  PredictorWeights w;  // rounded to F16 (what the file holds)
  float pos_weight = 1;
  int64_t n_train = 0, n_held_out = 0;
  PredictorMetrics held_out;  // at the chosen threshold, computed with the F16 weights
};

// Trains one layer's predictor on s (errors: too few samples for the split, bad options).
Result<TrainedPredictor> train_layer(
    const PredictorSamples& s, const PredictorTrainOptions& opt, ThreadPool& pool,
    const std::function<void(const PredictorEpoch&)>& on_epoch = {});

}  // namespace hc
