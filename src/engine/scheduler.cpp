#include "engine/scheduler.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "core/log.h"

namespace hc {

namespace {
double seconds_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
constexpr double kRecentWindow = 10.0;  // seconds of decode history behind the tokens/s gauge
}  // namespace

struct Scheduler::Slot {
  enum class State { kFree, kPrefill, kDecode };
  KvCache cache;
  State state = State::kFree;
  std::shared_ptr<GenRequest> req;
  std::vector<int32_t> history;  // tokens in the cache, oldest first
  // Positions [0, n_computed) of the cache were prompt-processed on the grid from position 0
  // (reusable: engine/prompt_cache.h); decode steps' positions never are.
  int64_t n_computed = 0;
  uint64_t last_used = 0;
  bool new_request = false;  // setup_slot still to run
  size_t n_prompt_done = 0;
  int32_t pending = -1;  // sampled, not yet evaluated
  int n_gen = 0;
  std::optional<Sampler> sampler;
  std::optional<TextStream> text;
  std::unique_ptr<DeviceSession> ds;  // hybrid serving: this slot's device KV and buffers

  Slot(int n_layer, int n_ctx, int64_t kv_dim) : cache(n_layer, n_ctx, kv_dim) {}
};

Scheduler::Scheduler(std::shared_ptr<const LlamaModel> model,
                     std::shared_ptr<const SparseFfn> sparse, const SchedulerParams& params,
                     NoStart)
    : model_(std::move(model)), sparse_(std::move(sparse)), params_(params),
      pool_(std::max(1, params.n_threads)),
      prompt_cache_(params.cache_prompt ? params.cache_ram_bytes : 0) {
  HC_CHECK(params_.n_parallel >= 1 && params_.n_ctx_slot >= 2 && params_.max_queue >= 0);
  if (params_.n_batch < 1) params_.n_batch = 1;
  reuse_unit_ = reuse_unit(params_.n_batch, forward_ubatch(model_->hparams()));
  const LlamaHParams& hp = model_->hparams();
  for (int i = 0; i < params_.n_parallel; ++i)
    slots_.push_back(std::make_unique<Slot>(hp.n_layer, params_.n_ctx_slot,
                                            int64_t{hp.n_head_kv} * hp.head_dim));
  scratch_.sparse = sparse_.get();
  mixed_ = !sparse_ && !hp.is_moe();
  stats_.n_slots = params_.n_parallel;
  for (const auto& sl : slots_) stats_.kv_bytes += sl->cache.bytes();
}

Scheduler::Scheduler(std::shared_ptr<const LlamaModel> model,
                     std::shared_ptr<const SparseFfn> sparse, const SchedulerParams& params)
    : Scheduler(std::move(model), std::move(sparse), params, NoStart{}) {
  start();
}

void Scheduler::start() { thread_ = std::thread([this] { worker(); }); }

Result<std::unique_ptr<Scheduler>> Scheduler::create(std::shared_ptr<const LlamaModel> model,
                                                     std::shared_ptr<const SparseFfn> sparse,
                                                     const SchedulerParams& params,
                                                     SchedulerDevice device) {
  if (device.model && &device.model->model() != model.get())
    return Status::Error("the device placement was built for another model");
  std::unique_ptr<Scheduler> s(
      new Scheduler(std::move(model), std::move(sparse), params, NoStart{}));
  if (device.model) {
    const int64_t ubatch = forward_ubatch(s->model_->hparams());
    for (size_t i = 0; i < s->slots_.size(); ++i) {
      auto ds = DeviceSession::create(*device.model, s->params_.n_ctx_slot, ubatch);
      if (!ds.ok())
        return ds.status().with_context("slot " + std::to_string(i + 1) + " of " +
                                        std::to_string(s->slots_.size()) +
                                        "'s device session (its KV cache and buffers)");
      s->stats_.device_kv_bytes += (*ds)->kv_bytes();
      s->slots_[i]->ds = std::move(*ds);
    }
  }
  if (device.dynamic) {
    device.dynamic->attach(s->scratch_.sparse_scratch);
    device.dynamic->attach(s->scratch_.moe);
  }
  s->device_ = std::move(device);
  if (s->separate_prompt_passes()) s->mixed_ = false;
  s->start();
  return s;
}

Scheduler::~Scheduler() { stop(); }

SubmitResult Scheduler::submit(std::shared_ptr<GenRequest> req) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!accepting_ || stop_) {
      ++stats_.requests_rejected;
      return SubmitResult::kShuttingDown;
    }
    // A request may always wait for a free slot; beyond that the queue is bounded.
    const int free_slots = stats_.n_slots - stats_.active_slots;
    if (static_cast<int>(queue_.size()) >= params_.max_queue + std::max(0, free_slots)) {
      ++stats_.requests_rejected;
      return SubmitResult::kQueueFull;
    }
    queue_.push_back(std::move(req));
    stats_.queue_depth = static_cast<int>(queue_.size());
  }
  cv_.notify_all();
  return SubmitResult::kAccepted;
}

