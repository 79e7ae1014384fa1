#include "engine/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <thread>

#include "../model/tiny_model.h"
#include "engine/session.h"
#include "format/gguf.h"

namespace hc {
namespace {

using namespace std::chrono_literals;

struct Fixture {
  std::vector<uint8_t> bytes;
  std::shared_ptr<const LlamaModel> model;
};

Fixture make_model(GgmlType t, const std::string& activation = "") {
  testing::TinyModelSpec spec;
  spec.wtype = t;
  spec.activation = activation;
  spec.n_embd = 128;
  spec.n_ff = 256;
  spec.n_ctx = 256;
  testing::TinyModel tm(spec);
  Fixture f{tm.bytes(), nullptr};
  f.model = testing::load_tiny(f.bytes, /*repack=*/true);
  return f;
}

// What hotcold run does: one Session, prompt in n_batch chunks, then one token at a time.
std::pair<std::string, int> reference(std::shared_ptr<const LlamaModel> m,
                                      const std::vector<int32_t>& prompt,
                                      const GenerationParams& p, int n_ctx,
                                      std::shared_ptr<const SparseFfn> sparse = nullptr,
                                      int n_batch = 8) {
  SessionParams sp;
  sp.n_ctx = n_ctx;
  sp.n_batch = n_batch;
  Session s(m, sp);
  s.set_sparse(sparse);
  EXPECT_TRUE(s.eval(prompt).ok());
  Sampler sampler(p.sampling);
  std::string text;
  int n = 0;
  while (n < p.max_tokens && s.n_past() < s.n_ctx()) {
    const int32_t next = sampler.sample(s.logits(), s.history());
    if (!p.ignore_eos && m->tokenizer().is_eog(next)) break;
    text += m->tokenizer().token_to_piece(next, false);
    if (++n == p.max_tokens) break;
    const int32_t one[1] = {next};
    EXPECT_TRUE(s.eval(one).ok());
  }
  return {text, n};
}

std::vector<int32_t> prompt_of(int len, int seed) {
  std::vector<int32_t> p = {1};
  for (int i = 1; i < len; ++i) p.push_back(3 + (seed * 7 + i * 5) % 30);
  return p;
}

// Runs until cancelled (or its slot's context is full).
GenerationParams long_params() {
  GenerationParams p;
  p.max_tokens = 100000;
  p.ignore_eos = true;
  return p;
}

// n requests that generate until cancelled, submitted and decoding (two decode steps done).
std::vector<std::shared_ptr<GenRequest>> start_generating(Scheduler& sched, int n) {
  std::vector<std::shared_ptr<GenRequest>> gens;
  for (int i = 0; i < n; ++i) {
    gens.push_back(std::make_shared<GenRequest>(prompt_of(4 + i, i), long_params()));
    if (sched.submit(gens.back()) != SubmitResult::kAccepted) {
      ADD_FAILURE() << "generator " << i << " was not accepted";
      return gens;
    }
  }
  while (sched.stats().decode_steps < 2) std::this_thread::sleep_for(1ms);
  return gens;
}

class SchedulerTypes : public ::testing::TestWithParam<GgmlType> {};

TEST_P(SchedulerTypes, ConcurrentRequestsGiveTheSessionOutputs) {
  Fixture f = make_model(GetParam());
  SchedulerParams sp;
  sp.n_parallel = 3;
  sp.n_ctx_slot = 96;
  sp.n_batch = 8;  // several prompt chunks per request, interleaved with decode steps
  Scheduler sched(f.model, nullptr, sp);
  std::vector<std::shared_ptr<GenRequest>> reqs;
  std::vector<GenerationParams> params;
  for (int i = 0; i < 7; ++i) {  // more requests than slots: some wait in the queue
    GenerationParams p;
    p.max_tokens = 10 + 3 * i;
    p.ignore_eos = true;
    p.sampling.temp = i % 2 ? 0.0f : 0.9f;  // greedy and seeded sampling
    p.sampling.seed = 100 + i;
    params.push_back(p);
    reqs.push_back(std::make_shared<GenRequest>(prompt_of(3 + 5 * i, i), p));
    ASSERT_EQ(sched.submit(reqs.back()), SubmitResult::kAccepted);
  }
  for (size_t i = 0; i < reqs.size(); ++i) {
    const GenRequest::Update u = reqs[i]->wait_all();
    const auto [text, n] = reference(f.model, reqs[i]->prompt(), params[i], sp.n_ctx_slot);
    EXPECT_EQ(u.reason, FinishReason::kLength) << i;
    EXPECT_EQ(u.n_generated, n) << i;
    EXPECT_EQ(u.text, text) << "request " << i;
    EXPECT_EQ(u.n_prompt, static_cast<int>(reqs[i]->prompt().size()));
  }
  const SchedulerStats st = sched.stats();
  EXPECT_EQ(st.requests_finished, 7u);
  EXPECT_EQ(st.active_slots, 0);
  EXPECT_GT(st.decode_batch_tokens, st.decode_steps);  // steps really were batched
  EXPECT_GT(st.mixed_passes, 0u);  // prompt chunks rode in decode passes
}

// A long prompt (several 128-token micro-batches of one 512-token chunk) arriving while other
// slots generate is read one micro-batch per decode pass, and still gives run's output with
// run's default batch. The two generating requests could run for thousands of tokens; they are
// cancelled once the long one is done, so they provably generated through all of its passes
// (not timing: a finished one would not end as cancelled).
TEST_P(SchedulerTypes, LongPromptRidesInDecodePasses) {
  Fixture f = make_model(GetParam());
  SchedulerParams sp;
  sp.n_parallel = 3;
  sp.n_ctx_slot = 4096;
  sp.n_batch = 512;
  Scheduler sched(f.model, nullptr, sp);
  const std::vector<std::shared_ptr<GenRequest>> gens = start_generating(sched, 2);
  GenerationParams p;
  p.max_tokens = 12;
  p.ignore_eos = true;
  p.sampling.temp = 0.0f;
  auto req = std::make_shared<GenRequest>(prompt_of(300, 2), p);
  ASSERT_EQ(sched.submit(req), SubmitResult::kAccepted);
  const GenRequest::Update u = req->wait_all();
  for (auto& g : gens) g->cancel();
  for (auto& g : gens)
    EXPECT_EQ(g->wait_all().reason, FinishReason::kCancelled) << "still generating";
  const auto [text, n] = reference(f.model, req->prompt(), p, sp.n_ctx_slot, nullptr, sp.n_batch);
  EXPECT_EQ(u.n_generated, n);
  EXPECT_EQ(u.text, text);
  EXPECT_GE(sched.stats().mixed_passes, 3u);  // 128 + 128 + 44 tokens
}

INSTANTIATE_TEST_SUITE_P(Types, SchedulerTypes,
                         ::testing::Values(GgmlType::F32, GgmlType::Q8_0, GgmlType::Q4_0));

TEST(Scheduler, SparseFfnBatchesGiveTheSessionOutputs) {
  // Exact ReLU: a batch computes the union of its tokens' firing sets; a neuron a token did
  // not fire contributes an exact zero, so each request still gets its single-session text.
  Fixture f = make_model(GgmlType::Q8_0, "relu");
  SparseOptions opt;
  opt.max_union_share = 1.0;  // never the dense fallback (it rounds differently)
  auto built = SparseFfn::build(*f.model, opt);
  ASSERT_TRUE(built.ok()) << built.message();
  std::shared_ptr<const SparseFfn> sparse = std::move(built).value();
  SchedulerParams sp;
  sp.n_parallel = 4;
  sp.n_ctx_slot = 80;
  Scheduler sched(f.model, sparse, sp);
  std::vector<std::shared_ptr<GenRequest>> reqs;
  GenerationParams p;
  p.max_tokens = 24;
  p.ignore_eos = true;
  p.sampling.temp = 0;
  for (int i = 0; i < 4; ++i) {
    reqs.push_back(std::make_shared<GenRequest>(prompt_of(4 + 3 * i, 20 + i), p));
    ASSERT_EQ(sched.submit(reqs.back()), SubmitResult::kAccepted);
  }
  for (auto& r : reqs) {
    const GenRequest::Update u = r->wait_all();
    EXPECT_EQ(u.text, reference(f.model, r->prompt(), p, sp.n_ctx_slot, sparse).first);
  }
  const SchedulerStats st = sched.stats();
  EXPECT_GT(st.sparse.neurons, 0u);
  EXPECT_GT(st.sparse.sparsity(), 0.2);  // ReLU on random weights: about half the neurons
}

// ---- prompt cache (engine/prompt_cache.h) ----

TEST(PromptCache, ReusablePrefixFollowsTheGrid) {
  EXPECT_EQ(reuse_unit(8, 128), 8);      // chunks smaller than a micro-batch: the chunks
  EXPECT_EQ(reuse_unit(512, 128), 128);  // whole micro-batches
  EXPECT_EQ(reuse_unit(300, 128), 300);  // micro-batches off the grid: whole chunks
  const std::vector<int32_t> a = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  std::vector<int32_t> b = a;
  EXPECT_EQ(reusable_prefix(a, 10, b, 4), 8);  // the last prompt token is always evaluated
  EXPECT_EQ(reusable_prefix(a, 10, b, 3), 9);
  EXPECT_EQ(reusable_prefix(a, 5, b, 4), 4);   // only prompt-processed positions
  b[6] = 0;
  EXPECT_EQ(reusable_prefix(a, 10, b, 4), 4);  // the common prefix, cut to the grid
  EXPECT_EQ(reusable_prefix(a, 10, std::vector<int32_t>{1}, 1), 0);
  EXPECT_EQ(reusable_prefix({}, 0, b, 1), 0);
}

struct CacheRun {
  std::string text;
  SchedulerStats stats;
};

// Runs prompts one after another (each finished before the next) on one scheduler; returns each
// request's text and the scheduler's stats after it.
std::vector<CacheRun> run_in_turn(const Fixture& f, const SchedulerParams& sp,
                                  const std::vector<std::vector<int32_t>>& prompts,
                                  const GenerationParams& p) {
  Scheduler sched(f.model, nullptr, sp);
  std::vector<CacheRun> out;
  for (const auto& prompt : prompts) {
    auto r = std::make_shared<GenRequest>(prompt, p);
    EXPECT_EQ(sched.submit(r), SubmitResult::kAccepted);
    out.push_back({r->wait_all().text, sched.stats()});
  }
  return out;
}

TEST(Scheduler, PromptCacheReusesSlotsAndTheStoreWithoutChangingOutput) {
  Fixture f = make_model(GgmlType::Q8_0);
  GenerationParams p;
  p.max_tokens = 12;
  p.ignore_eos = true;
  p.sampling.temp = 0;
  const std::vector<int32_t> a = prompt_of(70, 1), b = prompt_of(50, 2);
  std::vector<int32_t> a_more = a;  // a chat turn: the earlier prompt and more
  for (int i = 0; i < 30; ++i) a_more.push_back(5 + i % 20);
  for (int n_batch : {8, 32}) {
    SCOPED_TRACE("n_batch " + std::to_string(n_batch));
    SchedulerParams sp;
    sp.n_parallel = 1;
    sp.n_ctx_slot = 128;
    sp.n_batch = n_batch;
    sp.cache_ram_bytes = 64 << 20;
    const int64_t unit = n_batch;  // both below the 128-token micro-batch
    const auto runs = run_in_turn(f, sp, {a, a, b, a, a_more}, p);
    const std::vector<std::vector<int32_t>> prompts = {a, a, b, a, a_more};
    for (size_t i = 0; i < runs.size(); ++i)  // what hotcold run prints, cache or not
      EXPECT_EQ(runs[i].text, reference(f.model, prompts[i], p, sp.n_ctx_slot, nullptr, n_batch).first)
          << "request " << i;
    auto reused = [&](size_t i) {
      return runs[i].stats.prompt_tokens_reused - (i ? runs[i - 1].stats.prompt_tokens_reused : 0);
    };
    EXPECT_EQ(reused(0), 0u);
    EXPECT_EQ(reused(1), static_cast<uint64_t>((a.size() - 1) / unit * unit));  // the slot's
    EXPECT_EQ(reused(2), 0u);
    EXPECT_EQ(reused(3), static_cast<uint64_t>((a.size() - 1) / unit * unit));  // the store's
    EXPECT_EQ(reused(4), static_cast<uint64_t>(a.size() / unit * unit));
    const SchedulerStats& st = runs.back().stats;
    EXPECT_EQ(st.prompt_cache_hits, 3u);
    EXPECT_GT(st.prompt_cache_entries, 0u);
    EXPECT_LE(st.prompt_cache_bytes, sp.cache_ram_bytes);
    // Every prompt token was either evaluated or reused.
    EXPECT_EQ(st.prompt_tokens + st.prompt_tokens_reused,
              2 * a.size() + b.size() + a.size() + a_more.size());
  }
}

TEST(Scheduler, PromptCacheOffOrPerRequestEvaluatesEverything) {
  Fixture f = make_model(GgmlType::F32);
  GenerationParams p;
  p.max_tokens = 4;
  p.ignore_eos = true;
  p.sampling.temp = 0;
  const std::vector<int32_t> a = prompt_of(40, 3);
  SchedulerParams sp;
  sp.n_parallel = 1;
  sp.n_ctx_slot = 64;
  sp.n_batch = 8;
  sp.cache_prompt = false;
  EXPECT_EQ(run_in_turn(f, sp, {a, a}, p).back().stats.prompt_tokens_reused, 0u);
  sp.cache_prompt = true;
  p.cache_prompt = false;  // the request's own "cache_prompt": false
  EXPECT_EQ(run_in_turn(f, sp, {a, a}, p).back().stats.prompt_tokens_reused, 0u);
}

TEST(Scheduler, PromptCacheStaysWithinItsBudget) {
  Fixture f = make_model(GgmlType::F32);
  GenerationParams p;
  p.max_tokens = 2;
  p.ignore_eos = true;
  p.sampling.temp = 0;
  SchedulerParams sp;
  sp.n_parallel = 1;
  sp.n_ctx_slot = 64;
  sp.n_batch = 8;
  // One 40-token prefix of this model: 2 layers x 40 x kv_dim 64 x 2 (K, V) x 2 bytes = 20 KiB.
  sp.cache_ram_bytes = 50 << 10;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 8; ++i) prompts.push_back(prompt_of(41, 10 + i));
  // Then the prompt before the last one (kept: among the two most recent) and the first one
  // (evicted long ago).
  prompts.push_back(prompts[6]);
  prompts.push_back(prompts[0]);
  const auto runs = run_in_turn(f, sp, prompts, p);
  for (const CacheRun& r : runs) EXPECT_LE(r.stats.prompt_cache_bytes, sp.cache_ram_bytes);
  EXPECT_EQ(runs[7].stats.prompt_cache_entries, 2u);
  EXPECT_EQ(runs[7].stats.prompt_cache_evictions, 5u);  // 7 saved (prompts 0-6), 2 kept
  EXPECT_EQ(runs[7].stats.prompt_tokens_reused, 0u);
  EXPECT_EQ(runs[8].stats.prompt_tokens_reused, 40u);
  EXPECT_EQ(runs[9].stats.prompt_tokens_reused, 40u);
}

TEST(Scheduler, LogprobsAreTheModelsLogSoftmax) {
  Fixture f = make_model(GgmlType::Q8_0);
  SchedulerParams sp;
  sp.n_parallel = 2;
  sp.n_ctx_slot = 64;
  sp.n_batch = 8;
  Scheduler sched(f.model, nullptr, sp);
  GenerationParams p;
  p.max_tokens = 10;
  p.ignore_eos = true;
  p.sampling.temp = 0.7f;  // sampled: the chosen token is not always the top one
  p.sampling.seed = 5;
  p.logprobs = 3;
  const std::vector<int32_t> prompt = prompt_of(12, 4);
  auto r = std::make_shared<GenRequest>(prompt, p);
  ASSERT_EQ(sched.submit(r), SubmitResult::kAccepted);
  const GenRequest::Update u = r->wait_all();
  ASSERT_EQ(u.logprobs.size(), 10u);
  // The same tokens through a session: each step's logits, log-softmaxed in double.
  SessionParams ssp;
  ssp.n_ctx = 64;
  ssp.n_batch = 8;
  Session s(f.model, ssp);
  ASSERT_TRUE(s.eval(prompt).ok());
  for (const TokenLogprob& lp : u.logprobs) {
    const std::vector<float>& l = s.logits();
    double z = 0;
    const float mx = *std::max_element(l.begin(), l.end());
    for (float v : l) z += std::exp(static_cast<double>(v - mx));
    auto want = [&](int32_t id) { return static_cast<double>(l[id] - mx) - std::log(z); };
    EXPECT_NEAR(lp.logprob, want(lp.id), 1e-5);
    ASSERT_EQ(lp.top.size(), 3u);
    EXPECT_EQ(lp.top[0].first,
              static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin()));
    for (size_t j = 0; j < lp.top.size(); ++j) {
      EXPECT_NEAR(lp.top[j].second, want(lp.top[j].first), 1e-5);
      if (j > 0) {
        EXPECT_GE(lp.top[j - 1].second, lp.top[j].second);
      }
    }
    EXPECT_LE(lp.logprob, lp.top[0].second);
    const int32_t one[1] = {lp.id};
    ASSERT_TRUE(s.eval(one).ok());
  }
  // Without the field, none.
  p.logprobs = -1;
  auto q = std::make_shared<GenRequest>(prompt, p);
  ASSERT_EQ(sched.submit(q), SubmitResult::kAccepted);
  EXPECT_TRUE(q->wait_all().logprobs.empty());
}

