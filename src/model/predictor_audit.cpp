// PredictorAudit (predictor_audit.h): the predictor's decisions against the dense activations.
#include "model/predictor_audit.h"

#include "model/sparse_ffn.h"

namespace hc {

bool PredictorAudit::applies(const LlamaModel& model) {
  const LlamaHParams& hp = model.hparams();
  if (hp.is_moe() || !relu_family(hp.ffn_act) || hp.predictor_normed_input) return false;
  for (const LlamaLayerWeights& L : model.weights().layers)
    if (L.fc1.empty() || L.fc2.empty()) return false;
  return true;
}

PredictorAudit::PredictorAudit(const LlamaModel& model, ThreadPool& pool, FfnObserver* inner)
    : model_(model), pool_(pool), inner_(inner),
      thresholds_(file_predictor_thresholds(model.hparams())),
      layers_(static_cast<size_t>(model.hparams().n_layer)) {}

void PredictorAudit::on_ffn_input(int il, const float* x, int64_t n_tok, int64_t n_embd) {
  const LlamaLayerWeights& L = model_.weights().layers[static_cast<size_t>(il)];
  const int64_t n_ff = model_.hparams().n_ff;
  in_.reset(x, n_tok, n_embd);
  if (logit_.size() < static_cast<size_t>(n_tok * n_ff)) logit_.resize(static_cast<size_t>(n_tok * n_ff));
  predictor_logits(L.fc1, L.fc2, in_, hid_, logit_.data(), pred_in_, pool_);
  pending_ = il;
  pending_tok_ = n_tok;
  if (inner_) inner_->on_ffn_input(il, x, n_tok, n_embd);
}

void PredictorAudit::on_ffn_activation(int il, const float* act, int64_t n_tok, int64_t n_ff) {
  if (pending_ == il && pending_tok_ == n_tok) {
    const float thr = threshold(il);
    PredictorLayerAudit& a = layers_[static_cast<size_t>(il)];
    int64_t fired = 0, predicted = 0, hit = 0;
    for (int64_t i = 0; i < n_tok * n_ff; ++i) {
      const bool f = act[i] != 0.0f, p = logit_[static_cast<size_t>(i)] >= thr;
      fired += f;
      predicted += p;
      hit += f && p;
    }
    a.fired += fired;
    a.predicted += predicted;
    a.hit += hit;
    a.pairs += n_tok * n_ff;
    pending_ = -1;
  }
  if (inner_) inner_->on_ffn_activation(il, act, n_tok, n_ff);
}

void PredictorAudit::on_moe_routing(int il, const int32_t* experts, int64_t n_tok, int k) {
  if (inner_) inner_->on_moe_routing(il, experts, n_tok, k);
}

void PredictorAudit::on_expert_activation(int il, int expert, const float* act, int64_t n_rows,
                                          int64_t n_ff) {
  if (inner_) inner_->on_expert_activation(il, expert, act, n_rows, n_ff);
}

}  // namespace hc