void Scheduler::cancel_queue() {
  std::deque<std::shared_ptr<GenRequest>> dropped;
  {
    std::lock_guard<std::mutex> lk(mu_);
    accepting_ = false;
    dropped.swap(queue_);
    stats_.queue_depth = 0;
    stats_.requests_cancelled += dropped.size();
  }
  for (auto& r : dropped) r->finish(FinishReason::kCancelled, "the server is shutting down");
}

void Scheduler::drain(std::chrono::milliseconds grace) {
  cancel_queue();
  const auto deadline = std::chrono::steady_clock::now() + grace;
  bool cancelled = false;
  for (;;) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (stats_.active_slots == 0 || stop_) return;
      if (!cancelled && std::chrono::steady_clock::now() >= deadline) {
        // Past the grace period: cancel what is still running (the worker reaps it).
        for (auto& s : slots_)
          if (s->req) s->req->cancel();
        cancelled = true;
      }
    }
    cv_.notify_all();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

void Scheduler::stop() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stop_ && !thread_.joinable()) return;
    stop_ = true;
    accepting_ = false;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

SchedulerStats Scheduler::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  SchedulerStats s = stats_;
  const double now = seconds_now();
  double n = 0;
  for (const auto& [t, k] : recent_)
    if (now - t <= kRecentWindow) n += k;
  s.recent_tokens_per_second = n / kRecentWindow;
  return s;
}

bool Scheduler::admit_locked() {
  bool any = false;
  for (;;) {
    while (!queue_.empty() && queue_.front()->cancel_requested()) {
      queue_.front()->finish(FinishReason::kCancelled);
      ++stats_.requests_cancelled;
      queue_.pop_front();
    }
    if (queue_.empty()) break;
    // The free slot holding the longest reusable prefix of the prompt, else the least recently
    // used one (its cache is the least likely to be wanted again).
    const std::vector<int32_t>& prompt = queue_.front()->prompt();
    const bool reuse = params_.cache_prompt && queue_.front()->params().cache_prompt;
    Slot* pick = nullptr;
    int64_t pick_reuse = -1;
    for (auto& sp : slots_) {
      Slot& c = *sp;
      if (c.state != Slot::State::kFree) continue;
      const int64_t r = reuse ? reusable_prefix(c.history, c.n_computed, prompt, reuse_unit_) : 0;
      if (r > pick_reuse || (r == pick_reuse && c.last_used < pick->last_used)) {
        pick = &c;
        pick_reuse = r;
      }
    }
    if (!pick) break;
    Slot& s = *pick;
    s.req = std::move(queue_.front());
    queue_.pop_front();
    s.state = Slot::State::kPrefill;
    s.new_request = true;  // its cached prefix is set up outside the lock (setup_slot)
    s.last_used = ++use_clock_;
    s.req->mark_started();
    s.n_prompt_done = 0;
    s.pending = -1;
    s.n_gen = 0;
    s.sampler.emplace(s.req->params().sampling);
    s.text.emplace(s.req->params().stop);
    ++stats_.active_slots;
    ++stats_.requests_started;
    any = true;
  }
  stats_.queue_depth = static_cast<int>(queue_.size());
  return any;
}

void Scheduler::keep_prefix(Slot& s, int64_t keep) {
  // The grid-computed part of the slot's cache that would be lost, whole units of it.
  const int64_t n = s.n_computed / reuse_unit_ * reuse_unit_;
  if (n <= keep || prompt_cache_.budget() == 0) return;
  if (s.ds) {  // the device attention layers' KV joins the host layers' in the host cache
    const Status st = s.ds->kv_to_host(s.cache, n);
    if (!st.ok()) {
      HC_LOG_WARN("prompt cache: the device KV could not be copied out (%s); prefix not kept",
                  st.message().c_str());
      return;
    }
  }
  prompt_cache_.save(std::span<const int32_t>(s.history).first(static_cast<size_t>(n)), s.cache);
}