TEST(Scheduler, ContextFullEndsWithLength) {
  Fixture f = make_model(GgmlType::F32);
  SchedulerParams sp;
  sp.n_ctx_slot = 32;
  Scheduler sched(f.model, nullptr, sp);
  GenerationParams p;
  p.max_tokens = 1000;
  p.ignore_eos = true;
  p.sampling.temp = 0;
  auto r = std::make_shared<GenRequest>(prompt_of(10, 1), p);
  ASSERT_EQ(sched.submit(r), SubmitResult::kAccepted);
  const GenRequest::Update u = r->wait_all();
  EXPECT_EQ(u.reason, FinishReason::kLength);
  EXPECT_EQ(u.n_generated, 22);  // the slot is full at 10 + 22 tokens
}

TEST(Scheduler, StopStringsEndTheRequest) {
  Fixture f = make_model(GgmlType::F32);
  SchedulerParams sp;
  sp.n_ctx_slot = 64;
  Scheduler sched(f.model, nullptr, sp);
  GenerationParams p;
  p.max_tokens = 30;
  p.ignore_eos = true;
  p.sampling.temp = 0;
  auto full = std::make_shared<GenRequest>(prompt_of(6, 2), p);
  ASSERT_EQ(sched.submit(full), SubmitResult::kAccepted);
  const std::string text = full->wait_all().text;
  ASSERT_GE(text.size(), 6u);
  p.stop = {text.substr(3, 2)};
  auto cut = std::make_shared<GenRequest>(prompt_of(6, 2), p);
  ASSERT_EQ(sched.submit(cut), SubmitResult::kAccepted);
  const GenRequest::Update u = cut->wait_all();
  EXPECT_EQ(u.reason, FinishReason::kStop);
  EXPECT_EQ(u.text, text.substr(0, text.find(p.stop[0])));
}

