// A Session is one conversation with a shared model: its own KV cache, position and scratch
// buffers. Many sessions may share one LlamaModel (weights are immutable).
#pragma once
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "model/dynamic_sparsity.h"
#include "model/kv_cache.h"
#include "model/llama_forward.h"
#include "model/llama_model.h"

namespace hc {

struct SessionParams {
  int n_ctx = 0;      // 0: the model's training context, capped at 4096
  int n_threads = 2;
  int n_batch = 512;  // prompt tokens evaluated per forward pass
};

// The context a session gets for SessionParams::n_ctx == requested (0: the model's training
// context, capped at 4096).
int session_ctx(const LlamaModel& m, int requested);

class Session {
 public:
  Session(std::shared_ptr<const LlamaModel> model, const SessionParams& params);

  const LlamaModel& model() const { return *model_; }
  int n_ctx() const { return cache_.n_ctx; }
  int n_past() const { return n_past_; }
  const std::vector<int32_t>& history() const { return history_; }
  ThreadPool& pool() { return pool_; }

  // Evaluates tokens at the current position (in n_batch chunks) and advances it.
  // Afterwards logits() holds the last token's logits, or every token's when all_logits.
  Status eval(std::span<const int32_t> tokens, bool all_logits = false);
  const std::vector<float>& logits() const { return logits_; }
  // eval(tokens), returning the greedy choice after the last token (the first largest logit,
  // Sampler's greedy pick without penalties). With the output layer on a device only the id
  // crosses the link, and logits() is empty afterwards.
  Result<int32_t> eval_argmax(std::span<const int32_t> tokens);
  // Forgets everything from position n on (n <= n_past).
  void truncate(int n);
  uint64_t kv_bytes() const { return cache_.bytes(); }

  // Activation-sparse FFN for the following evals (null: the dense FFN). The session keeps
  // the object alive; sparse_stats() counts what it skipped.
  void set_sparse(std::shared_ptr<const SparseFfn> sparse) {
    sparse_ = std::move(sparse);
    scratch_.sparse = sparse_.get();
  }
  const SparseStats& sparse_stats() const { return scratch_.sparse_scratch.stats; }
  // Mixture-of-experts layers' counters (all zero for a dense model).
  const MoeStats& moe_stats() const { return scratch_.moe.stats; }
  // Runs the layers `dm` places on its device there (hybrid / offloaded inference), with a KV
  // cache and buffers for this session on that device (charged to its budget); null: the host
  // only. The session keeps `dm` alive.
  Status set_device(std::shared_ptr<const DeviceModel> dm);
  uint64_t device_kv_bytes() const { return device_ ? device_->kv_bytes() : 0; }
  const DeviceModel* device_model() const { return device_model_.get(); }
  // Dynamic sparsity (model/dynamic_sparsity.h) for the following evals: its thresholds replace
  // the SparseFfn's, it watches the sparse FFN and migrates hot neurons between evals. Needs
  // set_sparse (and set_device for migration) first; null to stop.
  void set_dynamic(std::shared_ptr<DynamicSparsity> dyn);
  DynamicSparsity* dynamic() const { return dynamic_.get(); }
  // Sees every layer's FFN activations during evals (profiling); null to stop.
  void set_ffn_observer(FfnObserver* observer) { scratch_.observer = observer; }

 private:
  // eval and eval_argmax: tokens in n_batch chunks; with argmax, the last chunk asks for the id.
  Status eval_chunks(std::span<const int32_t> tokens, bool all_logits, int32_t* argmax);

  std::shared_ptr<const LlamaModel> model_;
  std::shared_ptr<const SparseFfn> sparse_;
  std::shared_ptr<const DeviceModel> device_model_;
  std::unique_ptr<DeviceSession> device_;
  std::shared_ptr<DynamicSparsity> dynamic_;
  SessionParams params_;
  ThreadPool pool_;
  KvCache cache_;
  ForwardScratch scratch_;
  std::vector<float> logits_;
  std::vector<float> chunk_logits_;
  std::vector<int32_t> history_;
  int n_past_ = 0;
};

}  // namespace hc
