// Continuous batching for the HTTP server: many generation requests over one shared model.
//
// A fixed number of slots (--parallel), each with its own KV cache, run on one worker thread
// that owns the thread pool and the forward-pass scratch. Requests wait in a bounded FIFO
// queue and take the first free slot (fair: first come, first served). Every iteration of
// the worker takes the next slot that is still reading its prompt, round robin, and one decode
// step for every generating slot together, in one forward pass (llama_forward_mixed): one
// micro-batch of that prompt (at most 128 tokens, on `hotcold run`'s micro-batch grid) rides
// with the decode rows, so the weights are read once for both. With no slot generating, the
// prompt goes in chunks of n_batch tokens alone; with a device or a sparse FFN the prompt chunk
// and the decode step are separate passes. Each row keeps the arithmetic it has alone: the
// prompt's as its micro-batch in `hotcold run`, each decode step's as a one-token call
// (llama_forward_multi: each slot attends over its own cache). So a request's tokens do not
// depend on what else is running: greedy output equals `hotcold run`.
//
// Requests are cancelled by their owner (client gone) or by shutdown; finished slots are
// freed at once. Text is produced through TextStream (complete UTF-8, stop strings).
//
// Prompt cache (engine/prompt_cache.h): a free slot keeps its KV; a new request takes the free
// slot that shares the longest reusable prefix with its prompt (else the least recently used
// one), or, when the bounded store of earlier prefixes (cache_ram_bytes) has a longer one, that
// prefix copied in; a slot about to lose prompt-processed tokens saves them to the store first.
// Reuse is cut to the prompt-processing grid, so it changes no result.
//
// Hybrid serving (create() with a DeviceModel): every slot also has its own DeviceSession (its
// device KV cache and buffers, charged to the device's budget). A slot's prompt chunks run
// llama_forward over the device placement with its session; the decode steps of all generating
// slots run in one llama_forward_multi pass over the placement, each step with its own slot's
// session (its device KV), every row with the device operations of its one-token decode: the
// arithmetic of `hotcold run` with the same flags, so greedy output equals run's. Dynamic
// sparsity (--dynamic / --migrate) watches every pass and migrates between them. With
// attention layers on the device, a prefix saved to the host store carries its device layers'
// KV (DeviceSession::kv_to_host / kv_from_host).
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "engine/gen_request.h"
#include "engine/prompt_cache.h"
#include "engine/sampler.h"
#include "engine/text_stream.h"
#include "model/device_model.h"
#include "model/dynamic_sparsity.h"
#include "model/kv_cache.h"
#include "model/llama_forward.h"
#include "model/llama_model.h"
#include "model/sparse_ffn.h"

namespace hc {

struct SchedulerParams {
  int n_parallel = 1;   // slots
  int n_ctx_slot = 0;   // context per slot (tokens)
  int n_threads = 2;
  int n_batch = 512;    // prompt tokens per forward pass (as Session / hotcold run)
  int max_queue = 64;   // requests waiting for a slot; more are refused
  bool cache_prompt = true;      // reuse slots' KV across requests (prompt cache)
  uint64_t cache_ram_bytes = 0;  // prefixes kept beyond the slots, in host memory (0: none)
};

struct SchedulerStats {
  uint64_t requests_started = 0, requests_finished = 0, requests_cancelled = 0,
           requests_rejected = 0, requests_failed = 0;
  uint64_t prompt_tokens = 0;
  uint64_t generated_tokens = 0;  // tokens sampled for requests (each one's first from its prompt)
  uint64_t decode_steps = 0, decode_batch_tokens = 0;  // mean batch = tokens / steps
  uint64_t mixed_passes = 0;  // prompt micro-batches evaluated inside a decode pass
  double decode_seconds = 0, prompt_seconds = 0;
  double recent_tokens_per_second = 0;  // generated tokens over the last 10 s
  int queue_depth = 0, active_slots = 0, n_slots = 0;
  uint64_t kv_bytes = 0;  // KV caches of all slots
  uint64_t device_kv_bytes = 0;  // the slots' KV caches on the second device (hybrid serving)
  // Prompt cache: requests that reused cached KV, the prompt tokens not evaluated thanks to it,
  // the store's bytes (within cache_ram_bytes), entries and evictions.
  uint64_t prompt_cache_hits = 0, prompt_tokens_reused = 0;
  uint64_t prompt_cache_bytes = 0, prompt_cache_entries = 0, prompt_cache_evictions = 0;
  SparseStats sparse;  // activation-sparse FFN counters (zero when dense)
};

enum class SubmitResult { kAccepted, kQueueFull, kShuttingDown };

// The second device of hybrid serving and the dynamic sparsity that watches it (both optional).
struct SchedulerDevice {
  std::shared_ptr<DeviceModel> model;         // placement built for the scheduler's model
  std::shared_ptr<DynamicSparsity> dynamic;   // thresholds / migration over every slot's passes
};

class Scheduler {
 public:
  // Host only.
  Scheduler(std::shared_ptr<const LlamaModel> model, std::shared_ptr<const SparseFfn> sparse,
            const SchedulerParams& params);
  // With a second device and / or dynamic sparsity: a DeviceSession per slot (errors: the
  // device model built for another model, the slots' KV and buffers over the device's budget).
  static Result<std::unique_ptr<Scheduler>> create(std::shared_ptr<const LlamaModel> model,
                                                   std::shared_ptr<const SparseFfn> sparse,
                                                   const SchedulerParams& params,
                                                   SchedulerDevice device);
  ~Scheduler();  // stop(): cancels everything, joins the worker
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  const SchedulerParams& params() const { return params_; }
  const LlamaModel& model() const { return *model_; }

