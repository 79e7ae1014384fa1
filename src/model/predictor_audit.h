// How well a model's activation predictors (PowerInfer's fc1 / fc2) pick the neurons that fire,
// measured while the dense FFN runs: an FfnObserver that, for every layer and token, computes
// the predictor's decision from the FFN input (predictor_logits, the runtime's arithmetic, with
// the layer's threshold as the sparse FFN uses it) and compares it with what the layer's dense
// activations say fired (act != 0: ReLU-family models). hotcold profile prints it for files
// with predictors. Other observers see every call unchanged (`inner`).
#pragma once
#include <cstdint>
#include <vector>

#include "core/thread_pool.h"
#include "model/ffn_observer.h"
#include "model/llama_model.h"
#include "ops/cpu/matmul.h"

namespace hc {

struct PredictorLayerAudit {
  int64_t fired = 0;      // (token, neuron) pairs that fired
  int64_t predicted = 0;  // ... the predictor chose
  int64_t hit = 0;        // ... both
  int64_t pairs = 0;      // every pair seen
  double recall() const { return fired ? static_cast<double>(hit) / fired : 1.0; }
  double precision() const { return predicted ? static_cast<double>(hit) / predicted : 1.0; }
  double predicted_share() const { return pairs ? static_cast<double>(predicted) / pairs : 0.0; }
};

class PredictorAudit final : public FfnObserver {
 public:
  // model: a dense (not MoE), ReLU-family model with fc1 / fc2 in every layer (has_predictors).
  PredictorAudit(const LlamaModel& model, ThreadPool& pool, FfnObserver* inner);
  static bool applies(const LlamaModel& model);

  void on_ffn_input(int il, const float* x, int64_t n_tok, int64_t n_embd) override;
  void on_ffn_activation(int il, const float* act, int64_t n_tok, int64_t n_ff) override;
  void on_moe_routing(int il, const int32_t* experts, int64_t n_tok, int k) override;
  void on_expert_activation(int il, int expert, const float* act, int64_t n_rows,
                            int64_t n_ff) override;

  // The threshold the sparse FFN compares layer il's logits with (>=).
  float threshold(int il) const { return thresholds_[static_cast<size_t>(il)]; }
  const PredictorLayerAudit& layer(int il) const { return layers_[static_cast<size_t>(il)]; }
  int n_layer() const { return static_cast<int>(layers_.size()); }

 private:
  const LlamaModel& model_;
  ThreadPool& pool_;
  FfnObserver* inner_;
  ops::MatmulInput in_, pred_in_;
  std::vector<float> hid_, logit_;
  int pending_ = -1;  // the layer whose decisions logit_ holds
  int64_t pending_tok_ = 0;
  std::vector<float> thresholds_;  // file_predictor_thresholds
  std::vector<PredictorLayerAudit> layers_;
};

}  // namespace hc
