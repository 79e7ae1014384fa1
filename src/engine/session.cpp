#include "engine/session.h"

#include <algorithm>

namespace hc {

int session_ctx(const LlamaModel& m, int requested) {
  if (requested > 0) return requested;
  return std::min(m.hparams().n_ctx_train, 4096);
}

Session::Session(std::shared_ptr<const LlamaModel> model, const SessionParams& params)
    : model_(std::move(model)),
      params_(params),
      pool_(params.n_threads),
      cache_(model_->hparams().n_layer, session_ctx(*model_, params.n_ctx),
             int64_t{model_->hparams().n_head_kv} * model_->hparams().head_dim) {
  if (params_.n_batch < 1) params_.n_batch = 1;
}

Status Session::eval(std::span<const int32_t> tokens, bool all_logits) {
  return eval_chunks(tokens, all_logits, nullptr);
}

Result<int32_t> Session::eval_argmax(std::span<const int32_t> tokens) {
  int32_t id = 0;
  HC_TRY(eval_chunks(tokens, false, &id));
  return id;
}

Status Session::eval_chunks(std::span<const int32_t> tokens, bool all_logits, int32_t* argmax) {
  if (tokens.empty()) return Status::Error("no tokens to evaluate");
  if (n_past_ + static_cast<int64_t>(tokens.size()) > cache_.n_ctx)
    return Status::Error("context overflow: " + std::to_string(n_past_) + " tokens in context + " +
                         std::to_string(tokens.size()) + " new exceed the context size " +
                         std::to_string(cache_.n_ctx) + " (raise -c)");
  logits_.clear();
  for (size_t i = 0; i < tokens.size(); i += params_.n_batch) {
    const size_t n = std::min(tokens.size() - i, static_cast<size_t>(params_.n_batch));
    const bool last_chunk = i + n == tokens.size();
    // The last (usually only) chunk writes logits_ in place: no per-token copy of [n_vocab].
    std::vector<float>* out = last_chunk && logits_.empty() ? &logits_ : &chunk_logits_;
    if (dynamic_) dynamic_->begin_call(static_cast<int64_t>(n));
    HC_TRY(llama_forward(*model_, cache_, scratch_, pool_, tokens.subspan(i, n), n_past_,
                         all_logits, out, last_chunk ? argmax : nullptr));
    if (dynamic_) HC_TRY(dynamic_->end_call());  // may migrate hot neurons (device idle now)
    n_past_ += static_cast<int>(n);
    history_.insert(history_.end(), tokens.begin() + i, tokens.begin() + i + n);
    if (out == &chunk_logits_ && all_logits)
      logits_.insert(logits_.end(), chunk_logits_.begin(), chunk_logits_.end());
  }
  // The device kept the logits: none of the buffer's values are the last token's.
  if (argmax && device_model_ && device_model_->output_on_device()) logits_.clear();
  return Status::Ok();
}

Status Session::set_device(std::shared_ptr<const DeviceModel> dm) {
  scratch_.device = nullptr;
  device_.reset();
  device_model_ = std::move(dm);
  if (!device_model_) return Status::Ok();
  if (&device_model_->model() != model_.get())
    return Status::Error("set_device: the device model was built for another model");
  auto ds = DeviceSession::create(*device_model_, cache_.n_ctx, forward_ubatch(model_->hparams()));
  if (!ds.ok()) {
    device_model_.reset();
    return ds.status();
  }
  device_ = std::move(*ds);
  scratch_.device = device_.get();
  return Status::Ok();
}

void Session::set_dynamic(std::shared_ptr<DynamicSparsity> dyn) {
  dynamic_ = std::move(dyn);
  SparseScratch& sc = scratch_.sparse_scratch;
  sc.thresholds = nullptr;
  sc.predictor_thresholds = nullptr;
  sc.monitor = nullptr;
  scratch_.moe.monitor = nullptr;
  if (dynamic_) {
    dynamic_->attach(sc);
    dynamic_->attach(scratch_.moe);
  }
}

void Session::truncate(int n) {
  HC_CHECK(n >= 0 && n <= n_past_);
  n_past_ = n;
  history_.resize(n);
}

}  // namespace hc