  // Queues a request. The prompt must be non-empty and shorter than n_ctx_slot (checked by
  // the caller, who can explain the error better; violations finish the request with kError).
  SubmitResult submit(std::shared_ptr<GenRequest> req);

  // Stops admitting requests, cancels the queued ones, and waits up to `grace` for the
  // running ones to finish before cancelling them. Returns when no request is running.
  void drain(std::chrono::milliseconds grace);
  // Cancels everything and joins the worker (idempotent).
  void stop();

  SchedulerStats stats() const;

 private:
  struct Slot;
  struct NoStart {};
  Scheduler(std::shared_ptr<const LlamaModel> model, std::shared_ptr<const SparseFfn> sparse,
            const SchedulerParams& params, NoStart);
  void start();
  // One forward pass `run` with the scratch's device session set to ds (null without a device)
  // inside the dynamic sparsity's call bracket (begin_call(n_tok) / end_call).
  template <class F>
  Status bracketed(DeviceSession* ds, int64_t n_tok, F&& run);
  // One prompt pass of one slot, with its device session.
  Status forward_slot(Slot& s, std::span<const int32_t> tokens, int pos0,
                      std::vector<float>* logits);
  // Prompt chunks run as their own passes (llama_forward_mixed is for the dense host model).
  bool separate_prompt_passes() const { return device_.model || device_.dynamic; }
  void worker();
  bool admit_locked();                  // queue -> free slots
  void setup_slot(Slot& slot);          // a new request's cached prefix (prompt cache)
  void keep_prefix(Slot& slot, int64_t keep);  // saves what slot would lose beyond `keep`
  void step();                          // one iteration of the worker's loop
  Slot* next_prefill();                 // the next slot reading its prompt (round robin)
  size_t prompt_chunk_end(const Slot& slot, bool micro) const;
  void prefill_chunk(Slot& slot);       // one prompt chunk of one slot, alone
  // A prompt pass of slot up to `end` is done (inside a decode pass when `mixed`): stats,
  // history, sampling when complete.
  void prefilled(Slot& slot, size_t end, const Status& st, double seconds, const float* logits,
                 bool mixed);
  void collect_steps();                 // steps_ / step_slots_: every generating slot
  void decode_all();                    // one token for every generating slot
  // A decode pass over steps_ is done (logits [steps_.size(), n_vocab]).
  void decoded(const Status& st, double t0, double t1, const float* logits);
  void after_logits(Slot& slot, const float* logits);  // sample, emit, finish or continue
  void release(Slot& slot, FinishReason reason, std::string error = {});
  void reap_cancelled();
  void cancel_queue();  // stops admitting and finishes every queued request as cancelled

  std::shared_ptr<const LlamaModel> model_;
  std::shared_ptr<const SparseFfn> sparse_;
  SchedulerParams params_;
  SchedulerDevice device_;
  ThreadPool pool_;
  ForwardScratch scratch_;
  std::vector<std::unique_ptr<Slot>> slots_;
  PromptCache prompt_cache_;
  int64_t reuse_unit_ = 0;  // engine/prompt_cache.h's grid for this model and n_batch
  uint64_t use_clock_ = 0;  // slots' last use, for least-recently-used choices
  size_t prefill_rr_ = 0;
  // Prompt micro-batches ride in the decode pass (llama_forward_mixed): the dense host model
  // without a device or dynamic sparsity.
  bool mixed_ = false;
  std::vector<float> logits_;
  // Tokens sampled for requests (worker thread only; stats_.generated_tokens is its copy as of
  // the last decode step or release, so the worker takes no lock per token).
  uint64_t n_sampled_ = 0;
  std::vector<int32_t> order_;  // after_logits' top-candidate scratch [n_vocab]
  std::vector<SeqStep> steps_;
  std::vector<Slot*> step_slots_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<GenRequest>> queue_;
  bool accepting_ = true;
  bool stop_ = false;
  SchedulerStats stats_;
  std::deque<std::pair<double, int>> recent_;  // (time, tokens) of decode steps, last 10 s
  std::thread thread_;
};

}  // namespace hc