TEST(Scheduler, CancelStopsARunningAndAQueuedRequest) {
  Fixture f = make_model(GgmlType::F32);
  SchedulerParams sp;
  sp.n_ctx_slot = 256;
  Scheduler sched(f.model, nullptr, sp);
  auto running = std::make_shared<GenRequest>(prompt_of(4, 3), long_params());
  auto queued = std::make_shared<GenRequest>(prompt_of(4, 4), long_params());
  ASSERT_EQ(sched.submit(running), SubmitResult::kAccepted);
  ASSERT_EQ(sched.submit(queued), SubmitResult::kAccepted);
  ASSERT_TRUE(running->wait_started(10s));
  queued->cancel();
  running->cancel();
  EXPECT_EQ(running->wait_all().reason, FinishReason::kCancelled);
  EXPECT_EQ(queued->wait_all().reason, FinishReason::kCancelled);
  EXPECT_LT(running->state().n_generated, 256);
  EXPECT_EQ(sched.stats().requests_cancelled, 2u);
}

TEST(Scheduler, QueueIsBounded) {
  Fixture f = make_model(GgmlType::F32);
  SchedulerParams sp;
  sp.n_ctx_slot = 256;
  sp.max_queue = 1;
  Scheduler sched(f.model, nullptr, sp);
  std::vector<std::shared_ptr<GenRequest>> r;
  for (int i = 0; i < 3; ++i) r.push_back(std::make_shared<GenRequest>(prompt_of(4, i), long_params()));
  EXPECT_EQ(sched.submit(r[0]), SubmitResult::kAccepted);
  EXPECT_EQ(sched.submit(r[1]), SubmitResult::kAccepted);
  EXPECT_EQ(sched.submit(r[2]), SubmitResult::kQueueFull);
  EXPECT_EQ(sched.stats().requests_rejected, 1u);
  for (auto& q : r) q->cancel();
}

