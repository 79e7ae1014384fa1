// Batched decode of independent sequences (llama_forward_multi): every step's logits, and its
// cache afterwards, are bit-identical to decoding that step alone with llama_forward, for
// several weight types with and without the decode layout, batch sizes around the GEMM
// threshold, positions on both sides of the attention view's 256-position padding, and more
// steps than one micro-batch; the sparse FFN runs in the batch; bad input is a Status error.
// The same for llama_forward_mixed (a prompt micro-batch riding in the decode pass).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "model/llama_forward.h"
#include "model/llama_model.h"
#include "model/ffn_observer.h"
#include "model/sparse_ffn.h"
#include "tiny_model.h"

namespace hc {
namespace {

using testing::TinyModel;
using testing::TinyModelSpec;

std::shared_ptr<const LlamaModel> load(std::vector<uint8_t>& bytes, bool repack,
                                       bool block_sums = false) {
  return testing::load_tiny(bytes, repack, block_sums);
}

// The weight layouts a model can run with: the file's, the decode layout, and the decode layout
// with Q4_1 / Q8_0 in block sums (serve's default).
struct Layout {
  bool repack, block_sums;
  std::string name() const {
    return block_sums ? " block sums" : repack ? " repack" : " file layout";
  }
};
constexpr Layout kLayouts[] = {{false, false}, {true, false}, {true, true}};

int64_t kv_dim(const LlamaModel& m) {
  return int64_t{m.hparams().n_head_kv} * m.hparams().head_dim;
}

int32_t token_at(const LlamaModel& m, int64_t seq, int64_t i) {
  return static_cast<int32_t>(1 + (seq * 13 + i * 7) % (m.hparams().n_vocab - 1));
}

// n_seq sequences, each with its own cache (sizes differ) prefilled with its own prompt in one
// llama_forward call. Sequence 0's prompt runs past 256 positions, so its decode attends over a
// 512-position view while the others use 256.
struct Sequences {
  std::vector<KvCache> caches;
  std::vector<int> pos;  // next position = tokens in the cache

