// One generation request of the server and its output, shared between the thread that submitted
// it (the HTTP handler) and the scheduler's worker.
//
// The output (text and log probabilities) is an append-only log: the worker appends, and a
// reader follows it with its own Cursor. Nothing ever moves text out of the request, so no read
// can lose what another part of the code has not delivered yet; the one consumer that delivers it
// (the response) owns the only cursor. Questions about the request's progress (started? done?
// why?) are answered by state(), which never touches the output.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "engine/sampler.h"

namespace hc {

enum class FinishReason { kNone, kStop, kLength, kCancelled, kError };
const char* finish_reason_name(FinishReason r);  // "stop", "length", "cancelled", "error"

struct GenerationParams {
  int max_tokens = 16;  // >= 1; generation also ends when the slot's context is full
  SamplerParams sampling;
  std::vector<std::string> stop;
  bool ignore_eos = false;
  bool cache_prompt = true;  // may reuse cached KV of an earlier prompt (llama-server's field)
  // Log probabilities of each generated token (the model's distribution: log softmax of the
  // logits, before any sampling transformation) and of the top `logprobs` candidates; -1: none.
  int logprobs = -1;
};

// One generated token's log probability and its step's most likely candidates.
struct TokenLogprob {
  int32_t id = -1;
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;  // (id, logprob), most likely first
};

class GenRequest {
 public:
  GenRequest(std::vector<int32_t> prompt, GenerationParams params)
      : prompt_(std::move(prompt)), params_(std::move(params)) {}

  const std::vector<int32_t>& prompt() const { return prompt_; }
  const GenerationParams& params() const { return params_; }

  // Asks the worker to stop this request (queued or running); safe from any thread.
  void cancel() { cancel_.store(true, std::memory_order_relaxed); }
  bool cancel_requested() const { return cancel_.load(std::memory_order_relaxed); }

  // Where a reader is in the output: bytes of text and log-probability entries already read.
  struct Cursor {
    size_t text = 0;
    size_t logprobs = 0;
  };

  // The request's progress, without its output.
  struct State {
    bool started = false;  // a slot took it (or it is done)
    bool done = false;
    FinishReason reason = FinishReason::kNone;
    std::string error;  // when reason is kError or kCancelled (may be empty)
    int n_prompt = 0, n_generated = 0;
  };

  struct Update : State {
    std::string text;  // text past the reader's cursor (complete UTF-8)
    // Log probabilities of the tokens past the cursor (when params().logprobs >= 0), in
    // generation order; a token's entry may come before its text (held back by the stream).
    std::vector<TokenLogprob> logprobs;
  };

  // Waits until there is output past `at` or the request is done, or `timeout` passes; returns
  // the output past `at` (a copy: the request keeps it) and moves `at` to its end. An update
  // with done set holds all the output there is: once done, nothing is appended.
  Update read(Cursor& at, std::chrono::milliseconds timeout);
  // Waits for the end and returns all the output from the start.
  Update wait_all();
  // Waits until the request is done or `timeout` passes; its state, no output (new text does
  // not wake it: a reader that delivers everything at the end copies nothing per token).
  State wait_done(std::chrono::milliseconds timeout);
  // Waits until a slot has taken the request or it is done (e.g. cancelled while queued);
  // false if `timeout` passed first.
  bool wait_started(std::chrono::milliseconds timeout);
  State state();

  // Worker side.
  void mark_started();
  void append(const std::string& text, int n_generated, TokenLogprob* logprob = nullptr);
  void finish(FinishReason reason, std::string error = {});

 private:
  State state_locked() const;

  const std::vector<int32_t> prompt_;
  const GenerationParams params_;
  std::atomic<bool> cancel_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::string text_;
  std::vector<TokenLogprob> logprobs_;
  bool done_ = false;
  bool started_ = false;
  FinishReason reason_ = FinishReason::kNone;
  std::string error_;
  int n_generated_ = 0;
};

}  // namespace hc