TEST(Scheduler, DrainFinishesRunningWorkAndRefusesNewWork) {
  Fixture f = make_model(GgmlType::F32);
  SchedulerParams sp;
  sp.n_ctx_slot = 128;
  Scheduler sched(f.model, nullptr, sp);
  GenerationParams p;
  p.max_tokens = 40;
  p.ignore_eos = true;
  auto running = std::make_shared<GenRequest>(prompt_of(4, 5), p);
  auto queued = std::make_shared<GenRequest>(prompt_of(4, 6), p);
  ASSERT_EQ(sched.submit(running), SubmitResult::kAccepted);
  ASSERT_TRUE(running->wait_started(10s));
  ASSERT_EQ(sched.submit(queued), SubmitResult::kAccepted);
  sched.drain(60s);
  const GenRequest::Update u = running->wait_all();
  EXPECT_EQ(u.reason, FinishReason::kLength);  // finished in full
  EXPECT_EQ(u.n_generated, 40);
  EXPECT_EQ(queued->wait_all().reason, FinishReason::kCancelled);
  auto late = std::make_shared<GenRequest>(prompt_of(4, 7), p);
  EXPECT_EQ(sched.submit(late), SubmitResult::kShuttingDown);
}

TEST(Scheduler, DrainCancelsAfterTheGracePeriod) {
  Fixture f = make_model(GgmlType::F32);
  SchedulerParams sp;
  sp.n_ctx_slot = 256;
  Scheduler sched(f.model, nullptr, sp);
  auto r = std::make_shared<GenRequest>(prompt_of(4, 8), long_params());
  ASSERT_EQ(sched.submit(r), SubmitResult::kAccepted);
  ASSERT_TRUE(r->wait_started(10s));
  sched.drain(1ms);
  EXPECT_EQ(r->wait_all().reason, FinishReason::kCancelled);
  EXPECT_EQ(sched.stats().active_slots, 0);
}

