#include "engine/gen_request.h"

#include <gtest/gtest.h>

#include <memory>
#include <thread>

namespace hc {
namespace {

using namespace std::chrono_literals;

TokenLogprob lp(int32_t id) {
  TokenLogprob t;
  t.id = id;
  t.logprob = -0.5f * static_cast<float>(id);
  t.top = {{id, t.logprob}};
  return t;
}

std::unique_ptr<GenRequest> finished_request() {
  auto g = std::make_unique<GenRequest>(std::vector<int32_t>{1, 2, 3}, GenerationParams{});
  g->mark_started();
  TokenLogprob a = lp(7), b = lp(9);
  g->append(", there", 1, &a);
  g->append(" was", 2, &b);
  g->finish(FinishReason::kLength);
  return g;
}

// The server's defect (issue 34): the handler asked whether a request that finished before the
// response's first read had ended early, and that question moved its text out. Asking now never
// touches the output.
TEST(GenRequest, StateOfAFinishedRequestLeavesItsOutput) {
  GenRequest g({1, 2, 3}, GenerationParams{});
  g.mark_started();
  TokenLogprob a = lp(7);
  g.append(", there was", 3, &a);
  g.finish(FinishReason::kLength);
  for (int i = 0; i < 3; ++i) {
    const GenRequest::State s = g.state();
    EXPECT_TRUE(s.started && s.done);
    EXPECT_EQ(s.reason, FinishReason::kLength);
    EXPECT_EQ(s.n_prompt, 3);
    EXPECT_EQ(s.n_generated, 3);
  }
  GenRequest::Cursor c;
  const GenRequest::Update u = g.read(c, 0ms);
  EXPECT_TRUE(u.done);
  EXPECT_EQ(u.text, ", there was");
  ASSERT_EQ(u.logprobs.size(), 1u);
  EXPECT_EQ(u.logprobs[0].id, 7);
  EXPECT_EQ(g.wait_all().text, ", there was");
}

TEST(GenRequest, EveryCursorReadsTheWholeOutputOnce) {
  GenRequest g({1}, GenerationParams{});
  g.mark_started();
  GenRequest::Cursor c1, c2;
  TokenLogprob a = lp(4);
  g.append("Once", 1, &a);
  GenRequest::Update u = g.read(c1, 0ms);
  EXPECT_EQ(u.text, "Once");
  EXPECT_FALSE(u.done);
  EXPECT_EQ(u.logprobs.size(), 1u);
  // Nothing new for c1: the read waits out its timeout and returns nothing.
  u = g.read(c1, 1ms);
  EXPECT_EQ(u.text, "");
  EXPECT_TRUE(u.logprobs.empty());
  g.append(" upon", 2);
  g.append("", 3);  // a held-back piece: no text
  g.finish(FinishReason::kStop);
  u = g.read(c1, 0ms);
  EXPECT_EQ(u.text, " upon");
  EXPECT_TRUE(u.done);
  EXPECT_EQ(u.reason, FinishReason::kStop);
  EXPECT_EQ(u.n_generated, 3);
  // A second reader sees everything from the start.
  u = g.read(c2, 0ms);
  EXPECT_EQ(u.text, "Once upon");
  EXPECT_EQ(u.logprobs.size(), 1u);
  EXPECT_TRUE(u.done);
}

TEST(GenRequest, NothingIsAppendedAfterTheEnd) {
  auto g = finished_request();
  g->append(" more", 5);
  g->finish(FinishReason::kCancelled, "late");
  const GenRequest::Update all = g->wait_all();
  EXPECT_EQ(all.text, ", there was");
  EXPECT_EQ(all.logprobs.size(), 2u);
  EXPECT_EQ(all.n_generated, 2);
  EXPECT_EQ(all.reason, FinishReason::kLength);
}

// A reader racing the worker gets every byte in order, whatever the interleaving, and its
// update with done set holds the tail.
TEST(GenRequest, PiecesReadWhileWritingAddUpToTheOutput) {
  for (int round = 0; round < 20; ++round) {
    GenRequest g({1}, GenerationParams{});
    std::string expected;
    for (int i = 0; i < 200; ++i) expected += static_cast<char>('a' + (i + round) % 26);
    std::thread worker([&] {
      g.mark_started();
      for (size_t i = 0; i < expected.size(); ++i) {
        TokenLogprob t = lp(static_cast<int32_t>(i));
        g.append(expected.substr(i, 1), static_cast<int>(i + 1), &t);
      }
      g.finish(FinishReason::kLength);
    });
    std::string got;
    size_t n_probs = 0;
    GenRequest::Cursor c;
    for (;;) {
      GenRequest::Update u = g.read(c, 50ms);
      for (const TokenLogprob& t : u.logprobs) EXPECT_EQ(t.id, static_cast<int32_t>(n_probs++));
      got += u.text;
      if (u.done) break;
    }
    worker.join();
    EXPECT_EQ(got, expected);
    EXPECT_EQ(n_probs, expected.size());
  }
}

}  // namespace
}  // namespace hc
