// Shared by the CPU-device and Vulkan tests of the server's batched hybrid decode: two identical
// sets of sequences over one device placement (caches of different lengths, prompts of their
// own, each with its own DeviceSession); set a decodes in llama_forward_multi passes, set b one
// sequence at a time with llama_forward. Every round's logits must be bit-identical, and so
// must the host KV and the device KV of positions [0, pos] afterwards.
#pragma once
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "model/device_model.h"
#include "model/llama_forward.h"
#include "model/llama_model.h"
#include "model/sparse_ffn.h"

namespace hc::testing {

// Returns the sparse counters of the batched passes (what ran where).
inline SparseStats expect_batched_steps_equal_alone(const LlamaModel& m, const DeviceModel& dm,
                                                    const SparseFfn* sparse, int n_seq,
                                                    int rounds, const std::string& what) {
  const LlamaHParams& hp = m.hparams();
  const int64_t kv_dim = int64_t{hp.n_head_kv} * hp.head_dim, n_vocab = hp.n_vocab;
  ThreadPool pool(2);
  struct Seq {
    KvCache cache;
    std::unique_ptr<DeviceSession> ds;
    int pos = 0;
  };
  std::vector<Seq> a, b;
  ForwardScratch sa, sb;
  sa.sparse = sb.sparse = sparse;
  for (int i = 0; i < n_seq; ++i) {
    for (auto* set : {&a, &b}) {
      const int n_ctx = 24 + 3 * i;
      Seq q{KvCache(hp.n_layer, n_ctx, kv_dim), nullptr, 0};
      auto r = DeviceSession::create(dm, n_ctx, forward_ubatch(hp));
      EXPECT_TRUE(r.ok()) << r.message();
      if (!r.ok()) return {};
      q.ds = std::move(*r);
      std::vector<int32_t> prompt(static_cast<size_t>(2 + (5 * i) % 11));
      for (size_t j = 0; j < prompt.size(); ++j)
        prompt[j] = static_cast<int32_t>(1 + (i * 13 + j * 7) % (n_vocab - 1));
      ForwardScratch& s = set == &a ? sa : sb;
      s.device = q.ds.get();
      std::vector<float> l;
      const Status st = llama_forward(m, q.cache, s, pool, prompt, 0, false, &l);
      EXPECT_TRUE(st.ok()) << st.message();
      if (!st.ok()) return {};
      q.pos = static_cast<int>(prompt.size());
      set->push_back(std::move(q));
    }
  }
  for (int round = 0; round < rounds; ++round) {
    std::vector<SeqStep> steps;
    for (int i = 0; i < n_seq; ++i)
      steps.push_back({&a[i].cache, a[i].pos,
                       static_cast<int32_t>(1 + (i * 5 + round * 11) % (n_vocab - 1)),
                       a[i].ds.get()});
    sa.device = a.back().ds.get();  // any session of the placement carries the batch
    std::vector<float> batched, alone;
    const Status st = llama_forward_multi(m, steps, sa, pool, &batched);
    EXPECT_TRUE(st.ok()) << st.message();
    if (!st.ok()) return {};
    for (int i = 0; i < n_seq; ++i) {
      const std::string where = what + ": " + std::to_string(n_seq) + " sequences, round " +
                                std::to_string(round) + ", sequence " + std::to_string(i);
      sb.device = b[i].ds.get();
      const Status sti = llama_forward(m, b[i].cache, sb, pool, std::span(&steps[i].token, 1),
                                       b[i].pos, false, &alone);
      EXPECT_TRUE(sti.ok()) << sti.message();
      if (!sti.ok()) return {};
      EXPECT_EQ(0, std::memcmp(batched.data() + i * n_vocab, alone.data(),
                               static_cast<size_t>(n_vocab) * sizeof(float)))
          << where;
      EXPECT_TRUE(a[i].cache.k == b[i].cache.k && a[i].cache.v == b[i].cache.v) << where;
      KvCache da(hp.n_layer, a[i].cache.n_ctx, kv_dim), db = da;
      EXPECT_TRUE(a[i].ds->kv_to_host(da, a[i].pos + 1).ok());
      EXPECT_TRUE(b[i].ds->kv_to_host(db, b[i].pos + 1).ok());
      // Positions [0, pos] (the rest of a transposed V row is whatever the device held).
      bool same = true;
      for (int il = 0; il < hp.n_layer; ++il)
        for (int pos = 0; pos <= a[i].pos; ++pos)
          for (int64_t d = 0; d < kv_dim; ++d)
            same = same && da.k_at(il, pos)[d] == db.k_at(il, pos)[d] &&
                   da.v_row(il, d)[pos] == db.v_row(il, d)[pos];
      EXPECT_TRUE(same) << "device KV, " << where;
      if (::testing::Test::HasFailure()) return {};
      ++a[i].pos;
      ++b[i].pos;
    }
  }
  return sa.sparse_scratch.stats;
}

}  // namespace hc::testing