// A prompt the forward pass refuses (a token id past the vocabulary), arriving while other
// slots generate: the mixed pass refuses it before computing anything, and the error goes to
// that request alone; the others keep generating.
TEST(Scheduler, BadPromptBesideDecodingSlotsFailsAlone) {
  Fixture f = make_model(GgmlType::F32);
  SchedulerParams sp;
  sp.n_parallel = 3;
  sp.n_ctx_slot = 4096;
  Scheduler sched(f.model, nullptr, sp);
  const std::vector<std::shared_ptr<GenRequest>> gens = start_generating(sched, 2);
  std::vector<int32_t> bad = prompt_of(6, 3);
  bad[3] = static_cast<int32_t>(f.model->hparams().n_vocab) + 5;
  auto r = std::make_shared<GenRequest>(bad, long_params());
  ASSERT_EQ(sched.submit(r), SubmitResult::kAccepted);
  const GenRequest::Update u = r->wait_all();
  EXPECT_EQ(u.reason, FinishReason::kError);
  EXPECT_NE(u.error.find("out of range"), std::string::npos) << u.error;
  for (auto& g : gens) g->cancel();
  for (auto& g : gens)
    EXPECT_EQ(g->wait_all().reason, FinishReason::kCancelled) << "still generating";
}

TEST(Scheduler, BadPromptFinishesWithAnError) {
  Fixture f = make_model(GgmlType::F32);
  SchedulerParams sp;
  sp.n_ctx_slot = 16;
  Scheduler sched(f.model, nullptr, sp);
  auto r = std::make_shared<GenRequest>(prompt_of(16, 9), long_params());
  ASSERT_EQ(sched.submit(r), SubmitResult::kAccepted);
  const GenRequest::Update u = r->wait_all();
  EXPECT_EQ(u.reason, FinishReason::kError);
  EXPECT_NE(u.error.find("does not fit a slot of 16"), std::string::npos) << u.error;
}

}  // namespace
}  // namespace hc