void Scheduler::setup_slot(Slot& s) {
  s.new_request = false;
  const std::vector<int32_t>& prompt = s.req->prompt();
  const bool reuse = params_.cache_prompt && s.req->params().cache_prompt;
  int64_t n_reuse = reuse ? reusable_prefix(s.history, s.n_computed, prompt, reuse_unit_) : 0;
  keep_prefix(s, n_reuse);
  const PromptCache::Match m =
      reuse ? prompt_cache_.best(prompt, reuse_unit_) : PromptCache::Match{};
  if (m.n_reuse > n_reuse) {
    prompt_cache_.restore(m, s.cache);
    n_reuse = m.n_reuse;
    if (s.ds) {
      const Status st = s.ds->kv_from_host(s.cache, n_reuse);
      if (!st.ok()) {  // the slot's KV is no longer whole: evaluate the prompt from the start
        HC_LOG_WARN("prompt cache: the device KV could not be restored (%s); recomputing",
                    st.message().c_str());
        n_reuse = 0;
      }
    }
  }
  s.history.assign(prompt.begin(), prompt.begin() + n_reuse);
  s.n_computed = n_reuse;
  s.n_prompt_done = static_cast<size_t>(n_reuse);
  std::lock_guard<std::mutex> lk(mu_);
  stats_.prompt_cache_hits += n_reuse > 0;
  stats_.prompt_tokens_reused += static_cast<uint64_t>(n_reuse);
  stats_.prompt_cache_bytes = prompt_cache_.bytes();
  stats_.prompt_cache_entries = prompt_cache_.entries();
  stats_.prompt_cache_evictions = prompt_cache_.evictions();
}

void Scheduler::release(Slot& s, FinishReason reason, std::string error) {
  if (reason != FinishReason::kCancelled && reason != FinishReason::kError) {
    const std::string tail = s.text->flush();
    if (!tail.empty()) s.req->append(tail, s.n_gen);
  }
  {
    // Counted before the request is finished: a client that saw it end reads the stats with it.
    std::lock_guard<std::mutex> lk(mu_);
    stats_.generated_tokens = n_sampled_;
    --stats_.active_slots;
    if (reason == FinishReason::kCancelled) ++stats_.requests_cancelled;
    else if (reason == FinishReason::kError) ++stats_.requests_failed;
    else ++stats_.requests_finished;
  }
  s.req->finish(reason, std::move(error));
  s.req.reset();
  s.state = Slot::State::kFree;
  s.new_request = false;
  s.sampler.reset();
  s.text.reset();
}

void Scheduler::reap_cancelled() {
  for (auto& sp : slots_)
    if (sp->state != Slot::State::kFree && sp->req->cancel_requested())
      release(*sp, FinishReason::kCancelled);
}

namespace {

// token's log probability under log softmax(logits) and the top k candidates' (k >= 0);
// order: [n_vocab] scratch.
TokenLogprob token_logprob(const float* logits, int64_t n_vocab, int32_t token, int k,
                           std::vector<int32_t>& order) {
  float mx = logits[0];
  for (int64_t i = 1; i < n_vocab; ++i) mx = std::max(mx, logits[i]);
  double sum = 0;
  for (int64_t i = 0; i < n_vocab; ++i) sum += std::exp(static_cast<double>(logits[i] - mx));
  const double log_z = static_cast<double>(mx) + std::log(sum);
  auto lp = [&](int32_t i) { return static_cast<float>(logits[i] - log_z); };
  TokenLogprob out;
  out.id = token;
  out.logprob = lp(token);
  k = static_cast<int>(std::min<int64_t>(k, n_vocab));
  if (k > 0) {
    order.resize(static_cast<size_t>(n_vocab));
    for (int64_t i = 0; i < n_vocab; ++i) order[static_cast<size_t>(i)] = static_cast<int32_t>(i);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
    for (int j = 0; j < k; ++j) out.top.emplace_back(order[j], lp(order[j]));
  }
  return out;
}

}  // namespace

