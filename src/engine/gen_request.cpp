#include "engine/gen_request.h"

namespace hc {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kError: return "error";
    case FinishReason::kNone: break;
  }
  return "none";
}

GenRequest::State GenRequest::state_locked() const {
  State s;
  s.started = started_ || done_;
  s.done = done_;
  s.reason = reason_;
  s.error = error_;
  s.n_prompt = static_cast<int>(prompt_.size());
  s.n_generated = n_generated_;
  return s;
}

GenRequest::Update GenRequest::read(Cursor& at, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait_for(lk, timeout,
               [&] { return done_ || text_.size() > at.text || logprobs_.size() > at.logprobs; });
  Update u;
  static_cast<State&>(u) = state_locked();
  if (at.text < text_.size()) u.text.assign(text_, at.text, std::string::npos);
  if (at.logprobs < logprobs_.size())
    u.logprobs.assign(logprobs_.begin() + static_cast<std::ptrdiff_t>(at.logprobs), logprobs_.end());
  at.text = text_.size();
  at.logprobs = logprobs_.size();
  return u;
}

GenRequest::Update GenRequest::wait_all() {
  {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] { return done_; });
  }
  Cursor from_start;
  return read(from_start, std::chrono::milliseconds(0));  // done: nothing follows
}

GenRequest::State GenRequest::wait_done(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait_for(lk, timeout, [&] { return done_; });
  return state_locked();
}

bool GenRequest::wait_started(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lk(mu_);
  return cv_.wait_for(lk, timeout, [&] { return started_ || done_; });
}

GenRequest::State GenRequest::state() {
  std::lock_guard<std::mutex> lk(mu_);
  return state_locked();
}

void GenRequest::mark_started() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    started_ = true;
  }
  cv_.notify_all();
}

void GenRequest::append(const std::string& text, int n_generated, TokenLogprob* logprob) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (done_) return;  // nothing follows the end (a reader that saw it has everything)
    text_ += text;
    n_generated_ = n_generated;
    if (logprob) logprobs_.push_back(std::move(*logprob));
  }
  // A held-back piece (partial UTF-8, stop prefix) wakes no one, unless it has a log probability.
  if (!text.empty() || logprob) cv_.notify_all();
}

void GenRequest::finish(FinishReason reason, std::string error) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (done_) return;
    done_ = true;
    reason_ = reason;
    error_ = std::move(error);
  }
  cv_.notify_all();
}

}  // namespace hc