  Sequences(const LlamaModel& m, int n_seq, ForwardScratch& s, ThreadPool& pool) {
    for (int i = 0; i < n_seq; ++i) {
      const int len = i == 0 ? 257 : 1 + (5 * i + n_seq) % 40;
      caches.emplace_back(m.hparams().n_layer, i == 0 ? 300 : len + 8 + 3 * i, kv_dim(m));
      std::vector<int32_t> prompt(static_cast<size_t>(len));
      for (int j = 0; j < len; ++j) prompt[j] = token_at(m, i, j);
      std::vector<float> l;
      EXPECT_TRUE(llama_forward(m, caches.back(), s, pool, prompt, 0, false, &l).ok());
      pos.push_back(len);
    }
  }
};

// One batched step of every sequence against each step decoded alone on a copy of its cache;
// then the caches must match too. Positions advance by one.
void expect_steps_match_single_decode(const LlamaModel& m, Sequences& seqs, ForwardScratch& s,
                                      ThreadPool& pool, int round, const std::string& what) {
  const int64_t n_vocab = m.hparams().n_vocab;
  std::vector<KvCache> copies = seqs.caches;
  std::vector<SeqStep> steps;
  for (size_t i = 0; i < seqs.caches.size(); ++i)
    steps.push_back(
        {&seqs.caches[i], seqs.pos[i], token_at(m, static_cast<int64_t>(i) + 50, round)});
  std::vector<float> logits;
  const Status st = llama_forward_multi(m, steps, s, pool, &logits);
  ASSERT_TRUE(st.ok()) << st.message();
  ASSERT_EQ(logits.size(), steps.size() * static_cast<size_t>(n_vocab));
  ForwardScratch ref;
  std::vector<float> l;
  for (size_t i = 0; i < steps.size(); ++i) {
    ASSERT_TRUE(llama_forward(m, copies[i], ref, pool, std::span(&steps[i].token, 1),
                              steps[i].pos, false, &l).ok());
    ASSERT_EQ(0, std::memcmp(logits.data() + i * n_vocab, l.data(), n_vocab * sizeof(float)))
        << what << " round " << round << " step " << i << " of " << steps.size() << " (pos "
        << steps[i].pos << ")";
    ASSERT_TRUE(seqs.caches[i].k == copies[i].k) << what << " step " << i << ": K cache differs";
    ASSERT_TRUE(seqs.caches[i].v == copies[i].v) << what << " step " << i << ": V cache differs";
    seqs.pos[i] += 1;
  }
}

class ForwardMultiTypes : public ::testing::TestWithParam<GgmlType> {};

TEST_P(ForwardMultiTypes, EveryStepEqualsItsSingleSequenceDecode) {
  TinyModelSpec spec;
  spec.wtype = GetParam();
  spec.n_embd = 256;  // K-quants need rows of 256
  spec.n_ff = 256;
  TinyModel tm(spec);
  auto bytes = tm.bytes();
  for (const Layout& lay : kLayouts) {
    auto m = load(bytes, lay.repack, lay.block_sums);
    ASSERT_TRUE(m);
    ThreadPool pool(2);
    ForwardScratch s;
    for (int n_seq : {1, 3, 9, 12}) {
      Sequences seqs(*m, n_seq, s, pool);
      const std::string what = std::string(dtype_name(GetParam())) + lay.name() + " n_seq " +
                               std::to_string(n_seq);
      for (int round = 0; round < 2; ++round) {
        expect_steps_match_single_decode(*m, seqs, s, pool, round, what);
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, ForwardMultiTypes,
                         ::testing::Values(GgmlType::F32, GgmlType::F16, GgmlType::Q8_0,
                                           GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q4_K,
                                           GgmlType::Q6_K),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// More steps than kForwardUbatch run in several passes, with the same bits.
TEST(ForwardMulti, MoreStepsThanOneMicroBatch) {
  TinyModelSpec spec;
  spec.wtype = GgmlType::Q8_0;
  TinyModel tm(spec);
  auto bytes = tm.bytes();
  auto m = load(bytes, true);
  ASSERT_TRUE(m);
  ThreadPool pool(2);
  ForwardScratch s;
  Sequences seqs(*m, static_cast<int>(kForwardUbatch) + 3, s, pool);
  expect_steps_match_single_decode(*m, seqs, s, pool, 0, "Q8_0 131 steps");
}

// The scratch remembers no mode: a prompt batch after a batched decode still runs the prompt
// path (the packed GEMM where available), the same bits as on a fresh scratch.
TEST(ForwardMulti, PromptAfterBatchedDecodeIsUnchanged) {
  TinyModelSpec spec;
  spec.wtype = GgmlType::Q4_0;
  spec.n_embd = 256;
  TinyModel tm(spec);
  auto bytes = tm.bytes();
  auto m = load(bytes, true);
  ASSERT_TRUE(m);
  ThreadPool pool(2);
  ForwardScratch s, fresh;
  Sequences seqs(*m, 3, s, pool);
  expect_steps_match_single_decode(*m, seqs, s, pool, 0, "Q4_0");
  std::vector<int32_t> prompt(9);
  for (int j = 0; j < 9; ++j) prompt[j] = token_at(*m, 7, j);
  KvCache c1(m->hparams().n_layer, 16, kv_dim(*m)), c2 = c1;
  std::vector<float> a, b;
  ASSERT_TRUE(llama_forward(*m, c1, s, pool, prompt, 0, true, &a).ok());
  ASSERT_TRUE(llama_forward(*m, c2, fresh, pool, prompt, 0, true, &b).ok());
  ASSERT_EQ(a, b);
  ASSERT_TRUE(c1.k == c2.k && c1.v == c2.v);
}

// The sparse FFN in a batch of steps: the union of their firing sets. Every step's logits are
// its own decode's bit for bit: always sparse (the union's extra neurons have h = 0 for that
// step, and the fma of a zero adds nothing), always the dense fallback (the per-token dense
// FFN), and at 0.5, where some steps' own sets pass the share and others do not (each takes
// the path it takes alone).
TEST(ForwardMulti, SparseFfnRunsOverTheBatch) {
  for (GgmlType t : {GgmlType::F32, GgmlType::Q8_0, GgmlType::Q4_K}) {
    TinyModelSpec spec;
    spec.wtype = t;
    spec.n_embd = 256;
    spec.n_ff = 512;
    spec.activation = "relu";
    TinyModel tm(spec);
    auto bytes = tm.bytes();
    auto m = load(bytes, true);
    ASSERT_TRUE(m);
    for (double share : {1.0, 0.0, 0.5}) {
      SparseOptions opt;
      opt.max_union_share = share;
      auto sp = SparseFfn::build(*m, opt);
      ASSERT_TRUE(sp.ok()) << sp.message();
      ThreadPool pool(2);
      ForwardScratch s, ref;
      s.sparse = ref.sparse = sp->get();
      Sequences seqs(*m, 9, s, pool);
      std::vector<KvCache> copies = seqs.caches;
      std::vector<SeqStep> steps;
      for (size_t i = 0; i < seqs.caches.size(); ++i)
        steps.push_back({&seqs.caches[i], seqs.pos[i], token_at(*m, static_cast<int64_t>(i), 99)});
      std::vector<float> logits, l;
      const SparseStats before = s.sparse_scratch.stats;
      ASSERT_TRUE(llama_forward_multi(*m, steps, s, pool, &logits).ok());
      const SparseStats& after = s.sparse_scratch.stats;
      EXPECT_EQ(after.neurons - before.neurons, uint64_t(spec.n_layer) * spec.n_ff * steps.size());
      if (share == 1.0) {
        EXPECT_LT(after.computed - before.computed, after.neurons - before.neurons);
      }
      const int64_t nv = m->hparams().n_vocab;
      for (size_t i = 0; i < steps.size(); ++i) {
        ASSERT_TRUE(llama_forward(*m, copies[i], ref, pool, std::span(&steps[i].token, 1),
                                  steps[i].pos, false, &l).ok());
        for (int64_t j = 0; j < nv; ++j) {
          ASSERT_EQ(logits[i * nv + j], l[j])
              << dtype_name(t) << " step " << i << " share " << share;
        }
      }
    }
  }
}

// llama_forward_mixed: one prompt micro-batch of a sequence plus a decode step of each of the
// others in one pass. The chunk's logits and cache equal llama_forward of that chunk alone (the
// GEMM and batched attention from 8 tokens, the decode kernels below), every step's equal its
// one-token decode, for chunks below, at and above the GEMM threshold up to a whole
// micro-batch, with and without the chunk's logits.
void expect_mixed_matches_separate(const LlamaModel& m, bool many_steps, const std::string& what) {
  const int64_t n_vocab = m.hparams().n_vocab;
  ThreadPool pool(2);
  ForwardScratch s, ref;
  Sequences seqs(m, many_steps ? static_cast<int>(kForwardUbatch) + 2 : 4, s, pool);
  KvCache prompt_cache(m.hparams().n_layer, 320, kv_dim(m));
  KvCache prompt_copy = prompt_cache;
  int pos = 0;
  int round = 0;
  for (int chunk : {5, 8, 16, 3, static_cast<int>(kForwardUbatch), 9}) {
    std::vector<int32_t> toks(static_cast<size_t>(chunk));
    for (int j = 0; j < chunk; ++j) toks[j] = token_at(m, 99, pos + j);
    const bool chunk_logits = round % 2 == 0;
    std::vector<KvCache> copies = seqs.caches;
    std::vector<SeqStep> steps;
    for (size_t i = 0; i < seqs.caches.size(); ++i)
      steps.push_back(
          {&seqs.caches[i], seqs.pos[i], token_at(m, static_cast<int64_t>(i) + 50, round)});
    std::vector<float> logits;
    const Status st = llama_forward_mixed(m, prompt_cache, toks, pos, chunk_logits, steps, s, pool,
                                          &logits);
    ASSERT_TRUE(st.ok()) << what << ": " << st.message();
    const int64_t off = chunk_logits ? 1 : 0;
    ASSERT_EQ(logits.size(), (off + steps.size()) * static_cast<size_t>(n_vocab));
    std::vector<float> l;
    ASSERT_TRUE(llama_forward(m, prompt_copy, ref, pool, toks, pos, false, &l).ok());
    if (chunk_logits) {
      ASSERT_EQ(0, std::memcmp(logits.data(), l.data(), n_vocab * sizeof(float)))
          << what << ": the chunk of " << chunk << " at " << pos << "'s logits";
    }
    ASSERT_TRUE(prompt_cache.k == prompt_copy.k && prompt_cache.v == prompt_copy.v)
        << what << ": the chunk of " << chunk << "'s cache";
    for (size_t i = 0; i < steps.size(); ++i) {
      ASSERT_TRUE(llama_forward(m, copies[i], ref, pool, std::span(&steps[i].token, 1),
                                steps[i].pos, false, &l).ok());
      ASSERT_EQ(0, std::memcmp(logits.data() + (off + static_cast<int64_t>(i)) * n_vocab,
                               l.data(), n_vocab * sizeof(float)))
          << what << " chunk " << chunk << " step " << i << " of " << steps.size();
      ASSERT_TRUE(seqs.caches[i].k == copies[i].k && seqs.caches[i].v == copies[i].v)
          << what << " step " << i << ": cache differs";
      seqs.pos[i] += 1;
    }
    pos += chunk;
    ++round;
  }
}

class ForwardMixedTypes : public ::testing::TestWithParam<GgmlType> {};

TEST_P(ForwardMixedTypes, ChunkAndStepsEqualTheirSeparatePasses) {
  TinyModelSpec spec;
  spec.wtype = GetParam();
  spec.n_embd = 256;
  spec.n_ff = 256;
  TinyModel tm(spec);
  auto bytes = tm.bytes();
  for (const Layout& lay : kLayouts) {
    auto m = load(bytes, lay.repack, lay.block_sums);
    ASSERT_TRUE(m);
    expect_mixed_matches_separate(*m, false, std::string(dtype_name(GetParam())) + lay.name());
    if (::testing::Test::HasFatalFailure()) return;
  }
}

INSTANTIATE_TEST_SUITE_P(Types, ForwardMixedTypes,
                         ::testing::Values(GgmlType::F32, GgmlType::F16, GgmlType::Q8_0,
                                           GgmlType::Q4_1, GgmlType::Q4_K),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(ForwardMixed, MoreStepsThanOneMicroBatch) {
  TinyModelSpec spec;
  spec.wtype = GgmlType::Q4_0;
  TinyModel tm(spec);
  auto bytes = tm.bytes();
  auto m = load(bytes, true);
  ASSERT_TRUE(m);
  expect_mixed_matches_separate(*m, true, "Q4_0 130 steps");
}

TEST(ForwardMixed, BadInputIsAnError) {
  TinyModel tm({});
  auto bytes = tm.bytes();
  auto m = load(bytes, false);
  ASSERT_TRUE(m);
  const int n_layer = m->hparams().n_layer;
  ThreadPool pool(1);
  ForwardScratch s;
  KvCache a(n_layer, 300, kv_dim(*m)), b(n_layer, 8, kv_dim(*m));
  const KvCache a0 = a, b0 = b;
  std::vector<float> l;
  const std::vector<int32_t> three = {1, 2, 3};
  const std::vector<int32_t> long_chunk(static_cast<size_t>(kForwardUbatch) + 1, 1);
  auto expect_error = [&](std::span<const int32_t> chunk, int pos0,
                          std::vector<SeqStep> steps, const std::string& want) {
    const Status st = llama_forward_mixed(*m, a, chunk, pos0, true, steps, s, pool, &l);
    ASSERT_FALSE(st.ok()) << want;
    EXPECT_NE(st.message().find(want), std::string::npos) << st.message();
    EXPECT_TRUE(a.k == a0.k && a.v == a0.v && b.k == b0.k && b.v == b0.v)
        << "nothing may be computed: " << want;
  };
  expect_error(three, 0, {{&a, 5, 1}}, "uses the prompt's KV cache");
  expect_error(long_chunk, 0, {{&b, 0, 1}}, "at most 128");
  expect_error({}, 0, {{&b, 0, 1}}, "no tokens");
  expect_error(three, 299, {{&b, 0, 1}}, "context overflow");
  expect_error(three, 0, {{&b, 8, 1}}, "position 8 does not fit");
  struct Null : FfnObserver {
    void on_ffn_activation(int, const float*, int64_t, int64_t) override {}
  } observer;
  s.observer = &observer;
  expect_error(three, 0, {{&b, 0, 1}}, "dense host model only");
  s.observer = nullptr;
  // Without steps it is llama_forward (the chunk's logits, or none).
  ASSERT_TRUE(llama_forward_mixed(*m, a, three, 0, false, {}, s, pool, &l).ok());
  EXPECT_TRUE(l.empty());
  const std::vector<SeqStep> one = {{&b, 0, 2}};
  ASSERT_TRUE(llama_forward_mixed(*m, a, three, 3, true, one, s, pool, &l).ok());
  EXPECT_EQ(l.size(), 2u * static_cast<size_t>(m->hparams().n_vocab));
}

TEST(ForwardMulti, BadInputIsAnError) {
  TinyModel tm({});
  auto bytes = tm.bytes();
  auto m = load(bytes, false);
  ASSERT_TRUE(m);
  const int n_layer = m->hparams().n_layer;
  const int64_t kvd = kv_dim(*m);
  ThreadPool pool(1);
  ForwardScratch s;
  KvCache a(n_layer, 8, kvd), b(n_layer, 8, kvd);
  const KvCache a0 = a;
  std::vector<float> l;
  auto expect_error = [&](std::vector<SeqStep> steps, const std::string& want,
                          std::vector<float>* out) {
    const Status st = llama_forward_multi(*m, steps, s, pool, out);
    ASSERT_FALSE(st.ok()) << want;
    EXPECT_NE(st.message().find(want), std::string::npos) << st.message();
    EXPECT_TRUE(a.k == a0.k && a.v == a0.v) << "nothing may be computed: " << want;
  };
  expect_error({}, "no decode steps", &l);
  expect_error({{&a, 0, 1}}, "no logits", nullptr);
  expect_error({{&a, 0, 1}, {nullptr, 0, 1}}, "decode step 1: no KV cache", &l);
  expect_error({{&a, 8, 1}}, "position 8 does not fit a context of 8", &l);
  expect_error({{&a, -1, 1}}, "position -1 does not fit", &l);
  expect_error({{&a, 0, 1}, {&b, 0, 999}}, "token id 999 out of range", &l);
  expect_error({{&a, 0, -3}}, "token id -3 out of range", &l);
  expect_error({{&a, 0, 1}, {&b, 0, 2}, {&a, 1, 3}}, "decode steps 0 and 2 share one KV cache", &l);
  KvCache layers(n_layer + 1, 8, kvd), dims(n_layer, 8, kvd * 2), empty;
  expect_error({{&a, 0, 1}, {&layers, 0, 1}}, "decode step 1: KV cache of 3 layers", &l);
  expect_error({{&dims, 0, 1}}, "does not fit the model's", &l);
  expect_error({{&empty, 0, 1}}, "does not fit the model's", &l);
  KvCache truncated(n_layer, 8, kvd);
  truncated.v.resize(3);
  expect_error({{&truncated, 0, 1}}, "does not fit the model's", &l);
  // Valid input after all that still works.
  const std::vector<SeqStep> ok = {{&a, 0, 1}, {&b, 0, 2}};
  ASSERT_TRUE(llama_forward_multi(*m, ok, s, pool, &l).ok());
  EXPECT_EQ(l.size(), 2u * static_cast<size_t>(m->hparams().n_vocab));
}

}  // namespace
}  // namespace hc