void Scheduler::after_logits(Slot& s, const float* logits) {
  const Tokenizer& tok = model_->tokenizer();
  const GenerationParams& p = s.req->params();
  if (static_cast<int>(s.history.size()) >= params_.n_ctx_slot) {
    release(s, FinishReason::kLength);  // context full (as hotcold run stops)
    return;
  }
  const int32_t next =
      s.sampler->sample(std::span<const float>(logits, model_->hparams().n_vocab), s.history);
  if (!p.ignore_eos && tok.is_eog(next)) {
    release(s, FinishReason::kStop);
    return;
  }
  ++s.n_gen;
  ++n_sampled_;  // published under the lock by release() and decode_all()
  const std::string out = s.text->push(tok.token_to_piece(next, false));
  if (p.logprobs >= 0) {
    TokenLogprob lp =
        token_logprob(logits, model_->hparams().n_vocab, next, p.logprobs, order_);
    s.req->append(out, s.n_gen, &lp);
  } else {
    s.req->append(out, s.n_gen);
  }
  if (s.text->stopped()) {
    release(s, FinishReason::kStop);
    return;
  }
  if (s.n_gen >= p.max_tokens) {
    release(s, FinishReason::kLength);
    return;
  }
  s.pending = next;
  s.state = Slot::State::kDecode;
}

template <class F>
Status Scheduler::bracketed(DeviceSession* ds, int64_t n_tok, F&& run) {
  scratch_.device = ds;
  if (device_.dynamic) device_.dynamic->begin_call(n_tok);
  Status st = run();
  // Between forward passes: the dynamic sparsity may migrate (no pass of any slot runs now).
  if (device_.dynamic && st.ok()) st = device_.dynamic->end_call();
  scratch_.device = nullptr;
  return st;
}

Status Scheduler::forward_slot(Slot& s, std::span<const int32_t> tokens, int pos0,
                               std::vector<float>* logits) {
  return bracketed(s.ds.get(), static_cast<int64_t>(tokens.size()), [&] {
    return llama_forward(*model_, s.cache, scratch_, pool_, tokens, pos0, false, logits);
  });
}

Scheduler::Slot* Scheduler::next_prefill() {
  const size_t n = slots_.size();
  for (size_t k = 0; k < n; ++k) {
    Slot& s = *slots_[(prefill_rr_ + k) % n];
    if (s.state != Slot::State::kPrefill) continue;
    prefill_rr_ = (prefill_rr_ + k + 1) % n;
    const std::vector<int32_t>& prompt = s.req->prompt();
    if (prompt.empty() || static_cast<int>(prompt.size()) >= params_.n_ctx_slot) {
      release(s, FinishReason::kError,
              "prompt of " + std::to_string(prompt.size()) + " tokens does not fit a slot of " +
                  std::to_string(params_.n_ctx_slot));
      return nullptr;
    }
    if (s.new_request) setup_slot(s);
    return &s;
  }
  return nullptr;
}

size_t Scheduler::prompt_chunk_end(const Slot& s, bool micro) const {
  // Chunks of n_batch tokens from position 0, as Session::eval makes them (the same arithmetic
  // as hotcold run); after a reused prefix, up to the next chunk boundary first. `micro`: only
  // up to the end of the micro-batch llama_forward would make there (the mixed pass's unit).
  const size_t size = s.req->prompt().size();
  const size_t b = s.n_prompt_done, nb = static_cast<size_t>(params_.n_batch);
  const size_t cs = b / nb * nb, ce = std::min(size, cs + nb);
  if (!micro) return ce;
  const auto ub = static_cast<size_t>(forward_ubatch(model_->hparams()));
  return std::min(ce, cs + ((b - cs) / ub + 1) * ub);
}

void Scheduler::prefilled(Slot& s, size_t end, const Status& st, double seconds,
                          const float* logits, bool mixed) {
  const size_t b = s.n_prompt_done;
  {
    std::lock_guard<std::mutex> lk(mu_);
    stats_.prompt_seconds += seconds;
    if (st.ok()) stats_.prompt_tokens += end - b;
    stats_.mixed_passes += mixed;
  }
  if (!st.ok()) {
    release(s, FinishReason::kError, st.message());
    return;
  }
  const std::vector<int32_t>& prompt = s.req->prompt();
  s.history.insert(s.history.end(), prompt.begin() + static_cast<int64_t>(b),
                   prompt.begin() + static_cast<int64_t>(end));
  s.n_prompt_done = end;
  s.n_computed = static_cast<int64_t>(end);
  if (end == prompt.size()) after_logits(s, logits);
}

void Scheduler::prefill_chunk(Slot& s) {
  const size_t b = s.n_prompt_done, e = prompt_chunk_end(s, false);
  const double t0 = seconds_now();
  const Status st = forward_slot(s, std::span<const int32_t>(s.req->prompt()).subspan(b, e - b),
                                 static_cast<int>(b), &logits_);
  prefilled(s, e, st, seconds_now() - t0, logits_.data(), /*mixed=*/false);
}

void Scheduler::collect_steps() {
  steps_.clear();
  step_slots_.clear();
  for (auto& sp : slots_) {
    Slot& s = *sp;
    if (s.state != Slot::State::kDecode) continue;
    steps_.push_back({&s.cache, static_cast<int>(s.history.size()), s.pending, s.ds.get()});
    step_slots_.push_back(&s);
  }
}

void Scheduler::decoded(const Status& st, double t0, double t1, const float* logits) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stats_.decode_seconds += t1 - t0;
    stats_.generated_tokens = n_sampled_;
    if (st.ok()) {
      ++stats_.decode_steps;
      stats_.decode_batch_tokens += steps_.size();
      recent_.emplace_back(t1, static_cast<int>(steps_.size()));
      while (!recent_.empty() && t1 - recent_.front().first > kRecentWindow) recent_.pop_front();
    }
    stats_.sparse = scratch_.sparse_scratch.stats;
  }
  const int64_t n_vocab = model_->hparams().n_vocab;
  for (size_t i = 0; i < step_slots_.size(); ++i) {
    Slot& s = *step_slots_[i];
    if (!st.ok()) {
      release(s, FinishReason::kError, st.message());
      continue;
    }
    s.history.push_back(s.pending);
    s.pending = -1;
    after_logits(s, logits + static_cast<int64_t>(i) * n_vocab);
  }
}

void Scheduler::decode_all() {
  collect_steps();
  if (steps_.empty()) return;
  const double t0 = seconds_now();
  // One pass for every generating slot; with a device, each step's row over the placement
  // with its own slot's session (its device KV), the first slot's session carrying the batch:
  // every row gets its one-token decode's arithmetic, so the output is still run's.
  const Status st = bracketed(step_slots_.front()->ds.get(), static_cast<int64_t>(steps_.size()),
                              [&] { return llama_forward_multi(*model_, steps_, scratch_, pool_,
                                                               &logits_); });
  decoded(st, t0, seconds_now(), logits_.data());
}

void Scheduler::step() {
  Slot* p = next_prefill();
  if (p && mixed_) {
    collect_steps();
    if (!steps_.empty()) {
      // One pass for a micro-batch of p's prompt and every generating slot's next token: the
      // weights are read once for both, and each row keeps the arithmetic it has alone.
      const size_t b = p->n_prompt_done, e = prompt_chunk_end(*p, true);
      const bool last = e == p->req->prompt().size();
      const double t0 = seconds_now();
      const Status st = llama_forward_mixed(
          *model_, p->cache, std::span<const int32_t>(p->req->prompt()).subspan(b, e - b),
          static_cast<int>(b), last, steps_, scratch_, pool_, &logits_);
      const double t1 = seconds_now();
      if (st.ok()) {
        // The pass's time is shared by its rows.
        const double share =
            static_cast<double>(e - b) / static_cast<double>(e - b + steps_.size());
        const int64_t n_vocab = model_->hparams().n_vocab;
        prefilled(*p, e, st, (t1 - t0) * share, logits_.data(), /*mixed=*/true);
        decoded(st, t0 + (t1 - t0) * share, t1, logits_.data() + (last ? n_vocab : 0));
        return;
      }
      // Refused before anything was computed (llama_forward_mixed validates first): the
      // separate passes below give the error to the request it belongs to, not to every slot.
    }
  }
  if (p) prefill_chunk(*p);
  decode_all();
}

void Scheduler::worker() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stop_ || !queue_.empty() || stats_.active_slots > 0; });
      if (stop_) break;
      admit_locked();
    }
    reap_cancelled();
    step();
  }
  // Shutting down: nothing is left waiting.
  cancel_queue();
  for (auto& sp : slots_)
    if (sp->state != Slot::State::kFree) release(*sp, FinishReason::kCancelled);
}

}  // namespace hc
